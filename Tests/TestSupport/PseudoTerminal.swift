import Foundation
import Testing

/// `opsh` on a real pseudo-terminal, as an operator types into it: the
/// child is a session leader whose controlling terminal is the pty, so
/// Ctrl-C typed on it is a real SIGINT.
public final class PseudoTerminal {
    public let master: Int32
    public let pid: pid_t
    /// Everything read so far, escape sequences removed.
    public private(set) var transcript = ""
    /// Everything read so far, escape sequences kept.
    public private(set) var rawTranscript = ""
    /// Where the next `expect` starts looking.
    private var consumed: String.Index

    /// - parameter standardOutput: a file stdout goes to instead of the
    ///   terminal (`opsh … > FILE` typed at a prompt); stderr stays on it.
    public init(arguments: [String], environment: [String: String], rows: Int = 40, columns: Int = 200,
                standardOutput: String? = nil) throws {
        var master: Int32 = 0, slave: Int32 = 0
        var size = winsize(ws_row: UInt16(rows), ws_col: UInt16(columns), ws_xpixel: 0, ws_ypixel: 0)
        guard openpty(&master, &slave, nil, nil, &size) == 0 else { throw POSIXError(.EIO) }
        // ttyname_r, not ttyname: tests run in parallel, and ttyname's
        // static buffer could hand this child another test's terminal.
        var nameBuffer = [CChar](repeating: 0, count: Int(PATH_MAX))
        guard ttyname_r(slave, &nameBuffer, nameBuffer.count) == 0 else { throw POSIXError(.EIO) }
        let slaveName = String(cString: nameBuffer)
        self.master = master

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addclose(&actions, master)
        posix_spawn_file_actions_addclose(&actions, slave)
        // Opened after setsid: the pty becomes the controlling terminal.
        posix_spawn_file_actions_addopen(&actions, 0, slaveName, O_RDWR, 0)
        if let standardOutput {
            posix_spawn_file_actions_addopen(&actions, 1, standardOutput, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        } else {
            posix_spawn_file_actions_adddup2(&actions, 0, 1)
        }
        posix_spawn_file_actions_adddup2(&actions, 0, 2)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGINT, SIGTERM, SIGHUP, SIGPIPE] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(0x80 /* POSIX_SPAWN_SETSID */ | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        let argv = ([opshExecutable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var child: pid_t = 0
        let status = posix_spawn(&child, opshExecutable, &actions, &attributes, argv, envp)
        close(slave)
        guard status == 0 else { throw POSIXError(POSIXErrorCode(rawValue: status) ?? .EIO) }
        pid = child
        consumed = transcript.startIndex
    }

    deinit {
        kill(pid, SIGKILL)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        close(master)
    }

    /// Resizes the terminal, as a window resized by the operator: the
    /// kernel sends SIGWINCH to the terminal's foreground processes.
    public func resize(rows: Int, columns: Int) {
        var size = winsize(ws_row: UInt16(rows), ws_col: UInt16(columns), ws_xpixel: 0, ws_ypixel: 0)
        _ = ioctl(master, UInt(TIOCSWINSZ), &size)
    }

    /// What was read after the last match (for a test's own checks).
    public var unmatched: Substring { transcript[consumed...] }

    public func send(_ text: String) {
        _ = text.withCString { write(master, $0, strlen($0)) }
    }

    /// Waits until `text` appears after what earlier expectations matched
    /// (polling: on a busy machine the default waits long, and a test that
    /// passes never waits for it).
    @discardableResult
    public func expect(_ text: String, timeout: Double = 30, sourceLocation: SourceLocation = #_sourceLocation) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if let range = transcript.range(of: text, range: consumed..<transcript.endIndex) {
                consumed = range.upperBound
                return true
            }
            let remaining = deadline.timeIntervalSinceNow
            if remaining <= 0 { break }
            readAvailable(timeout: remaining)
        }
        Issue.record("expected \(text.debugDescription) in the terminal; it shows:\n\(transcript[consumed...])",
                     sourceLocation: sourceLocation)
        return false
    }

    /// Whether `text` appears after what earlier expectations matched
    /// within `timeout` (then it is matched, as by ``expect(_:timeout:sourceLocation:)``);
    /// records nothing when it does not: for polling.
    public func sees(_ text: String, timeout: Double) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if let range = transcript.range(of: text, range: consumed..<transcript.endIndex) {
                consumed = range.upperBound
                return true
            }
            let remaining = deadline.timeIntervalSinceNow
            if remaining <= 0 { return false }
            readAvailable(timeout: remaining)
        }
    }

    /// Reads what the child wrote within `seconds` (a test polling something
    /// else meanwhile keeps the terminal's buffer from filling up and
    /// blocking the child).
    public func readPending(for seconds: Double = 0.02) {
        readAvailable(timeout: seconds)
    }

    private func readAvailable(timeout: Double) {
        var descriptor = pollfd(fd: master, events: Int16(POLLIN), revents: 0)
        guard poll(&descriptor, 1, Int32(max(1, min(timeout, 0.2) * 1000))) > 0 else { return }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = read(master, &buffer, buffer.count)
        guard count > 0 else { return }
        let offset = transcript.distance(from: transcript.startIndex, to: consumed)
        let text = String(decoding: buffer[..<count], as: UTF8.self)
        rawTranscript += text
        transcript += Self.plain(text)
        consumed = transcript.index(transcript.startIndex, offsetBy: offset)
    }

    /// Waits for the child to exit; returns its status (nil: still running).
    public func waitForExit(timeout: Double = 60) -> Int32? {
        let deadline = Date().addingTimeInterval(timeout)
        var status: Int32 = 0
        while Date() < deadline {
            readAvailable(timeout: 0.05)
            if waitpid(pid, &status, WNOHANG) == pid {
                return (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
            }
        }
        return nil
    }

    /// Text without terminal escape sequences and carriage returns.
    public static func plain(_ text: String) -> String {
        var result = ""
        var iterator = text.unicodeScalars.makeIterator()
        while let scalar = iterator.next() {
            if scalar == "\u{1B}" {
                guard let next = iterator.next() else { break }
                if next == "[" {
                    while let c = iterator.next(), !(c.properties.isAlphabetic || c == "~") {}
                } else if next == "]" {
                    while let c = iterator.next(), c != "\u{07}" {}
                }
                continue
            }
            if scalar == "\r" || scalar == "\u{07}" || scalar == "\u{08}" { continue }
            result.unicodeScalars.append(scalar)
        }
        return result
    }
}
