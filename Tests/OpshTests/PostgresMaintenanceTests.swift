import Foundation
import Testing

/// Maintenance on a real PostgreSQL server: the telemetry cleanup in
/// batches, backups through pg_dump (restored with pg_restore to check
/// them), check() and stats(), vacuum() and checkpoint().
@Suite struct PostgresMaintenanceTests: PostgresSuite {
    let server = try! PostgresServer.shared()
    let sandbox = try! Sandbox()

    /// The same cleanup script deletes the same rows on both engines: by
    /// date, by event, keeping the newest, in batches; a dry run deletes
    /// nothing; inside a transaction it is refused.
    @Test func theCleanupDeletesTheSameRowsOnBothEngines() throws {
        let url = try server.makeDatabase()
        let script = try sandbox.script("cleanup.lua", """
            db.transaction(function()
              for i = 1, 2000 do db.exec("INSERT INTO telemetry (event, created_at) VALUES (?, ?)", i % 4 == 0 and "debug" or "app", i) end
            end)
            local dry = telemetry.cleanup{ olderThan = 1000.5, dryRun = true }
            print("dry", dry.deleted, dry.dryRun, db.value("SELECT count(*) FROM telemetry"))
            local r = telemetry.cleanup{ olderThan = 1000.5, event = "debug", batch = 70 }
            print("debug", r.deleted, r.batches)
            r = telemetry.cleanup{ olderThan = 1900.5, keep = 300, batch = 128 }
            print("keep", r.deleted, db.value("SELECT count(*) FROM telemetry"), db.value("SELECT min(created_at) FROM telemetry"))
            print(select(2, pcall(db.transaction, function() telemetry.cleanup{ olderThan = 5 } end)):match("cannot run inside") ~= nil)
            """)
        let onPostgres = try opsh(url, ["--create", "run", script])
        #expect(onPostgres.status == 0, "\(onPostgres.stderr)")
        let onSQLite = try sandbox.opsh(["run", script])
        #expect(onSQLite.status == 0, "\(onSQLite.stderr)")
        #expect(onPostgres.stdout == onSQLite.stdout)
        #expect(onPostgres.stdout == "dry\t1000\ttrue\t2000\ndebug\t250\t4\nkeep\t1450\t300\t1701.0\ntrue\n", "\(onPostgres.stdout)")
    }

    /// backup() runs pg_dump into a temporary file and names it when
    /// it is whole; the dump restores into another database with the same
    /// rows. An existing file is not replaced, unless it is a dump opsh wrote
    /// and overwrite is asked for.
    @Test func aBackupIsADumpThatRestores() throws {
        let url = try server.makeDatabase()
        let folder = sandbox.root + "/backups"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let run = try opsh(url, ["--create", "-e", """
            db.exec("INSERT INTO telemetry (event, created_at) VALUES ('kept', 1), ('kept', 2)")
            local b = backup("\(folder)/")
            print(b.path)
            """])
        #expect(run.status == 0, "\(run.stderr)")
        let path = run.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(path.hasPrefix(folder + "/opsh-") && path.hasSuffix(".dump"))
        #expect(try visibleFiles(folder) == [(path as NSString).lastPathComponent])

        // Restored into a new database: the rows are there.
        let restored = try server.makeDatabase()
        let restore = try sandbox.run(server.tool("pg_restore"), ["--no-owner", "--dbname=\(restored)", path])
        #expect(restore.status == 0, "\(restore.stderr)")
        #expect(try server.sql("SELECT count(*) FROM telemetry WHERE event = 'kept'", url: restored) == "2")

        // Not over an existing file…
        let again = try opsh(url, ["-e", "backup('\(path)')"])
        #expect(again.status == 1)
        #expect(again.stderr.contains("exists; choose another path"), "\(again.stderr)")
        // …unless it is a dump opsh wrote there and overwrite is asked for (the control)…
        let replaced = try opsh(url, ["-e", "return backup('\(path)', { overwrite = true }).path"])
        #expect(replaced.status == 0, "\(replaced.stderr)")
        // …and never over a file that is not a dump.
        let notes = sandbox.root + "/notes.txt"
        try "mine".write(toFile: notes, atomically: true, encoding: .utf8)
        let refused = try opsh(url, ["-e", "backup('\(notes)', { overwrite = true })"])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("it is not a backup opsh wrote there"), "\(refused.stderr)")
        #expect(try String(contentsOfFile: notes, encoding: .utf8) == "mine")
    }

    /// backup{ keep = N } rotates a series of dumps as SQLite's rotates its
    /// copies: only dumps of the series that opsh wrote are earlier backups
    /// (BackupSafetyTests holds the rule on both engines); a file of the
    /// series that merely begins with PGDMP, a link and files of other
    /// names are never deleted. A dry run says what it would remove;
    /// --read-only refuses rotation.
    @Test func keepRotatesOnlyEarlierDumpsOfTheSeries() throws {
        let url = try server.makeDatabase()
        #expect(try opsh(url, ["--create", "-e", "return 1"]).status == 0)
        let folder = sandbox.root + "/backups"
        let elsewhere = sandbox.root + "/elsewhere.dump"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        for number in [1, 2] {
            let made = try opsh(url, ["-e", "backup('\(folder)/opsh-\(number).dump')"])
            #expect(made.status == 0, "\(made.stderr)")
        }
        func file(_ name: String, _ content: String) throws {
            try content.write(toFile: folder + "/" + name, atomically: false, encoding: .utf8)
        }
        try file("opsh-3.dump", "PGDMP not opsh's")   // named like one, begins like one: left alone
        try file("opsh-5.dump", "not a dump")         // named like one: left alone
        try file("notes-1.txt", "PGDMP")              // another series
        try "PGDMP linked".write(toFile: elsewhere, atomically: false, encoding: .utf8)
        try FileManager.default.createSymbolicLink(atPath: folder + "/opsh-4.dump", withDestinationPath: elsewhere)
        let visible = { try FileManager.default.contentsOfDirectory(atPath: folder).filter { !$0.hasPrefix(".") }.sorted() }

        let dry = try opsh(url, ["--dry-run", "-e", "print(table.concat(backup('\(folder)/opsh-9.dump', { keep = 2 }).wouldRemove, ','))"])
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout == folder + "/opsh-1.dump\n", "\(dry.stdout)")
        let readOnly = try opsh(url, ["--read-only", "-e", "backup('\(folder)/opsh-9.dump', { keep = 2 })"])
        #expect(readOnly.status == 1)
        #expect(readOnly.stderr.contains("--read-only deletes and overwrites nothing (keep = N deletes older backups)"), "\(readOnly.stderr)")
        let bad = try opsh(url, ["-e", "backup('\(folder)/opsh-9.dump', { keep = 0 })"])
        #expect(bad.status == 1)
        #expect(bad.stderr.contains("keep: a number of backups of 1 or more expected"), "\(bad.stderr)")
        #expect(try visible().count == 6)

        let run = try opsh(url, ["-e", "print(table.concat(backup('\(folder)/opsh-9.dump', { keep = 2 }).removed, ','))"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == folder + "/opsh-1.dump\n", "\(run.stdout)")
        #expect(try visible() == ["notes-1.txt", "opsh-2.dump", "opsh-3.dump", "opsh-4.dump", "opsh-5.dump", "opsh-9.dump"])
        #expect(try String(contentsOfFile: elsewhere, encoding: .utf8) == "PGDMP linked")
        // keep = 1: only the new one of the series' dumps opsh wrote stays.
        let last = try opsh(url, ["-e", "print(table.concat(backup('\(folder)/opsh-10.dump', { keep = 1 }).removed, ','))"])
        #expect(last.status == 0, "\(last.stderr)")
        #expect(Set(last.stdout.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: ",").map(String.init))
                == [folder + "/opsh-2.dump", folder + "/opsh-9.dump"], "\(last.stdout)")
        #expect(try visible() == ["notes-1.txt", "opsh-10.dump", "opsh-3.dump", "opsh-4.dump", "opsh-5.dump"])
        #expect(try String(contentsOfFile: folder + "/opsh-3.dump", encoding: .utf8) == "PGDMP not opsh's")
    }

    /// check() reports what an interrupted operation leaves (a constraint
    /// never validated); stats() counts rows.
    @Test func checkAndStatsSayWhatTheServerKnows() throws {
        let url = try server.makeDatabase()
        let fresh = try opsh(url, ["--create", "-e", "local r = check() print(r.ok, #r.problems, stats().rows.telemetry)"])
        #expect(fresh.status == 0, "\(fresh.stderr)")
        #expect(fresh.stdout == "true\t0\t0\n")
        try server.sql("""
            INSERT INTO telemetry (event, created_at) VALUES ('a', 1), ('b', 2);
            ALTER TABLE telemetry ADD CONSTRAINT positive_dates CHECK (created_at > 0) NOT VALID;
            """, url: url)
        let damaged = try opsh(url, ["-e", "local r = check() print(r.ok, r.problems[1]) print(stats().rows.telemetry)"])
        #expect(damaged.status == 0, "\(damaged.stderr)")
        #expect(damaged.stdout.contains("false\tconstraint positive_dates on telemetry is not validated"), "\(damaged.stdout)")
        #expect(damaged.stdout.hasSuffix("\n2\n"))
    }

    /// vacuum() is VACUUM (ANALYZE) of opsh's tables: the server records
    /// the vacuum and the analysis. Inside db.transaction it is refused
    /// with the reason (PostgreSQL runs VACUUM only outside a transaction
    /// block) where the same call outside it runs; a dry run skips it,
    /// --read-only refuses it. A script's own VACUUM through db.exec still
    /// runs, and the run is audited.
    @Test func vacuumAnalyzesOpshsTablesOutsideATransaction() throws {
        let url = try server.makeDatabase()
        let filled = try opsh(url, ["--create", "-e", """
            db.transaction(function() for i = 1, 500 do db.exec("INSERT INTO telemetry (event, created_at) VALUES ('v', ?)", i) end end)
            db.exec("DELETE FROM telemetry WHERE created_at > 250")
            """])
        #expect(filled.status == 0, "\(filled.stderr)")
        let inside = try opsh(url, ["-e", "db.transaction(function() vacuum() end)"])
        #expect(inside.status == 1)
        #expect(inside.stderr.contains("vacuum cannot run inside db.transaction: it needs a database connection of its own (PostgreSQL runs VACUUM only outside a transaction block)"), "\(inside.stderr)")
        #expect(try server.sql("SELECT last_vacuum IS NULL FROM pg_stat_user_tables WHERE relname = 'telemetry'", url: url) == "t")

        let dry = try opsh(url, ["--dry-run", "-e", "return vacuum().dryRun"])
        #expect(dry.stdout == "true\n", "\(dry.stderr)")
        #expect(dry.stderr.contains("opsh: dry run: vacuum skipped (would run VACUUM (ANALYZE) on opsh's tables)"), "\(dry.stderr)")
        let readOnly = try opsh(url, ["--read-only", "-e", "vacuum()"])
        #expect(readOnly.status == 1)
        #expect(readOnly.stderr.contains("vacuum is refused under --read-only"), "\(readOnly.stderr)")

        // Control: outside a transaction it runs.
        let outside = try opsh(url, ["-e", """
            local r = vacuum()
            local listed = {}
            for _, name in ipairs(r.tables) do listed[name] = true end
            print(listed.telemetry, listed.buildLogs, listed.opsh_audit, #r.skipped, r.pagesBefore > 0, r.bytesAfter > 0)
            """])
        #expect(outside.status == 0, "\(outside.stderr)")
        #expect(outside.stdout == "true\ttrue\ttrue\t0\ttrue\ttrue\n", "\(outside.stdout)")
        #expect(try server.sql("SELECT last_vacuum IS NOT NULL AND last_analyze IS NOT NULL FROM pg_stat_user_tables WHERE relname = 'telemetry'", url: url) == "t")

        // A statement PostgreSQL runs only outside a transaction block, in
        // an audited run: it runs, and the run's other rows are counted.
        let own = try opsh(url, ["-e", "db.exec('VACUUM telemetry') db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('w', 1)\")"])
        #expect(own.status == 0, "\(own.stderr)")
        let recorded = try opsh(url, ["--read-only", "-e", "return audit.list{ limit = 1 }[1].changes.telemetry.inserted"])
        #expect(recorded.stdout == "1\n", "\(recorded.stderr)")
    }

    /// checkpoint() is the server's CHECKPOINT: a role that is neither
    /// superuser nor granted pg_checkpoint is refused with the reason and
    /// what allows it; granted pg_checkpoint, the same call runs. A bad
    /// mode is refused as on SQLite.
    @Test func checkpointNeedsSuperuserOrPgCheckpoint() throws {
        let url = try server.makeDatabase()
        #expect(try opsh(url, ["--create", "-e", "return checkpoint().seconds >= 0"]).stdout == "true\n")
        let role = "ops_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased().prefix(12)
        try server.sql("CREATE ROLE \(role) LOGIN; GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA public TO \(role)", url: url)
        let asRole = url.replacingOccurrences(of: "//root@", with: "//\(role)@")
        let refused = try opsh(asRole, ["-e", "checkpoint()"])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("checkpoint: PostgreSQL runs CHECKPOINT only for a superuser or a role granted pg_checkpoint (PostgreSQL 15 and later), and \(role) is neither"), "\(refused.stderr)")
        #expect(refused.stderr.contains("GRANT pg_checkpoint TO \(role)"), "\(refused.stderr)")
        let badMode = try opsh(url, ["-e", "checkpoint('soon')"])
        #expect(badMode.status == 1)
        #expect(badMode.stderr.contains("bad argument #1 to 'checkpoint' (a checkpoint mode expected (passive, full, restart, truncate), got 'soon')"), "\(badMode.stderr)")
        // Control: granted pg_checkpoint, the same call runs.
        try server.sql("GRANT pg_checkpoint TO \(role)", url: url)
        let allowed = try opsh(asRole, ["-e", "return checkpoint('truncate').seconds >= 0"])
        #expect(allowed.status == 0, "\(allowed.stderr)")
        #expect(allowed.stdout == "true\n")
    }
}
