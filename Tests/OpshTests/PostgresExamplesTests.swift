import Foundation
import Testing

/// The example scripts that use what runs on PostgreSQL, run against both
/// engines on the same rows: the same report, the same rows left, and a
/// dry run that keeps nothing.
@Suite struct PostgresExamplesTests {
    let server = try! PostgresServer.shared()
    let sandbox = try! Sandbox()

    /// `opsh run --db DB [--dry-run] examples/NAME arguments…` on either engine.
    func example(_ db: String, _ name: String, _ arguments: [String] = [], dryRun: Bool = false) throws -> Sandbox.Result {
        try sandbox.spawn(opshExecutable, ["run", "--db", db] + (dryRun ? ["--dry-run"] : []) + [Examples.path(name)] + arguments)
    }

    /// Every row of the PostgreSQL database (pg_dump's data, without the
    /// sequences' positions, which a rolled-back insert moves, and the
    /// random key of its `\restrict` lines, and without the audit trail's
    /// rows, which a dry run adds, as ExampleFixtures leaves SQLite's out):
    /// equal before and after means nothing changed.
    func rows(_ url: String) throws -> String {
        let dump = try sandbox.spawn(server.tool("pg_dump"), ["--data-only", "--no-owner", "--exclude-table-data=opsh_audit", "--dbname=\(url)"])
        #expect(dump.status == 0, "\(dump.stderr)")
        return dump.stdout.split(separator: "\n", omittingEmptySubsequences: false)
            .filter { !$0.contains("setval(") && !$0.hasPrefix("\\restrict") && !$0.hasPrefix("\\unrestrict") }
            .joined(separator: "\n")
    }

    /// Runs `name` on PostgreSQL and checks that no row changed.
    func unchanged(_ url: String, _ name: String, _ arguments: [String] = [], dryRun: Bool = false,
                   sourceLocation: SourceLocation = #_sourceLocation) throws -> Sandbox.Result {
        let before = try rows(url)
        let result = try example(url, name, arguments, dryRun: dryRun)
        #expect(try rows(url) == before, "\(dryRun ? "a dry run" : "a run") of \(name) changed the database", sourceLocation: sourceLocation)
        return result
    }

    /// The lines of `text` that start with `prefix` (a script's own, not the dry run's summary).
    static func lines(_ text: String, _ prefixes: String...) -> [String] {
        text.split(separator: "\n").map(String.init).filter { line in prefixes.contains { line.hasPrefix($0) } }
    }

    /// The report without its timings (lock, seconds), which differ.
    static func report(_ output: String) -> String {
        output.replacingOccurrences(of: #"longest lock [0-9.]+ ms, [0-9.]+ s"#, with: "…", options: .regularExpression)
    }

    @Test func telemetryRetentionRunsUnchangedOnPostgres() throws {
        let url = try server.makeDatabase()
        let day = 86400.0, now = Date().timeIntervalSince1970
        let rows = """
            db.exec("INSERT INTO telemetry (event, created_at) VALUES ('old', ?), ('old', ?), ('older', ?), ('recent', ?), ('new', ?)",
                    \(now - 40 * day), \(now - 35 * day), \(now - 90 * day), \(now - 20 * day), \(now - 60))
            db.exec("INSERT INTO configuration (id, base_url, created_at, updated_at) VALUES ('default', 'x', 0, 0)")
            db.exec("INSERT INTO storage_config (configuration_id, telemetry_retention_days) VALUES ('default', 30)")
            """
        let example = Examples.path("telemetry-retention.lua")
        var outputs: [[String]] = []
        for engine in [["--db", url], ["--db", sandbox.database]] {
            let seeded = try sandbox.opsh(engine + ["--create", "-e", rows], database: false)
            #expect(seeded.status == 0, "\(seeded.stderr)")
            let dry = try sandbox.opsh(engine + ["--dry-run", "run", example], database: false)
            #expect(dry.status == 0, "\(dry.stderr)")
            let run = try sandbox.opsh(engine + ["run", example], database: false)
            #expect(run.status == 0, "\(run.stderr)")
            let left = try sandbox.opsh(engine + ["-e", "local t = {} for r in db.rows('SELECT event FROM telemetry ORDER BY created_at') do t[#t + 1] = r.event end print(table.concat(t, ','))"], database: false)
            outputs.append([Self.report(dry.stdout), Self.report(run.stdout), left.stdout])
        }
        #expect(outputs[0] == outputs[1])
        #expect(outputs[0][0].contains("retention 30d (storage_config 'default'): would delete 3 of 5 events"), "\(outputs[0][0])")
        #expect(outputs[0][1].contains("deleted 3 of 5 events"), "\(outputs[0][1])")
        #expect(outputs[0][2] == "recent,new\n")
    }

    /// purge-orphans.lua on a PostgreSQL database whose foreign keys were
    /// off (its triggers disabled, as a restore may leave it): the same
    /// report and the same rows deleted as on SQLite, a dry run and a
    /// second run that change nothing, and the restricted orphans reported.
    @Test func purgeOrphansRunsUnchangedOnPostgres() throws {
        let url = try server.makeDatabase()
        #expect(try sandbox.opsh(["--db", url, "--create", "-e", "return 1"], database: false).status == 0)
        try sandbox.createDatabase()
        let seed = """
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
            """
        try sandbox.sql(seed)
        // Foreign keys are triggers on PostgreSQL: with them off for this session, the orphans go in.
        try server.sql("SET session_replication_role = replica;\n" + seed, url: url)

        let dry = try unchanged(url, "purge-orphans.lua", dryRun: true)
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout.contains("purge-orphans: 7 orphan row(s) would be deleted in 4 table(s)"), "\(dry.stdout)")
        #expect(try sandbox.dryRun("purge-orphans.lua").stdout == dry.stdout)

        let run = try example(url, "purge-orphans.lua")
        #expect(run.status == 0, "\(run.stderr)")
        for line in ["buildLogs                 3 deleted", "crashLogs                 1 deleted",
                     "model_usage_stats         2 deleted", "generations               1 deleted",
                     "purge-orphans: 7 orphan row(s) deleted in 4 table(s)"] {
            #expect(run.stdout.contains(line), "\(line) in \(run.stdout)")
        }
        #expect(try sandbox.example("purge-orphans.lua").stdout == run.stdout)
        #expect(try server.sql("SELECT string_agg(id, ',') FROM buildLogs", url: url) == "kept")
        #expect(try server.sql("SELECT count(*) FROM crashLogs", url: url) == "0")
        #expect(try server.sql("SELECT string_agg(model_id, ',') FROM model_usage_stats", url: url) == "m1")
        #expect(try server.sql("SELECT string_agg(id, ',') FROM generations", url: url) == "g1")

        let again = try unchanged(url, "purge-orphans.lua")
        #expect(again.status == 0)
        #expect(again.stdout.contains("0 orphan row(s) deleted"), "\(again.stdout)")

        // A build whose scheme is gone is reported, not deleted: status 4.
        let restricted = "INSERT INTO builds (id, schemeId, versionString, buildNumber, createdAt) VALUES ('b2', 'gone', '1.0.0', 1, 0)"
        try server.sql("SET session_replication_role = replica;\n" + restricted, url: url)
        try sandbox.sql(restricted)
        let left = try unchanged(url, "purge-orphans.lua")
        #expect(left.status == 4)
        #expect(left.stderr.contains("left alone: 1 builds whose scheme is gone in builds: b2"), "\(left.stderr)")
        let onSQLite = try sandbox.secondRun("purge-orphans.lua")
        #expect(onSQLite.status == 4)
        #expect(left.stdout == onSQLite.stdout && left.stderr == onSQLite.stderr, "\(left.stderr) vs \(onSQLite.stderr)")
    }

    /// repair-json.lua on a PostgreSQL database whose JSON checks were off
    /// when the damage was written (dropped, and put back NOT VALID, as a
    /// restore of an old backend may leave them): the JSON columns found in
    /// pg_constraint, the same repairs and quarantines as on SQLite, every
    /// constraint valid afterwards.
    @Test func repairJSONRunsUnchangedOnPostgres() throws {
        let url = try server.makeDatabase()
        #expect(try sandbox.opsh(["--db", url, "--create", "-e", "return 1"], database: false).status == 0)
        try sandbox.createDatabase()
        let rows = """
            INSERT INTO projects VALUES ('com.example.app', 'app', 'App', '/srv/app', 0);
            INSERT INTO schemes (id, projectBundleIdentifier, name, platforms) VALUES
              ('s1', 'com.example.app', 'App', '["ios"]'), ('s2', 'com.example.app', 'Tests', '[]'), ('s3', 'com.example.app', 'Docs', '[]');
            INSERT INTO model_metadata (id, name, format, framework, created_at, updated_at) VALUES ('m1', 'M', 'gguf', 'x', 0, 0);
            INSERT INTO telemetry (id, event, properties, created_at) VALUES (1, 'a', NULL, 0), (2, 'b', NULL, 0), (3, 'c', '{"ok": true}', 0);
            """
        let damage = """
            UPDATE schemes SET platforms = '["ios", "macos",]' WHERE id = 's1';
            UPDATE schemes SET platforms = '[''tvos'']' WHERE id = 's2';
            UPDATE schemes SET platforms = 'ios' WHERE id = 's3';
            UPDATE model_metadata SET capabilities = '["chat", "code"' WHERE id = 'm1';
            UPDATE telemetry SET properties = '{"a": 1, "b": [1, 2' WHERE id = 1;
            UPDATE telemetry SET properties = '{"a": "trunc' WHERE id = 2;
            """
        try sandbox.sql(rows + "PRAGMA ignore_check_constraints = ON;\n" + damage)
        let checks = [("schemes", "platforms_is_json", "opsh_json_valid(platforms)"),
                      ("model_metadata", "capabilities_is_json", "opsh_json_valid(capabilities)"),
                      ("telemetry", "properties_is_json", "properties IS NULL OR opsh_json_valid(properties)")]
        try server.sql(rows + checks.map { "ALTER TABLE \($0.0) DROP CONSTRAINT \($0.1);" }.joined(separator: "\n") + damage
                       + checks.map { "ALTER TABLE \($0.0) ADD CONSTRAINT \($0.1) CHECK (\($0.2)) NOT VALID;" }.joined(separator: "\n"),
                       url: url)
        #expect(try server.sql("SELECT count(*) FROM schemes WHERE NOT opsh_json_valid(platforms)", url: url) == "3")

        let dry = try unchanged(url, "repair-json.lua", dryRun: true)
        #expect(dry.status == 4, "\(dry.stderr)")
        #expect(dry.stdout.contains("repair-json: 4 value(s) would be repaired, 2 would be quarantined"), "\(dry.stdout)")
        let dryOnSQLite = try sandbox.dryRun("repair-json.lua")
        #expect(dry.stdout == dryOnSQLite.stdout)
        #expect(Self.lines(dry.stderr, "repair-json:") == Self.lines(dryOnSQLite.stderr, "repair-json:"))

        let run = try example(url, "repair-json.lua")
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
        let onSQLite = try sandbox.example("repair-json.lua")
        #expect(run.stdout == onSQLite.stdout)
        #expect(run.stderr == onSQLite.stderr)
        #expect(try server.sql("SELECT string_agg(platforms, ' ' ORDER BY id) FROM schemes", url: url) == #"["ios", "macos"] ["tvos"] []"#)
        #expect(try server.sql("SELECT capabilities FROM model_metadata", url: url) == #"["chat", "code"]"#)
        #expect(try server.sql("SELECT string_agg(coalesce(properties, 'NULL'), ' ' ORDER BY id) FROM telemetry", url: url)
                == #"{"a": 1, "b": [1, 2]} NULL {"ok": true}"#)
        #expect(try server.sql("SELECT string_agg(table_name || '|' || row_key || '|' || column_name || '|' || value, E'\\n' ORDER BY table_name) FROM json_quarantine", url: url)
                == "schemes|s3|platforms|ios\ntelemetry|2|properties|{\"a\": \"trunc")
        // Every value is valid JSON now: the checks validate.
        try server.sql(checks.map { "ALTER TABLE \($0.0) VALIDATE CONSTRAINT \($0.1);" }.joined(separator: "\n"), url: url)

        let again = try unchanged(url, "repair-json.lua")
        #expect(again.status == 0, "\(again.stderr)")
        #expect(again.stdout.contains("repair-json: 0 value(s) repaired, 0 quarantined"), "\(again.stdout)")
    }

    /// nightly-backup.lua on PostgreSQL: a pg_dump archive named by time
    /// that restores, verified by its PGDMP header, and KEEP rotation of
    /// the .dump series that deletes only earlier dumps (never a file of
    /// the series that is not one, nor files of other names).
    @Test func nightlyBackupRunsUnchangedOnPostgres() throws {
        let url = try server.makeDatabase()
        let seeded = try sandbox.opsh(["--db", url, "--create", "-e",
                                       "db.exec(\"INSERT INTO projects VALUES ('com.example.app', 'app', 'App', '/srv/app', 0)\")"],
                                      database: false)
        #expect(seeded.status == 0, "\(seeded.stderr)")
        let folder = sandbox.root + "/backups"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        // Three older dumps of the series, opsh's, oldest first.
        for name in ["opsh-20240101-000000.dump", "opsh-20240102-000000.dump", "opsh-20240103-000000.dump"] {
            let made = try sandbox.opsh(["--db", url, "-e", "backup('\(folder)/\(name)')"], database: false)
            #expect(made.status == 0, "\(made.stderr)")
        }
        #expect(FileManager.default.createFile(atPath: folder + "/notes.txt", contents: Data("keep me".utf8)))
        // Named like a backup, but not one: rotation leaves it alone.
        #expect(FileManager.default.createFile(atPath: folder + "/opsh-20230101-000000.dump", contents: Data("mine".utf8),
                                               attributes: [.modificationDate: Date(timeIntervalSinceNow: -86400 * 30)]))

        let dry = try unchanged(url, "nightly-backup.lua", [folder, "2"], dryRun: true)
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout.contains("would copy the database"), "\(dry.stdout)")
        #expect(dry.stdout.contains(".dump and keep the 2 newest backups"), "\(dry.stdout)")
        #expect(try visibleFiles(folder).count == 5)

        let run = try example(url, "nightly-backup.lua", [folder, "2"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("verified"), "\(run.stdout)")
        #expect(run.stdout.contains("removed 2 old backup(s)"), "\(run.stdout)")
        let names = try visibleFiles(folder)
        #expect(names.count == 4, "\(names)")
        #expect(names.contains("notes.txt") && names.contains("opsh-20240103-000000.dump")
                && names.contains("opsh-20230101-000000.dump"), "\(names)")
        let copy = try #require(names.first { $0.hasPrefix("opsh-") && !$0.hasPrefix("opsh-2024") && !$0.hasPrefix("opsh-2023") })
        #expect(copy.hasSuffix(".dump"), "\(copy)")
        let restored = try server.makeDatabase()
        let restore = try sandbox.spawn(server.tool("pg_restore"), ["--no-owner", "--dbname=\(restored)", folder + "/" + copy])
        #expect(restore.status == 0, "\(restore.stderr)")
        #expect(try server.sql("SELECT bundleIdentifier FROM projects", url: restored) == "com.example.app")

        // A folder that does not exist yet is created.
        let nested = try example(url, "nightly-backup.lua", [sandbox.root + "/new/folder"])
        #expect(nested.status == 0, "\(nested.stderr)")
        #expect(try visibleFiles(sandbox.root + "/new/folder").count == 1)

        let usage = try example(url, "nightly-backup.lua")
        #expect(usage.status == 2)
        #expect(usage.stderr.contains("usage: opsh run nightly-backup.lua FOLDER [KEEP]"))
        #expect(try example(url, "nightly-backup.lua", [folder, "0"]).status == 2)
    }

    /// model-usage-report.lua prints the same report from the same rows on
    /// both engines, changes nothing, and says so when there is no usage.
    @Test func modelUsageReportRunsUnchangedOnPostgres() throws {
        let url = try server.makeDatabase()
        #expect(try sandbox.opsh(["--db", url, "--create", "-e", "return 1"], database: false).status == 0)
        try sandbox.createDatabase()
        let empty = try example(url, "model-usage-report.lua")
        #expect(empty.status == 0, "\(empty.stderr)")
        #expect(empty.stdout.contains("No model usage in this period."))

        let today = Date().timeIntervalSince1970
        func day(_ back: Double) -> String {
            let formatter = DateFormatter()
            formatter.dateFormat = "yyyy-MM-dd"
            formatter.timeZone = TimeZone(identifier: "UTC")
            return formatter.string(from: Date(timeIntervalSince1970: today - back * 86400))
        }
        let rows = """
            INSERT INTO model_metadata (id, name, format, framework, created_at, updated_at) VALUES
              ('small', 'Small Model', 'gguf', 'llama.cpp', 0, 0), ('big', 'Big Model', 'gguf', 'llama.cpp', 0, 0);
            INSERT INTO model_usage_stats (model_id, day, generation_count, total_tokens, total_cost, total_latency_ms, error_count) VALUES
              ('small', '\(day(1))', 10, 1000, 0.5, 2000, 1), ('small', '\(day(2))', 10, 3000, 0.5, 2000, 0),
              ('big', '\(day(1))', 4, 8000, 2, 4000, 0), ('big', '\(day(30))', 100, 99999, 9, 9, 0);
            """
        try sandbox.sql(rows)
        try server.sql(rows, url: url)

        let run = try unchanged(url, "model-usage-report.lua", dryRun: true)
        #expect(run.status == 0, "\(run.stderr)")
        let lines = run.stdout.split(separator: "\n").map(String.init)
        #expect(lines.contains { $0.hasPrefix("Big Model") && $0.contains(" 4 ") && $0.contains(" 8000 ") }, "\(run.stdout)")
        #expect(lines.contains { $0.hasPrefix("Small Model") && $0.contains(" 20 ") && $0.contains(" 4000 ") && $0.contains("5.00") }, "\(run.stdout)")
        #expect(lines.contains { $0.hasPrefix("total") && $0.contains(" 24 ") && $0.contains(" 12000 ") }, "\(run.stdout)")
        #expect(run.stdout.contains("Tokens per day"), "\(run.stdout)")
        #expect(try sandbox.dryRun("model-usage-report.lua").stdout == run.stdout)

        let month = try unchanged(url, "model-usage-report.lua", ["31"])
        #expect(month.stdout.contains("107999"), "\(month.stdout)")
        #expect(try sandbox.example("model-usage-report.lua", ["31"]).stdout == month.stdout)
        #expect(try example(url, "model-usage-report.lua", ["a week"]).status == 2)
    }

    /// demo-data.lua fills an empty PostgreSQL database once (its git
    /// repository in opsh's data folder), with the same rows as on SQLite;
    /// a dry run keeps nothing, a second run inserts nothing, and the other
    /// examples run on the result.
    @Test func demoDataRunsUnchangedOnPostgres() throws {
        let url = try server.makeDatabase()
        #expect(try sandbox.opsh(["--db", url, "--create", "-e", "return 1"], database: false).status == 0)
        try sandbox.createDatabase()

        let dry = try unchanged(url, "demo-data.lua", ["300"], dryRun: true)
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout.contains("demo-data: 300 telemetry events inserted"), "\(dry.stdout)")

        let run = try example(url, "demo-data.lua", ["300"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("demo-data: 300 telemetry events inserted"), "\(run.stdout)")
        let onSQLite = try sandbox.example("demo-data.lua", ["300"])
        #expect(Self.lines(run.stdout, "demo-data: 1 configuration", "demo-data: 300")
                == Self.lines(onSQLite.stdout, "demo-data: 1 configuration", "demo-data: 300"))
        for (table, count) in [("projects", "2"), ("schemes", "3"), ("builds", "18"), ("crashLogs", "1"), ("model_metadata", "3"),
                               ("generation_sessions", "40"), ("telemetry", "300")] {
            #expect(try server.sql("SELECT count(*) FROM \(table)", url: url) == count, "\(table)")
        }
        for table in ["buildLogs", "generations", "model_usage_stats"] {
            #expect(try server.sql("SELECT count(*) FROM \(table)", url: url) == sandbox.sql("SELECT count(*) FROM \(table)"), "\(table)")
        }
        #expect(try server.sql("SELECT telemetry_retention_days FROM storage_config", url: url) == "30")
        // Its git repository, in opsh's data folder, has tags, one of them without builds.
        let repository = try server.sql("SELECT gitRepositoryURL FROM projects WHERE bundleIdentifier = 'com.example.demo'", url: url)
        #expect(repository == sandbox.root + "/data/opsh/demo-repositories/demo-app", "\(repository)")
        #expect(FileManager.default.fileExists(atPath: repository + "/.git"), "\(repository)")
        let tags = try unchanged(url, "build-new-tags.lua", ["com.example.demo"], dryRun: true)
        #expect(tags.stdout.contains("2 build(s) would be queued"), "\(tags.stdout)")

        let again = try unchanged(url, "demo-data.lua", ["300"])
        #expect(again.status == 0)
        #expect(again.stdout.contains("exists already"), "\(again.stdout)")
        #expect(again.stdout.contains("0 telemetry events inserted (300 demo events in all)"), "\(again.stdout)")

        let more = try example(url, "demo-data.lua", ["500"])
        #expect(more.stdout.contains("200 telemetry events inserted (500 demo events in all)"), "\(more.stdout)")
        let retention = try unchanged(url, "telemetry-retention.lua", dryRun: true)
        #expect(retention.status == 0 && retention.stdout.contains("retention 30d (storage_config 'default')"), "\(retention.stdout)")
        let report = try example(url, "model-usage-report.lua")
        #expect(report.status == 0 && report.stdout.contains("Llama 3.2 3B"), "\(report.stdout)")
    }
}
