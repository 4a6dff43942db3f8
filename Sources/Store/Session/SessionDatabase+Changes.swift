import CSQLiteStore
import Foundation
import GRDB
import GRDBSQLite

/// What a dry run, a scope or a capped `db.transaction` counts: the rows
/// its connection's counter saw since (``ConnectionChanges``), and the
/// schema it changed.
struct Counting {
    /// The counted transaction's connection's counter (nil: a connection
    /// the store does not count, read-only).
    let changes: ConnectionChanges?
    /// The cap (nil: counted, not capped).
    let limit: Int?
    /// "the run", "the chunk", "the transaction", "the dry run".
    let what: String
    /// Whether a schema change may pass the cap.
    let allowSchemaChanges: Bool
    /// The counts when counting began (a replayed chunk's carried changes).
    var baseline: TableChanges = [:]
    /// Rows a dry run's operation counted instead of changing
    /// (``SessionDatabase/countedInsteadOfChanged(_:deleted:)``).
    var notChanged: TableChanges = [:]
    /// The schema when the transaction began (nil until it has).
    var schema: SchemaSnapshot?

    init(changes: ConnectionChanges?, limit: Int?, what: String, allowSchemaChanges: Bool) {
        self.changes = changes
        self.limit = limit
        self.what = what
        self.allowSchemaChanges = allowSchemaChanges
    }

    /// The rows counted so far: what the counter saw since counting began,
    /// with what operations counted instead of changing.
    var tables: TableChanges {
        var tables = (changes?.pending() ?? [:]).since(baseline)
        tables.add(notChanged)
        return tables
    }
}

extension SessionDatabase {
    /// A counted transaction began on `db` (BEGIN just ran): what its
    /// counter holds belongs to no transaction, and the schema is taken to
    /// say at the end what the transaction did to it.
    func beganCountedTransaction(_ db: Database) throws {
        guard counting != nil else { return }
        counting?.changes?.clear()
        counting?.schema = try SchemaSnapshot.take(db)
    }

    /// What `counting`'s transaction changed so far: its rows and the
    /// database file's schema.
    func summary(of counting: Counting, db: Database) throws -> ChangeSummary {
        var summary = ChangeSummary()
        summary.tables = counting.tables
        summary.schemaChanges = try counting.schema?.changes(now: db) ?? []
        return summary
    }

    /// A dry run's operation counted `deleted` rows of `table` instead of
    /// deleting them (telemetry.cleanup: deleting them in the dry run's one
    /// transaction would hold SQLite's write lock for the whole deletion,
    /// where the real cleanup holds it a batch at a time): the dry run's
    /// summary names them as deleted, and its cap counts them. The dry run
    /// remembers them by `filter` (``CountedInsteadOfChanged``), so that
    /// its later cleanups leave them out.
    func countedInsteadOfChanged(_ table: String, deleted: Int, countedBy filter: TelemetryCleanup.Filter?) throws {
        guard deleted > 0, counting != nil else { return }
        counting?.notChanged.add([table: TableChangeCounts(deleted: deleted)])
        if let counting, let limit = counting.limit {
            var summary = ChangeSummary()
            summary.tables = counting.tables
            try TooManyChanges.check(summary, limit: limit, allowSchemaChanges: true, what: counting.what)
        }
        countedInDryRun.add(table, deleted: deleted, countedBy: filter)
    }

    /// Throws ``TooManyChanges`` when the counted transaction with what the
    /// script committed elsewhere meanwhile (jobs.*, migrations) is past
    /// the cap, or changed the schema while that is not allowed.
    func check(_ counting: Counting, db: Database) throws {
        guard let limit = counting.limit else { return }
        var summary = ChangeSummary()
        summary.tables = counting.tables
        summary.schemaChanges = try counting.schema?.changes(now: db) ?? []
        let kept = store.committedChanges.budgetCommitted()
        summary.tables.add(kept)
        try TooManyChanges.check(summary, limit: limit, allowSchemaChanges: counting.allowSchemaChanges,
                                 what: counting.what, kept: kept)
    }

    /// Refuses what changes the schema (`what`: a migration) while a cap is
    /// on that schema changes may not pass.
    public func refuseSchemaChange(_ what: String) throws {
        guard let counting, let limit = counting.limit, !counting.allowSchemaChanges else { return }
        throw TooManyChanges(limit: limit, summary: nil, what: counting.what, schemaChange: what)
    }

    /// Runs `body`, a statement with `effects` stepped on `connection`
    /// (a writer's), counting the rows of the tables it drops as deleted:
    /// SQLite reports no row change for a DROP TABLE (only for the rows a
    /// foreign key makes it delete first, which are not counted twice).
    public func countingDroppedRows<T>(of effects: StatementEffects, on connection: OpaquePointer,
                                       _ body: () throws -> T) throws -> T {
        // The repositories read the schema again (``schemaEpoch``).
        defer { if effects.changesSchema { schemaEpoch &+= 1 } }
        guard !effects.droppedTables.isEmpty, let changes = store.committedChanges.changes(on: connection) else {
            return try body()
        }
        var rows: [String: Int] = [:]
        for table in effects.droppedTables { rows[table] = try Self.rowCount(of: table, on: connection) }
        let before = changes.pending(includingTemporary: false)
        let result = try body()
        let after = changes.pending(includingTemporary: false)
        for (table, count) in rows {
            let reported = (after[table]?.deleted ?? 0) - (before[table]?.deleted ?? 0)
            changes.addDeleted(count - reported, in: table)
        }
        return result
    }

    private static func rowCount(of table: String, on connection: OpaquePointer) throws -> Int {
        let sql = "SELECT count(*) FROM main.\"\(table.replacingOccurrences(of: "\"", with: "\"\""))\""
        var statement: OpaquePointer?
        defer { sqlite3_finalize(statement) }
        guard sqlite3_prepare_v2(connection, sql, -1, &statement, nil) == SQLITE_OK,
              sqlite3_step(statement) == SQLITE_ROW else {
            throw SQLFailure(message: String(cString: sqlite3_errmsg(connection)), sql: sql)
        }
        return Int(sqlite3_column_int64(statement, 0))
    }

    /// Rows this session (and the store's other writers: jobs' log lines)
    /// committed per table since the store connected.
    public var committedChanges: TableChanges { store.committedChanges.committed }
}
