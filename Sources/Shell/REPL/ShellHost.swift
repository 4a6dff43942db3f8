import Bindings
import Foundation
import LuaRuntime
import Store

/// What the REPL needs of a session, whatever its engine: the Lua
/// runtime, the events to print at the prompt, and how a chunk typed at
/// the prompt runs (on SQLite, ``ChunkTransactions``: one transaction begun
/// at its first write, confirmation, undo; on PostgreSQL, one transaction
/// with a savepoint per statement).
public protocol ShellHost: AnyObject {
    var runtime: LuaRuntime { get }
    var eventQueue: EventQueue { get }
    @discardableResult func deliverEvents() throws -> [LuaError]
    var isSandboxed: Bool { get }
    /// The database file (SQLite), for `.locks`; nil elsewhere.
    var databaseFilePath: String? { get }
    /// `.locks` where there is no file to look at (PostgreSQL): who holds
    /// locks on the database now; nil where `.locks` reads the file's.
    func describeLocks() -> String?
    /// Why writes are refused now (the file was replaced), or nil.
    var writeProblem: String? { get }
    /// Sentences that help with an error (a missing migration, who holds
    /// the lock).
    func hints(for error: any Error) -> [String]
}

extension OpshSession: ShellHost {
    public var eventQueue: EventQueue { events }
    public var databaseFilePath: String? { store.path }
    public var writeProblem: String? { store.replacedFileProblem }
    public func describeLocks() -> String? { nil }

    public func hints(for error: any Error) -> [String] {
        let message = (error as? LuaError)?.message ?? "\(error)"
        var hints: [String] = []
        if let hint = store.missingMigrationHint(for: message) { hints.append(hint) }
        // A write that gave up waiting: say who holds the lock.
        if message.contains("database is locked"), let path = store.path, let holders = LockHolders.sentence(for: path) {
            hints.append("the database's lock is \(holders) (.locks shows it again)")
        }
        return hints
    }
}

extension PostgresSession: ShellHost {
    public var eventQueue: EventQueue { events }
    public var databaseFilePath: String? { nil }
    public var writeProblem: String? { nil }

    public func hints(for error: any Error) -> [String] {
        let message = (error as? LuaError)?.message ?? "\(error)"
        return message.contains("database is locked") ? [".locks shows the sessions holding locks now"] : []
    }

    /// The sessions of this database holding more than a read's lock on
    /// its tables, or that another waits for (`pg_blocking_pids`).
    public func describeLocks() -> String? {
        do {
            return try database.lockHolders().map { "locks " + $0 } ?? "no other session holds a lock on this database's tables"
        } catch {
            return "cannot read the server's locks: \(error)"
        }
    }
}
