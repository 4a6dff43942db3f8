import Foundation
import PostgresWire

// Maintenance on PostgreSQL: what the server offers for `check()`,
// `stats()` and `backup()` (through `pg_dump`), and the telemetry
// retention cleanup in key-range batches (PostgreSQL has no
// `DELETE … LIMIT`).

extension PostgresDatabase {
    /// What `check()` reports on PostgreSQL: the server keeps pages and
    /// foreign keys whole itself, so what is worth looking at is what an
    /// interrupted operation can leave behind — indexes left invalid by a
    /// failed `CREATE INDEX CONCURRENTLY`, constraints added `NOT VALID`
    /// and never validated — and migrations the database lacks.
    public struct Check: Sendable {
        public var problems: [String]
        public var isOK: Bool { problems.isEmpty }
    }

    public func check() throws -> Check {
        var problems: [String] = []
        for row in try execute("""
            SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
            JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = current_schema() AND NOT (i.indisvalid AND i.indisready) ORDER BY 1
            """).rows {
            problems.append("index \(row[0].textValue ?? "?") is not valid (a failed CREATE INDEX CONCURRENTLY?): REINDEX it")
        }
        for row in try execute("""
            SELECT conrelid::regclass::text, conname FROM pg_constraint
            WHERE connamespace = current_schema()::regnamespace AND NOT convalidated ORDER BY 1, 2
            """).rows {
            problems.append("constraint \(row[1].textValue ?? "?") on \(row[0].textValue ?? "?") is not validated: ALTER TABLE … VALIDATE CONSTRAINT")
        }
        if !pendingMigrations.isEmpty {
            problems.append("migrations \(pendingMigrations.joined(separator: ", ")) are not applied")
        }
        return Check(problems: problems)
    }

    /// What `stats()` reports on PostgreSQL.
    public struct Statistics: Sendable {
        public var database: String
        public var serverVersion: String
        /// `pg_database_size`: the whole database on disk.
        public var databaseBytes: Int64
        /// opsh's tables: exact rows and bytes on disk with indexes and TOAST.
        public var tables: [(table: String, rows: Int64, bytes: Int64)]
        public var migrations: [String]
    }

    public func statistics() throws -> Statistics {
        let size = try execute("SELECT pg_database_size(current_database())").rows.first?.first?.integerValue ?? 0
        var tables: [(table: String, rows: Int64, bytes: Int64)] = []
        let names = try execute("""
            SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename
            """).rows.compactMap { $0.first?.textValue }
        for name in names {
            let quoted = "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\""
            let row = try execute("SELECT (SELECT count(*) FROM \(quoted)), pg_total_relation_size(?::regclass)", .positional([.text(quoted)]))
                .rows.first ?? []
            tables.append((PostgresNames.rowKey(name), row.first?.integerValue ?? 0, row.dropFirst().first?.integerValue ?? 0))
        }
        return Statistics(database: url.database, serverVersion: serverVersion, databaseBytes: size,
                          tables: tables, migrations: appliedMigrations)
    }

    // MARK: backup

    /// Where `pg_dump` is: on the PATH, else the newest of Debian's
    /// `/usr/lib/postgresql/*/bin`.
    static func pgDump() -> String? {
        let path = EnvironmentVariables.process["PATH"] ?? "/usr/bin:/bin"
        for folder in path.split(separator: ":") where access("\(folder)/pg_dump", X_OK) == 0 {
            return "\(folder)/pg_dump"
        }
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []
        for version in versions.sorted(by: { $0.compare($1, options: .numeric) == .orderedDescending })
        where access("/usr/lib/postgresql/\(version)/bin/pg_dump", X_OK) == 0 {
            return "/usr/lib/postgresql/\(version)/bin/pg_dump"
        }
        return nil
    }
}

extension TelemetryCleanup {
    /// What the shell says when a cleanup typed at the prompt runs outside
    /// the chunk's transaction (README: the cleanup commits per batch).
    public static let outsideTheChunk = "telemetry.cleanup runs outside the chunk's transaction: each batch is committed as it goes"

    /// Runs the cleanup on PostgreSQL: each batch a transaction of its own
    /// that deletes the oldest `batchSize` (default ``Options/defaultBatchSize``)
    /// matching rows by key range —
    /// `(created_at, id) <` the first row after the batch, read from the
    /// index — since PostgreSQL has no `DELETE … LIMIT`. A batch cancelled
    /// on the server (Ctrl-C, `--timeout`: SQLSTATE 57014) rolls back
    /// alone; the earlier ones stay committed and the report says `stopped`.
    ///
    /// In a shell chunk that has not written (``PostgresDatabase/isInUnwrittenChunk()``)
    /// the batches run on a session of their own, outside the chunk's
    /// transaction, so that each is committed as it goes and other writers
    /// wait for one batch at most, as on SQLite; their rows count for the
    /// session's audit (``PostgresWritesElsewhere``), and Ctrl-C cancels
    /// the batch that runs there. Inside a `--max-changes` run each batch is
    /// a savepoint of the run's transaction, rolled back with it.
    public func run(on database: PostgresDatabase, shouldStop: () -> Bool,
                    progress: (MaintenanceProgress) -> Void) throws -> Report {
        guard try database.isInUnwrittenChunk() else {
            return try runBatches(in: database, shouldStop: shouldStop, progress: progress)
        }
        var options = database.options
        options.create = false
        options.connectTimeLimit = nil
        let own = try PostgresDatabase(url: database.urlText, options: options)
        own.startCountingCommits(exactly: false)
        database.sideCanceller.withLock { $0 = own.canceller }
        defer {
            database.sideCanceller.withLock { $0 = nil }
            database.writesElsewhere.didCommit(own.committed)
        }
        return try runBatches(in: own, shouldStop: shouldStop, progress: progress)
    }

    private func runBatches(in database: PostgresDatabase, shouldStop: () -> Bool,
                            progress: (MaintenanceProgress) -> Void) throws -> Report {
        try runBatches(
            survey: { try survey(database) },
            deleteBatch: { filter in
                try database.transaction {
                    let bound = try database.execute("""
                        SELECT created_at, id FROM telemetry WHERE \(filter.sql) ORDER BY created_at, id LIMIT 1 OFFSET ?
                        """, .positional(filter.values + [.integer(Int64(options.batchSize ?? Options.defaultBatchSize))])).rows.first
                    if let bound, case let .real(date) = bound[0], case let .integer(id) = bound[1] {
                        let deleted = try database.execute("DELETE FROM telemetry WHERE \(filter.sql) AND (created_at, id) < (?, ?)",
                                                           .positional(filter.values + [.real(date), .integer(id)])).changes ?? 0
                        return (deleted, false)
                    }
                    let deleted = try database.execute("DELETE FROM telemetry WHERE \(filter.sql)",
                                                       .positional(filter.values)).changes ?? 0
                    return (deleted, true)
                }
            },
            isCancellation: { ($0 as? PostgresError)?.code == "57014" },
            shouldStop: shouldStop, progress: progress)
    }
}

extension PostgresDatabase {
    /// Makes a backup at `destination` (a file, or a folder that gets
    /// `opsh-YYYYMMDD-HHMMSS.dump`): `dump` writes it into a temporary file
    /// beside the final name (`pg_dump --format=custom`, run by the caller,
    /// which can start processes), which is checked (pg_dump's custom format
    /// begins with `PGDMP`), synced, recorded as opsh's and then given its
    /// name; nothing at that name is replaced unless `overwrite` and it is
    /// a dump opsh wrote there that nothing uses (``BackupOwnership``, the
    /// rule SQLite's backups follow).
    public func backup(to destination: String, overwrite: Bool,
                       dump: (_ temporary: String) throws -> Void) throws -> BackupResult {
        let target = try BackupTarget(destination: destination, sourcePath: nil, overwrite: overwrite, kind: .pgDump)
        BackupTarget.removeAbandonedTemporaries(in: target.folder)
        let temporary = try target.createTemporary()
        do {
            try dump(temporary)
            guard BackupKind.pgDump.hasItsHeader(temporary) else {
                throw StoreError.refused(reason: "pg_dump did not write a dump (no PGDMP header in \(temporary)); nothing was kept")
            }
            try BackupTarget.sync(temporary)
            try target.publish(temporary)
        } catch {
            BackupTarget.remove(temporary)
            throw error
        }
        return BackupResult(path: target.path, pages: 0)
    }

    /// Where `backup(to: destination)` would write: inside it when it is a
    /// folder, `opsh-YYYYMMDD-HHMMSS.dump`.
    public static func backupPath(for destination: String) -> String {
        BackupTarget.finalPath(for: destination, suffix: "dump")
    }

    /// Where `pg_dump` is, or nil.
    public static var pgDumpPath: String? { pgDump() }
}

// MARK: vacuum and checkpoint

extension PostgresDatabase {
    /// Runs `body` on a connection of its own, opened now and closed
    /// after: for the maintenance PostgreSQL runs only outside a
    /// transaction block (VACUUM), whatever the session's connection is in.
    /// Ctrl-C and `--timeout` cancel it as they cancel the session's
    /// statements (``cancelRunning``).
    func onConnectionOfItsOwn<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        // The pinned path, not the role's: `current_schema()` is then opsh's
        // schema, not a `"$user"` one a script made (scripts/reliability-attacks.md, 28j).
        let other = try PostgresConnection(url: url, settings: ownPath.map { [(name: "search_path", value: $0.pinnedPath)] } ?? [])
        defer { other.close() }
        sideCanceller.withLock { $0 = other.canceller }
        defer { sideCanceller.withLock { $0 = nil } }
        return try body(other)
    }

    /// What `vacuum()` did on PostgreSQL.
    public struct VacuumReport: Sendable {
        /// The tables vacuumed and analyzed, by the schema's spelling.
        public var tables: [String]
        /// Tables of the schema this role may not vacuum (neither it nor
        /// the database is its owner's); the server would skip them.
        public var skipped: [String]
        /// Their size on disk (tables, indexes, TOAST) before and after,
        /// in bytes and in the server's pages (`block_size`, 8 kB).
        public var bytesBefore: Int64
        public var bytesAfter: Int64
        public var blockSize: Int64
    }

    /// `VACUUM (ANALYZE)` of opsh's tables, the tables of the database's
    /// schema (those `stats()` lists), on a connection of its own:
    /// PostgreSQL runs VACUUM only outside a transaction block
    /// (SQLSTATE 25001 otherwise). The dead rows' space becomes reusable
    /// and the planner's statistics are brought up to date; the files
    /// seldom shrink (that is VACUUM FULL, which locks each table against
    /// the backend's reads and writes while it rewrites it: opsh does not
    /// run it). Refuses when the role may vacuum none of them.
    public func vacuumAnalyze() throws -> VacuumReport {
        try onConnectionOfItsOwn { connection in
            let listed = try connection.query("""
                SELECT c.relname::text,
                       pg_has_role(c.relowner, 'USAGE')
                       OR pg_has_role((SELECT datdba FROM pg_database WHERE datname = current_database()), 'USAGE'),
                       pg_total_relation_size(c.oid)
                FROM pg_class c
                WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p', 'm')
                ORDER BY c.relname COLLATE "C"
                """)
            var mine: [String] = []
            var skipped: [String] = []
            var bytesBefore: Int64 = 0
            for row in listed.rows {
                guard case let .text(name) = row[0] else { continue }
                if row[1] == .bool(true) {
                    mine.append(name)
                    if case let .integer(bytes) = row[2] { bytesBefore += bytes }
                } else {
                    skipped.append(PostgresNames.rowKey(name))
                }
            }
            let role = Self.role(of: connection)
            guard !mine.isEmpty else {
                throw StoreError.refused(reason: "vacuum: \(role) may vacuum none of the schema's \(skipped.count) table(s) (PostgreSQL lets only a table's owner, the database's owner or a superuser vacuum it); nothing was done")
            }
            let names = mine.map { "\"" + $0.replacingOccurrences(of: "\"", with: "\"\"") + "\"" }
            _ = try connection.query("VACUUM (ANALYZE) " + names.joined(separator: ", "))
            let after = try connection.query("""
                SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint, current_setting('block_size')::bigint
                FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace AND c.relname = ANY($1::text::text[])
                """, [.text("{" + names.joined(separator: ",") + "}")])
            var bytesAfter: Int64 = 0
            var blockSize: Int64 = 8192
            if let row = after.rows.first {
                if case let .integer(bytes) = row[0] { bytesAfter = bytes }
                if case let .integer(size) = row[1] { blockSize = size }
            }
            return VacuumReport(tables: mine.map(PostgresNames.rowKey), skipped: skipped, bytesBefore: bytesBefore,
                                bytesAfter: bytesAfter, blockSize: blockSize)
        }
    }

    /// The connection's role, for messages.
    static func role(of connection: PostgresConnection) -> String {
        if case let .text(name)? = try? connection.query("SELECT current_user::text").scalar { return name }
        return "this role"
    }

    /// `CHECKPOINT`: the server writes every dirty page of the cluster to
    /// its files now instead of at its next scheduled checkpoint
    /// (`checkpoint_timeout`, `max_wal_size`). PostgreSQL allows it to a
    /// superuser and (from version 15) to a role granted `pg_checkpoint`;
    /// anyone else is refused, saying so. Returns the seconds it took.
    public func checkpoint() throws -> Double {
        try onConnectionOfItsOwn { connection in
            let started = DispatchTime.now().uptimeNanoseconds
            do {
                _ = try connection.query("CHECKPOINT")
            } catch let error as PostgresError where error.code == "42501" {
                let role = Self.role(of: connection)
                throw StoreError.refused(reason: "checkpoint: PostgreSQL runs CHECKPOINT only for a superuser or a role granted pg_checkpoint (PostgreSQL 15 and later), and \(role) is neither (the server said: \(error.message)); the server checkpoints on its own schedule, so nothing opsh committed waits for it (GRANT pg_checkpoint TO \(role) to allow it)")
            }
            return Double(DispatchTime.now().uptimeNanoseconds - started) / 1e9
        }
    }
}
