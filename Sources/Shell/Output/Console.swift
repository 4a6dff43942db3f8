import CLuaShim
import Foundation
import Store
import Synchronization

/// Where opsh's own messages go: stderr, one line each, with a level
/// (`opsh: error: …`), coloured only on a terminal that wants colour.
/// stdout carries only what scripts print or return.
public struct Console: Sendable {
    public enum Level: String, Sendable {
        case error, warning, note
    }

    /// Colour on stderr (a terminal, and `NO_COLOR` unset, and not `TERM=dumb`).
    public let colour: Bool
    /// Drops warnings and notes; errors always show.
    public let quiet: Bool

    public init(colour: Bool = Terminal.wantsColour(descriptor: 2), quiet: Bool = false) {
        self.colour = colour
        self.quiet = quiet
    }

    public func error(_ message: String) { log(.error, message) }
    public func warning(_ message: String) { log(.warning, message) }
    public func note(_ message: String) { log(.note, message) }

    public func log(_ level: Level, _ message: String) {
        if quiet && level != .error { return }
        let tag: String
        if colour {
            let code = level == .error ? "31" : level == .warning ? "33" : "36"
            tag = "\u{1B}[1;\(code)m\(level.rawValue):\u{1B}[0m"
        } else {
            tag = "\(level.rawValue):"
        }
        writeError("opsh: \(tag) \(message)\n")
    }

    /// Text on stderr as is (a traceback, a dry-run summary).
    public func raw(_ text: String) {
        writeError(text.hasSuffix("\n") ? text : text + "\n")
    }

    private func writeError(_ text: String) {
        // Keep the order of what a script printed (C stdio, buffered).
        fflush(nil)
        Terminal.write(text, to: 2)
    }
}

/// Facts about the terminal and raw writes that bypass buffering.
public enum Terminal {
    public static func isTerminal(_ descriptor: Int32) -> Bool { isatty(descriptor) == 1 }

    /// Says on `console`, once per process, that standard output could not
    /// be written; true when it could not (said now or before). A batch
    /// run asks before it writes its audit row, so that the row says the
    /// run failed; the process's exit asks again for what came after.
    public static func reportStandardOutputFailure(on console: Console) -> Bool {
        guard let reason = standardOutputFailure() else { return false }
        if !outputFailureSaid.exchange(true, ordering: .relaxed) {
            console.error("cannot write standard output: \(reason)")
        }
        return true
    }

    private static let outputFailureSaid = Atomic<Bool>(false)

    /// Flushes what Lua's `print` left in C's stdout buffer; the reason
    /// when a write to stdout failed (a full disk under `> out.txt`).
    public static func standardOutputFailure() -> String? {
        let code = opsh_stdout_failure()
        switch code {
        case 0: return nil
        case -1: return "a write to it failed (a full disk, a closed file)"
        default: return String(cString: strerror(code))
        }
    }

    /// The width in columns of the terminal on `descriptor`, or nil when it
    /// is not a terminal (output to a pipe or file is never narrowed).
    public static func width(descriptor: Int32) -> Int? {
        guard isTerminal(descriptor) else { return nil }
        var size = winsize()
        guard ioctl(descriptor, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 else { return nil }
        return Int(size.ws_col)
    }

    /// The height in rows of the terminal on `descriptor`, or nil when it
    /// is not a terminal (the pager's measure).
    public static func height(descriptor: Int32) -> Int? {
        guard isTerminal(descriptor) else { return nil }
        var size = winsize()
        guard ioctl(descriptor, UInt(TIOCGWINSZ), &size) == 0, size.ws_row > 0 else { return nil }
        return Int(size.ws_row)
    }

    public static func wantsColour(descriptor: Int32) -> Bool {
        let environment = EnvironmentVariables.process
        if environment["NO_COLOR"].map({ !$0.isEmpty }) == true { return false }
        if environment["TERM"] == "dumb" { return false }
        return isTerminal(descriptor)
    }

    /// Whether the terminal can show box-drawing characters (a UTF-8 locale).
    public static var isUTF8: Bool {
        let environment = EnvironmentVariables.process
        let locale = environment["LC_ALL"].flatMap { $0.isEmpty ? nil : $0 }
            ?? environment["LC_CTYPE"].flatMap { $0.isEmpty ? nil : $0 }
            ?? environment["LANG"] ?? ""
        if locale.isEmpty || locale == "C" || locale == "POSIX" { return environment["TERM"] != "dumb" && environment["TERM"] != "linux" }
        return locale.uppercased().contains("UTF-8") || locale.uppercased().contains("UTF8")
    }

    public static func write(_ text: String, to descriptor: Int32) {
        var text = text
        text.withUTF8 { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = Foundation.write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    return
                }
                offset += written
            }
        }
    }
}
