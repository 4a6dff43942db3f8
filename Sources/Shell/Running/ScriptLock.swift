import Foundation
import Store

/// `opsh run --lock` (the default): two runs of the same script against the
/// same database never overlap; the second exits at once (README: exit
/// 75). The lock belongs to the database, not to the environment or the
/// spelling of a path:
/// - on SQLite it is a lock on a byte of the database file itself
///   (``DatabaseFileRunLock``): its device and inode, whatever
///   `XDG_RUNTIME_DIR` or `HOME` say (cron has neither) and under any name
///   of the file;
/// - on PostgreSQL it is an advisory lock on the server
///   (``PostgresRunLock``), so every URL of the database and every host
///   share it.
///
/// "The same script" is the script's real path (symbolic links and `.`,
/// `..` resolved): the file a deployment puts in one place, also when cron
/// names it through a link. The lock goes with the process, also when it
/// is killed.
public final class ScriptLock {
    public enum Failure: Error, CustomStringConvertible {
        /// Another run of the script holds the lock on the database.
        case held(script: String, database: String, holder: String?)
        /// The database could not be reached to take the lock (PostgreSQL).
        case databaseUnavailable(database: String, reason: String)
        case cannotLock(database: String, reason: String)

        public var description: String {
            switch self {
            case let .held(script, database, holder):
                return "another run holds the lock of \(script) on \(database)\(holder.map { " (\($0))" } ?? ""); not running"
            case let .databaseUnavailable(database, reason):
                return "cannot take the run's lock on \(database): \(reason)"
            case let .cannotLock(database, reason):
                return "cannot take the run's lock on \(database): \(reason)"
            }
        }
    }

    /// What holds the lock: the file lock or the server's connection.
    private let holding: AnyObject

    private init(holding: AnyObject) {
        self.holding = holding
    }

    /// Takes the lock of `script` on `database` (a file path or a
    /// PostgreSQL connection: ``Databases/engine(of:)``) without waiting.
    public static func acquire(script: String, database: String) throws -> ScriptLock {
        let identity = realPath(script)
        let key = DatabaseFileRunLock.fnv1a(identity)
        if Databases.engine(of: database) == .postgresql {
            let label = PostgresRunLock.label(of: database)
            let outcome: PostgresRunLock.Outcome
            do {
                outcome = try PostgresRunLock.acquire(url: database, key: key)
            } catch {
                throw Failure.databaseUnavailable(database: label, reason: "\(error)")
            }
            switch outcome {
            case let .acquired(lock): return ScriptLock(holding: lock)
            case let .held(holder): throw Failure.held(script: identity, database: label, holder: holder)
            }
        }
        let outcome: DatabaseFileRunLock.Outcome
        do {
            outcome = try DatabaseFileRunLock.acquire(database: database, key: key)
        } catch {
            throw Failure.cannotLock(database: database, reason: "\(error)")
        }
        switch outcome {
        case let .acquired(lock): return ScriptLock(holding: lock)
        case let .held(holder): throw Failure.held(script: identity, database: database, holder: holder)
        }
    }

    /// The script's real path, or its absolute path when it cannot be
    /// resolved (the run then fails reading it anyway).
    static func realPath(_ script: String) -> String {
        if let resolved = realpath(script, nil) {
            defer { free(resolved) }
            return String(cString: resolved)
        }
        return script.hasPrefix("/") ? script : FileManager.default.currentDirectoryPath + "/" + script
    }
}
