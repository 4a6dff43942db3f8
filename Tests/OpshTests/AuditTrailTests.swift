import Foundation
import Testing

/// The audit trail (issue 16, "A trail of who did what"), the reasons, the
/// dead man's switch for cron and the lock-owner records: real opsh
/// processes on real SQLite files, the shell through a real pty.
/// One database the audit tests run opsh on, whatever its engine: an
/// SQLite file of the sandbox, or a database of the tests' PostgreSQL
/// server. The same checks run on both (PostgresAuditTests).
struct AuditedDatabase {
    let sandbox: Sandbox
    /// `--db` and its value.
    let arguments: [String]
    /// Runs SQL on it from another process (sqlite3, psql).
    let sql: (String) throws -> String

    /// The sandbox's SQLite file, created.
    static func sqlite(_ sandbox: Sandbox) throws -> AuditedDatabase {
        try sandbox.createDatabase()
        return AuditedDatabase(sandbox: sandbox, arguments: ["--db", sandbox.database]) { try sandbox.sqlite($0) }
    }

    /// A new database on the tests' PostgreSQL server, with opsh's schema.
    static func postgres(_ sandbox: Sandbox, server: PostgresServer) throws -> AuditedDatabase {
        let url = try server.makeDatabase()
        let created = try sandbox.opsh(["--db", url, "--create", "-e", "return db.engine"], database: false)
        #expect(created.status == 0, "\(created.stderr)")
        return AuditedDatabase(sandbox: sandbox, arguments: ["--db", url]) { try server.sql($0, url: url) }
    }

    /// opsh on this database (`--db` first, then `arguments`).
    func opsh(_ arguments: [String], environment: [String: String]? = nil) throws -> Sandbox.Result {
        try sandbox.run(opshExecutable, self.arguments + arguments, environment: environment)
    }

    /// The audit rows as JSON objects, oldest first (read with a reason, for
    /// a database that asks for one; a read-only run is not recorded).
    func rows() throws -> [[String: Any]] {
        let result = try opsh(["--read-only", "--reason", "reading the trail", "--json", "-e", "return audit.list{ order = 'startedAt' }"])
        #expect(result.status == 0, "\(result.stderr)")
        let parsed = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8))
        return parsed as? [[String: Any]] ?? []
    }

    /// The shell on this database, through a pseudo-terminal.
    func shell(_ extra: [String] = [], environment: [String: String]? = nil) throws -> PseudoTerminal {
        try PseudoTerminal(arguments: arguments + ["--no-init"] + extra, environment: environment ?? sandbox.environment)
    }
}

@Suite struct AuditTrailTests {
    /// The audit rows as JSON objects, oldest first.
    static func rows(_ sandbox: Sandbox) throws -> [[String: Any]] {
        try AuditedDatabase(sandbox: sandbox, arguments: ["--db", sandbox.database]) { try sandbox.sqlite($0) }.rows()
    }

    static func counts(_ row: [String: Any], _ table: String) -> [String: Int] {
        ((row["changes"] as? [String: Any])?[table] as? [String: Int]) ?? [:]
    }

    @Test func successFailureDryRunAndOneLinerAreRecordedAndReadOnlyIsNot() throws {
        try Self.recordsRunsAsSQLiteDoes(try .sqlite(try Sandbox()))
    }

    /// What `opsh run` and `opsh -e` leave in the trail, on either engine:
    /// a dry run (with what it reports), a success (rows per table, a
    /// nested transaction that rolled back not counted), a failure (what
    /// it committed before failing), a one-liner (its code, the API key
    /// masked); nothing for a one-liner that never used the database nor
    /// for `--read-only`.
    static func recordsRunsAsSQLiteDoes(_ database: AuditedDatabase) throws {
        let sandbox = database.sandbox
        // A one-liner that never touches the database records nothing.
        #expect(try database.opsh(["-e", "return 1"]).stdout == "1\n")
        #expect(try database.sql("SELECT count(*) FROM opsh_audit") == "0")

        // Success: rows committed per table, through the db module's C fast
        // path (a loop in db.transaction), repositories, and a nested
        // transaction that rolled back (not counted).
        let good = try sandbox.script("good.lua", """
            -- @every 10m
            db.transaction(function()
              for i = 1, 5 do db.exec("INSERT INTO telemetry (event, created_at) VALUES (?, ?)", "e", i) end
              db.exec("UPDATE telemetry SET event = 'f' WHERE created_at <= 2")
              pcall(db.transaction, function() db.exec("DELETE FROM telemetry") error("inner") end)
            end)
            db.exec("DELETE FROM telemetry WHERE created_at = 5")
            projects.insert{ bundleIdentifier = "com.example.app", name = "App", gitRepositoryURL = "/srv/app" }
            """)
        // A dry run first: what it reports.
        let dry = try database.opsh(["run", "--dry-run", good])
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stderr.contains("telemetry: 5 inserted, 2 updated, 1 deleted"), "\(dry.stderr)")
        let ran = try database.opsh(["run", "--reason", "nightly repair", good])
        #expect(ran.status == 0, "\(ran.stderr)")

        // Failure (exit 1): what it committed before the error.
        let bad = try sandbox.script("bad.lua", """
            db.exec("DELETE FROM telemetry WHERE created_at = 4")
            db.transaction(function() db.exec("DELETE FROM telemetry") error("boom") end)
            """)
        let failed = try database.opsh(["run", bad])
        #expect(failed.status == 1)

        // A one-liner with the API key: masked in the record.
        let eval = try database.opsh(["-e", "db.exec(\"UPDATE telemetry SET event = 'g' WHERE created_at = 1\") config.save{ api_key = \"sk-live-0123456789abcd\", base_url = \"http://x\" }"])
        #expect(eval.status == 0, "\(eval.stderr)")

        // --read-only: nothing recorded.
        let readOnly = try database.opsh(["--read-only", "-e", "return db.value('SELECT count(*) FROM telemetry')"])
        #expect(readOnly.status == 0, "\(readOnly.stderr)")

        let rows = try database.rows()
        #expect(rows.count == 4, "\(rows)")
        guard rows.count == 4 else { return }
        let (dryRun, success, failure, oneLiner) = (rows[0], rows[1], rows[2], rows[3])
        #expect(success["mode"] as? String == "run")
        #expect(success["script"] as? String == URL(fileURLWithPath: good).resolvingSymlinksInPath().path)
        #expect((success["scriptSHA256"] as? String)?.count == 64)
        #expect(success["period"] as? Double == 600)
        #expect(success["reason"] as? String == "nightly repair")
        #expect(success["status"] as? Int == 0)
        #expect(success["dryRun"] as? Bool == false)
        #expect(Self.counts(success, "telemetry") == ["inserted": 5, "updated": 2, "deleted": 1], "\(success)")
        #expect(Self.counts(success, "projects") == ["inserted": 1, "updated": 0, "deleted": 0])
        for field in ["startedAt", "endedAt", "user", "host", "pid", "version"] { #expect(success[field] != nil, "\(field)") }
        #expect(failure["status"] as? Int == 1)
        #expect(Self.counts(failure, "telemetry") == ["inserted": 0, "updated": 0, "deleted": 1], "\(failure)")
        #expect(dryRun["dryRun"] as? Bool == true)
        #expect(Self.counts(dryRun, "telemetry") == ["inserted": 5, "updated": 2, "deleted": 1], "\(dryRun)")
        #expect(oneLiner["mode"] as? String == "eval")
        let code = oneLiner["code"] as? String ?? ""
        #expect(code.contains("api_key = \"••••abcd\""), "\(code)")
        #expect(!code.contains("sk-live-0123456789abcd"), "\(code)")
        #expect(Self.counts(oneLiner, "telemetry") == ["inserted": 0, "updated": 1, "deleted": 0])
        // What the trail says matches the data: 5 inserted, 2 deleted.
        #expect(try database.sql("SELECT count(*) FROM telemetry") == "3")
    }

    @Test func auditRowsCannotBeChangedAndLeaveOnlyThroughPrune() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        #expect(try sandbox.opsh(["-e", "return db.value('SELECT 1')"]).status == 0)
        // An old row (inserting is allowed: the trail only grows).
        let old = Date().timeIntervalSince1970 - 100 * 86400
        try sandbox.sqlite("INSERT INTO opsh_audit (startedAt, endedAt, user, host, pid, version, mode, status) VALUES (\(old), \(old), 'u', 'h', 1, 'v', 'run', 0)")
        #expect(try sandbox.sqlite("SELECT count(*) FROM opsh_audit") == "2")

        // Refused, by SQLite, whoever writes: an update, and a delete.
        let update = try sandbox.opsh(["-e", "db.exec(\"UPDATE opsh_audit SET reason = 'forged'\")"])
        #expect(update.status == 1)
        #expect(update.stderr.contains("opsh_audit is append-only: audit rows cannot be changed"), "\(update.stderr)")
        let cli = try sandbox.run("/usr/bin/sqlite3", [sandbox.database, "DELETE FROM opsh_audit"])
        #expect(cli.status != 0)
        #expect(cli.stderr.contains("opsh_audit rows leave only through audit.prune"), "\(cli.stderr)")
        let tooRecent = try sandbox.opsh(["-e", "return audit.prune{ olderThan = '1h' }"])
        #expect(tooRecent.status == 1)
        #expect(tooRecent.stderr.contains("the audit trail keeps at least its last day"), "\(tooRecent.stderr)")
        // Nothing left or changed (the refused attempts are rows of their own).
        #expect(try sandbox.sqlite("SELECT count(*) FROM opsh_audit WHERE startedAt < \(old + 1)") == "1")
        #expect(try sandbox.sqlite("SELECT count(*) FROM opsh_audit WHERE reason = 'forged'") == "0")
        let before = try sandbox.sqlite("SELECT count(*) FROM opsh_audit")

        // Control: prune removes the old row (and only it).
        let prune = try sandbox.opsh(["-e", "return audit.prune{ olderThan = '90d' }.deleted"])
        #expect(prune.status == 0, "\(prune.stderr)")
        #expect(prune.stdout == "1\n")
        #expect(try sandbox.sqlite("SELECT count(*) FROM opsh_audit WHERE startedAt < \(old + 1)") == "0")
        #expect(try sandbox.sqlite("SELECT count(*) FROM opsh_audit") == String(Int(before)!))  // -1 old, +1 the prune's own row
        #expect(try sandbox.sqlite("SELECT count(*) FROM opsh_audit_prune") == "0")
        // Control: without the trigger the same update lands.
        try sandbox.sqlite("DROP TRIGGER opsh_audit_no_update")
        let unprotected = try sandbox.opsh(["-e", "return (db.exec(\"UPDATE opsh_audit SET reason = 'forged'\"))"])
        #expect(unprotected.status == 0, "\(unprotected.stderr)")
        #expect(unprotected.stdout != "0\n")
    }

    @Test func reasonsAreRecordedAndRequiredWhenAskedFor() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        let script = try sandbox.script("touch.lua", "return db.value('SELECT count(*) FROM projects')\n")
        var environment = sandbox.environment
        environment["OPSH_REQUIRE_REASON"] = "1"

        let refused = try sandbox.run(opshExecutable, sandbox.withDatabase(["run", script]), environment: environment)
        #expect(refused.status == 2)
        #expect(refused.stderr.contains("a reason is required (OPSH_REQUIRE_REASON=1): run again with --reason TEXT"), "\(refused.stderr)")
        #expect(refused.stdout.isEmpty)
        // Control: with a reason it runs, and the reason is recorded.
        let allowed = try sandbox.run(opshExecutable, sandbox.withDatabase(["run", "--reason", "INC-42 stuck builds", script]), environment: environment)
        #expect(allowed.status == 0, "\(allowed.stderr)")
        environment["OPSH_REASON"] = "from the environment"
        let fromEnvironment = try sandbox.run(opshExecutable, sandbox.withDatabase(["-e", "return projects.count()"]), environment: environment)
        #expect(fromEnvironment.status == 0, "\(fromEnvironment.stderr)")
        let reasons = try Self.rows(sandbox).compactMap { $0["reason"] as? String }
        #expect(reasons == ["INC-42 stuck builds", "from the environment"])

        // The database's own setting: a run without a reason is refused at
        // its first use of the database; with one it runs.
        #expect(try sandbox.opsh(["-e", "audit.requireReason(true)"]).status == 0)
        let bySetting = try sandbox.opsh(["run", script])
        #expect(bySetting.status == 2)
        #expect(bySetting.stderr.contains("this database requires a reason for every run"), "\(bySetting.stderr)")
        let withReason = try sandbox.opsh(["run", "--reason", "checking", script])
        #expect(withReason.status == 0, "\(withReason.stderr)")
    }

    @Test func theShellAsksForAReasonAndAuditsChunksThatChangeData() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        var environment = sandbox.environment
        environment["OPSH_REQUIRE_REASON"] = "1"
        // Refused without an answer.
        let refused = try PseudoTerminal(arguments: ["--db", sandbox.database, "--no-init"], environment: environment)
        refused.expect("why are you here?")
        refused.send("\r")
        refused.expect("no reason given: the shell does not start without one")
        #expect(refused.waitForExit(timeout: 10) == 2)

        let terminal = try PseudoTerminal(arguments: ["--db", sandbox.database, "--no-init"], environment: environment)
        terminal.expect("why are you here?")
        terminal.send("INC-7 cleaning up\r")
        terminal.expect("opsh> ")
        terminal.send("projects.count()\r")          // reads only: not recorded
        terminal.expect("opsh> ")
        terminal.send("db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('shell', 1)\")\r")
        terminal.expect("opsh> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit(timeout: 15) == 0)
        let rows = try Self.rows(sandbox)
        #expect(rows.count == 1, "\(rows)")
        #expect(rows.first?["mode"] as? String == "shell")
        #expect(rows.first?["reason"] as? String == "INC-7 cleaning up")
        #expect((rows.first?["code"] as? String)?.contains("INSERT INTO telemetry") == true)
        #expect(rows.first.map { Self.counts($0, "telemetry") } == ["inserted": 1, "updated": 0, "deleted": 0])
    }

    @Test func overdueNamesAScriptThatMissedItsPeriod() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        let script = try sandbox.script("every-second.lua", "-- mark stale builds\n-- @every 1s\nreturn builds.count()\n")
        #expect(try sandbox.opsh(["run", script]).status == 0)
        // On time: just ran.
        let onTime = try sandbox.opsh(["runs", "--db", sandbox.database, "--overdue", "--grace", "1s"], database: false)
        #expect(onTime.status == 0, "\(onTime.stdout) \(onTime.stderr)")
        #expect(onTime.stderr.contains("no script is overdue"))
        let listed = try sandbox.opsh(["runs", "--db", sandbox.database], database: false)
        #expect(listed.status == 0, "\(listed.stderr)")
        #expect(listed.stdout.contains("every-second.lua"), "\(listed.stdout)")
        usleep(2_600_000)
        // Missed: period 1 s + grace 1 s have passed.
        let late = try sandbox.opsh(["runs", "--db", sandbox.database, "--overdue", "--grace", "1s"], database: false)
        #expect(late.status == 1, "\(late.stdout) \(late.stderr)")
        #expect(late.stdout.contains("overdue: \(URL(fileURLWithPath: script).resolvingSymlinksInPath().path): its last successful run started"), "\(late.stdout)")
        // The default grace (10 % of the period, at least a minute) still allows it.
        #expect(try sandbox.opsh(["runs", "--db", sandbox.database, "--overdue"], database: false).status == 0)
        // Bad input says what was wrong.
        let bad = try sandbox.opsh(["runs", "--db", sandbox.database, "--overdue", "--grace", "soon"], database: false)
        #expect(bad.status == 2)
        #expect(bad.stderr.contains("'soon' is not a duration"), "\(bad.stderr)")
        let badPeriod = try sandbox.opsh(["run", try sandbox.script("typo.lua", "-- @every 10x\nreturn 1\n")])
        #expect(badPeriod.status == 2)
        #expect(badPeriod.stderr.contains("is not a period"), "\(badPeriod.stderr)")
    }

    @Test func aWriteThatGivesUpNamesTheOtherOpshHoldingTheLock() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        let holder = try sandbox.script("hold.lua", """
            db.transaction(function()
              db.exec("INSERT INTO telemetry (event, created_at) VALUES ('hold', 1)")
              io.stdout:write("holding\\n") io.stdout:flush()
              local started = os.clock()
              while os.clock() - started < 4 do end
            end)
            """)
        let child = try sandbox.start(opshExecutable, sandbox.withDatabase(["run", holder]))
        #expect(String(decoding: readFirstLine(child.standardOutput), as: UTF8.self).hasPrefix("holding"))
        let write = try sandbox.opsh(["--busy-timeout", "0.5", "-e", "db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('w', 2)\")"])
        #expect(write.status == 3)
        #expect(write.stderr.contains("database is locked"), "\(write.stderr)")
        #expect(write.stderr.contains("held by opsh (pid \(child.pid), user "), "\(write.stderr)")
        #expect(write.stderr.contains("script \(URL(fileURLWithPath: holder).resolvingSymlinksInPath().path), holding the write lock since"), "\(write.stderr)")
        // Control: once the holder is done, the same write lands.
        let done = sandbox.finish(child)
        #expect(done.status == 0, "\(done.stderr)")
        let again = try sandbox.opsh(["-e", "db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('w', 2)\")"])
        #expect(again.status == 0, "\(again.stderr)")
    }

    @Test func aDatabaseWithoutTheAuditMigrationRunsAndSaysSoOnce() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        try sandbox.sqlite("""
            DROP TABLE opsh_audit; DROP TABLE opsh_audit_prune; DROP TABLE opsh_settings;
            DELETE FROM grdb_migrations WHERE identifier = '003_audit';
            """)
        let script = try sandbox.script("write.lua", """
            db.exec("INSERT INTO telemetry (event, created_at) VALUES ('a', 1)")
            db.transaction(function() db.exec("INSERT INTO telemetry (event, created_at) VALUES ('b', 2)") end)
            """)
        let run = try sandbox.opsh(["run", script])
        #expect(run.status == 0, "\(run.stderr)")
        let note = "the audit trail is not recorded on this database until `opsh migrate` applies 003_audit"
        #expect(run.stderr.components(separatedBy: note).count == 2, "\(run.stderr)")
        #expect(try sandbox.sqlite("SELECT count(*) FROM telemetry") == "2")
        // Control: once migrated, the same run is recorded.
        #expect(try sandbox.opsh(["migrate"]).status == 0)
        let again = try sandbox.opsh(["run", script])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(!again.stderr.contains("not recorded"), "\(again.stderr)")
        #expect(try sandbox.sqlite("SELECT json_extract(changes, '$.telemetry.inserted') FROM opsh_audit") == "2")
    }

    /// Store's own fast paths (batched inserts stepped through SQLite's C
    /// API) are counted too, and a rolled-back batch is not.
    @Test func batchedInsertsAreCounted() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        let run = try sandbox.opsh(["-e", """
            telemetry.insertMany{ { event = "a", created_at = 1 }, { event = "b", created_at = 2 }, { event = "c", created_at = 3 } }
            pcall(db.transaction, function() telemetry.insertMany{ { event = "d", created_at = 4 } } error("no") end)
            """])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(try sandbox.sqlite("SELECT count(*) FROM telemetry") == "3")
        let rows = try Self.rows(sandbox)
        #expect(rows.last.map { Self.counts($0, "telemetry") } == ["inserted": 3, "updated": 0, "deleted": 0], "\(rows)")

        // An import's rows (stepped through SQLite's C API) too.
        let document = sandbox.root + "/app.json"
        let exported = try sandbox.opsh(["-e", """
            projects.insert{ bundleIdentifier = "com.example.app", name = "App", gitRepositoryURL = "/srv/app" }
            export.project("com.example.app", { file = "\(document)" })
            projects.delete("com.example.app", { cascade = true })
            """])
        #expect(exported.status == 0, "\(exported.stderr)")
        let imported = try sandbox.opsh(["-e", "import{ file = '\(document)' }"])
        #expect(imported.status == 0, "\(imported.stderr)")
        #expect(try Self.rows(sandbox).last.map { Self.counts($0, "projects") } == ["inserted": 1, "updated": 0, "deleted": 0])
    }

    /// A chunk committed after the question (re-applied from its changeset)
    /// and an undo (a changeset applied) are audited with their counts.
    @Test func aConfirmedChunkAndAnUndoAreAudited() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        let terminal = try PseudoTerminal(arguments: ["--db", sandbox.database, "--no-init", "--reason", "tidy"], environment: sandbox.environment)
        terminal.expect("opsh> ")
        terminal.send(".confirm 2\r")
        terminal.expect("opsh> ")
        terminal.send("for i = 1, 3 do db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('c', ?)\", i) end\r")
        terminal.expect("commit? [y/N] ")
        terminal.send("y\r")
        terminal.expect("opsh> ")
        terminal.send("undo()\r")
        terminal.expect("commit? [y/N] ")   // the undo changes 3 rows too
        terminal.send("y\r")
        terminal.expect("opsh> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit(timeout: 15) == 0)
        #expect(try sandbox.sqlite("SELECT count(*) FROM telemetry") == "0")
        let rows = try Self.rows(sandbox)
        #expect(rows.count == 2, "\(rows)")
        guard rows.count == 2 else { return }
        #expect(Self.counts(rows[0], "telemetry") == ["inserted": 3, "updated": 0, "deleted": 0], "\(rows[0])")
        #expect(Self.counts(rows[1], "telemetry") == ["inserted": 0, "updated": 0, "deleted": 3], "\(rows[1])")
        #expect(rows[1]["code"] as? String == "undo()")
        #expect(rows.allSatisfy { $0["reason"] as? String == "tidy" && $0["mode"] as? String == "shell" })
    }

    /// `.read FILE` is one chunk: audited when it changed data, as typed
    /// chunks are; one that only reads leaves no row (the control).
    @Test func aReadFileChunkIsAudited() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        let writes = try sandbox.script("fill.lua", "for i = 1, 2 do db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('r', ?)\", i) end")
        let reads = try sandbox.script("look.lua", "print('seen', db.value('SELECT count(*) FROM telemetry'))")
        let terminal = try PseudoTerminal(arguments: ["--db", sandbox.database, "--no-init"], environment: sandbox.environment)
        terminal.expect("opsh> ")
        terminal.send(".read \(reads)\r")
        terminal.expect("seen\t0")
        terminal.expect("opsh> ")
        terminal.send(".read \(writes)\r")
        terminal.expect("committed: telemetry: 2 inserted")
        terminal.expect("opsh> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit(timeout: 15) == 0)
        let rows = try Self.rows(sandbox)
        #expect(rows.count == 1, "\(rows)")
        guard rows.count == 1 else { return }
        #expect(rows[0]["code"] as? String == ".read \(writes)")
        #expect(Self.counts(rows[0], "telemetry") == ["inserted": 2, "updated": 0, "deleted": 0], "\(rows[0])")
    }
}
