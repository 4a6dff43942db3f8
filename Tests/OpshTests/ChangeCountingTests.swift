import Foundation
import Testing

/// Every row a run changes is counted, whatever route changed it (issue 24,
/// SQLite, items 7 and 10): `--max-changes` and `{ maxChanges = N }`, the
/// dry run's report and the audit row see the rows the job manager's
/// connection writes, a Lua migration's, a dropped table's, and the rows
/// SQLite deletes to resolve a REPLACE conflict; a schema change is over
/// any cap unless `allowSchemaChanges` (`--allow-schema-changes`) says it
/// may happen. Each refusal has a control run within the cap.
@Suite struct ChangeCountingTests {
    /// A scheme, a finished build `b1` with 200 log lines (jobs.delete
    /// deletes 201 rows) and a queued build `q1`.
    static let builds = """
        projects.insert{ bundleIdentifier = "p", name = "P", gitRepositoryURL = "/srv/p" }
        local s = schemes.insert{ projectBundleIdentifier = "p", name = "R", buildCommand = "make", platforms = { "linux" } }
        db.transaction(function()
          db.exec("INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt) VALUES ('b1', ?, '1.0', 1, 'succeeded', 1)", s.id)
          db.exec("INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt) VALUES ('q1', ?, '1.0', 2, 'queued', 2)", s.id)
          for i = 1, 200 do
            db.exec("INSERT INTO buildLogs (id, buildId, content, createdAt) VALUES (?, 'b1', 'line', ?)", 'l' .. i, i)
          end
        end)
        return s.id
        """

    /// `n` telemetry rows, ids 1…n.
    static func telemetry(_ n: Int) -> String {
        """
        db.transaction(function()
          for i = 1, \(n) do db.exec("INSERT INTO telemetry (id, event, created_at) VALUES (?, 'e', ?)", i, i) end
        end)
        """
    }

    /// The changes of the newest audit row, per table.
    static func lastAudit(_ sandbox: Sandbox, _ database: TestDatabase) throws -> [String: [String: Int]] {
        let result = try sandbox.opsh(["--read-only", "--reason", "reading the trail", "--json", "-e",
                                       "return audit.list{ order = 'startedAt' }"], on: database)
        let rows = (try? JSONSerialization.jsonObject(with: Data(result.stdout.utf8))) as? [[String: Any]] ?? []
        return (rows.last?["changes"] as? [String: [String: Int]]) ?? [:]
    }

    @Test(arguments: Engine.allCases)
    func theJobManagersWritesCountAgainstTheCap(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let made = try sandbox.opsh(["-e", Self.builds], on: database)
        #expect(made.status == 0, "\(made.stderr)")
        let scheme = made.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        // jobs.delete: the build and its 200 lines.
        let delete = try sandbox.opsh(["--max-changes", "10", "-e", "jobs.delete('b1')"], on: database)
        #expect(delete.status == 1, "\(delete.stderr)")
        #expect(delete.stderr.contains("changed 201 rows"), "\(delete.stderr)")
        #expect(delete.stderr.contains("more than its limit of 10"), "\(delete.stderr)")
        #expect(try database.count("builds", where: "id = 'b1'") == 1)
        #expect(try database.count("buildLogs") == 200)
        // jobs.cancel of a queued build, jobs.create and jobs.enqueue.
        for code in ["jobs.cancel('q1')", "jobs.create{ scheme = '\(scheme)', version = '2.0' }",
                     "jobs.enqueue{ scheme = '\(scheme)', version = '2.0' }"] {
            let refused = try sandbox.opsh(["--max-changes", "0", "-e", code], on: database)
            #expect(refused.status == 1, "\(code): \(refused.stderr)")
            #expect(refused.stderr.contains("more than its limit of 0"), "\(code): \(refused.stderr)")
        }
        #expect(try database.count("builds") == 2)
        #expect(try database.sql("SELECT status FROM builds WHERE id = 'q1'") == "queued")
        // Control: within the cap each lands, and the audit row counts it.
        let deleted = try sandbox.opsh(["--max-changes", "201", "-e", "jobs.delete('b1')"], on: database)
        #expect(deleted.status == 0, "\(deleted.stderr)")
        #expect(try database.count("buildLogs") == 0)
        let audit = try Self.lastAudit(sandbox, database)
        #expect(audit["builds"]?["deleted"] == 1 && audit["buildLogs"]?["deleted"] == 200, "\(audit)")
        let cancelled = try sandbox.opsh(["--max-changes", "5", "-e", "jobs.cancel('q1')"], on: database)
        #expect(cancelled.status == 0, "\(cancelled.stderr)")
        #expect(try database.sql("SELECT status FROM builds WHERE id = 'q1'") == "cancelled")
    }

    @Test(arguments: Engine.allCases)
    func aLuaMigrationsRowsCountAndItIsASchemaChange(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        #expect(try sandbox.opsh(["-e", Self.telemetry(20)], on: database).status == 0)
        let folder = sandbox.root + "/migrations"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try """
            return { id = "001_forget_telemetry", up = function(db) db.exec("DELETE FROM telemetry") end }
            """.write(toFile: folder + "/001_forget_telemetry.lua", atomically: true, encoding: .utf8)
        let code = "migrate.up{ folder = '\(folder)' }"
        let schema = try sandbox.opsh(["--max-changes", "10", "-e", code], on: database)
        #expect(schema.status == 1, "\(schema.stderr)")
        #expect(schema.stderr.contains("--allow-schema-changes"), "\(schema.stderr)")
        let rows = try sandbox.opsh(["--max-changes", "10", "--allow-schema-changes", "-e", code], on: database)
        #expect(rows.status == 1, "\(rows.stderr)")
        #expect(rows.stderr.contains("more than its limit of 10"), "\(rows.stderr)")
        #expect(try database.count("telemetry") == 20)
        // Control: a cap it stays within.
        let applied = try sandbox.opsh(["--max-changes", "100", "--allow-schema-changes", "-e", code], on: database)
        #expect(applied.status == 0, "\(applied.stderr)")
        #expect(try database.count("telemetry") == 0)
    }

    @Test(arguments: Engine.allCases)
    func aSchemaChangeIsOverAnyCapAndADroppedTablesRowsAreDeleted(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        #expect(try sandbox.opsh(["-e", Self.telemetry(5000)], on: database).status == 0)
        let drop = "db.exec('DROP TABLE telemetry')"
        // The dry run reports the rows the drop deletes, and the schema.
        let dry = try sandbox.opsh(["--dry-run", "-e", drop], on: database)
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stderr.contains("telemetry: 0 inserted, 0 updated, 5000 deleted"), "\(dry.stderr)")
        #expect(dry.stderr.contains("dropped table telemetry"), "\(dry.stderr)")
        // Under a cap: refused as a schema change, then by its rows.
        let schema = try sandbox.opsh(["--max-changes", "10", "-e", drop], on: database)
        #expect(schema.status == 1, "\(schema.stderr)")
        #expect(schema.stderr.contains("changed the schema (dropped table telemetry)"), "\(schema.stderr)")
        #expect(schema.stderr.contains("--allow-schema-changes"), "\(schema.stderr)")
        let rows = try sandbox.opsh(["--max-changes", "10", "--allow-schema-changes", "-e", drop], on: database)
        #expect(rows.status == 1, "\(rows.stderr)")
        #expect(rows.stderr.contains("changed 5000 rows (telemetry: 5000 deleted)"), "\(rows.stderr)")
        let transaction = try sandbox.opsh(["-e", """
            print(pcall(db.transaction, function() db.exec('ALTER TABLE telemetry DROP COLUMN session_id') end, { maxChanges = 10 }))
            """], on: database)
        #expect(transaction.stdout.contains("false"), "\(transaction.stdout) \(transaction.stderr)")
        #expect(transaction.stdout.contains("changed the schema (altered table telemetry)"), "\(transaction.stdout)")
        #expect(try database.count("telemetry") == 5000)
        // Controls: allowed, and within the cap.
        let altered = try sandbox.opsh(["-e", """
            db.transaction(function() db.exec('ALTER TABLE telemetry DROP COLUMN session_id') end, { maxChanges = 10, allowSchemaChanges = true })
            """], on: database)
        #expect(altered.status == 0, "\(altered.stderr)")
        let dropped = try sandbox.opsh(["--max-changes", "5000", "--allow-schema-changes", "-e", drop], on: database)
        #expect(dropped.status == 0, "\(dropped.stderr)")
        let audit = try Self.lastAudit(sandbox, database)
        #expect(audit["telemetry"]?["deleted"] == 5000, "\(audit)")
    }

    /// SQLite deletes the rows a REPLACE conflict resolution replaces, and
    /// neither its update hook nor GRDB's observers hear of them. SQLite
    /// only: PostgreSQL has no REPLACE conflict resolution (its upserts
    /// update the row, they never delete one).
    @Test func replacedRowsAreCountedAsDeleted() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.sqlite)
        #expect(try sandbox.opsh(["-e", Self.telemetry(3000)], on: database).status == 0)
        let replace = "db.exec('UPDATE OR REPLACE telemetry SET id = 1 WHERE id <= 3000')"
        let dry = try sandbox.opsh(["--dry-run", "-e", replace + " db.exec(\"INSERT OR REPLACE INTO telemetry (id, event, created_at) VALUES (1, 'r', 1)\")"], on: database)
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stderr.contains("telemetry: 1 inserted, 3000 updated, 3000 deleted"), "\(dry.stderr)")
        let capped = try sandbox.opsh(["--max-changes", "3000", "-e", replace], on: database)
        #expect(capped.status == 1, "\(capped.stderr)")
        #expect(capped.stderr.contains("changed 5999 rows (telemetry: 3000 updated, 2999 deleted)"), "\(capped.stderr)")
        #expect(try database.count("telemetry") == 3000)
        // At the prompt the question sees the deletes: the table's name is asked.
        let terminal = try PseudoTerminal(arguments: ["--db", database.db], environment: sandbox.environment)
        terminal.expect("opsh> ")
        terminal.send(".confirm 100\r")
        terminal.expect("opsh> ")
        terminal.send(replace + "\r")
        terminal.expect("telemetry: 0 inserted, 3000 updated, 2999 deleted")
        terminal.expect("it deletes 2999 rows from telemetry: type the table's name to commit")
        terminal.send("y\r")
        terminal.expect("rolled back: nothing was changed")
        terminal.expect("opsh> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit(timeout: 15) == 0)
        #expect(try database.count("telemetry") == 3000)
        // Control: within the cap it lands, and the audit row counts the deletes.
        let allowed = try sandbox.opsh(["--max-changes", "6000", "-e", replace], on: database)
        #expect(allowed.status == 0, "\(allowed.stderr)")
        #expect(try database.count("telemetry") == 1)
        let audit = try Self.lastAudit(sandbox, database)
        #expect(audit["telemetry"]?["deleted"] == 2999 && audit["telemetry"]?["updated"] == 3000, "\(audit)")
    }

    /// The audit row counts the database file's rows only: a TEMP table of
    /// the same name, written in the same transaction and in turn with the
    /// file's (so the hook tells the two apart row by row, by schema, not
    /// by table name), is not the file's. SQLite only: the counts are its
    /// preupdate hook's (CSQLiteStore/opsh_changes.c), which names the
    /// schema of each row. The table is the script's own (`notes`): a TEMP
    /// table may not take the name of one of opsh's tables (27x).
    @Test func aTempTableOfTheSameNameIsNotCountedAsTheFiles() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.sqlite)
        let script = """
            local scratch
            db.exec("CREATE TABLE notes (id INTEGER PRIMARY KEY, event TEXT, created_at INTEGER)")
            db.transaction(function()
              db.exec("CREATE TEMP TABLE notes (id INTEGER PRIMARY KEY, event TEXT, created_at INTEGER)")
              for i = 1, 10 do
                db.exec("INSERT INTO temp.notes (id, event, created_at) VALUES (?, 'scratch', ?)", i, i)
                if i <= 3 then db.exec("INSERT INTO main.notes (id, event, created_at) VALUES (?, 'e', ?)", i, i) end
              end
              scratch = db.value("SELECT count(*) FROM temp.notes")
            end)
            return scratch
            """
        let run = try sandbox.opsh(["-e", script], on: database)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "10", "\(run.stdout)")
        #expect(try database.count("notes") == 3)
        let audit = try Self.lastAudit(sandbox, database)
        #expect(audit["notes"]?["inserted"] == 3, "\(audit)")
    }
}
