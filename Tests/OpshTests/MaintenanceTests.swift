import Foundation
import Testing

/// Maintenance through the real opsh: the telemetry cleanup in batches,
/// backups (a copy of the file on SQLite, pg_dump's archive on PostgreSQL,
/// each restored to check it) and their rotation, vacuum(); on PostgreSQL
/// also check(), stats() and checkpoint() as the server knows them.
@Suite struct MaintenanceTests {
    /// opsh on `url` (no SQLite database of the sandbox's).
    func opsh(_ sandbox: Sandbox, _ url: String, _ arguments: [String]) throws -> Sandbox.Result {
        try sandbox.opsh(["--db", url] + arguments, database: false)
    }

    /// The same cleanup script deletes the same rows on both engines: by
    /// date, by event, keeping the newest, in batches; a dry run deletes
    /// nothing; inside a transaction it is refused.
    @Test(arguments: Engine.allCases) func theCleanupDeletesTheSameRowsOnBothEngines(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
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
        let run = try sandbox.opsh(["run", script], on: db)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == "dry\t1000\ttrue\t2000\ndebug\t250\t4\nkeep\t1450\t300\t1701.0\ntrue\n", "\(run.stdout)")
    }

    /// The backup file's name in a series (`opsh-N.sqlite`, `opsh-N.dump`),
    /// and how it begins (what a file must at least be to be one).
    static func series(_ engine: Engine) -> (suffix: String, header: String) {
        engine == .sqlite ? (".sqlite", "SQLite format 3\u{0}") : (".dump", "PGDMP")
    }

    /// What a backup holds, read by the engine's own tools: the sqlite3 CLI
    /// on the copy, psql on a database pg_restore filled from the dump.
    func restoredCount(_ engine: Engine, _ sandbox: Sandbox, backup path: String, _ query: String) throws -> String {
        switch engine {
        case .sqlite:
            return try TestDatabase(engine: .sqlite, db: path).sql(query)
        case .postgresql:
            let server = try PostgresServer.shared()
            let restored = TestDatabase(engine: .postgresql, db: try server.makeDatabase())
            let restore = try sandbox.run(server.tool("pg_restore"), ["--no-owner", "--dbname=\(restored.db)", path])
            #expect(restore.status == 0, "\(restore.stderr)")
            return try restored.sql(query)
        }
    }

    /// A backup on PostgreSQL dumps the database opsh is connected to,
    /// whatever `PGSERVICE` names. pg_dump takes a service's settings
    /// before libpq's variables, so an inherited `PGSERVICE` whose service
    /// names another database would have dumped that one. PostgreSQL only:
    /// services and pg_dump are libpq's; the control is the same backup
    /// without `PGSERVICE`.
    @Test func aBackupDumpsTheDatabaseOpshIsOnWhateverPGSERVICENames() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.postgresql)
        try database.sql("INSERT INTO telemetry (event, properties, created_at) VALUES ('mine', '{}', 1)")
        let server = try PostgresServer.shared()
        let decoy = try server.makeDatabase()
        try TestDatabase(engine: .postgresql, db: decoy).sql("CREATE TABLE telemetry (event text); INSERT INTO telemetry VALUES ('decoy')")
        let decoyName = decoy.split(separator: "?")[0].split(separator: "/").last.map(String.init) ?? ""
        let services = sandbox.root + "/services.conf"
        try "[nightly]\ndbname=\(decoyName)\n".write(toFile: services, atomically: true, encoding: .utf8)
        for (label, extra) in [("control", [String: String]()), ("PGSERVICE", ["PGSERVICE": "nightly", "PGSERVICEFILE": services])] {
            let path = sandbox.root + "/\(label).dump"
            let result = try sandbox.opsh(["-e", "backup('\(path)')"], on: database, environment: extra)
            #expect(result.status == 0, "\(label): \(result.stderr)")
            #expect(try restoredCount(.postgresql, sandbox, backup: path, "SELECT string_agg(event, ',') FROM telemetry") == "mine",
                    "\(label): the dump holds another database")
        }
    }

    /// backup() writes the copy or dump under a temporary name and names it
    /// when it is whole; it restores with the same rows. An existing file
    /// is not replaced, unless it is a backup opsh wrote and overwrite is
    /// asked for.
    @Test(arguments: Engine.allCases) func aBackupRestoresAndReplacesOnlyWhatOpshWrote(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
        let folder = sandbox.root + "/backups"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let run = try sandbox.opsh(["-e", """
            db.exec("INSERT INTO telemetry (event, created_at) VALUES ('kept', 1), ('kept', 2)")
            local b = backup("\(folder)/")
            print(b.path)
            """], on: db)
        #expect(run.status == 0, "\(run.stderr)")
        let path = run.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(path.hasPrefix(folder + "/opsh-") && path.hasSuffix(Self.series(engine).suffix), "\(path)")
        #expect(try visibleFiles(folder) == [(path as NSString).lastPathComponent])
        #expect(try restoredCount(engine, sandbox, backup: path, "SELECT count(*) FROM telemetry WHERE event = 'kept'") == "2")

        // Not over an existing file…
        let again = try sandbox.opsh(["-e", "backup('\(path)')"], on: db)
        #expect(again.status == 1)
        #expect(again.stderr.contains("exists; choose another path"), "\(again.stderr)")
        // …unless it is a backup opsh wrote there and overwrite is asked for (the control)…
        let replaced = try sandbox.opsh(["-e", "return backup('\(path)', { overwrite = true }).path"], on: db)
        #expect(replaced.status == 0, "\(replaced.stderr)")
        // …and never over a file that is not a backup.
        let notes = sandbox.root + "/notes.txt"
        try "mine".write(toFile: notes, atomically: true, encoding: .utf8)
        let refused = try sandbox.opsh(["-e", "backup('\(notes)', { overwrite = true })"], on: db)
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("it is not a backup opsh wrote there"), "\(refused.stderr)")
        #expect(try String(contentsOfFile: notes, encoding: .utf8) == "mine")
    }

    /// backup{ keep = N } rotates a series: only backups of the series that
    /// opsh wrote are earlier backups (BackupSafetyTests holds the rule
    /// against attack); a file of the series that merely begins like one,
    /// a link and files of other names are never deleted. A dry run says
    /// what it would remove; --read-only refuses rotation.
    @Test(arguments: Engine.allCases) func keepRotatesOnlyEarlierBackupsOfTheSeries(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
        let (suffix, header) = Self.series(engine)
        let folder = sandbox.root + "/backups"
        let elsewhere = sandbox.root + "/elsewhere" + suffix
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        for number in [1, 2] {
            let made = try sandbox.opsh(["-e", "backup('\(folder)/opsh-\(number)\(suffix)')"], on: db)
            #expect(made.status == 0, "\(made.stderr)")
        }
        func file(_ name: String, _ content: String) throws {
            try content.write(toFile: folder + "/" + name, atomically: false, encoding: .utf8)
        }
        try file("opsh-3" + suffix, header + " not opsh's")   // named like one, begins like one: left alone
        try file("opsh-5" + suffix, "not a backup")            // named like one: left alone
        try file("notes-1.txt", header)                        // another series
        try (header + " linked").write(toFile: elsewhere, atomically: false, encoding: .utf8)
        try FileManager.default.createSymbolicLink(atPath: folder + "/opsh-4" + suffix, withDestinationPath: elsewhere)
        let visible = { try visibleFiles(folder) }

        let dry = try sandbox.opsh(["--dry-run", "-e", "print(table.concat(backup('\(folder)/opsh-9\(suffix)', { keep = 2 }).wouldRemove, ','))"], on: db)
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout == folder + "/opsh-1\(suffix)\n", "\(dry.stdout)")
        let readOnly = try sandbox.opsh(["--read-only", "-e", "backup('\(folder)/opsh-9\(suffix)', { keep = 2 })"], on: db)
        #expect(readOnly.status == 1)
        #expect(readOnly.stderr.contains("--read-only deletes and overwrites nothing (keep = N deletes older backups)"), "\(readOnly.stderr)")
        let bad = try sandbox.opsh(["-e", "backup('\(folder)/opsh-9\(suffix)', { keep = 0 })"], on: db)
        #expect(bad.status == 1)
        #expect(bad.stderr.contains("keep: a number of backups of 1 or more expected"), "\(bad.stderr)")
        #expect(try visible().count == 6)

        let run = try sandbox.opsh(["-e", "print(table.concat(backup('\(folder)/opsh-9\(suffix)', { keep = 2 }).removed, ','))"], on: db)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == folder + "/opsh-1\(suffix)\n", "\(run.stdout)")
        #expect(try visible() == ["notes-1.txt"] + [2, 3, 4, 5, 9].map { "opsh-\($0)\(suffix)" })
        #expect(try String(contentsOfFile: elsewhere, encoding: .utf8) == header + " linked")
        // keep = 1: only the new one of the series' backups opsh wrote stays.
        let last = try sandbox.opsh(["-e", "print(table.concat(backup('\(folder)/opsh-10\(suffix)', { keep = 1 }).removed, ','))"], on: db)
        #expect(last.status == 0, "\(last.stderr)")
        #expect(Set(last.stdout.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: ",").map(String.init))
                == [folder + "/opsh-2" + suffix, folder + "/opsh-9" + suffix], "\(last.stdout)")
        #expect(try visible() == ["notes-1.txt"] + [10, 3, 4, 5].map { "opsh-\($0)\(suffix)" })
        #expect(try String(contentsOfFile: folder + "/opsh-3" + suffix, encoding: .utf8) == header + " not opsh's")
    }

    /// vacuum() needs a connection of its own: inside db.transaction it is
    /// refused with the reason where the same call outside it runs; a dry
    /// run skips it, --read-only refuses it. On PostgreSQL it is VACUUM
    /// (ANALYZE) of opsh's tables, which the server records, a script's own
    /// VACUUM through db.exec runs too, and the run is audited.
    @Test(arguments: Engine.allCases) func vacuumRunsOnlyOutsideATransaction(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
        let filled = try sandbox.opsh(["-e", """
            db.transaction(function() for i = 1, 500 do db.exec("INSERT INTO telemetry (event, created_at) VALUES ('v', ?)", i) end end)
            db.exec("DELETE FROM telemetry WHERE created_at > 250")
            """], on: db)
        #expect(filled.status == 0, "\(filled.stderr)")
        let inside = try sandbox.opsh(["-e", "db.transaction(function() vacuum() end)"], on: db)
        #expect(inside.status == 1)
        #expect(inside.stderr.contains("vacuum cannot run inside db.transaction: it needs a database connection of its own"), "\(inside.stderr)")
        if engine == .postgresql {
            #expect(inside.stderr.contains("(PostgreSQL runs VACUUM only outside a transaction block)"), "\(inside.stderr)")
            #expect(try db.sql("SELECT last_vacuum IS NULL FROM pg_stat_user_tables WHERE relname = 'telemetry'") == "t")
        }

        let dry = try sandbox.opsh(["--dry-run", "-e", "return vacuum().dryRun"], on: db)
        #expect(dry.stdout == "true\n", "\(dry.stderr)")
        #expect(dry.stderr.contains(engine == .sqlite ? "opsh: dry run: vacuum skipped (would rebuild the database file)"
                                    : "opsh: dry run: vacuum skipped (would run VACUUM (ANALYZE) on opsh's tables)"), "\(dry.stderr)")
        let readOnly = try sandbox.opsh(["--read-only", "-e", "vacuum()"], on: db)
        #expect(readOnly.status == 1)
        #expect(readOnly.stderr.contains("vacuum is refused under --read-only: it writes to the database's files"), "\(readOnly.stderr)")

        // Control: outside a transaction it runs.
        switch engine {
        case .sqlite:
            let outside = try sandbox.opsh(["-e", "local r = vacuum() print(r.pagesBefore > 0, r.pagesAfter > 0, r.freePagesBefore >= 0)"], on: db)
            #expect(outside.status == 0, "\(outside.stderr)")
            #expect(outside.stdout == "true\ttrue\ttrue\n", "\(outside.stdout)")
        case .postgresql:
            let outside = try sandbox.opsh(["-e", """
                local r = vacuum()
                local listed = {}
                for _, name in ipairs(r.tables) do listed[name] = true end
                print(listed.telemetry, listed.buildLogs, listed.opsh_audit, #r.skipped, r.pagesBefore > 0, r.bytesAfter > 0)
                """], on: db)
            #expect(outside.status == 0, "\(outside.stderr)")
            #expect(outside.stdout == "true\ttrue\ttrue\t0\ttrue\ttrue\n", "\(outside.stdout)")
            #expect(try db.sql("SELECT last_vacuum IS NOT NULL AND last_analyze IS NOT NULL FROM pg_stat_user_tables WHERE relname = 'telemetry'") == "t")

            // A statement PostgreSQL runs only outside a transaction block, in
            // an audited run: it runs, and the run's other rows are counted.
            let own = try sandbox.opsh(["-e", "db.exec('VACUUM telemetry') db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('w', 1)\")"], on: db)
            #expect(own.status == 0, "\(own.stderr)")
            let recorded = try sandbox.opsh(["--read-only", "-e", "return audit.list{ limit = 1 }[1].changes.telemetry.inserted"], on: db)
            #expect(recorded.stdout == "1\n", "\(recorded.stderr)")
        }
    }

    /// PostgreSQL only (SQLite's check() is its integrity and foreign key
    /// checks: MaintenanceModuleTests): check() reports what an interrupted
    /// operation leaves (a constraint never validated); stats() counts rows.
    @Test func checkAndStatsSayWhatTheServerKnows() throws {
        let sandbox = try Sandbox()
        let server = try PostgresServer.shared()
        let url = try server.makeDatabase()
        let fresh = try opsh(sandbox, url, ["--create", "-e", "local r = check() print(r.ok, #r.problems, stats().rows.telemetry)"])
        #expect(fresh.status == 0, "\(fresh.stderr)")
        #expect(fresh.stdout == "true\t0\t0\n")
        try server.sql("""
            INSERT INTO telemetry (event, created_at) VALUES ('a', 1), ('b', 2);
            ALTER TABLE telemetry ADD CONSTRAINT positive_dates CHECK (created_at > 0) NOT VALID;
            """, url: url)
        let damaged = try opsh(sandbox, url, ["-e", "local r = check() print(r.ok, r.problems[1]) print(stats().rows.telemetry)"])
        #expect(damaged.status == 0, "\(damaged.stderr)")
        #expect(damaged.stdout.contains("false\tconstraint positive_dates on telemetry is not validated"), "\(damaged.stdout)")
        #expect(damaged.stdout.hasSuffix("\n2\n"))
    }

    /// PostgreSQL only (SQLite's checkpoint is its own WAL's, which any
    /// writer may run): checkpoint() is the server's CHECKPOINT: a role that is neither
    /// superuser nor granted pg_checkpoint is refused with the reason and
    /// what allows it; granted pg_checkpoint, the same call runs. A bad
    /// mode is refused as on SQLite.
    @Test func checkpointNeedsSuperuserOrPgCheckpoint() throws {
        let sandbox = try Sandbox()
        let server = try PostgresServer.shared()
        let url = try server.makeDatabase()
        #expect(try opsh(sandbox, url, ["--create", "-e", "return checkpoint().seconds >= 0"]).stdout == "true\n")
        let role = "ops_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased().prefix(12)
        try server.sql("CREATE ROLE \(role) LOGIN; GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA public TO \(role)", url: url)
        let asRole = url.replacingOccurrences(of: "//root@", with: "//\(role)@")
        let refused = try opsh(sandbox, asRole, ["-e", "checkpoint()"])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("checkpoint: PostgreSQL runs CHECKPOINT only for a superuser or a role granted pg_checkpoint (PostgreSQL 15 and later), and \(role) is neither"), "\(refused.stderr)")
        #expect(refused.stderr.contains("GRANT pg_checkpoint TO \(role)"), "\(refused.stderr)")
        let badMode = try opsh(sandbox, url, ["-e", "checkpoint('soon')"])
        #expect(badMode.status == 1)
        #expect(badMode.stderr.contains("bad argument #1 to 'checkpoint' (a checkpoint mode expected (passive, full, restart, truncate), got 'soon')"), "\(badMode.stderr)")
        // Control: granted pg_checkpoint, the same call runs.
        try server.sql("GRANT pg_checkpoint TO \(role)", url: url)
        let allowed = try opsh(sandbox, asRole, ["-e", "return checkpoint('truncate').seconds >= 0"])
        #expect(allowed.status == 0, "\(allowed.stderr)")
        #expect(allowed.stdout == "true\n")
    }
}
