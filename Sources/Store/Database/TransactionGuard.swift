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
/// refuses every schema change too (decision 9). On every connection it
/// refuses a TEMP table or view named as one of opsh's tables, and renaming
/// a TEMP table: found first by an unqualified name, it would take opsh's
/// own statements (27x).
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
        if effects.renames_temp_table != 0 {
            throw SQLFailure(message: temporaryRenameRefusal, sql: sql(of: statement))
        }
        for created in names(effects.temp_tables_created) {
            if let table = StoreMigrations.opshTables.first(where: { sameName($0, created) }) {
                throw SQLFailure(message: shadowRefusal(table), sql: sql(of: statement))
            }
        }
        var result = StatementEffects()
        result.changesSchema = effects.schema_change != 0
        result.mayChangeSchema = effects.dormant_schema_change != 0
        result.changesFileSchema = effects.schema_change_main != 0
        result.droppedTables = names(effects.dropped_tables)
        return result
    }

    /// Why a TEMP table or view named as one of opsh's tables is refused:
    /// the unqualified name in the repositories' statements would find it
    /// first (scripts/reliability-attacks.md, 27x).
    public static func shadowRefusal(_ table: String) -> String {
        "a TEMP table named \(table) would stand in for opsh's \(table) table (opsh's own statements would read and write it instead): name it otherwise"
    }

    /// Why renaming a TEMP table is refused: SQLite does not tell its new
    /// name before it runs, and it could be one of opsh's tables.
    public static let temporaryRenameRefusal = "renaming a TEMP table is refused: under a name of opsh's tables it would stand in for that table in opsh's own statements; create it under the name it is to have"

    /// SQLite compares names ignoring the case of ASCII letters.
    private static func sameName(_ left: String, _ right: String) -> Bool {
        left.utf8.count == right.utf8.count && zip(left.utf8, right.utf8).allSatisfy { asciiLower($0) == asciiLower($1) }
    }

    private static func asciiLower(_ byte: UInt8) -> UInt8 {
        (65...90).contains(byte) ? byte + 32 : byte
    }

    /// A list of NUL-terminated names ending with an empty name.
    private static func names(_ list: UnsafeMutablePointer<CChar>?) -> [String] {
        guard let list else { return [] }
        var names: [String] = []
        var name = UnsafePointer(list)
        while name.pointee != 0 {
            let table = String(cString: name)
            names.append(table)
            name += table.utf8.count + 1
        }
        return names
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
