import Foundation
import PostgresWire

// PostgreSQL's side of what the Lua bindings run on (``DatabaseSession``):
// the session's connection, a build queue of its own, the change listener
// and the server's maintenance.

extension PostgresDatabase {
    public var rowPath: RowPath { .wire(self) }

    public func read<T>(table: String, _ body: (any RepositoryConnection) throws -> T) throws -> T {
        try read(table) { db in try body(db) }
    }

    public func write<T>(table: String, _ body: (any RepositoryConnection) throws -> T) throws -> T {
        try write(table) { db in try body(db) }
    }

    public func writeOneStatement<T>(table: String, _ body: (any RepositoryConnection) throws -> T) throws -> T {
        try writeOneStatement(table) { db in try body(db) }
    }

    /// One COPY FROM STDIN in one transaction, under the session's rules
    /// as `db.copy` (the server's counters count it).
    public func insertTelemetry(_ events: [TelemetryRepository.Event]) throws {
        try write("telemetry") { db in try TelemetryRepository().copyRows(db, events) }
    }

    /// The server's own tool writes PostgreSQL's dump.
    public func dump(table: String?, _ write: (String) throws -> Void) throws {
        throw StoreError.refused(reason: ".dump writes SQLite's SQL; on PostgreSQL the dump is pg_dump's: pg_dump --inserts --no-owner\(table.map { " --table=\($0.lowercased())" } ?? "") with this database's URL (one snapshot; it locks out no writer)")
    }

    /// One `REPEATABLE READ READ ONLY` snapshot.
    public func exportSnapshot<T>(_ body: (any RepositoryConnection) throws -> T) throws -> T {
        try snapshot { try body(self) }
    }

    public func importDocument(_ text: String, options: Transfer.ImportOptions) throws -> Transfer.Summary {
        try Transfer.importDocument(text, into: self, options: options)
    }

    /// A queue of its own (its own connections, opened at first use), as
    /// `opsh runner` has: the job manager's threads never share the
    /// session's connection.
    public func makeBuildStore() throws -> any BuildStore {
        try PostgresBuildQueue(url: url, counted: writesElsewhere, searchPath: ownPath?.pinnedPath)
    }

    /// No database file to put them beside: opsh's data folder of the
    /// machine, as `opsh runner --db postgresql://…` does.
    public var defaultWorkspaceRoot: String { DatabaseLocation.dataDirectory() + "/workspaces" }

    /// Refused inside `db.transaction`, and in a shell chunk or a
    /// `--max-changes` run that has written (its rows are not visible to the
    /// manager's connections, which could wait for its locks).
    public func jobsRefusalInTransaction(_ name: String) throws -> String? {
        if depth > (isInScope ? 1 : 0) {
            return "jobs.\(name) cannot run inside \(openTransactionName): the job manager writes builds in transactions of its own; call it before or after the transaction"
        }
        if isInRunScope, try transactionHasWritten() {
            return "jobs.\(name) cannot run after a --max-changes run has written (the run is one transaction until it ends, and the job manager's connections cannot see its rows): call it before the run's first write"
        }
        if isInChunk, try transactionHasWritten() {
            return "jobs.\(name) cannot run inside a chunk that has written (a chunk at the prompt is one transaction until it ends, and the job manager's connections cannot see its rows: run this in a chunk of its own, or before the chunk's first write)"
        }
        return nil
    }

    public func tablesRead(by sql: String, arguments: QueryArguments) throws -> Set<String> {
        switch arguments {
        case let .positional(values): try tablesRead(by: sql, .positional(values))
        case let .named(values): try tablesRead(by: sql, .table(positional: [], named: values))
        }
    }

    /// LISTEN/NOTIFY on a connection of the listener's own (started by the
    /// first watch).
    public func observe(_ tables: Set<String>, onChange: @escaping @Sendable () -> Void) throws -> StorageCancellable {
        try listener.observe(tables, onChange: onChange)
    }

    /// Nothing to end: each statement reads the latest commits.
    public func releaseReadSnapshot() {}

    public func migrationStatus(_ external: [ExternalMigration]) throws -> [ExternalMigrations.Status] {
        try ExternalMigrations.status(self, external: external)
    }

    public func migrate(_ external: [ExternalMigration], upTo target: String?) throws -> [String] {
        try migrate(external: external, upTo: target)
    }

    /// The session's connection is the one migrating: the body runs as it is.
    public func runMigration(on migrating: StoreDatabase?, _ body: () throws -> Void) throws {
        try body()
    }

    public var maintenance: any SessionMaintenance { PostgresSessionMaintenance(database: self) }
}

/// PostgreSQL's maintenance: `pg_dump` for backups, what the server offers
/// for `check()` and `stats()`, `VACUUM (ANALYZE)` and `CHECKPOINT` on a
/// connection of their own, the telemetry cleanup in key-range batches.
struct PostgresSessionMaintenance: SessionMaintenance {
    let database: PostgresDatabase

    var maintained: any DatabaseSession { database }

    func dryRunDetail(_ name: String) -> String {
        "would run " + (name == "vacuum" ? "VACUUM (ANALYZE) on opsh's tables" : "CHECKPOINT")
    }

    /// `vacuum` and `checkpoint` run on a connection of their own
    /// (PostgreSQL runs VACUUM only outside a transaction block): refused
    /// inside `db.transaction` and in a shell chunk that has written.
    func transactionRefusal(_ name: String) throws -> String? {
        if database.isInChunk && database.depth == 1 {
            guard try database.transactionHasWritten() else { return nil }
            return "\(name) cannot run in a shell chunk that has written: on PostgreSQL each chunk is one transaction, and \(name) runs on a connection of its own (PostgreSQL runs VACUUM only outside a transaction block); run it in a chunk of its own, or before the chunk's first write"
        }
        guard database.isInTransaction else { return nil }
        return "\(name) cannot run inside db.transaction: it needs a database connection of its own (PostgreSQL runs VACUUM only outside a transaction block); call it outside the transaction"
    }

    func check() throws -> (ok: Bool, problems: [String], foreignKeys: [[String: StoreValue]]) {
        let report = try database.check()
        return (report.isOK, report.problems, [])
    }

    func statistics() throws -> (fields: [(String, StoreValue)], tables: [[String: StoreValue]]) {
        let statistics = try database.statistics()
        let fields: [(String, StoreValue)] = [
            ("engine", .text("postgresql")),
            ("database", .text(statistics.database)),
            ("serverVersion", .text(statistics.serverVersion)),
            ("databaseBytes", .integer(statistics.databaseBytes)),
            ("migrations", .array(statistics.migrations.map(StoreValue.text))),
        ]
        let tables = statistics.tables.map { entry -> [String: StoreValue] in
            ["table": .text(entry.table), "rows": .integer(entry.rows), "bytes": .integer(entry.bytes)]
        }
        return (fields, tables)
    }

    func vacuum() throws -> [(String, StoreValue)] {
        let report = try database.vacuumAnalyze()
        return [("tables", .array(report.tables.map(StoreValue.text))), ("skipped", .array(report.skipped.map(StoreValue.text))),
                ("bytesBefore", .integer(report.bytesBefore)), ("bytesAfter", .integer(report.bytesAfter)),
                ("pagesBefore", .integer(report.bytesBefore / report.blockSize)),
                ("pagesAfter", .integer(report.bytesAfter / report.blockSize))]
    }

    /// Every mode is the same `CHECKPOINT` (PostgreSQL has no WAL file of
    /// opsh's to copy or truncate: the server's checkpoint writes every
    /// dirty page).
    func checkpoint(_ mode: CheckpointMode) throws -> [(String, StoreValue)] {
        let seconds = try database.checkpoint()
        return [("seconds", .real((seconds * 1000).rounded() / 1000))]
    }

    func backupTarget(for path: String) -> (path: String, kind: BackupKind) {
        (PostgresDatabase.backupPath(for: path), .pgDump)
    }

    func isDatabaseFile(_ path: String) -> Bool { false }

    /// `pg_dump --format=custom`, connected through libpq's variables, not
    /// the command line: other users see a process's arguments, not its
    /// environment. It gets exactly this session's connection: every `PG…`
    /// variable opsh inherited is left out (libpq takes a `PGSERVICE`'s
    /// settings before the variables, so an inherited service could name
    /// another database), and the server, login and TLS files opsh used
    /// are given.
    func backup(to path: String, overwrite: Bool, progress: @escaping (MaintenanceProgress) -> Void,
                runTool: ToolRunner) throws -> (path: String, pages: Int?) {
        guard let pgDump = PostgresDatabase.pgDumpPath else {
            throw StoreError.refused(reason: "backup on PostgreSQL runs pg_dump, which is not installed here (Debian: postgresql-client); nothing was written")
        }
        let result = try database.backup(to: path, overwrite: overwrite) { temporary in
            // The server this session reached (of several hosts, the one
            // target_session_attrs chose), with the password it logged in with.
            let url = database.url, host = database.connection.connectedHost
            var connection = ["PGHOST": host.name, "PGPORT": String(host.port), "PGUSER": url.user,
                              "PGDATABASE": url.database, "PGSSLMODE": url.sslMode.rawValue]
            if let address = host.address { connection["PGHOSTADDR"] = address }
            if let options = url.options { connection["PGOPTIONS"] = options }
            if let password = database.connection.loginPassword { connection["PGPASSWORD"] = password }
            if let file = url.sslRootCert { connection["PGSSLROOTCERT"] = file }
            if let file = url.sslCert { connection["PGSSLCERT"] = file }
            if let file = url.sslKey { connection["PGSSLKEY"] = file }
            if url.sslNegotiation != .postgres { connection["PGSSLNEGOTIATION"] = url.sslNegotiation.rawValue }
            connection["PGCHANNELBINDING"] = url.channelBinding.rawValue
            connection["PGAPPNAME"] = url.applicationName
            connection["PGCONNECT_TIMEOUT"] = EnvironmentVariables.process["PGCONNECT_TIMEOUT"] ?? "10"
            var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("PG") }
            environment.merge(connection) { $1 }
            try runTool(pgDump, ["--format=custom", "--no-password", "--file=\(temporary)"], environment)
        }
        return (result.path, nil)
    }

    /// At the prompt the cleanup runs outside the chunk's transaction; in
    /// a --max-changes run, in the run's (rolled back past its cap).
    var cleanupIsAllowedInTheOpenTransaction: Bool { isOutsideTheChunk || isInTheRun }

    var cleanupNote: String? {
        isOutsideTheChunk && !database.isDryRun ? TelemetryCleanup.outsideTheChunk : nil
    }

    var cleanupCommitsEachBatch: Bool { !isInTheRun }

    private var isOutsideTheChunk: Bool { (try? database.isInUnwrittenChunk()) == true }
    private var isInTheRun: Bool { database.isInRunScope && database.depth == 1 }

    func telemetryRetentionDays() throws -> Int? {
        try database.execute("""
            SELECT telemetry_retention_days FROM storage_config
            ORDER BY configuration_id = 'default' DESC, configuration_id LIMIT 1
            """).rows.first?.first?.integerValue.map(Int.init)
    }

    func cleanTelemetry(_ cleanup: TelemetryCleanup, shouldStop: () -> Bool,
                        progress: (MaintenanceProgress) -> Void) throws -> TelemetryCleanup.Report {
        guard database.isDryRun else { return try cleanup.run(on: database, shouldStop: shouldStop, progress: progress) }
        let report = try cleanup.leavingOut(database.countedInDryRun.telemetryFilters)
            .run(on: database, shouldStop: shouldStop, progress: progress)
        database.countedInDryRun.add("telemetry", deleted: report.deleted, countedBy: report.countedBy)
        return report
    }
}
