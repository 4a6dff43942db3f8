import CSQLiteStore
import Foundation
import GRDB

// SQLite's side of what the Lua bindings run on (``DatabaseSession``):
// the store's connections, the session's transactions, the store's job
// queue and maintenance.

extension SessionDatabase {
    public var rowPath: RowPath { .sqlite(self) }

    public func read<T>(table: String, _ body: (any RepositoryConnection) throws -> T) throws -> T {
        try read(table) { db in try body(db) }
    }

    public func write<T>(table: String, _ body: (any RepositoryConnection) throws -> T) throws -> T {
        try write(table) { db in try body(db) }
    }

    public func writeOneStatement<T>(table: String, _ body: (any RepositoryConnection) throws -> T) throws -> T {
        try writeOneStatement(table) { db in try body(db) }
    }

    /// The batched C path, or row by row through GRDB while a dry run or a
    /// shell chunk counts changes.
    public func insertTelemetry(_ events: [TelemetryRepository.Event]) throws {
        let counted = isCountingChanges
        try write("telemetry") { db in try TelemetryRepository().insert(db, events, counted: counted) }
    }

    public func dump(table: String?, _ write: (String) throws -> Void) throws {
        try read { db in try SQLDump.write(db, table: table, to: write) }
    }

    public func exportSnapshot<T>(_ body: (any RepositoryConnection) throws -> T) throws -> T {
        try read("projects") { db in try body(db) }
    }

    public func importDocument(_ text: String, options: Transfer.ImportOptions) throws -> Transfer.Summary {
        // Read and checked first, without the write lock; written after,
        // in one short transaction.
        try Transfer.importDocument(text, into: self, options: options)
    }

    public func makeBuildStore() throws -> any BuildStore {
        SQLiteBuildStore(store: store)
    }

    /// `workspaces/` next to the database file (in memory: opsh's data folder).
    public var defaultWorkspaceRoot: String {
        store.path.map { (($0 as NSString).deletingLastPathComponent as NSString).appendingPathComponent("workspaces") }
            ?? DatabaseLocation.dataDirectory() + "/workspaces"
    }

    public func jobsRefusalInTransaction(_ name: String) throws -> String? {
        if isInTransaction {
            return "jobs.\(name) cannot run inside \(openTransactionName): the job manager writes builds in transactions of its own; call it before or after the transaction"
        }
        return nil
    }

    public func tablesRead(by sql: String, arguments: QueryArguments) throws -> Set<String> {
        do {
            return try inspectQuery(sql, arguments: arguments).tables
        } catch QueryInspectionError.notAQuery {
            throw StoreError.refused(reason: "watch observes queries only (SELECT …): \(sql)")
        } catch let QueryInspectionError.refused(message) {
            throw StoreError.refused(reason: "\(message) in watch(\(sql))")
        }
    }

    public func observe(_ tables: Set<String>, onChange: @escaping @Sendable () -> Void) throws -> StorageCancellable {
        try store.client.observeTables(tables, onChange)
    }

    public func releaseReadSnapshot() {
        if let reader = route.pointee.reader { opsh_sql_reader_end_snapshot(reader) }
    }

    public func migrationStatus(_ external: [ExternalMigration]) throws -> [ExternalMigrations.Status] {
        try unsafeRead("grdb_migrations") { db in try ExternalMigrations.status(db, external: external) }
    }

    public func migrate(_ external: [ExternalMigration], upTo target: String?) throws -> [String] {
        try ExternalMigrations.migrate(self, external: external, upTo: target)
    }

    public func runMigration(on migrating: StoreDatabase?, _ body: () throws -> Void) throws {
        guard let migrating else { return try body() }
        try run(on: migrating, body)
    }

    public var maintenance: any SessionMaintenance { SQLiteMaintenance(session: self) }
}

/// SQLite's maintenance: the store's own connections (a backup through
/// SQLite's online backup, `VACUUM`, `PRAGMA wal_checkpoint`), refused
/// inside a transaction, skipped in a dry run.
struct SQLiteMaintenance: SessionMaintenance {
    let session: SessionDatabase
    var store: Store { session.store }

    var maintained: any DatabaseSession { session }

    func dryRunDetail(_ name: String) -> String {
        name == "vacuum" ? "would rebuild the database file" : "would copy the WAL into the database file"
    }

    func transactionRefusal(_ name: String) throws -> String? {
        guard session.isInTransaction else { return nil }
        return "\(name) cannot run inside \(session.openTransactionName): it needs a database connection of its own; call it outside the transaction"
    }

    func check() throws -> (ok: Bool, problems: [String], foreignKeys: [[String: StoreValue]]) {
        let report = try session.check()
        return (report.isOK, report.integrityProblems, report.foreignKeyViolations.map { violation in
            ["table": .text(violation.table), "rowid": violation.rowid.map(StoreValue.integer) ?? .null,
             "parent": .text(violation.parent), "message": .text(violation.description)]
        })
    }

    func statistics() throws -> (fields: [(String, StoreValue)], tables: [[String: StoreValue]]) {
        let statistics = try session.statistics()
        let bytes = statistics.tableBytes
        let fields: [(String, StoreValue)] = [
            ("engine", .text("sqlite")),
            ("path", statistics.path.map(StoreValue.text) ?? .null),
            ("fileSize", .integer(statistics.fileSize)),
            ("walSize", .integer(statistics.walSize)),
            ("pageSize", .integer(Int64(statistics.pageSize))),
            ("pageCount", .integer(Int64(statistics.pageCount))),
            ("freePages", .integer(Int64(statistics.freePageCount))),
            ("migrations", .array(statistics.migrations.map(StoreValue.text))),
        ]
        let tables = statistics.rowCounts.map { entry -> [String: StoreValue] in
            ["table": .text(entry.table), "rows": .integer(Int64(entry.rows)),
             "bytes": bytes[entry.table].map(StoreValue.integer) ?? .null]
        }
        return (fields, tables)
    }

    func vacuum() throws -> [(String, StoreValue)] {
        let before = try store.statistics()
        try store.vacuum()
        let after = try store.statistics()
        return [("pagesBefore", .integer(Int64(before.pageCount))), ("pagesAfter", .integer(Int64(after.pageCount))),
                ("freePagesBefore", .integer(Int64(before.freePageCount)))]
    }

    func checkpoint(_ mode: CheckpointMode) throws -> [(String, StoreValue)] {
        let result = try store.checkpoint(mode)
        return [("walFrames", .integer(Int64(result.walFrames))), ("checkpointed", .integer(Int64(result.checkpointedFrames)))]
    }

    func backupTarget(for path: String) -> (path: String, kind: BackupKind) {
        (Store.backupPath(for: path), .sqlite)
    }

    func isDatabaseFile(_ path: String) -> Bool { store.isDatabaseFile(path) }

    func backup(to path: String, overwrite: Bool, progress: @escaping (MaintenanceProgress) -> Void,
                runTool: ToolRunner) throws -> (path: String, pages: Int?) {
        let result = try store.backup(to: path, overwrite: overwrite, progress: progress)
        return (result.path, result.pages)
    }

    /// In a chunk that has not written, SQLite's session has no
    /// transaction open yet: the cleanup runs before it begins.
    var cleanupIsAllowedInTheOpenTransaction: Bool { false }

    var cleanupNote: String? {
        guard session.isInUnwrittenChunk && !session.isDryRun else { return nil }
        // README: the cleanup commits per batch, at the prompt too.
        return "telemetry.cleanup runs outside the chunk's transaction: each batch is committed as it goes (undo() cannot take it back)"
    }

    /// Each batch commits on its own, except inside a --max-changes run
    /// (one transaction, rolled back past its cap).
    var cleanupCommitsEachBatch: Bool { session.isInUnwrittenChunk || !session.isCountingChanges }

    func telemetryRetentionDays() throws -> Int? {
        try session.unsafeRead("storage_config") { db in try TelemetryCleanup.retentionDays(db) }
    }

    func cleanTelemetry(_ cleanup: TelemetryCleanup, shouldStop: () -> Bool,
                        progress: (MaintenanceProgress) -> Void) throws -> TelemetryCleanup.Report {
        guard session.isDryRun else { return try cleanup.run(on: session, shouldStop: shouldStop, progress: progress) }
        let report = try cleanup.leavingOut(session.countedInDryRun.telemetryFilters)
            .run(on: session, shouldStop: shouldStop, progress: progress)
        try session.countedInsteadOfChanged("telemetry", deleted: report.deleted, countedBy: report.countedBy)
        return report
    }
}
