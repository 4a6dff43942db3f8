import Foundation
import Testing

/// Each script of `examples/` against a database holding the damage it
/// repairs: the repaired state, the report, the exit status, a dry run
/// that changes nothing, and a second run that is a no-op.
@Suite struct ExamplesTests {
    @Test func telemetryRetentionDeletesWhatIsOlderThanThePolicy() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        let day = 86400.0, now = Date().timeIntervalSince1970
        try sandbox.sql("""
            INSERT INTO telemetry (event, created_at) VALUES
              ('old', \(now - 40 * day)), ('old', \(now - 35 * day)), ('older', \(now - 90 * day)),
              ('recent', \(now - 20 * day)), ('new', \(now - 60));
            """)

        let dry = try sandbox.dryRun("telemetry-retention.lua")
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout.contains("retention 30d (default: no storage_config): would delete 3 of 5 events"), "\(dry.stdout)")

        let run = try sandbox.example("telemetry-retention.lua")
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("deleted 3 of 5 events"), "\(run.stdout)")
        #expect(try sandbox.sql("SELECT group_concat(event, ',') FROM (SELECT event FROM telemetry ORDER BY id)") == "recent,new")

        let again = try sandbox.secondRun("telemetry-retention.lua")
        #expect(again.status == 0)
        #expect(again.stdout.contains("deleted 0 of 2 events"), "\(again.stdout)")

        // The storage configuration's retention, and an argument over it.
        try sandbox.sql("""
            INSERT INTO configuration (id, base_url, created_at, updated_at) VALUES ('default', 'x', 0, 0);
            INSERT INTO storage_config (configuration_id, telemetry_retention_days) VALUES ('default', 10);
            """)
        let policy = try sandbox.example("telemetry-retention.lua")
        #expect(policy.stdout.contains("retention 10d (storage_config 'default'): deleted 1 of 2"), "\(policy.stdout)")
        try sandbox.sql("UPDATE storage_config SET auto_cleanup = 0")
        let off = try sandbox.secondRun("telemetry-retention.lua")
        #expect(off.status == 0)
        #expect(off.stdout.contains("auto_cleanup is off"), "\(off.stdout)")
        let argument = try sandbox.example("telemetry-retention.lua", ["30s"])
        #expect(argument.stdout.contains("retention 30s (argument): deleted 1 of 1"), "\(argument.stdout)")

        let bad = try sandbox.example("telemetry-retention.lua", ["soon"])
        #expect(bad.status == 2)
        #expect(bad.stderr.contains("retention must be a duration"))
    }

    @Test func nightlyBackupCopiesVerifiesAndRotates() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        try sandbox.sql("INSERT INTO projects VALUES ('com.example.app', 'app', 'App', '/srv/app', 0)")
        let folder = sandbox.root + "/backups"
        // Three older backups of the series (opsh's, oldest first) and a file of another name.
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        for name in ["opsh-20240101-000000.sqlite", "opsh-20240102-000000.sqlite", "opsh-20240103-000000.sqlite"] {
            let made = try sandbox.opsh(["-e", "backup('\(folder)/\(name)')"])
            #expect(made.status == 0, "\(made.stderr)")
        }
        #expect(FileManager.default.createFile(atPath: folder + "/notes.txt", contents: Data("keep me".utf8)))
        // Named like a backup, but not one: rotation leaves it alone.
        #expect(FileManager.default.createFile(atPath: folder + "/opsh-20230101-000000.sqlite", contents: Data("mine".utf8),
                                               attributes: [.modificationDate: Date(timeIntervalSinceNow: -86400 * 30)]))

        let dry = try sandbox.dryRun("nightly-backup.lua", [folder, "2"])
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout.contains("would copy the database"), "\(dry.stdout)")
        #expect(try visibleFiles(folder).count == 5)

        let run = try sandbox.example("nightly-backup.lua", [folder, "2"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("verified"), "\(run.stdout)")
        #expect(run.stdout.contains("removed 2 old backup(s)"), "\(run.stdout)")
        let names = try visibleFiles(folder)
        #expect(names.count == 4, "\(names)")
        #expect(names.contains("notes.txt") && names.contains("opsh-20240103-000000.sqlite")
                && names.contains("opsh-20230101-000000.sqlite"), "\(names)")
        let copy = try #require(names.first { $0.hasPrefix("opsh-") && !$0.hasPrefix("opsh-2024") && !$0.hasPrefix("opsh-2023") })
        let check = try sandbox.spawn("/usr/bin/sqlite3", [folder + "/" + copy, "SELECT bundleIdentifier FROM projects"])
        #expect(check.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "com.example.app")

        // A folder that does not exist yet is created.
        let nested = try sandbox.example("nightly-backup.lua", [sandbox.root + "/new/folder"])
        #expect(nested.status == 0, "\(nested.stderr)")
        #expect(try visibleFiles(sandbox.root + "/new/folder").count == 1)

        let usage = try sandbox.example("nightly-backup.lua")
        #expect(usage.status == 2)
        #expect(usage.stderr.contains("usage: opsh run nightly-backup.lua FOLDER [KEEP]"))
        #expect(try sandbox.example("nightly-backup.lua", [folder, "0"]).status == 2)
    }

    @Test func markStaleBuildsFailsTheBuildsOfDeadRunners() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        // A pid that has ended, this test's own (alive) process, another host.
        let ended = try sandbox.spawn("/bin/sh", ["-c", "echo $$"])
        let deadPid = Int(ended.stdout.trimmingCharacters(in: .whitespacesAndNewlines))!
        let host = hostName(), now = Date().timeIntervalSince1970
        try sandbox.sql("""
            INSERT INTO projects VALUES ('com.example.app', 'app', 'App', '/srv/app', 0);
            INSERT INTO schemes (id, projectBundleIdentifier, name) VALUES ('s1', 'com.example.app', 'App');
            INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt, startDate, runnerHost, runnerPid, runnerStartedAt) VALUES
              ('dead', 's1', '1.0.0', 1, 'running', \(now - 600), \(now - 600), '\(host)', \(deadPid), \(now - 600)),
              ('alive', 's1', '1.1.0', 2, 'running', \(now - 600), \(now - 600), '\(host)', \(getpid()), \(currentProcessStartTime())),
              ('remote', 's1', '1.2.0', 3, 'running', \(now - 600), \(now - 600), 'another-host', 1, 1),
              ('done', 's1', '1.3.0', 4, 'succeeded', \(now - 600), \(now - 600), '\(host)', \(deadPid), \(now - 600));
            """)

        let dry = try sandbox.dryRun("mark-stale-builds.lua")
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout.contains("would mark failed: build dead (com.example.app App #1, version 1.0.0"), "\(dry.stdout)")
        #expect(dry.stdout.contains("1 stale build(s) would be marked failed"), "\(dry.stdout)")
        #expect(dry.stderr.contains("builds: 0 inserted, 1 updated"), "\(dry.stderr)")

        let run = try sandbox.example("mark-stale-builds.lua")
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("marked failed: build dead"), "\(run.stdout)")
        #expect(!run.stdout.contains("build alive") && !run.stdout.contains("build remote"), "\(run.stdout)")
        #expect(try sandbox.sql("SELECT group_concat(id || '=' || status, ',') FROM (SELECT * FROM builds ORDER BY buildNumber)")
                == "dead=failed,alive=running,remote=running,done=succeeded")
        #expect(try sandbox.sql("SELECT level || ': ' || content FROM buildLogs WHERE buildId = 'dead'")
                == "error: marked failed as stale: found by mark-stale-builds.lua (runner pid \(deadPid) on \(host) is gone)")
        #expect(try sandbox.sql("SELECT endDate IS NOT NULL FROM builds WHERE id = 'dead'") == "1")

        let again = try sandbox.secondRun("mark-stale-builds.lua")
        #expect(again.status == 0)
        #expect(again.stdout.contains("0 stale build(s) marked failed"), "\(again.stdout)")

        // Running for two days with no runner recorded: reported, untouched, status 4.
        try sandbox.sql("""
            INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt, startDate)
            VALUES ('unknown', 's1', '2.0.0', 5, 'running', \(now - 2 * 86400), \(now - 2 * 86400))
            """)
        let unknown = try sandbox.secondRun("mark-stale-builds.lua")
        #expect(unknown.status == 4)
        #expect(unknown.stderr.contains("running with no runner recorded, for more than 24h: build unknown"), "\(unknown.stderr)")
        #expect(try sandbox.example("mark-stale-builds.lua", ["3d"]).status == 0)
        #expect(try sandbox.example("mark-stale-builds.lua", ["later"]).status == 2)
    }

    @Test func purgeOrphansDeletesRowsWhoseParentIsGone() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        // sqlite3 starts with foreign keys off: the orphans of a database
        // that lived without them.
        try sandbox.sql("""
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

        let dry = try sandbox.dryRun("purge-orphans.lua")
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout.contains("purge-orphans: 7 orphan row(s) would be deleted in 4 table(s)"), "\(dry.stdout)")

        let run = try sandbox.example("purge-orphans.lua")
        #expect(run.status == 0, "\(run.stderr)")
        for line in ["buildLogs                 3 deleted", "crashLogs                 1 deleted",
                     "model_usage_stats         2 deleted", "generations               1 deleted",
                     "purge-orphans: 7 orphan row(s) deleted in 4 table(s)"] {
            #expect(run.stdout.contains(line), "\(line) in \(run.stdout)")
        }
        #expect(try sandbox.sql("SELECT group_concat(id) FROM buildLogs") == "kept")
        #expect(try sandbox.sql("SELECT count(*) FROM crashLogs") == "0")
        #expect(try sandbox.sql("SELECT group_concat(model_id) FROM model_usage_stats") == "m1")
        #expect(try sandbox.sql("SELECT group_concat(id) FROM generations") == "g1")
        #expect(try sandbox.sql("PRAGMA foreign_key_check") == "")

        let again = try sandbox.secondRun("purge-orphans.lua")
        #expect(again.status == 0)
        #expect(again.stdout.contains("0 orphan row(s) deleted"), "\(again.stdout)")

        // A build whose scheme is gone is reported, not deleted: status 4.
        try sandbox.sql("INSERT INTO builds (id, schemeId, versionString, buildNumber, createdAt) VALUES ('b2', 'gone', '1.0.0', 1, 0)")
        let restricted = try sandbox.secondRun("purge-orphans.lua")
        #expect(restricted.status == 4)
        #expect(restricted.stderr.contains("left alone: 1 builds whose scheme is gone in builds: b2"), "\(restricted.stderr)")
    }

    @Test func repairJSONRepairsOrQuarantines() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        try sandbox.sql("""
            INSERT INTO projects VALUES ('com.example.app', 'app', 'App', '/srv/app', 0);
            INSERT INTO schemes (id, projectBundleIdentifier, name, platforms) VALUES
              ('s1', 'com.example.app', 'App', '["ios"]'), ('s2', 'com.example.app', 'Tests', '[]'), ('s3', 'com.example.app', 'Docs', '[]');
            INSERT INTO model_metadata (id, name, format, framework, created_at, updated_at) VALUES ('m1', 'M', 'gguf', 'x', 0, 0);
            INSERT INTO telemetry (id, event, properties, created_at) VALUES (1, 'a', NULL, 0), (2, 'b', NULL, 0), (3, 'c', '{"ok": true}', 0);
            PRAGMA ignore_check_constraints = ON;
            UPDATE schemes SET platforms = '["ios", "macos",]' WHERE id = 's1';
            UPDATE schemes SET platforms = '[''tvos'']' WHERE id = 's2';
            UPDATE schemes SET platforms = 'ios' WHERE id = 's3';
            UPDATE model_metadata SET capabilities = '["chat", "code"' WHERE id = 'm1';
            UPDATE telemetry SET properties = '{"a": 1, "b": [1, 2' WHERE id = 1;
            UPDATE telemetry SET properties = '{"a": "trunc' WHERE id = 2;
            """)
        #expect(try sandbox.sql("SELECT count(*) FROM schemes WHERE NOT json_valid(platforms)") == "3")

        let dry = try sandbox.dryRun("repair-json.lua")
        #expect(dry.status == 4, "\(dry.stderr)")
        #expect(dry.stdout.contains("repair-json: 4 value(s) would be repaired, 2 would be quarantined"), "\(dry.stdout)")

        let run = try sandbox.example("repair-json.lua")
        #expect(run.status == 4, "\(run.stderr)")
        for line in ["repaired schemes.platforms of id s1 (trailing commas)",
                     "repaired schemes.platforms of id s2 (single quotes)",
                     "repaired model_metadata.capabilities of id m1 (missing closing brackets)",
                     "repaired telemetry.properties of id 1 (missing closing brackets)",
                     "repair-json: 4 value(s) repaired, 2 quarantined"] {
            #expect(run.stdout.contains(line), "\(line) in \(run.stdout)")
        }
        #expect(run.stderr.contains("quarantined schemes.platforms of id s3: ios → json_quarantine; the column is now '[]'"), "\(run.stderr)")
        #expect(run.stderr.contains("quarantined telemetry.properties of id 2"), "\(run.stderr)")
        #expect(try sandbox.sql("SELECT group_concat(platforms, ' ') FROM (SELECT platforms FROM schemes ORDER BY id)")
                == #"["ios", "macos"] ["tvos"] []"#)
        #expect(try sandbox.sql("SELECT capabilities FROM model_metadata") == #"["chat", "code"]"#)
        #expect(try sandbox.sql("SELECT group_concat(coalesce(properties, 'NULL'), ' ') FROM (SELECT properties FROM telemetry ORDER BY id)")
                == #"{"a": 1, "b": [1, 2]} NULL {"ok": true}"#)
        #expect(try sandbox.sql("SELECT table_name || '|' || row_key || '|' || column_name || '|' || value FROM json_quarantine ORDER BY table_name")
                == "schemes|s3|platforms|ios\ntelemetry|2|properties|{\"a\": \"trunc")

        let again = try sandbox.secondRun("repair-json.lua")
        #expect(again.status == 0, "\(again.stderr)")
        #expect(again.stdout.contains("repair-json: 0 value(s) repaired, 0 quarantined"), "\(again.stdout)")
    }

    @Test func buildNewTagsQueuesEachUnbuiltTagForEachScheme() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        let repository = try sandbox.gitRepository(tags: ["v1.0.0", "v1.1.0", "not-a-version", "2.0.0-rc.1"])
        try sandbox.sql("""
            INSERT INTO projects VALUES ('com.example.app', 'app', 'App', '\(repository)', 0),
              ('com.example.lost', 'lost', 'Lost', '\(sandbox.root)/no-such-repository', 0),
              ('com.example.bare', 'bare', 'Bare', '\(repository)', 0);
            INSERT INTO schemes (id, projectBundleIdentifier, name, buildCommand) VALUES
              ('app', 'com.example.app', 'App', 'echo building'), ('tests', 'com.example.app', 'Tests', 'echo testing'),
              ('lost', 'com.example.lost', 'App', 'echo building');
            INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt) VALUES
              ('old', 'app', '1.0.0', 1, 'failed', 0);
            """)

        let dry = try sandbox.dryRun("build-new-tags.lua", ["com.example.app"])
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout.contains("would queue: com.example.app App v1.1.0"), "\(dry.stdout)")
        #expect(dry.stdout.contains("build-new-tags: 5 build(s) would be queued for 1 project(s)"), "\(dry.stdout)")
        #expect(dry.stderr.contains("builds: 5 inserted"), "\(dry.stderr)")

        let run = try sandbox.example("build-new-tags.lua")
        #expect(run.status == 4, "\(run.stderr)")
        #expect(run.stderr.contains("com.example.lost: cannot read the tags"), "\(run.stderr)")
        #expect(run.stdout.contains("build-new-tags: 5 build(s) queued for 3 project(s), 1 without schemes, 1 unreadable"), "\(run.stdout)")
        #expect(try sandbox.sql("""
            SELECT group_concat(schemeId || ' ' || versionString || ' ' || status, ', ')
            FROM (SELECT * FROM builds ORDER BY schemeId, buildNumber)
            """) == "app 1.0.0 failed, app v1.1.0 queued, app 2.0.0-rc.1 queued, tests v1.0.0 queued, tests v1.1.0 queued, tests 2.0.0-rc.1 queued")

        let again = try sandbox.secondRun("build-new-tags.lua", ["com.example.app"])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(again.stdout.contains("build-new-tags: 0 build(s) queued for 1 project(s)"), "\(again.stdout)")
        #expect(try sandbox.example("build-new-tags.lua", ["com.example.nope"]).status == 2)
    }

    @Test func modelUsageReportPrintsATableAndACharts() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        let empty = try sandbox.example("model-usage-report.lua")
        #expect(empty.status == 0, "\(empty.stderr)")
        #expect(empty.stdout.contains("No model usage in this period."))

        let today = Date().timeIntervalSince1970
        func day(_ back: Double) -> String {
            let formatter = DateFormatter()
            formatter.dateFormat = "yyyy-MM-dd"
            formatter.timeZone = TimeZone(identifier: "UTC")
            return formatter.string(from: Date(timeIntervalSince1970: today - back * 86400))
        }
        try sandbox.sql("""
            INSERT INTO model_metadata (id, name, format, framework, created_at, updated_at) VALUES
              ('small', 'Small Model', 'gguf', 'llama.cpp', 0, 0), ('big', 'Big Model', 'gguf', 'llama.cpp', 0, 0);
            INSERT INTO model_usage_stats (model_id, day, generation_count, total_tokens, total_cost, total_latency_ms, error_count) VALUES
              ('small', '\(day(1))', 10, 1000, 0.5, 2000, 1), ('small', '\(day(2))', 10, 3000, 0.5, 2000, 0),
              ('big', '\(day(1))', 4, 8000, 2, 4000, 0), ('big', '\(day(30))', 100, 99999, 9, 9, 0);
            """)

        let run = try sandbox.dryRun("model-usage-report.lua")
        #expect(run.status == 0, "\(run.stderr)")
        let lines = run.stdout.split(separator: "\n").map(String.init)
        #expect(lines.contains { $0.hasPrefix("Big Model") && $0.contains(" 4 ") && $0.contains(" 8000 ") }, "\(run.stdout)")
        #expect(lines.contains { $0.hasPrefix("Small Model") && $0.contains(" 20 ") && $0.contains(" 4000 ") && $0.contains("5.00") }, "\(run.stdout)")
        #expect(lines.contains { $0.hasPrefix("total") && $0.contains(" 24 ") && $0.contains(" 12000 ") }, "\(run.stdout)")
        #expect(run.stdout.contains("Tokens per model"))
        #expect(lines.contains { $0.hasPrefix("Big Model") && $0.contains("█") && $0.hasSuffix("8000") }, "\(run.stdout)")
        #expect(run.stdout.contains("Tokens per day"), "\(run.stdout)")

        let month = try sandbox.secondRun("model-usage-report.lua", ["31"])
        #expect(month.stdout.contains("107999"), "\(month.stdout)")
        #expect(try sandbox.example("model-usage-report.lua", ["a week"]).status == 2)
    }

    @Test func demoDataFillsAnEmptyDatabaseOnce() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()

        let dry = try sandbox.dryRun("demo-data.lua", ["300"])
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stderr.contains("telemetry: 300 inserted"), "\(dry.stderr)")

        let run = try sandbox.example("demo-data.lua", ["300"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("demo-data: 300 telemetry events inserted"), "\(run.stdout)")
        #expect(try sandbox.sql("SELECT count(*) FROM projects") == "2")
        #expect(try sandbox.sql("SELECT count(*) FROM schemes") == "3")
        #expect(try sandbox.sql("SELECT count(*) FROM builds") == "18")
        #expect(try sandbox.sql("SELECT count(*) > 0 FROM buildLogs") == "1")
        #expect(try sandbox.sql("SELECT count(*) FROM crashLogs") == "1")
        #expect(try sandbox.sql("SELECT count(*) FROM model_metadata") == "3")
        #expect(try sandbox.sql("SELECT count(*) FROM generation_sessions") == "40")
        #expect(try sandbox.sql("SELECT count(*) > 40 FROM generations") == "1")
        #expect(try sandbox.sql("SELECT count(*) > 0 FROM model_usage_stats") == "1")
        #expect(try sandbox.sql("SELECT count(*) FROM telemetry") == "300")
        #expect(try sandbox.sql("SELECT telemetry_retention_days FROM storage_config") == "30")
        #expect(try sandbox.sql("PRAGMA foreign_key_check") == "")
        // Its git repository has tags, one of them without builds.
        let repository = try sandbox.sql("SELECT gitRepositoryURL FROM projects WHERE bundleIdentifier = 'com.example.demo'")
        #expect(repository.hasPrefix("/") && FileManager.default.fileExists(atPath: repository + "/.git"), "\(repository)")
        let tags = try sandbox.dryRun("build-new-tags.lua", ["com.example.demo"])
        #expect(tags.stdout.contains("2 build(s) would be queued"), "\(tags.stdout)")

        let again = try sandbox.secondRun("demo-data.lua", ["300"])
        #expect(again.status == 0)
        #expect(again.stdout.contains("exists already"), "\(again.stdout)")
        #expect(again.stdout.contains("0 telemetry events inserted (300 demo events in all)"), "\(again.stdout)")

        // A larger count tops telemetry up; the other examples run on the result.
        let more = try sandbox.example("demo-data.lua", ["500"])
        #expect(more.stdout.contains("200 telemetry events inserted (500 demo events in all)"), "\(more.stdout)")
        let retention = try sandbox.dryRun("telemetry-retention.lua")
        #expect(retention.status == 0 && retention.stdout.contains("retention 30d (storage_config 'default')"), "\(retention.stdout)")
        let report = try sandbox.example("model-usage-report.lua")
        #expect(report.status == 0 && report.stdout.contains("Llama 3.2 3B"), "\(report.stdout)")
    }
}
