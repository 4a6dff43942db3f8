import Foundation

/// Why a running chunk was asked to stop from outside.
public enum LuaInterruptReason: Int32, Sendable {
    /// SIGINT (Ctrl-C).
    case interrupted = 1
    /// The run-time limit passed.
    case timeout = 2
    /// SIGTERM.
    case terminated = 3
    /// The script called `os.exit`: it ends as a returning script does
    /// (the mode's commit or rollback, summary and audit row), then the
    /// process exits with the status it gave (``LuaError/Kind/exit(_:)``).
    case exit = 4
}

/// A failure of Lua code, as the host sees it after the protected call
/// returned.
public struct LuaError: Error, CustomStringConvertible, Sendable {
    public enum Kind: Equatable, Sendable {
        /// The chunk does not compile.
        case syntax
        /// An error raised while running (by `error`, a failed operation or
        /// a host function).
        case runtime
        /// The memory limit was reached.
        case memory
        /// Stopped from outside (Ctrl-C, a timeout, SIGTERM).
        case interrupted(LuaInterruptReason)
        /// `os.exit(status)`: not a failure. The host ends the run as if
        /// the chunk had returned, then exits with `status`.
        case exit(Int32)
    }

    public var kind: Kind
    /// Lua's message, starting with `chunk:line:` where Lua knows it.
    public var message: String
    /// `stack traceback:` and its lines, when there is one.
    public var traceback: String?
    /// For an interrupt: what the interrupted call leaves behind, said by
    /// the host function that was running (``LuaRuntime/interruptNote``):
    /// "stopped following; build #8 still runs (…)".
    public var note: String?
    /// Identifies the error value the runtime kept for this error (see
    /// `LuaRuntime.pushErrorValue`), when Lua code a host function called
    /// back raised it.
    var valueSerial: Int?

    public init(kind: Kind, message: String, traceback: String? = nil) {
        self.kind = kind
        self.message = message
        self.traceback = traceback
    }

    public var description: String { message }

    /// Whether the error ends the whole run rather than one call: an
    /// interrupt (Ctrl-C, a timeout, SIGTERM) or `os.exit`. Code that
    /// reports a callback's error and goes on must rethrow these.
    public var endsTheRun: Bool {
        switch kind {
        case .interrupted, .exit: true
        default: false
        }
    }

    /// The status `os.exit` asked for, or nil for any other error.
    public var exitStatus: Int32? {
        if case let .exit(status) = kind { return status }
        return nil
    }

    /// The message and, below it, the traceback.
    public var fullDescription: String {
        traceback.map { "\(message)\n\($0)" } ?? message
    }

    /// Splits what the traceback message handler produced.
    static func fromHandler(_ text: String, kind: Kind) -> LuaError {
        if let range = text.range(of: "\nstack traceback:") {
            return LuaError(kind: kind, message: String(text[..<range.lowerBound]),
                            traceback: String(text[text.index(after: range.lowerBound)...]))
        }
        return LuaError(kind: kind, message: text)
    }
}

/// An error a host function throws to make its Lua caller fail, worded as
/// Lua's own library words them.
public enum LuaCallError: Error, CustomStringConvertible, Sendable {
    /// `bad argument #N to 'name' (detail)`.
    case badArgument(Int32, function: String, detail: String)
    /// A message raised with the caller's `chunk:line:` in front.
    case message(String)

    public var description: String {
        switch self {
        case let .badArgument(index, function, detail):
            return "bad argument #\(index) to '\(function)' (\(detail))"
        case let .message(text):
            return text
        }
    }
}
