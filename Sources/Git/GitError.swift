/// What went wrong talking to git, with the command and git's own message.
public enum GitError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A local path that does not exist.
    case missingPath(String)
    /// A local path that exists but is not in a git repository.
    case notARepository(path: String, command: [String], message: String)
    /// git ran and failed; `message` is its standard error.
    case commandFailed(command: [String], status: Int32, message: String)
    /// git could not be started.
    case cannotRun(executable: String, reason: String)
    /// A tag, branch or commit the repository does not have.
    case revisionNotFound(location: String, revision: String, message: String)
    /// A revision opsh refuses to pass to git (empty, or it would read as an option).
    case invalidRevision(String)
    /// A workspace folder that cannot be made or removed.
    case workspace(path: String, reason: String)
    /// Git was stopped before it ended (Ctrl-C, SIGTERM, `--timeout`, a
    /// cancelled build): `reason` says which.
    case stopped(command: [String], reason: String)
    /// Git did not end within its network timeout (a remote that never answers).
    case timedOut(command: [String], seconds: Double)

    /// The git command line, as a person would type it.
    public static func commandLine(_ command: [String]) -> String {
        command.map(quoteIfNeeded).joined(separator: " ")
    }

    public var description: String {
        switch self {
        case let .missingPath(path):
            return "no such repository: \(path) does not exist"
        case let .notARepository(path, command, message):
            return "\(path) is not a git repository (\(Self.commandLine(command)): \(message))"
        case let .commandFailed(command, status, message):
            return "\(Self.commandLine(command)) failed with exit code \(status): \(message.isEmpty ? "(no message)" : message)"
        case let .cannotRun(executable, reason):
            return "cannot run git (\(executable)): \(reason)"
        case let .revisionNotFound(location, revision, message):
            return "version '\(revision)' not found in \(location): no tag, branch or commit of that name (\(message))"
        case let .invalidRevision(revision):
            return "invalid version '\(revision)': expected a tag, branch or commit name"
        case let .workspace(path, reason):
            return "workspace \(path): \(reason)"
        case let .stopped(command, reason):
            return "\(Self.commandLine(command)) was stopped: \(reason)"
        case let .timedOut(command, seconds):
            return "\(Self.commandLine(command)) did not answer within \(Self.seconds(seconds)) (its network timeout), and was stopped"
        }
    }

    /// `1 s`, `2.5 s`.
    static func seconds(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? "\(Int64(value)) s" : "\(value) s"
    }

    private static func quoteIfNeeded(_ word: String) -> String {
        let plain = word.utf8.allSatisfy { byte in
            (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                || "-_./:=@%+,^{}*".utf8.contains(byte)
        }
        return plain && !word.isEmpty ? word : "'" + word.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }
}
