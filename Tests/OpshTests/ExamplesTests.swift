import Foundation
import Testing

/// Each script of `examples/` against a database holding the damage it
/// repairs, on either engine: the repaired state, the report, the exit
/// status, a dry run that changes nothing, and a second run that is a no-op.
@Suite struct ExamplesTests {
    /// The report without its timings (lock, seconds), which differ from run to run.
    static func report(_ output: String) -> String {
        output.replacingOccurrences(of: #"longest lock [0-9.]+ ms, [0-9.]+ s"#, with: "…", options: .regularExpression)
    }

    /// The lines of `text` that start with one of `prefixes` (a script's own, not the dry run's summary).
    static func lines(_ text: String, _ prefixes: String...) -> [String] {
        text.split(separator: "\n").map(String.init).filter { line in prefixes.contains { line.hasPrefix($0) } }
    }

    @Test(arguments: Engine.allCases) func telemetryRetentionDeletesWhatIsOlderThanThePolicy(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try ExampleDatabase(engine, in: sandbox)
        let day = 86400.0, now = Date().timeIntervalSince1970
        try db.sql("""
            INSERT INTO telemetry (event, created_at) VALUES
              ('old', \(now - 40 * day)), ('old', \(now - 35 * day)), ('older', \(now - 90 * day)),
              ('recent', \(now - 20 * day)), ('new', \(now - 60));
            """)

        let dry = try db.dryRun("telemetry-retention.lua")
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout.contains("retention 30d (default: no storage_config): would delete 3 of 5 events"), "\(dry.stdout)")

        let run = try db.example("telemetry-retention.lua")
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("deleted 3 of 5 events"), "\(run.stdout)")
        #expect(Self.report(run.stdout).contains("retention 30d (default: no storage_config): deleted 3 of 5 events"), "\(run.stdout)")
        #expect(try db.sql("SELECT event FROM telemetry ORDER BY id") == "recent\nnew")

        let again = try db.secondRun("telemetry-retention.lua")
        #expect(again.status == 0)
        #expect(again.stdout.contains("deleted 0 of 2 events"), "\(again.stdout)")

        // The storage configuration's retention, and an argument over it.
        try db.sql("""
            INSERT INTO configuration (id, base_url, created_at, updated_at) VALUES ('default', 'x', 0, 0);
            INSERT INTO storage_config (configuration_id, telemetry_retention_days) VALUES ('default', 10);
            """)
        let policy = try db.example("telemetry-retention.lua")
        #expect(policy.stdout.contains("retention 10d (storage_config 'default'): deleted 1 of 2"), "\(policy.stdout)")
        try db.sql("UPDATE storage_config SET auto_cleanup = 0")
        let off = try db.secondRun("telemetry-retention.lua")
        #expect(off.status == 0)
        #expect(off.stdout.contains("auto_cleanup is off"), "\(off.stdout)")
        let argument = try db.example("telemetry-retention.lua", ["30s"])
        #expect(argument.stdout.contains("retention 30s (argument): deleted 1 of 1"), "\(argument.stdout)")

        let bad = try db.example("telemetry-retention.lua", ["soon"])
        #expect(bad.status == 2)
        #expect(bad.stderr.contains("retention must be a duration"))
    }

    /// A backup named by time (on SQLite an online copy, checked by
    /// integrity_check; on PostgreSQL a pg_dump archive, checked by its
    /// PGDMP header), that restores, and KEEP rotation of the series that
    /// deletes only earlier backups opsh wrote (never a file of the series
    /// that is not one, nor files of other names).
    @Test(arguments: Engine.allCases) func nightlyBackupCopiesVerifiesAndRotates(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try ExampleDatabase(engine, in: sandbox)
        let suffix = engine == .sqlite ? ".sqlite" : ".dump"
        try db.sql("INSERT INTO projects VALUES ('com.example.app', 'app', 'App', '/srv/app', 0)")
        let folder = sandbox.root + "/backups"
        // Three older backups of the series (opsh's, oldest first) and a file of another name.
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        for name in ["opsh-20240101-000000", "opsh-20240102-000000", "opsh-20240103-000000"] {
            let made = try sandbox.opsh(["-e", "backup('\(folder)/\(name)\(suffix)')"], on: db.database)
            #expect(made.status == 0, "\(made.stderr)")
        }
        #expect(FileManager.default.createFile(atPath: folder + "/notes.txt", contents: Data("keep me".utf8)))
        // Named like a backup, but not one: rotation leaves it alone.
        #expect(FileManager.default.createFile(atPath: folder + "/opsh-20230101-000000" + suffix, contents: Data("mine".utf8),
                                               attributes: [.modificationDate: Date(timeIntervalSinceNow: -86400 * 30)]))

        let dry = try db.dryRun("nightly-backup.lua", [folder, "2"])
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout.contains("would copy the database"), "\(dry.stdout)")
        #expect(dry.stdout.contains("\(suffix) and keep the 2 newest backups"), "\(dry.stdout)")
        #expect(try visibleFiles(folder).count == 5)

        let run = try db.example("nightly-backup.lua", [folder, "2"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("verified"), "\(run.stdout)")
        #expect(run.stdout.contains("removed 2 old backup(s)"), "\(run.stdout)")
        let names = try visibleFiles(folder)
        #expect(names.count == 4, "\(names)")
        #expect(names.contains("notes.txt") && names.contains("opsh-20240103-000000" + suffix)
                && names.contains("opsh-20230101-000000" + suffix), "\(names)")
        let copy = try #require(names.first { $0.hasPrefix("opsh-") && !$0.hasPrefix("opsh-2024") && !$0.hasPrefix("opsh-2023") })
        #expect(copy.hasSuffix(suffix), "\(copy)")
        switch engine {
        case .sqlite:
            #expect(try TestDatabase(engine: .sqlite, db: folder + "/" + copy).sql("SELECT bundleIdentifier FROM projects") == "com.example.app")
        case .postgresql:
            let server = try PostgresServer.shared()
            let restored = TestDatabase(engine: .postgresql, db: try server.makeDatabase())
            let restore = try sandbox.spawn(server.tool("pg_restore"), ["--no-owner", "--dbname=\(restored.db)", folder + "/" + copy])
            #expect(restore.status == 0, "\(restore.stderr)")
            #expect(try restored.sql("SELECT bundleIdentifier FROM projects") == "com.example.app")
        }

        // A folder that does not exist yet is created.
        let nested = try db.example("nightly-backup.lua", [sandbox.root + "/new/folder"])
        #expect(nested.status == 0, "\(nested.stderr)")
        #expect(try visibleFiles(sandbox.root + "/new/folder").count == 1)

        let usage = try db.example("nightly-backup.lua")
        #expect(usage.status == 2)
        #expect(usage.stderr.contains("usage: opsh run nightly-backup.lua FOLDER [KEEP]"))
        #expect(try db.example("nightly-backup.lua", [folder, "0"]).status == 2)
    }

    @Test(arguments: Engine.allCases) func markStaleBuildsFailsTheBuildsOfDeadRunners(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try ExampleDatabase(engine, in: sandbox)
        // A pid that has ended, this test's own (alive) process, another host.
        let ended = try sandbox.spawn("/bin/sh", ["-c", "echo $$"])
        let deadPid = Int(ended.stdout.trimmingCharacters(in: .whitespacesAndNewlines))!
        let host = hostName(), now = Date().timeIntervalSince1970
        try db.sql("""
            INSERT INTO projects VALUES ('com.example.app', 'app', 'App', '/srv/app', 0);
            INSERT INTO schemes (id, projectBundleIdentifier, name) VALUES ('s1', 'com.example.app', 'App');
            INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt, startDate, runnerHost, runnerPid, runnerStartedAt) VALUES
              ('dead', 's1', '1.0.0', 1, 'running', \(now - 600), \(now - 600), '\(host)', \(deadPid), \(now - 600)),
              ('alive', 's1', '1.1.0', 2, 'running', \(now - 600), \(now - 600), '\(host)', \(getpid()), \(currentProcessStartTime())),
              ('remote', 's1', '1.2.0', 3, 'running', \(now - 600), \(now - 600), 'another-host', 1, 1),
              ('done', 's1', '1.3.0', 4, 'succeeded', \(now - 600), \(now - 600), '\(host)', \(deadPid), \(now - 600));
            """)

        let dry = try db.dryRun("mark-stale-builds.lua")
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout.contains("would mark failed: build dead (com.example.app App #1, version 1.0.0"), "\(dry.stdout)")
        #expect(dry.stdout.contains("1 stale build(s) would be marked failed"), "\(dry.stdout)")
        #expect(dry.stderr.contains("builds: 0 inserted, 1 updated"), "\(dry.stderr)")
        #expect(try db.sql("SELECT status FROM builds WHERE id = 'dead'") == "running")

        let run = try db.example("mark-stale-builds.lua")
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("marked failed: build dead"), "\(run.stdout)")
        #expect(!run.stdout.contains("build alive") && !run.stdout.contains("build remote"), "\(run.stdout)")
        #expect(try db.sql("SELECT id || '=' || status FROM builds ORDER BY buildNumber") == "dead=failed\nalive=running\nremote=running\ndone=succeeded")
        #expect(try db.sql("SELECT level || ': ' || content FROM buildLogs WHERE buildId = 'dead'")
                == "error: marked failed as stale: found by mark-stale-builds.lua (runner pid \(deadPid) on \(host) is gone)")
        #expect(try db.sql("SELECT count(*) FROM builds WHERE id = 'dead' AND endDate IS NOT NULL") == "1")

        let again = try db.secondRun("mark-stale-builds.lua")
        #expect(again.status == 0)
        #expect(again.stdout.contains("0 stale build(s) marked failed"), "\(again.stdout)")

        // Running for two days with no runner recorded: reported, untouched, status 4.
        try db.sql("""
            INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt, startDate)
            VALUES ('unknown', 's1', '2.0.0', 5, 'running', \(now - 2 * 86400), \(now - 2 * 86400))
            """)
        let unknown = try db.secondRun("mark-stale-builds.lua")
        #expect(unknown.status == 4)
        #expect(unknown.stderr.contains("running with no runner recorded, for more than 24h: build unknown"), "\(unknown.stderr)")
        #expect(try db.example("mark-stale-builds.lua", ["3d"]).status == 0)
        #expect(try db.example("mark-stale-builds.lua", ["later"]).status == 2)
    }

    /// Orphans of a database that lived without its foreign keys (SQLite's
    /// off, as the sqlite3 CLI starts; PostgreSQL's triggers disabled, as a
    /// restore may leave them): deleted, and a build whose scheme is gone
    /// reported, not deleted.
    @Test(arguments: Engine.allCases) func purgeOrphansDeletesRowsWhoseParentIsGone(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try ExampleDatabase(engine, in: sandbox)
        try db.writeWithoutForeignKeys("""
            INSERT INTO projects VALUES ('com.example.app', 'app', 'App', '/srv/app', 0);
            INSERT INTO schemes (id, projectBundleIdentifier, name) VALUES ('s1', 'com.example.app', 'App');
            INSERT INTO builds (id, schemeId, versionString, buildNumber, createdAt) VALUES ('b1', 's1', '1.0.0', 1, 0);
            INSERT INTO buildLogs (id, buildId, content, createdAt) VALUES ('kept', 'b1', 'ok', 0),
              ('o1', 'gone', 'orphan', 0), ('o2', 'gone', 'orphan', 0), ('o3', 'also-gone', 'orphan', 0);
            INSERT INTO crashLogs (incidentIdentifier, buildId, content, createdAt) VALUES ('c1', 'gone', 'crash', 0);
            INSERT INTO model_metadata (id, name, format, framework, created_at, updated_at) VALUES ('m1', 'M', 'gguf', 'x', 0, 0);
            INSERT INTO model_usage_stats (model_id, day) VALUES ('m1', '2026-01-01'), ('gone', '2026-01-01'), ('gone', '2026-01-02');
            INSERT INTO generation_sessions (id, model_id, created_at, updated_at) VALUES ('sess', 'm1', 0, 0);
            INSERT INTO generations (id, session_id, sequence_number, created_at) VALUES ('g1', 'sess', 1, 0), ('g2', 'gone', 1, 0);
            """)

        // The same report on both engines.
        let report = """
            buildLogs                 3 deleted: build log lines whose build is gone
            crashLogs                 1 deleted: crash logs whose build is gone
            model_usage_stats         2 deleted: usage stats whose model is gone
            generations               1 deleted: generations whose session is gone
            purge-orphans: 7 orphan row(s) deleted in 4 table(s)

            """
        let dry = try db.dryRun("purge-orphans.lua")
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout == report.replacingOccurrences(of: " deleted", with: " would be deleted"), "\(dry.stdout)")

        let run = try db.example("purge-orphans.lua")
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == report, "\(run.stdout)")
        #expect(try db.sql("SELECT id FROM buildLogs") == "kept")
        #expect(try db.sql("SELECT count(*) FROM crashLogs") == "0")
        #expect(try db.sql("SELECT model_id FROM model_usage_stats") == "m1")
        #expect(try db.sql("SELECT id FROM generations") == "g1")
        if engine == .sqlite {
            #expect(try db.sql("PRAGMA foreign_key_check") == "")
        }

        let again = try db.secondRun("purge-orphans.lua")
        #expect(again.status == 0)
        #expect(again.stdout.contains("0 orphan row(s) deleted"), "\(again.stdout)")

        // A build whose scheme is gone is reported, not deleted: status 4.
        try db.writeWithoutForeignKeys("INSERT INTO builds (id, schemeId, versionString, buildNumber, createdAt) VALUES ('b2', 'gone', '1.0.0', 1, 0)")
        let restricted = try db.secondRun("purge-orphans.lua")
        #expect(restricted.status == 4)
        #expect(restricted.stderr.contains("left alone: 1 builds whose scheme is gone in builds: b2"), "\(restricted.stderr)")
    }

    /// JSON written past the columns' checks (as a restore of an old
    /// backend may leave it): repaired where it can be, quarantined where
    /// not; on PostgreSQL every check validates afterwards.
    @Test(arguments: Engine.allCases) func repairJSONRepairsOrQuarantines(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try ExampleDatabase(engine, in: sandbox)
        try db.sql("""
            INSERT INTO projects VALUES ('com.example.app', 'app', 'App', '/srv/app', 0);
            INSERT INTO schemes (id, projectBundleIdentifier, name, platforms) VALUES
              ('s1', 'com.example.app', 'App', '["ios"]'), ('s2', 'com.example.app', 'Tests', '[]'), ('s3', 'com.example.app', 'Docs', '[]');
            INSERT INTO model_metadata (id, name, format, framework, created_at, updated_at) VALUES ('m1', 'M', 'gguf', 'x', 0, 0);
            INSERT INTO telemetry (id, event, properties, created_at) VALUES (1, 'a', NULL, 0), (2, 'b', NULL, 0), (3, 'c', '{"ok": true}', 0);
            """)
        try db.writeWithoutJSONChecks("""
            UPDATE schemes SET platforms = '["ios", "macos",]' WHERE id = 's1';
            UPDATE schemes SET platforms = '[''tvos'']' WHERE id = 's2';
            UPDATE schemes SET platforms = 'ios' WHERE id = 's3';
            UPDATE model_metadata SET capabilities = '["chat", "code"' WHERE id = 'm1';
            UPDATE telemetry SET properties = '{"a": 1, "b": [1, 2' WHERE id = 1;
            UPDATE telemetry SET properties = '{"a": "trunc' WHERE id = 2;
            """)
        #expect(try db.sql("SELECT count(*) FROM schemes WHERE NOT \(engine == .sqlite ? "json_valid" : "opsh_json_valid")(platforms)") == "3")

        // The same report on both engines: repairs on stdout, quarantines on stderr.
        let repairs = #"""
            repaired model_metadata.capabilities of id m1 (missing closing brackets): ["chat", "code" → ["chat", "code"]
            repaired schemes.platforms of id s1 (trailing commas): ["ios", "macos",] → ["ios", "macos"]
            repaired schemes.platforms of id s2 (single quotes): ['tvos'] → ["tvos"]
            repaired telemetry.properties of id 1 (missing closing brackets): {"a": 1, "b": [1, 2 → {"a": 1, "b": [1, 2]}
            repair-json: 4 value(s) repaired, 2 quarantined

            """#
        let quarantines = #"""
            repair-json: quarantined schemes.platforms of id s3: ios → json_quarantine; the column is now '[]'
            repair-json: quarantined telemetry.properties of id 2: {"a": "trunc → json_quarantine; the column is now NULL
            """#
        let dry = try db.dryRun("repair-json.lua")
        #expect(dry.status == 4, "\(dry.stderr)")
        #expect(dry.stdout == repairs.replacingOccurrences(of: "repaired ", with: "would repair ")
                    .replacingOccurrences(of: "4 value(s) repaired, 2 quarantined", with: "4 value(s) would be repaired, 2 would be quarantined"),
                "\(dry.stdout)")
        #expect(Self.lines(dry.stderr, "repair-json:").joined(separator: "\n")
                == quarantines.replacingOccurrences(of: "quarantined ", with: "would quarantine "), "\(dry.stderr)")

        let run = try db.example("repair-json.lua")
        #expect(run.status == 4, "\(run.stderr)")
        #expect(run.stdout == repairs, "\(run.stdout)")
        #expect(Self.lines(run.stderr, "repair-json:").joined(separator: "\n") == quarantines, "\(run.stderr)")
        #expect(try db.sql("SELECT platforms FROM schemes ORDER BY id") == "[\"ios\", \"macos\"]\n[\"tvos\"]\n[]")
        #expect(try db.sql("SELECT capabilities FROM model_metadata") == #"["chat", "code"]"#)
        #expect(try db.sql("SELECT coalesce(properties, 'NULL') FROM telemetry ORDER BY id") == "{\"a\": 1, \"b\": [1, 2]}\nNULL\n{\"ok\": true}")
        #expect(try db.sql("SELECT table_name || '|' || row_key || '|' || column_name || '|' || value FROM json_quarantine ORDER BY table_name")
                == "schemes|s3|platforms|ios\ntelemetry|2|properties|{\"a\": \"trunc")
        if engine == .postgresql {
            // Every value is valid JSON now: the checks validate.
            try db.sql(ExampleDatabase.jsonChecks.map { "ALTER TABLE \($0.0) VALIDATE CONSTRAINT \($0.1);" }.joined(separator: "\n"))
        }

        let again = try db.secondRun("repair-json.lua")
        #expect(again.status == 0, "\(again.stderr)")
        #expect(again.stdout.contains("repair-json: 0 value(s) repaired, 0 quarantined"), "\(again.stdout)")
    }

    @Test(arguments: Engine.allCases) func buildNewTagsQueuesEachUnbuiltTagForEachScheme(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try ExampleDatabase(engine, in: sandbox)
        let repository = try sandbox.gitRepository(tags: ["v1.0.0", "v1.1.0", "not-a-version", "2.0.0-rc.1"])
        try db.sql("""
            INSERT INTO projects VALUES ('com.example.app', 'app', 'App', '\(repository)', 0),
              ('com.example.lost', 'lost', 'Lost', '\(sandbox.root)/no-such-repository', 0),
              ('com.example.bare', 'bare', 'Bare', '\(repository)', 0);
            INSERT INTO schemes (id, projectBundleIdentifier, name, buildCommand) VALUES
              ('app', 'com.example.app', 'App', 'echo building'), ('tests', 'com.example.app', 'Tests', 'echo testing'),
              ('lost', 'com.example.lost', 'App', 'echo building');
            INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt) VALUES
              ('old', 'app', '1.0.0', 1, 'failed', 0);
            """)

        let dry = try db.dryRun("build-new-tags.lua", ["com.example.app"])
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout.contains("would queue: com.example.app App v1.1.0"), "\(dry.stdout)")
        #expect(dry.stdout.contains("build-new-tags: 5 build(s) would be queued for 1 project(s)"), "\(dry.stdout)")
        #expect(dry.stderr.contains("builds: 5 inserted"), "\(dry.stderr)")
        #expect(try db.sql("SELECT count(*) FROM builds") == "1")

        let run = try db.example("build-new-tags.lua")
        #expect(run.status == 4, "\(run.stderr)")
        #expect(run.stderr.contains("com.example.lost: cannot read the tags"), "\(run.stderr)")
        #expect(run.stdout.contains("build-new-tags: 5 build(s) queued for 3 project(s), 1 without schemes, 1 unreadable"), "\(run.stdout)")
        #expect(try db.sql("SELECT schemeId || ' ' || versionString || ' ' || status FROM builds ORDER BY schemeId, buildNumber")
                == "app 1.0.0 failed\napp v1.1.0 queued\napp 2.0.0-rc.1 queued\ntests v1.0.0 queued\ntests v1.1.0 queued\ntests 2.0.0-rc.1 queued")

        let again = try db.secondRun("build-new-tags.lua", ["com.example.app"])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(again.stdout.contains("build-new-tags: 0 build(s) queued for 1 project(s)"), "\(again.stdout)")
        #expect(try db.example("build-new-tags.lua", ["com.example.nope"]).status == 2)
    }

    @Test(arguments: Engine.allCases) func modelUsageReportPrintsATableAndCharts(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try ExampleDatabase(engine, in: sandbox)
        let empty = try db.example("model-usage-report.lua")
        #expect(empty.status == 0, "\(empty.stderr)")
        #expect(empty.stdout.contains("No model usage in this period."))

        let today = Date().timeIntervalSince1970
        func day(_ back: Double) -> String {
            let formatter = DateFormatter()
            formatter.dateFormat = "yyyy-MM-dd"
            formatter.timeZone = TimeZone(identifier: "UTC")
            return formatter.string(from: Date(timeIntervalSince1970: today - back * 86400))
        }
        try db.sql("""
            INSERT INTO model_metadata (id, name, format, framework, created_at, updated_at) VALUES
              ('small', 'Small Model', 'gguf', 'llama.cpp', 0, 0), ('big', 'Big Model', 'gguf', 'llama.cpp', 0, 0);
            INSERT INTO model_usage_stats (model_id, day, generation_count, total_tokens, total_cost, total_latency_ms, error_count) VALUES
              ('small', '\(day(1))', 10, 1000, 0.5, 2000, 1), ('small', '\(day(2))', 10, 3000, 0.5, 2000, 0),
              ('big', '\(day(1))', 4, 8000, 2, 4000, 0), ('big', '\(day(30))', 100, 99999, 9, 9, 0);
            """)

        let run = try db.dryRun("model-usage-report.lua")
        #expect(run.status == 0, "\(run.stderr)")
        let lines = run.stdout.split(separator: "\n").map(String.init)
        #expect(lines.contains { $0.hasPrefix("Big Model") && $0.contains(" 4 ") && $0.contains(" 8000 ") }, "\(run.stdout)")
        #expect(lines.contains { $0.hasPrefix("Small Model") && $0.contains(" 20 ") && $0.contains(" 4000 ") && $0.contains("5.00") }, "\(run.stdout)")
        #expect(lines.contains { $0.hasPrefix("total") && $0.contains(" 24 ") && $0.contains(" 12000 ") }, "\(run.stdout)")
        #expect(run.stdout.contains("Tokens per model"))
        #expect(lines.contains { $0.hasPrefix("Big Model") && $0.contains("█") && $0.hasSuffix("8000") }, "\(run.stdout)")
        #expect(run.stdout.contains("Tokens per day"), "\(run.stdout)")

        let month = try db.secondRun("model-usage-report.lua", ["31"])
        #expect(month.stdout.contains("107999"), "\(month.stdout)")
        #expect(try db.example("model-usage-report.lua", ["a week"]).status == 2)
    }

    /// demo-data.lua fills an empty database once (its git repository in
    /// opsh's data folder); a dry run keeps nothing, a second run inserts
    /// nothing, a larger count tops telemetry up, and the other examples
    /// run on the result.
    @Test(arguments: Engine.allCases) func demoDataFillsAnEmptyDatabaseOnce(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try ExampleDatabase(engine, in: sandbox)

        let dry = try db.dryRun("demo-data.lua", ["300"])
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout.contains("demo-data: 300 telemetry events inserted"), "\(dry.stdout)")
        #expect(dry.stderr.contains("telemetry: 300 inserted"), "\(dry.stderr)")

        let run = try db.example("demo-data.lua", ["300"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("demo-data: 300 telemetry events inserted"), "\(run.stdout)")
        for (table, count) in [("projects", 2), ("schemes", 3), ("builds", 18), ("crashLogs", 1), ("model_metadata", 3),
                               ("generation_sessions", 40), ("telemetry", 300)] {
            #expect(try db.database.count(table) == count, "\(table)")
        }
        #expect(try db.database.count("buildLogs") > 0)
        #expect(try db.database.count("generations") > 40)
        #expect(try db.database.count("model_usage_stats") > 0)
        #expect(try db.sql("SELECT telemetry_retention_days FROM storage_config") == "30")
        if engine == .sqlite {
            #expect(try db.sql("PRAGMA foreign_key_check") == "")
        }
        // Its git repository (beside an SQLite file; in opsh's data folder
        // for a database on a server) has tags, one of them without builds.
        let repository = try db.sql("SELECT gitRepositoryURL FROM projects WHERE bundleIdentifier = 'com.example.demo'")
        let home = engine == .sqlite ? (db.database.db as NSString).deletingLastPathComponent : sandbox.root + "/data/opsh"
        #expect(repository == home + "/demo-repositories/demo-app", "\(repository)")
        #expect(FileManager.default.fileExists(atPath: repository + "/.git"), "\(repository)")
        let tags = try db.dryRun("build-new-tags.lua", ["com.example.demo"])
        #expect(tags.stdout.contains("2 build(s) would be queued"), "\(tags.stdout)")

        let again = try db.secondRun("demo-data.lua", ["300"])
        #expect(again.status == 0)
        #expect(again.stdout.contains("exists already"), "\(again.stdout)")
        #expect(again.stdout.contains("0 telemetry events inserted (300 demo events in all)"), "\(again.stdout)")

        let more = try db.example("demo-data.lua", ["500"])
        #expect(more.stdout.contains("200 telemetry events inserted (500 demo events in all)"), "\(more.stdout)")
        let retention = try db.dryRun("telemetry-retention.lua")
        #expect(retention.status == 0 && retention.stdout.contains("retention 30d (storage_config 'default')"), "\(retention.stdout)")
        let report = try db.example("model-usage-report.lua")
        #expect(report.status == 0 && report.stdout.contains("Llama 3.2 3B"), "\(report.stdout)")
    }
}
