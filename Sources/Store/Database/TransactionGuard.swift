import CSQLiteStore
import GRDBSQLite
import Synchronization

/// What a statement compiled from a script's SQL does, as SQLite compiled
/// it (``TransactionGuard/check(_:on:)``).
public struct StatementEffects: Sendable, Equatable {
    /// It changes the schema of the database file or of TEMP.
    public var changesSchema = false
    /// It does nothing now, but prepared again once the schema changed it
    /// would change the schema (`CREATE … IF NOT EXISTS` of an object that
    /// exists, `DROP … IF EXISTS` of one that does not): a statement kept
    /// and run again is classified again then (``check(_:on:)``), since
    /// SQLite prepares it again in its step.
    public var mayChangeSchema = false
    /// It changes the schema of the database file.
    public var changesFileSchema = false
    /// The tables of the database file it drops: their rows are counted
    /// as deleted (``SessionDatabase/countingDroppedRows(of:on:_:)``).
    public var droppedTables: [String] = []

    public init() {}
}

/// Refuses SQL from scripts that would begin, end or release a transaction
/// or savepoint: opsh owns them (`db.transaction`, dry runs, each write's
/// own transaction), and a `COMMIT` slipped into a dry run would keep its
/// writes (ARCHITECTURE.md, decision 5). On a sandboxed connection it
/// refuses every schema change too (decision 9).
///
/// SQLite decides, not the statement's words: every statement opsh
/// prepares from a script's SQL (`db.*`, `db.rows`, scripts of several
/// statements, `watch`, Lua migrations through `db`) is checked once,
/// after it is prepared and before it first runs, by `opsh_sql_classify`
/// (`CSQLiteStore/opsh_sql_guard.c`, which says why the statement's
/// compiled program is the check and not an authorizer).
public enum TransactionGuard {
    public static let refusal = "transaction control (BEGIN, COMMIT, END, ROLLBACK, SAVEPOINT, RELEASE) is not run through db: use db.transaction(function() … end), which commits, rolls back and nests as savepoints"

    /// Why the sandbox refuses a schema change: a trigger, a renamed
    /// `schemes` or `buildCommand` column, a dropped sandbox trigger would
    /// have a later, unsandboxed build run a command of the script's.
    public static let sandboxSchemaRefusal = "sandbox: schema changes are refused (CREATE, DROP and ALTER of tables, views, indexes and triggers, TEMP ones too): a trigger or a replaced table could make a later build outside the sandbox run a command of the script's; run opsh without --sandbox to change the schema"

    /// What `statement`, prepared on `connection`, does; throws when it is
    /// transaction control, a schema change on a sandboxed connection, or
    /// when SQLite cannot say.
    @discardableResult
    public static func check(_ statement: OpaquePointer, on connection: OpaquePointer) throws -> StatementEffects {
        var effects = opsh_sql_effects()
        guard opsh_sql_classify(connection, statement, &effects) == 0 else {
            throw SQLFailure(message: "could not check whether this statement controls transactions or changes the schema: \(String(cString: sqlite3_errmsg(connection)))",
                             sql: sql(of: statement))
        }
        defer { opsh_sql_effects_free(&effects) }
        if effects.transaction_control != 0 {
            throw SQLFailure(message: refusal, sql: sql(of: statement))
        }
        if (effects.schema_change != 0 || effects.dormant_schema_change != 0) && isProtected(connection) {
            throw SQLFailure(message: sandboxSchemaRefusal, sql: sql(of: statement))
        }
        var result = StatementEffects()
        result.changesSchema = effects.schema_change != 0
        result.mayChangeSchema = effects.dormant_schema_change != 0
        result.changesFileSchema = effects.schema_change_main != 0
        if let list = effects.dropped_tables as UnsafeMutablePointer<CChar>? {
            var name = UnsafePointer(list)
            while name.pointee != 0 {
                let table = String(cString: name)
                result.droppedTables.append(table)
                name += table.utf8.count + 1
            }
        }
        return result
    }

    /// The sandbox's connections: statements that change the schema are
    /// refused on them (every connection a sandboxed session's SQL is
    /// prepared on: the store's writer, the session's own, the read
    /// connection).
    // Locked, not a static Mutex: see LockOwner.state.
    private static let protected = Locked<Set<Int>>([])

    public static func protect(_ connection: OpaquePointer) {
        let address = Int(bitPattern: UnsafeRawPointer(connection))
        _ = protected.withLock { $0.insert(address) }
    }

    /// Before a protected connection closes (its address may be reused).
    public static func unprotect(_ connection: OpaquePointer) {
        let address = Int(bitPattern: UnsafeRawPointer(connection))
        _ = protected.withLock { $0.remove(address) }
    }

    private static func isProtected(_ connection: OpaquePointer) -> Bool {
        let address = Int(bitPattern: UnsafeRawPointer(connection))
        return protected.withLock { $0.contains(address) }
    }

    private static func sql(of statement: OpaquePointer) -> String? {
        sqlite3_sql(statement).map { String(cString: $0) }
    }
}
