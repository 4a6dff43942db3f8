import Foundation

/// `opsh` in a tmux window: the screen as the operator sees it after the
/// terminal has drawn every escape sequence, where ``PseudoTerminal``
/// holds the bytes. For what only a terminal's drawing shows (where
/// readline puts the cursor after a resize). tmux runs on a socket of the
/// test's own, so parallel tests never share a server.
public final class TmuxScreen {
    private let socket: String

    /// Starts `opsh arguments` with exactly `environment` in a window of
    /// `rows` × `columns`.
    public init(arguments: [String], environment: [String: String], rows: Int, columns: Int) throws {
        // In /tmp: a socket's path is at most 107 bytes.
        socket = "/tmp/opsh-tmux-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let command = ["env", "-i"] + environment.map { "\($0.key)=\($0.value)" } + [opshExecutable] + arguments
        try tmux(["-f", "/dev/null", "new-session", "-d", "-x", "\(columns)", "-y", "\(rows)", "--"] + command)
    }

    deinit {
        _ = try? tmux(["kill-server"])
        unlink(socket)
    }

    /// Types `keys` (tmux key names: `C-a`, `Enter`; else literal text
    /// with `literal`).
    public func send(_ keys: String, literal: Bool = false) throws {
        try tmux(["send-keys", "-t", "0"] + (literal ? ["-l", keys] : [keys]))
    }

    /// Resizes the window, as the operator's terminal window is resized.
    public func resize(rows: Int, columns: Int) throws {
        try tmux(["resize-window", "-t", "0", "-x", "\(columns)", "-y", "\(rows)"])
    }

    /// The screen's lines as drawn now.
    public func screen() throws -> [String] {
        try tmux(["capture-pane", "-p", "-t", "0"]).split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    }

    /// Waits (polling) until a line of the screen satisfies `test`.
    @discardableResult
    public func waitForLine(_ seconds: Double = 30, where test: (String) -> Bool) -> Bool {
        waitUntil(seconds) { (try? screen())?.contains(where: test) ?? false }
    }

    @discardableResult
    private func tmux(_ arguments: [String]) throws -> String {
        let child = try ChildProcess.start("tmux", ["-S", socket] + arguments, environment: ["PATH": "/usr/bin:/bin", "TERM": "xterm"])
        let result = child.finish()
        guard result.status == 0 else {
            throw TmuxError(message: "tmux \(arguments.joined(separator: " ")): \(result.stderr)")
        }
        return result.stdout
    }
}

public struct TmuxError: Error, CustomStringConvertible {
    public let message: String
    public var description: String { message }
}
