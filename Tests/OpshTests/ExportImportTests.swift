import Foundation
import Testing

/// `export.project`, `export.model` and `import` through the real opsh: a
/// document round-trips from either engine to the other byte for byte, and
/// the same rows give the same document on both; refusals with their
/// reasons and a dry run that keeps nothing, one body per engine.
@Suite struct ExportImportTests {
    /// The same rows on either engine (portable SQL): a project with three
    /// schemes (names whose byte order and locale order differ), builds with
    /// every nullable column NULL and set, 1,300 log lines (more than one
    /// multi-row INSERT; lines of one instant written out of id order, and
    /// of different lengths), a crash; a model with usage, a session and
    /// generations; another project and model that are not exported. Dates
    /// with fractional seconds.
    static let seed = #"""
        db.transaction(function()
          db.exec([[INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt)
                    VALUES ('com.example.app', 'App', 'The App', '/srv/repos/app', 1700000000.123456),
                           ('other', 'Other', 'Other', '/x', 1)]])
          db.exec("UPDATE projects SET displayName = ? WHERE bundleIdentifier = 'com.example.app'", 'The "App" ✓\n\t\\')
          db.exec([[INSERT INTO schemes (id, projectBundleIdentifier, name, "order", buildCommand, platforms)
                    VALUES ('s1', 'com.example.app', 'Release', 1, 'make release', '["linux", "macos"]'),
                           ('s2', 'com.example.app', 'debug', 1, 'make', '{ "odd" :  [1, 2.50, null] }'),
                           ('s3', 'com.example.app', 'Zeta', 0, '', '[]'),
                           ('o1', 'other', 'O', 0, '', '[]')]])
          db.exec([[INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt, startDate, endDate,
                                        exitCode, progress, commitHash, runnerHost, runnerPid, runnerStartedAt)
                    VALUES ('b1', 's1', '1.0.0', 1, 'queued', 0.1, NULL, NULL, NULL, 0, NULL, NULL, NULL, NULL),
                           ('b2', 's1', '1.1.0', 2, 'failed', 1700000100.5, 1700000101.000001, 1700000160.999999,
                            -9, 0.5, 'abc123', 'ci-3', 4242, 1700000099.25),
                           ('b3', 's2', 'main', 1, 'succeeded', 1700000200.75, NULL, NULL, 0, 1, NULL, NULL, NULL, NULL),
                           ('ob', 'o1', '1', 1, 'queued', 2, NULL, NULL, NULL, 0, NULL, NULL, NULL, NULL)]])
          for i = 1, 1300 do
            db.exec("INSERT INTO buildLogs (id, buildId, level, category, content, createdAt) VALUES (?, ?, ?, 'build', ?, ?)",
                    string.format("b2-%05d", 1301 - i), i % 2 == 0 and "b2" or "b3", i % 3 == 0 and "warning" or "info",
                    "line " .. i .. string.rep("·", i % 5), 1700000102.000001 + (i % 7) / 8)
          end
          db.exec([[INSERT INTO crashLogs (incidentIdentifier, buildId, content, signal, createdAt)
                    VALUES ('c1', 'b2', 'segfault', 11, 1700000161.123456), ('c0', 'b3', 'abort', NULL, 1700000161.123456)]])
          db.exec([[INSERT INTO model_metadata (id, name, format, size_bytes, framework, quantization, capabilities, created_at, updated_at)
                    VALUES ('m1', 'Llama', 'gguf', 1099511627776, 'llama.cpp', NULL, '["chat", "tools"]', 1700000000.123456, 1700000300.654321),
                           ('m2', 'Other', 'onnx', 0, 'onnx', 'q4', '[]', 1, 1)]])
          db.exec([[INSERT INTO model_usage_stats (model_id, day, generation_count, total_tokens, total_cost, total_latency_ms, error_count)
                    VALUES ('m2', '2024-05-01', 0, 0, 0, 0, 0),
                           ('m1', '2024-05-02', 0, 0, 0, 0, 1),
                           ('m1', '2024-05-01', 3, 100, 0.30000000000000004, 12.5, 0)]])
          db.exec([[INSERT INTO generation_sessions (id, model_id, session_type, total_tokens, total_cost, created_at, updated_at)
                    VALUES ('g1', 'm1', 'chat', 100, 0.3, 1700000400.000001, 1700000401.5)]])
          db.exec([[INSERT INTO generations (id, session_id, sequence_number, prompt_tokens, completion_tokens, latency_ms, cost, created_at)
                    VALUES ('g1-1', 'g1', 1, 40, 60, 12.5, 0.3, 1700000400.25)]])
        end)
        """#

    /// A new database of `engine` in `sandbox` seeded with ``seed``.
    func seeded(_ engine: Engine, _ sandbox: Sandbox) throws -> TestDatabase {
        let db = try TestDatabase.empty(engine, in: sandbox.root + "/" + UUID().uuidString)
        let run = try sandbox.opsh(["--create", "-e", Self.seed], on: db)
        #expect(run.status == 0, "\(run.stderr)")
        return db
    }

    /// Exports the project and the model of `db` into files named with
    /// `tag`; returns their texts.
    func export(_ db: TestDatabase, _ sandbox: Sandbox, _ tag: String) throws -> (project: String, model: String) {
        let project = sandbox.root + "/project-\(tag).json"
        let model = sandbox.root + "/model-\(tag).json"
        let run = try sandbox.opsh(["-e", """
            export.project("com.example.app", { file = "\(project)" })
            export.model("m1", { file = "\(model)" })
            """], on: db)
        #expect(run.status == 0, "\(tag): \(run.stderr)")
        return (try String(contentsOfFile: project, encoding: .utf8), try String(contentsOfFile: model, encoding: .utf8))
    }

    /// Imports the two documents of `tag` into `db`; returns what import said.
    func importBoth(_ db: TestDatabase, _ sandbox: Sandbox, _ tag: String) throws -> String {
        let run = try sandbox.opsh(["-e", """
            local p = import{ file = "\(sandbox.root)/project-\(tag).json" }
            local m = import{ file = "\(sandbox.root)/model-\(tag).json" }
            return p.projects, p.schemes, p.builds, p.buildLogs, p.crashLogs, m.model_metadata, m.model_usage_stats
            """], on: db)
        #expect(run.status == 0, "\(tag): \(run.stderr)")
        return run.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// From one engine to the other: what the target exports again is the
    /// document it imported, byte for byte; dates keep their microseconds;
    /// the imported usage ids are the target's past (a new row gets the next).
    @Test(arguments: [(Engine.sqlite, Engine.postgresql), (.postgresql, .sqlite)])
    func aDocumentRoundTripsBetweenTheEnginesByteForByte(from origin: Engine, to target: Engine) throws {
        let sandbox = try Sandbox()
        let source = try seeded(origin, sandbox)
        let exported = try export(source, sandbox, "origin")
        #expect(exported.project.contains(#""createdAt": 1700000000.123456"#))
        #expect(exported.model.contains(#""updated_at": 1700000300.654321"#))

        let copy = try sandbox.createdDatabase(target)
        #expect(try importBoth(copy, sandbox, "origin") == "1\t3\t3\t1300\t2\t1\t2")
        let again = try export(copy, sandbox, "copy")
        #expect(again.project == exported.project)
        #expect(again.model == exported.model)
        if target == .postgresql {
            // Stored as the same doubles: to the microsecond, as the server reads them.
            #expect(try copy.sql("SELECT createdAt = 1700000000.123456::float8 FROM projects") == "t")
            #expect(try copy.sql("SELECT to_char(to_timestamp(startDate) AT TIME ZONE 'UTC', 'HH24:MI:SS.US') FROM builds WHERE id = 'b2'")
                    == "22:15:01.000001")
            #expect(try copy.sql("SELECT to_char(to_timestamp(endDate) AT TIME ZONE 'UTC', 'HH24:MI:SS.US') FROM builds WHERE id = 'b2'")
                    == "22:16:00.999999")
        }
        let next = try sandbox.opsh(["-e", "return db.value(\"INSERT INTO model_usage_stats (model_id, day) VALUES ('m1', '2024-06-01') RETURNING id\")"],
                                    on: copy)
        #expect(next.status == 0, "\(next.stderr)")
        #expect(next.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "4")
    }

    /// The same rows, written on either engine, export as the same document.
    @Test func theSameRowsGiveTheSameDocumentOnBothEngines() throws {
        let sandbox = try Sandbox()
        let onSQLite = try export(try seeded(.sqlite, sandbox), sandbox, "sqlite")
        let onPostgres = try export(try seeded(.postgresql, sandbox), sandbox, "postgresql")
        #expect(onPostgres.project == onSQLite.project)
        #expect(onPostgres.model == onSQLite.model)
    }

    @Test(arguments: Engine.allCases) func importRefusalsSayWhyAndWriteNothing(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let document = try export(try seeded(engine, sandbox), sandbox, "doc").project
        let db = try sandbox.createdDatabase(engine)
        #expect(try importBoth(db, sandbox, "doc") == "1\t3\t3\t1300\t2\t1\t2")

        // A conflict without replace: refused, naming the rows; the
        // changed name is not written.
        let renamed = document.replacingOccurrences(of: #""name": "App""#, with: #""name": "Renamed""#)
        let changed = sandbox.root + "/renamed.json"
        try renamed.write(toFile: changed, atomically: true, encoding: .utf8)
        let refused = try sandbox.opsh(["-e", "return import{ file = '\(changed)' }"], on: db)
        #expect(refused.status == 1)
        #expect(refused.stderr.contains(#"import refused: 1309 row(s) already exist (projects "com.example.app", schemes "s3", schemes "s1", schemes "s2", builds "b1" and 1304 more); nothing was written; import with replace = true to overwrite them"#),
                "\(refused.stderr)")
        #expect(try db.sql("SELECT name FROM projects WHERE bundleIdentifier = 'com.example.app'") == "App")
        // Control: with replace it is written, and the counts say what was replaced.
        let replacedRun = try sandbox.opsh(["-e", """
            local rows, replaced = import{ file = '\(changed)', replace = true }
            return rows.buildLogs, replaced.buildLogs, replaced.projects
            """], on: db)
        #expect(replacedRun.status == 0, "\(replacedRun.stderr)")
        #expect(replacedRun.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "1300\t1300\t1")
        #expect(try db.sql("SELECT name FROM projects WHERE bundleIdentifier = 'com.example.app'") == "Renamed")

        // A broken document: refused before anything is written.
        let fresh = try TestDatabase.empty(engine, in: sandbox.root + "/fresh")
        #expect(try sandbox.opsh(["--create", "-e", "return 1"], on: fresh).status == 0)
        let broken = sandbox.root + "/broken.json"
        try document.replacingOccurrences(of: #""versionString": "1.1.0", "#, with: "")
            .write(toFile: broken, atomically: true, encoding: .utf8)
        let brokenRun = try sandbox.opsh(["-e", "return import{ file = '\(broken)' }"], on: fresh)
        #expect(brokenRun.status == 1)
        #expect(brokenRun.stderr.contains("bad argument #1 to 'import' (builds[2]: missing field 'versionString')"), "\(brokenRun.stderr)")
        // One the checks accept but the engine's CHECK refuses (on
        // PostgreSQL after 1,000 log lines were sent in the first INSERTs):
        // nothing is kept.
        let checked = sandbox.root + "/checked.json"
        try document.replacingOccurrences(of: #""progress": 0.5"#, with: #""progress": 7.5"#)
            .write(toFile: checked, atomically: true, encoding: .utf8)
        let checkedRun = try sandbox.opsh(["-e", "return import{ file = '\(checked)' }"], on: fresh)
        #expect(checkedRun.status == 1)
        switch engine {
        case .sqlite:
            // (SQLite's refusal is the engine's own words, without "import:"
            // and "nothing was written": the rows below say it.)
            #expect(checkedRun.stderr.contains("CHECK constraint failed: progress BETWEEN 0 AND 1"), "\(checkedRun.stderr)")
        case .postgresql:
            #expect(checkedRun.stderr.contains(#"import: invalid value for builds: new row for relation "builds" violates check constraint "builds_progress_check""#),
                    "\(checkedRun.stderr)")
            #expect(checkedRun.stderr.contains("nothing was written"), "\(checkedRun.stderr)")
        }
        for table in ["projects", "schemes", "builds", "buildLogs", "crashLogs"] {
            #expect(try fresh.count(table) == 0, "\(table)")
        }
        // --read-only: the engine refuses the write.
        let readOnly = try sandbox.opsh(["--read-only", "-e", "return import{ file = '\(sandbox.root)/project-doc.json' }"], on: fresh)
        #expect(readOnly.status != 0)
        #expect(readOnly.stderr.contains(engine == .sqlite ? "readonly" : "25006"), "\(readOnly.stderr)")
        #expect(try fresh.count("projects") == 0)
        // Control: the unbroken document imports into the same database.
        let works = try sandbox.opsh(["-e", "return import{ file = '\(sandbox.root)/project-doc.json' }.buildLogs"], on: fresh)
        #expect(works.status == 0, "\(works.stderr)")
        #expect(works.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "1300")
    }

    /// Awkward values through an import (on PostgreSQL each table's rows
    /// are one COPY): the empty string beside NULL, text with quotes,
    /// commas, line breaks, a backslash and COPY's end marker, a real to
    /// its last bit, 64-bit integers beyond a double's. Exported again,
    /// the copy is the same document byte for byte. `--read-only` is
    /// refused by the engine (on PostgreSQL naming the COPY); control: the
    /// same import without it.
    @Test(arguments: Engine.allCases)
    func awkwardValuesComeThroughAnImportExactly(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let source = try sandbox.createdDatabase(engine)
        let seeded = try sandbox.opsh(["-e", #"""
            db.transaction(function()
              db.exec([[INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt)
                        VALUES ('app', 'App', ?, '/p', ?)]], 'say "hi", then\r\nleave \\.', 1e-7)
              db.exec([[INSERT INTO schemes (id, projectBundleIdentifier, name, "order", buildCommand, platforms)
                        VALUES ('s1', 'app', 'S', 0, '', '[]'), ('s2', 'app', 'T', 1, '\.', '["a,b", "\"q\""]')]])
              local build = [[INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt, progress, commitHash, runnerPid, exitCode)
                              VALUES (?, 's1', '1', ?, 'failed', 1, ?, ?, ?, ?)]]
              db.exec(build, 'b1', 1, 0.1 + 0.2, '', 9007199254740993, -9223372036854775807)
              db.exec(build, 'b2', 2, 1 / 3, db.NULL, db.NULL, 0)
              local contents = { '', '\\N', 'a,b', '"quoted"', 'line1\nline2', 'cr\r\nlf', '\\.', '\\.\n', 'tab\there', 'ünï ✓', 'NULL' }
              for i, content in ipairs(contents) do
                db.exec("INSERT INTO buildLogs (id, buildId, level, category, content, createdAt) VALUES (?, 'b1', 'info', 'build', ?, ?)",
                        string.format('l%02d', i), content, 1700000000 + i / 10)
              end
            end)
            export.project('app', { file = '\#(sandbox.root)/awkward.json' })
            """#], on: source)
        #expect(seeded.status == 0, "\(seeded.stderr)")
        let document = try String(contentsOfFile: sandbox.root + "/awkward.json", encoding: .utf8)

        let target = try TestDatabase.empty(engine, in: sandbox.root + "/target")
        #expect(try sandbox.opsh(["--create", "-e", "return 1"], on: target).status == 0)
        let imported = "local rows = import{ file = '\(sandbox.root)/awkward.json' } return rows.schemes, rows.builds, rows.buildLogs"
        let readOnly = try sandbox.opsh(["--read-only", "-e", imported], on: target)
        #expect(readOnly.status == 1)
        #expect(readOnly.stderr.contains(engine == .sqlite ? "readonly" : "cannot execute COPY FROM in a read-only transaction"),
                "\(readOnly.stderr)")
        #expect(try target.count("projects") == 0)

        let run = try sandbox.opsh(["-e", imported], on: target)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == "2\t2\t11\n", "\(run.stdout)")
        let again = try sandbox.opsh(["-e", "export.project('app', { file = '\(sandbox.root)/again.json' })"], on: target)
        #expect(again.status == 0, "\(again.stderr)")
        #expect(try String(contentsOfFile: sandbox.root + "/again.json", encoding: .utf8) == document)
        // Not only the same document: the stored values themselves.
        let values = try sandbox.opsh(["-e", #"""
            local b1 = db.first("SELECT * FROM builds WHERE id = 'b1'")
            local b2 = db.first("SELECT * FROM builds WHERE id = 'b2'")
            print(b1.commitHash == '', b2.commitHash == nil, b1.progress == 0.1 + 0.2, b2.progress == 1 / 3,
                  b1.runnerPid == 9007199254740993, b1.exitCode == -9223372036854775807, math.type(b1.runnerPid))
            print(db.value("SELECT buildCommand FROM schemes WHERE id = 's1'") == '',
                  db.value("SELECT createdAt FROM projects") == 1e-7,
                  db.value("SELECT content FROM buildLogs WHERE id = 'l06'") == 'cr\r\nlf',
                  db.value("SELECT content FROM buildLogs WHERE id = 'l08'") == '\\.\n')
            """#], on: target)
        #expect(values.status == 0, "\(values.stderr)")
        #expect(values.stdout == "true\ttrue\ttrue\ttrue\ttrue\ttrue\tinteger\ntrue\ttrue\ttrue\ttrue\n", "\(values.stdout)")
    }

    @Test(arguments: Engine.allCases) func aDryRunImportKeepsNothingAndReportsCounts(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        _ = try export(try seeded(engine, sandbox), sandbox, "doc")
        let db = try sandbox.createdDatabase(engine)
        let run = try sandbox.opsh(["--dry-run", "-e", """
            local p = import{ file = "\(sandbox.root)/project-doc.json" }
            local m = import{ file = "\(sandbox.root)/model-doc.json" }
            return p.projects, p.buildLogs, m.model_usage_stats, db.value("SELECT count(*) FROM buildLogs")
            """], on: db)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "1\t1300\t2\t1300")
        #expect(run.stderr.contains("buildLogs: 1300 inserted, 0 updated, 0 deleted"), "\(run.stderr)")
        #expect(run.stderr.contains("model_usage_stats: 2 inserted, 0 updated, 0 deleted"), "\(run.stderr)")
        for table in ["projects", "schemes", "builds", "buildLogs", "crashLogs", "model_metadata", "model_usage_stats"] {
            #expect(try db.count(table) == 0, "\(table)")
        }
        // An export under --dry-run writes no file either.
        let exported = sandbox.root + "/not-written.json"
        let export = try sandbox.opsh(["--dry-run", "-e", """
            import{ file = "\(sandbox.root)/project-doc.json" }
            local path, counts, report = export.project("com.example.app", { file = "\(exported)" })
            return counts.buildLogs, report.dryRun
            """], on: db)
        #expect(export.status == 0, "\(export.stderr)")
        #expect(export.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "1300\ttrue")
        #expect(!FileManager.default.fileExists(atPath: exported))
    }
}
