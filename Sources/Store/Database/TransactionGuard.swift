import CSQLiteStore
import GRDBSQLite
import Synchronization

/// Refuses SQL from scripts that would begin, end or release a transaction
/// or savepoint: opsh owns them (`db.transaction`, dry runs, each write's
/// own transaction), and a `COMMIT` slipped into a dry run would keep its
/// writes (ARCHITECTURE.md, decision 5).
///
/// SQLite decides, not the statement's words: every statement opsh
/// prepares from a script's SQL (`db.*`, `db.rows`, scripts of several
/// statements, `watch`, Lua migrations through `db`) is checked once,
/// after it is prepared and before it first runs, by
/// `opsh_sql_is_transaction_control` (`CSQLiteStore/opsh_sql_guard.c`),
/// which reads the statement's compiled bytecode.
public enum TransactionGuard {
    public static let refusal = "transaction control (BEGIN, COMMIT, END, ROLLBACK, SAVEPOINT, RELEASE) is not run through db: use db.transaction(function() … end), which commits, rolls back and nests as savepoints"

    /// Throws when `statement`, prepared on `connection`, is transaction
    /// control, or when SQLite cannot say whether it is.
    public static func check(_ statement: OpaquePointer, on connection: OpaquePointer) throws {
        if isProtected(connection), opsh_sql_drops_trigger(connection, statement) != 0 {
            throw SQLFailure(message: "sandbox: dropping a trigger is refused (the sandbox keeps the buildCommand of schemes with triggers)",
                             sql: sql(of: statement))
        }
        switch opsh_sql_is_transaction_control(connection, statement) {
        case 0:
            return
        case 1:
            throw SQLFailure(message: refusal, sql: sql(of: statement))
        default:
            throw SQLFailure(message: "could not check whether this statement controls transactions: \(String(cString: sqlite3_errmsg(connection)))",
                             sql: sql(of: statement))
        }
    }

    /// Connections that carry the sandbox's TEMP triggers: statements that
    /// drop a trigger are refused on them.
    // Locked, not a static Mutex: see LockOwner.state.
    private static let protected = Locked<Set<Int>>([])

    public static func protect(_ connection: OpaquePointer) {
        let address = Int(bitPattern: UnsafeRawPointer(connection))
        _ = protected.withLock { $0.insert(address) }
    }

    private static func isProtected(_ connection: OpaquePointer) -> Bool {
        let address = Int(bitPattern: UnsafeRawPointer(connection))
        return protected.withLock { $0.contains(address) }
    }

    private static func sql(of statement: OpaquePointer) -> String? {
        sqlite3_sql(statement).map { String(cString: $0) }
    }
}
