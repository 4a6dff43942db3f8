import Foundation
import PostgresWire

// PostgreSQL's side of the session seam (``DatabaseSession``): one
// connection, the server's transactions and counters.

extension PostgresDatabase: DatabaseSession {
    public var engine: DatabaseEngine { .postgresql }
    public var shortName: String { url.database }
    public var serverDescription: String? { "PostgreSQL \(serverVersion)" }
    public var isReadOnly: Bool { options.readOnly }
    public var createdAtOpening: Bool { !appliedAtOpening.isEmpty }

    public var openTransactionName: String {
        if isDryRun { return "a dry run" }
        if isInChunk && depth == 1 {
            return "a chunk that has written (a chunk at the prompt is one transaction until it ends: run this in a chunk of its own, or before the chunk's first write)"
        }
        return "db.transaction"
    }

    /// Why `undo()` is SQLite's only, and what to do instead.
    public static let undoRefusal = "undo() is not available on PostgreSQL: it takes a chunk back by applying the inverse of the changeset SQLite's session extension recorded for it, and PostgreSQL keeps no changeset of a transaction; to try a change before keeping it, start the shell with --dry-run (the whole session is rolled back when it ends) or run the change inside db.transaction and raise an error to roll it back (a chunk that fails keeps nothing)"

    public var undoUnavailable: String? { Self.undoRefusal }

    /// One transaction for the whole shell session: the server's MVCC lets
    /// the backend go on meanwhile, and it holds only the rows it touched.
    public var dryRunSpansTheSession: Bool { true }

    /// Never reached (``dryRunSpansTheSession``): a chunk of the session's
    /// dry run, measured.
    public func replayScope<T>(carrying carried: Changeset?, changeLimit: Int?, _ body: () throws -> T)
        throws -> (result: T, carried: Changeset?, summary: ChangeSummary, notCarried: String?) {
        let (result, outcome) = try scope(.chunk, records: false, changeLimit: changeLimit, gate: nil, body)
        return (result, nil, outcome.summary, nil)
    }

    public var rowsCountedInsteadOfChanged: TableChanges { countedInDryRun.tables }

    public func markAsDryRun() {}

    public func apply(_ changeset: Changeset, refusal: String) throws -> ChangeSummary {
        throw PostgresStoreError.statement(Self.undoRefusal)
    }

    public func startCountingCommits(exactly: Bool) {
        countsCommits = !options.readOnly
        countsFailedStatementsExactly = exactly
    }

    /// Connected at opening, or not at all.
    public var connectionFailure: String? { nil }

    /// What this connection committed, and what the process committed for
    /// the session through connections of their own (jobs.*).
    public var committedChanges: TableChanges {
        guard countsCommits else { return committed }
        var all = committed
        all.add(writesElsewhere.committed)
        return all
    }

    /// Where migrations cannot run now (each runs in a transaction of its
    /// own: a savepoint inside a `--max-changes` run's, which counts their
    /// rows and rolls them back past its cap), or nil.
    public var transactionRefusingMigrations: String? {
        guard isInTransaction, !(isInRunScope && depth == 1 && !isDryRun) else { return nil }
        return openTransactionName
    }

    /// Refuses what changes the schema (`what`: a migration) while a cap is
    /// on that schema changes may not pass, before it runs.
    public func refuseSchemaChange(_ what: String) throws {
        guard let cap = scopeCap, !allowsSchemaChanges else { return }
        throw TooManyChanges(limit: cap.limit, summary: nil, what: cap.what, schemaChange: what)
    }

    public func auditDestination(busyTimeout: Double) -> any AuditDestination {
        PostgresAuditDestination(database: self, statementsBefore: statementCount, commitsElsewhereBefore: writesElsewhere.commits,
                                 lockWait: busyTimeout)
    }

    public func requiresReason() throws -> Bool {
        try AuditTrail.requiresReason(self)
    }

    public var catalog: any DatabaseCatalog { PostgresCatalog(database: self) }

    public var writeProblem: String? { nil }

    public func announceLockWaits(after seconds: TimeInterval, _ say: @escaping @Sendable (String) -> Void) {
        lockWitness?.announcement = (seconds, say)
    }

    public func sayNotes(_ say: @escaping @Sendable (String) -> Void) {
        onReconnect = say
    }

    public func hints(for message: String) -> [String] {
        message.contains("database is locked") ? [".locks shows the sessions holding locks now"] : []
    }

    public var interruptRunning: @Sendable () -> Void { cancelRunning }
    /// Not yet on PostgreSQL: a cancel reaches only a statement the server
    /// runs, so one sent just after an interrupt runs (a second Ctrl-C
    /// stops it).
    public func stopStatements(whenSet flag: UnsafeRawPointer?) {}

    public func close() {}

    // MARK: Transactions with limits, and scopes

    public func transaction<T>(changeLimit: Int?, allowSchemaChanges: Bool?, _ body: () throws -> T) throws -> T {
        guard let changeLimit else { return try transaction(body) }
        return try transaction {
            // The server's counters of this backend, read before and after:
            // what the transaction (or savepoint) changed in between,
            // cascades and triggers included; and the schema.
            let before = try currentCounts()
            let schema = try PostgresSchemaSnapshot(connection)
            let result = try body()
            let after = Measure.carrying(before, into: try currentCounts())
            let difference = try schemaDifference(since: schema, pending: after, always: true)
            var summary = ChangeSummary()
            summary.tables = after.since(before)
            summary.tables.add(difference.droppedRows)
            summary.schemaChanges = difference.changes
            try TooManyChanges.check(summary, limit: changeLimit, allowSchemaChanges: allowSchemaChanges ?? allowsSchemaChanges,
                                     what: "the transaction")
            return result
        }
    }

    /// The counters of this backend's open transaction (and of earlier
    /// ones not yet flushed): two readings in one transaction differ by
    /// what happened between them.
    func currentCounts() throws -> TableChanges {
        let relations = try tallyRelations()
        return CommitTally.counts(try connection.query(CommitTally.reading, [.text(relations.oids)]), relations)
    }
}

/// PostgreSQL's catalog: the tables and views of the schema opsh works in
/// (`current_schema()`), their columns, `\d`'s description of a table,
/// and who holds locks in the database (`pg_locks`, `pg_blocking_pids`,
/// with each session's application name and query). Read on the session's
/// connection (inside a chunk's transaction, its own tables too), past the
/// session's counters.
struct PostgresCatalog: DatabaseCatalog {
    let database: PostgresDatabase
    var connection: PostgresConnection { database.connection }

    private func texts(_ sql: String, _ parameters: [PostgresValue] = []) throws -> [[String]] {
        // What the script's SQL would name: read with its search_path
        // (PostgresOwnPath).
        try database.sending(.script) { try connection.query(sql, parameters) }.rows.map { row in
            row.map { value in
                switch value {
                case .null: ""
                case let .text(text): text
                case let .integer(number): String(number)
                case let .double(number): String(number)
                case let .bool(flag): flag ? "true" : "false"
                case let .bytes(bytes): String(decoding: bytes, as: UTF8.self)
                }
            }
        }
    }

    func tables() throws -> [String] {
        try texts("""
            SELECT c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = pg_catalog.current_schema() AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
            ORDER BY 1
            """).map { PostgresNames.rowKey($0[0]) }
    }

    func columns(of table: String) throws -> [String] {
        try texts("""
            SELECT a.attname FROM pg_catalog.pg_attribute a
            WHERE a.attrelid = pg_catalog.to_regclass(pg_catalog.quote_ident($1)) AND a.attnum > 0 AND NOT a.attisdropped
            ORDER BY a.attnum
            """, [.text(table.lowercased())]).map { PostgresNames.rowKey($0[0]) }
    }

    /// As psql's `\d TABLE` shows it: the columns with their types,
    /// nullability and defaults, then indexes, constraints and triggers.
    func schemaText(of table: String?) throws -> [String] {
        let names = try table.map { [$0] } ?? tables()
        return try names.compactMap { try describe($0) }
    }

    private func describe(_ table: String) throws -> String? {
        let found = try texts("""
            SELECT c.oid::text, n.nspname, c.relname, c.relkind::text FROM pg_catalog.pg_class c
            JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
            WHERE c.oid = pg_catalog.to_regclass(pg_catalog.quote_ident($1)) AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
            """, [.text(table.lowercased())])
        guard let relation = found.first else { return nil }
        let oid = relation[0]
        let kind = ["r": "Table", "p": "Partitioned table", "v": "View", "m": "Materialized view", "f": "Foreign table"][relation[3]] ?? "Table"
        var lines = ["\(kind) \"\(relation[1]).\(relation[2])\""]
        let columns = try texts("""
            SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod),
                   CASE WHEN a.attnotnull THEN 'not null' ELSE '' END,
                   COALESCE(pg_catalog.pg_get_expr(d.adbin, d.adrelid), ''),
                   CASE a.attidentity WHEN 'a' THEN 'generated always as identity' WHEN 'd' THEN 'generated by default as identity' ELSE '' END
            FROM pg_catalog.pg_attribute a LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
            WHERE a.attrelid = $1::oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum
            """, [.text(oid)])
        let header = ["Column", "Type", "Nullable", "Default"]
        let rows = columns.map { [$0[0], $0[1], $0[2], $0[3].isEmpty ? $0[4] : $0[3]] }
        let widths = header.indices.map { column in ([header[column]] + rows.map { $0[column] }).map(\.count).max() ?? 0 }
        func line(_ cells: [String]) -> String {
            " " + cells.enumerated().map { $0.element.padding(toLength: widths[$0.offset], withPad: " ", startingAt: 0) }
                .joined(separator: " | ").trimmingCharacters(in: .whitespaces)
        }
        lines.append(line(header))
        lines.append(widths.map { String(repeating: "-", count: $0 + 2) }.joined(separator: "+"))
        lines += rows.map(line)
        let sections: [(String, String)] = [
            ("Indexes:", """
                SELECT '"' || i.relname || '" ' || pg_catalog.pg_get_indexdef(x.indexrelid)
                FROM pg_catalog.pg_index x JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid
                WHERE x.indrelid = $1::oid ORDER BY x.indisprimary DESC, i.relname
                """),
            ("Constraints:", """
                SELECT '"' || conname || '" ' || pg_catalog.pg_get_constraintdef(oid, true)
                FROM pg_catalog.pg_constraint WHERE conrelid = $1::oid AND contype IN ('c', 'f', 'u', 'x')
                ORDER BY contype, conname
                """),
            ("Triggers:", """
                SELECT pg_catalog.pg_get_triggerdef(oid, true) FROM pg_catalog.pg_trigger
                WHERE tgrelid = $1::oid AND NOT tgisinternal ORDER BY tgname
                """),
        ]
        for (title, sql) in sections {
            let entries = try texts(sql, [.text(oid)]).map { $0[0] }
            guard !entries.isEmpty else { continue }
            lines.append(title)
            lines += entries.map { "    " + $0 }
        }
        return lines.joined(separator: "\n")
    }

    /// The other sessions of this database holding more than a read's
    /// lock on one of its tables, or that another waits for
    /// (``PostgresDatabase/lockHolders()``).
    func locks() throws -> [String] {
        try database.lockHolders().map { ["locks " + $0] } ?? []
    }
}

/// A PostgreSQL database: a connection of the trail's own to the same
/// URL; the row is not counted among the run's changes (it is not written
/// on the session's connection).
struct PostgresAuditDestination: AuditDestination {
    let database: PostgresDatabase
    /// Statements run before the script began (opsh's own).
    let statementsBefore: Int
    /// Transactions committed through other connections before it began.
    let commitsElsewhereBefore: Int
    let trail: AuditConnection

    /// - parameter lockWait: seconds the row of a run that changed data
    ///   waits for a lock on the trail (`--busy-timeout`, as SQLite's
    ///   writer waits).
    init(database: PostgresDatabase, statementsBefore: Int, commitsElsewhereBefore: Int, lockWait: Double) {
        self.database = database
        self.statementsBefore = statementsBefore
        self.commitsElsewhereBefore = commitsElsewhereBefore
        trail = AuditConnection.postgres(url: database.urlText, lockWait: lockWait, searchPath: database.ownPath?.pinnedPath)
    }

    /// A statement of the script's ran, or the job manager committed for it.
    var wasUsed: Bool {
        database.statementCount > statementsBefore || database.writesElsewhere.commits > commitsElsewhereBefore
    }
}
