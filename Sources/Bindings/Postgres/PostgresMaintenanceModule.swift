import CLuaShim
import Foundation
import Git
import LuaRuntime
import Store

/// Maintenance on PostgreSQL: `backup(path)` through `pg_dump` (a clear
/// error where it is not installed), `check()` and `stats()` with what the
/// server offers, `telemetry.cleanup{ … }` in key-range batches,
/// `vacuum()` as `VACUUM (ANALYZE)` of opsh's tables and `checkpoint()` as
/// `CHECKPOINT`.
///
/// ```lua
/// backup("/var/backups/opsh/")          -- opsh-YYYYMMDD-HHMMSS.dump, pg_dump's custom format
/// backup("/var/backups/opsh/", { keep = 7 })  -- and deletes all but the 7 newest dumps of the series opsh wrote
/// check()                               -- { ok = true, problems = {} }
/// stats().rows.telemetry, stats().databaseBytes
/// telemetry.cleanup{ olderThan = "30d" }
/// vacuum()                              -- { tables = {…}, pagesBefore = …, pagesAfter = …, … }
/// checkpoint()                          -- { seconds = 0.01 }: superuser or pg_checkpoint only
/// ```
///
/// `vacuum` and `checkpoint` run on a connection of their own (PostgreSQL
/// runs VACUUM only outside a transaction block), as on SQLite: refused
/// inside `db.transaction`, in a shell chunk that has written (each chunk
/// is one transaction) and under `--read-only`; skipped under a dry run.
enum PostgresMaintenanceModule {
    static func install(in session: PostgresSession) {
        let database = session.database
        let rowShapes = session.rowShapes
        let sandbox = session.sandbox
        let runtime = session.runtime
        runtime.register("check") { call in
            let report = try database.check()
            return call.results(.table(["ok": .boolean(report.isOK),
                                        "problems": .array(report.problems.map(LuaValue.string)),
                                        "foreignKeys": .array([])]))
        }
        runtime.register("stats") { call in
            let statistics = try database.statistics()
            let stack = call.stack
            lua_createtable(call.state, 0, 7)
            func set(_ name: String, _ value: LuaValue) {
                stack.push(value)
                stack.setField(name, at: -2)
            }
            set("engine", .string("postgresql"))
            set("database", .string(statistics.database))
            set("serverVersion", .string(statistics.serverVersion))
            set("databaseBytes", .integer(statistics.databaseBytes))
            set("migrations", .array(statistics.migrations.map(LuaValue.string)))
            var counts: [LuaValue: LuaValue] = [:]
            for entry in statistics.tables { counts[.string(entry.table)] = .integer(entry.rows) }
            set("rows", .table(counts))
            StoreValuePusher(rowShapes: rowShapes, state: call.state).pushRows(
                columns: ["table", "rows", "bytes"],
                rows: statistics.tables.map { [.text($0.table), .integer($0.rows), .integer($0.bytes)] })
            stack.setField("tables", at: -2)
            return 1
        }
        runtime.register("backup") { call in try backup(call, database: database, sandbox: sandbox) }
        runtime.register("vacuum") { call in try vacuum(call, database: database) }
        runtime.register("checkpoint") { call in try checkpoint(call, database: database) }
        runtime.register(module: "telemetry", [
            "cleanup": { call in
                // At the prompt it runs outside the chunk's transaction; in a
                // --max-changes run, in the run's (rolled back past its cap).
                let outsideTheChunk = try database.isInUnwrittenChunk()
                let inTheRun = database.isInRunScope && database.depth == 1
                if database.isInTransaction && !database.isDryRun && !outsideTheChunk && !inTheRun {
                    throw LuaCallError.message("telemetry.cleanup cannot run inside \(database.openTransactionName): it commits each batch on its own so that other writers are not blocked; call it outside the transaction")
                }
                if outsideTheChunk { FileHandle.standardError.write(Data("opsh: \(TelemetryCleanup.outsideTheChunk)\n".utf8)) }
                return try TelemetryCleanupModule.cleanup(
                    call, isDryRun: database.isDryRun, commitsEachBatch: !inTheRun,
                    retentionDays: {
                        try database.execute("""
                            SELECT telemetry_retention_days FROM storage_config
                            ORDER BY configuration_id = 'default' DESC, configuration_id LIMIT 1
                            """).rows.first?.first?.integerValue.map(Int.init)
                    },
                    run: { cleanup, shouldStop, progress in try cleanup.run(on: database, shouldStop: shouldStop, progress: progress) })
            },
        ])
    }

    /// Whether `name` may run now on a connection of its own: false under
    /// a dry run (it says so on stderr and is skipped, as on SQLite);
    /// throws where it may not run.
    /// - parameter statement: what it runs (`VACUUM (ANALYZE) on opsh's tables`).
    static func onItsOwn(_ name: String, database: PostgresDatabase, statement: String) throws -> Bool {
        if database.isDryRun {
            FileHandle.standardError.write(Data("opsh: dry run: \(name) skipped (would run \(statement))\n".utf8))
            return false
        }
        if database.options.readOnly {
            throw LuaCallError.message("\(name) is refused under --read-only: it runs \(statement), which writes to the database's files (on SQLite the file opened read-only refuses it too)")
        }
        if database.isInChunk && database.depth == 1 {
            if try database.transactionHasWritten() {
                throw LuaCallError.message("\(name) cannot run in a shell chunk that has written: on PostgreSQL each chunk is one transaction, and \(name) runs on a connection of its own (PostgreSQL runs VACUUM only outside a transaction block); run it in a chunk of its own, or before the chunk's first write")
            }
        } else if database.isInTransaction {
            throw LuaCallError.message("\(name) cannot run inside db.transaction: it needs a database connection of its own (PostgreSQL runs VACUUM only outside a transaction block); call it outside the transaction")
        }
        return true
    }

    static func vacuum(_ call: LuaCall, database: PostgresDatabase) throws -> Int32 {
        guard try onItsOwn("vacuum", database: database, statement: "VACUUM (ANALYZE) on opsh's tables") else {
            return call.results(.table(["dryRun": true]))
        }
        let report = try database.vacuumAnalyze()
        return call.results(.table([
            "tables": .array(report.tables.map(LuaValue.string)),
            "skipped": .array(report.skipped.map(LuaValue.string)),
            "bytesBefore": .integer(report.bytesBefore),
            "bytesAfter": .integer(report.bytesAfter),
            "pagesBefore": .integer(report.bytesBefore / report.blockSize),
            "pagesAfter": .integer(report.bytesAfter / report.blockSize),
        ]))
    }

    /// `checkpoint([mode])`: the mode is checked as on SQLite; every mode
    /// is the same `CHECKPOINT` (PostgreSQL has no WAL file of opsh's to
    /// copy or truncate: the server's checkpoint writes every dirty page).
    static func checkpoint(_ call: LuaCall, database: PostgresDatabase) throws -> Int32 {
        _ = try MaintenanceModule.checkpointMode(call)
        guard try onItsOwn("checkpoint", database: database, statement: "CHECKPOINT") else {
            return call.results(.table(["dryRun": true]))
        }
        let seconds = try database.checkpoint()
        return call.results(.table(["seconds": .number((seconds * 1000).rounded() / 1000)]))
    }

    static func backup(_ call: LuaCall, database: PostgresDatabase, sandbox: Bool) throws -> Int32 {
        if sandbox { throw LuaCallError.message("backup is not available in --sandbox (no files or processes)") }
        let (path, keep, overwrite) = try MaintenanceModule.backupArguments(call, files: FileEffects(database: database))
        // Rotation as on SQLite: only dumps of the series that opsh wrote
        // and nothing uses; nothing else is deleted.
        let target = PostgresDatabase.backupPath(for: path)
        let rotation = try keep.map { _ in try BackupRotation(path: target, kind: .pgDump) }
        if database.isDryRun {
            FileHandle.standardError.write(Data("opsh: dry run: backup skipped (would dump the database to \(path))\n".utf8))
            let wouldRemove = rotation.map { $0.doomed(keeping: keep!, newest: target) } ?? []
            return call.results(.table(["path": .string(path), "dryRun": true,
                                        "wouldRemove": .array(wouldRemove.map(LuaValue.string))]))
        }
        guard let pgDump = PostgresDatabase.pgDumpPath else {
            throw LuaCallError.message("backup on PostgreSQL runs pg_dump, which is not installed here (Debian: postgresql-client); nothing was written")
        }
        let started = Date()
        let result = try database.backup(to: path, overwrite: overwrite) { temporary in
            // The connection through libpq's variables, not the command
            // line: other users see a process's arguments, not its environment.
            let url = database.url
            var connection = ["PGHOST": url.host, "PGPORT": String(url.port), "PGUSER": url.user,
                              "PGDATABASE": url.database, "PGSSLMODE": url.sslMode.rawValue]
            if let password = url.password { connection["PGPASSWORD"] = password }
            try run(pgDump, ["--format=custom", "--no-password", "--file=\(temporary)"], connection: connection)
        }
        var removed: [String] = []
        if let rotation, let keep {
            removed = try rotation.prune(keeping: keep, newest: result.path)
        }
        return call.results(.table([
            "path": .string(result.path),
            "bytes": .integer(MaintenanceModule.fileSize(result.path)),
            "seconds": .number((Date().timeIntervalSince(started) * 1000).rounded() / 1000),
            "removed": .array(removed.map(LuaValue.string)),
        ]))
    }

    /// Runs a tool to its end; throws with what it wrote on stderr.
    static func run(_ executable: String, _ arguments: [String], connection: [String: String]) throws {
        var environment = ProcessInfo.processInfo.environment.merging(connection) { $1 }
        environment["PGCONNECT_TIMEOUT"] = environment["PGCONNECT_TIMEOUT"] ?? "10"
        let child = try Subprocess.spawn(executable: executable, arguments: arguments, environment: environment)
        var output = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 4096)
        for descriptor in [child.standardOutput, child.standardError] where descriptor >= 0 {
            while true {
                let count = read(descriptor, &buffer, buffer.count)
                if count > 0 { if descriptor == child.standardError { output += buffer[0..<count] }; continue }
                if count < 0 && errno == EINTR { continue }
                break
            }
            close(descriptor)
        }
        let ended = Subprocess.reap(child.pid)
        guard ended.exitCode == 0 else {
            let message = String(decoding: output, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            throw LuaCallError.message("backup: \((executable as NSString).lastPathComponent) failed (\(ended)): \(message); nothing was kept")
        }
    }
}
