import Foundation
import Testing

/// The audit trail (issue 16, "A trail of who did what"), the reasons, the
/// dead man's switch for cron and the lock-owner records: real opsh
/// processes on real SQLite files, the shell through a real pty.
/// One database the audit tests run opsh on, whatever its engine
/// (``TestDatabase``), with the trail read back as JSON.
struct AuditedDatabase {
    let sandbox: Sandbox
    let database: TestDatabase

    init(sandbox: Sandbox, database: TestDatabase) {
        self.sandbox = sandbox
        self.database = database
    }

    /// A new database of `engine` with opsh's schema.
    init(_ engine: Engine, in sandbox: Sandbox) throws {
        self.sandbox = sandbox
        database = try sandbox.createdDatabase(engine)
    }

    /// `--db` and its value.
    var arguments: [String] { ["--db", database.db] }

    /// Runs SQL on it from another process (sqlite3, psql).
    @discardableResult
    func sql(_ text: String) throws -> String { try database.sql(text) }

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
    /// The audit rows of the sandbox's SQLite file, as JSON objects, oldest first.
    static func rows(_ sandbox: Sandbox) throws -> [[String: Any]] {
        try AuditedDatabase(sandbox: sandbox, database: TestDatabase(engine: .sqlite, db: sandbox.database)).rows()
    }

    static func counts(_ row: [String: Any], _ table: String) -> [String: Int] {
        ((row["changes"] as? [String: Any])?[table] as? [String: Int]) ?? [:]
    }

    /// What `opsh run` and `opsh -e` leave in the trail: a dry run (with
    /// what it reports), a success (rows per table, a nested transaction
    /// that rolled back not counted), a failure (what it committed before
    /// failing), a one-liner (its code, the API key masked); nothing for a
    /// one-liner that never used the database nor for `--read-only`.
    @Test(arguments: Engine.allCases) func successFailureDryRunAndOneLinerAreRecordedAndReadOnlyIsNot(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try AuditedDatabase(engine, in: sandbox)
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

    /// Statements outside a transaction, one after another, each counted
    /// once: the reading before a statement is left out only while nothing
    /// else ran on the connection since the last one flushed the counters
    /// (a query between them, a transaction before them, a read that
    /// writes: on PostgreSQL a SELECT of a function that inserts, on
    /// SQLite, which has no such functions, an INSERT … RETURNING read as
    /// a value).
    /// A run whose results could not be written (stdout on a full disk)
    /// exits 1, and its row says so: it failed, with what it committed.
    /// The control: the same run with stdout to /dev/null is a success.
    @Test(arguments: Engine.allCases) func aRunWhoseOutputWasLostIsRecordedAsFailed(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try AuditedDatabase(engine, in: sandbox)
        let code = "db.exec(\"INSERT INTO telemetry (event, properties, created_at) VALUES ('e', '{}', 1)\") print('written')"
        for target in ["/dev/full", "/dev/null"] {
            let shell = "exec \"$0\" --db \"$1\" -e \"$2\" > \(target)"
            let result = try ChildProcess.start("/bin/sh", ["-c", shell, opshExecutable, database.database.db, code],
                                                environment: sandbox.environment).finish()
            #expect(result.status == (target == "/dev/full" ? 1 : 0), "\(target): \(result.stderr)")
            if target == "/dev/full" {
                #expect(result.stderr.components(separatedBy: "cannot write standard output").count == 2,
                        "said once: \(result.stderr)")
            }
        }
        let rows = try database.rows()
        #expect(rows.count == 2, "\(rows)")
        guard rows.count == 2 else { return }
        #expect(rows[0]["status"] as? Int == 1, "\(rows[0])")
        #expect(Self.counts(rows[0], "telemetry") == ["inserted": 1, "updated": 0, "deleted": 0], "\(rows[0])")
        #expect(rows[1]["status"] as? Int == 0, "\(rows[1])")
    }

    @Test(arguments: Engine.allCases) func autocommitStatementsAreEachCountedOnce(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try AuditedDatabase(engine, in: sandbox)
        let writingRead: String
        switch engine {
        case .sqlite:
            writingRead = "INSERT INTO telemetry (event, created_at) VALUES ('f', 9) RETURNING 1"
        case .postgresql:
            try database.sql("""
                CREATE FUNCTION add_event(e text) RETURNS int LANGUAGE sql AS $$
                  INSERT INTO telemetry (event, created_at) VALUES (e, 9) RETURNING 1 $$
                """)
            writingRead = "SELECT add_event('f')"
        }
        let run = try database.opsh(["-e", """
            db.transaction(function() db.exec("INSERT INTO telemetry (event, created_at) VALUES ('t', 1)") end)
            for i = 1, 3 do db.exec("INSERT INTO telemetry (event, created_at) VALUES ('a', ?)", i) end
            print(db.value("SELECT count(*) FROM telemetry"))
            db.exec("UPDATE telemetry SET event = 'b' WHERE created_at = 1")
            print(db.value("\(writingRead)"))
            db.exec("DELETE FROM telemetry WHERE created_at = 2")
            """])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == "4\n1\n")
        let rows = try database.rows()
        #expect(rows.count == 1, "\(rows)")
        guard let row = rows.first else { return }
        #expect(Self.counts(row, "telemetry") == ["inserted": 5, "updated": 2, "deleted": 1], "\(row)")
    }

    /// The migration's triggers keep the trail append-only whoever writes:
    /// an update from a script and a delete from another client are
    /// refused; `audit.prune` is the one way rows leave, never the last day.
    @Test(arguments: Engine.allCases) func auditRowsCannotBeChangedAndLeaveOnlyThroughPrune(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try AuditedDatabase(engine, in: sandbox)
        #expect(try database.opsh(["-e", "return db.value('SELECT 1')"]).status == 0)
        // An old row (inserting is allowed: the trail only grows).
        let old = Date().timeIntervalSince1970 - 100 * 86400
        try database.sql("INSERT INTO opsh_audit (startedAt, endedAt, \"user\", host, pid, version, mode, status) VALUES (\(old), \(old), 'u', 'h', 1, 'v', 'run', 0)")
        #expect(try database.sql("SELECT count(*) FROM opsh_audit") == "2")

        // Refused by the engine, whoever writes: an update, and a delete.
        let update = try database.opsh(["-e", "db.exec(\"UPDATE opsh_audit SET reason = 'forged'\")"])
        #expect(update.status == 1)
        #expect(update.stderr.contains("opsh_audit is append-only: audit rows cannot be changed"), "\(update.stderr)")
        let delete = #expect(throws: ShellError.self) { try database.sql("DELETE FROM opsh_audit") }
        #expect(delete?.output.contains("opsh_audit rows leave only through audit.prune") == true, "\(String(describing: delete))")
        let tooRecent = try database.opsh(["-e", "return audit.prune{ olderThan = '1h' }"])
        #expect(tooRecent.status == 1)
        #expect(tooRecent.stderr.contains("the audit trail keeps at least its last day"), "\(tooRecent.stderr)")
        // Nothing left or changed (the refused attempts are rows of their own).
        #expect(try database.sql("SELECT count(*) FROM opsh_audit WHERE startedAt < \(old + 1)") == "1")
        #expect(try database.sql("SELECT count(*) FROM opsh_audit WHERE reason = 'forged'") == "0")
        let before = try database.sql("SELECT count(*) FROM opsh_audit")

        // Control: prune removes the old row (and only it).
        let prune = try database.opsh(["-e", "return audit.prune{ olderThan = '90d' }.deleted"])
        #expect(prune.status == 0, "\(prune.stderr)")
        #expect(prune.stdout == "1\n")
        #expect(try database.sql("SELECT count(*) FROM opsh_audit WHERE startedAt < \(old + 1)") == "0")
        #expect(try database.sql("SELECT count(*) FROM opsh_audit") == before)  // -1 old, +1 the prune's own row
        #expect(try database.sql("SELECT count(*) FROM opsh_audit_prune") == "0")
        // Control: without the trigger the same update lands.
        try database.sql(engine == .sqlite ? "DROP TRIGGER opsh_audit_no_update" : "DROP TRIGGER opsh_audit_no_update ON opsh_audit")
        let unprotected = try database.opsh(["-e", "return (db.exec(\"UPDATE opsh_audit SET reason = 'forged'\"))"])
        #expect(unprotected.status == 0, "\(unprotected.stderr)")
        #expect(unprotected.stdout != "0\n")
    }

    /// A reason asked for by the environment (`OPSH_REQUIRE_REASON=1`) or
    /// by the database's own setting (`audit.requireReason(true)`): a run
    /// without one is refused before its script reads or writes anything;
    /// with one (`--reason`, `OPSH_REASON`) it runs and the reason is
    /// recorded.
    @Test(arguments: Engine.allCases) func reasonsAreRecordedAndRequiredWhenAskedFor(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try AuditedDatabase(engine, in: sandbox)
        let script = try sandbox.script("write.lua", "db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('w', 1)\")\n")
        var environment = sandbox.environment
        environment["OPSH_REQUIRE_REASON"] = "1"

        let refused = try database.opsh(["run", script], environment: environment)
        #expect(refused.status == 2)
        #expect(refused.stderr.contains("a reason is required (OPSH_REQUIRE_REASON=1): run again with --reason TEXT"), "\(refused.stderr)")
        #expect(refused.stdout.isEmpty)
        #expect(try database.sql("SELECT count(*) FROM telemetry") == "0")
        // Control: with a reason it runs, and the reason is recorded.
        let allowed = try database.opsh(["run", "--reason", "INC-42 stuck builds", script], environment: environment)
        #expect(allowed.status == 0, "\(allowed.stderr)")
        environment["OPSH_REASON"] = "from the environment"
        let fromEnvironment = try database.opsh(["-e", "return projects.count()"], environment: environment)
        #expect(fromEnvironment.status == 0, "\(fromEnvironment.stderr)")
        let reasons = try database.rows().compactMap { $0["reason"] as? String }
        #expect(reasons == ["INC-42 stuck builds", "from the environment"])

        // The database's own setting: a run without a reason is refused at
        // its first use of the database, having written nothing; with one it runs.
        #expect(try database.opsh(["-e", "audit.requireReason(true)"]).status == 0)
        let bySetting = try database.opsh(["run", script])
        #expect(bySetting.status == 2)
        #expect(bySetting.stderr.contains("this database requires a reason for every run"), "\(bySetting.stderr)")
        #expect(try database.sql("SELECT count(*) FROM telemetry") == "1")
        let withReason = try database.opsh(["run", "--reason", "INC-9", script])
        #expect(withReason.status == 0, "\(withReason.stderr)")
        #expect(try database.sql("SELECT count(*) FROM telemetry") == "2")
        #expect(try database.rows().last?["reason"] as? String == "INC-9")
    }

    /// The shell asks for a reason when told to (and does not start
    /// without one), and records each chunk that committed changes (not
    /// one that only read or failed); a `--dry-run` session records nothing.
    @Test(arguments: Engine.allCases) func theShellAsksForAReasonAndAuditsChunksThatChangeData(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try AuditedDatabase(engine, in: sandbox)
        var environment = sandbox.environment
        environment["OPSH_REQUIRE_REASON"] = "1"
        // Refused without an answer.
        let refused = try database.shell(environment: environment)
        refused.expect("why are you here?")
        refused.send("\r")
        refused.expect("no reason given: the shell does not start without one")
        #expect(refused.waitForExit(timeout: 10) == 2)

        let terminal = try database.shell(environment: environment)
        terminal.expect("why are you here?")
        terminal.send("INC-7 cleaning up\r")
        terminal.expect("opsh> ")
        terminal.send("projects.count()\r")          // reads only: not recorded
        terminal.expect("opsh> ")
        terminal.send("db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('lost', 1)\"); error('no')\r")
        terminal.expect("stdin:1: no")               // failed: rolled back, not recorded
        terminal.expect("opsh> ")
        terminal.send("db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('shell', 1)\"); pcall(db.exec, 'DELETE FROM nope')\r")
        terminal.expect("committed: telemetry: 1 inserted")
        terminal.expect("opsh> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit(timeout: 15) == 0)
        let rows = try database.rows()
        #expect(rows.count == 1, "\(rows)")
        #expect(rows.first?["mode"] as? String == "shell")
        #expect(rows.first?["reason"] as? String == "INC-7 cleaning up")
        #expect((rows.first?["code"] as? String)?.contains("INSERT INTO telemetry") == true)
        #expect((rows.first?["code"] as? String)?.contains("'shell'") == true)
        #expect(rows.first.map { Self.counts($0, "telemetry") } == ["inserted": 1, "updated": 0, "deleted": 0])

        // --dry-run: the same kind of chunk leaves no row.
        let dry = try database.shell(["--dry-run"])
        dry.expect("opsh> ")
        dry.send("db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('dry', 2)\")\r")
        dry.expect("dry run")   // SQLite's: "dry run (on the private copy): telemetry: …"
        dry.expect("telemetry: 1 inserted")
        dry.expect("opsh> ")
        dry.send("\u{4}")
        #expect(dry.waitForExit(timeout: 15) == 0)
        #expect(try database.rows().count == 1)
        #expect(try database.sql("SELECT count(*) FROM telemetry") == "1")
    }

    /// `opsh runs` lists the trail (the same columns on both engines) and
    /// `--overdue` names a script that missed its period.
    @Test(arguments: Engine.allCases) func overdueNamesAScriptThatMissedItsPeriod(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try AuditedDatabase(engine, in: sandbox)
        let script = try sandbox.script("every-second.lua", "-- mark stale builds\n-- @every 1s\nreturn builds.count()\n")
        let path = URL(fileURLWithPath: script).resolvingSymlinksInPath().path
        #expect(try database.opsh(["run", script]).status == 0)
        // On time: just ran.
        let onTime = try database.opsh(["runs", "--overdue", "--grace", "1s"])
        #expect(onTime.status == 0, "\(onTime.stdout) \(onTime.stderr)")
        #expect(onTime.stderr.contains("no script is overdue"))
        let listed = try database.opsh(["runs"])
        #expect(listed.status == 0, "\(listed.stderr)")
        // The columns, with the run's time and duration left out.
        let shape = listed.stdout
            .replacingOccurrences(of: #"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d  \d+\.\d\d s"#, with: "TIME", options: .regularExpression)
            .replacingOccurrences(of: " {2,}", with: "  ", options: .regularExpression)
        #expect(shape == "script  started (UTC)  duration  changes  status\n\(path)  TIME  none  0\n", "\(listed.stdout)")
        // Missed once its period (1 s) and the grace (1 s) have passed.
        var late = onTime
        #expect(try waitUntil(30) {
            late = try database.opsh(["runs", "--overdue", "--grace", "1s"])
            return late.status == 1
        }, "\(late.stdout) \(late.stderr)")
        #expect(late.stdout.contains("overdue: \(path): its last successful run started"), "\(late.stdout)")
        // The default grace (10 % of the period, at least a minute) still allows it.
        #expect(try database.opsh(["runs", "--overdue"]).status == 0)
        // Bad input says what was wrong.
        let bad = try database.opsh(["runs", "--overdue", "--grace", "soon"])
        #expect(bad.status == 2)
        #expect(bad.stderr.contains("'soon' is not a duration"), "\(bad.stderr)")
        let badPeriod = try database.opsh(["run", try sandbox.script("typo.lua", "-- @every 10x\nreturn 1\n")])
        #expect(badPeriod.status == 2)
        #expect(badPeriod.stderr.contains("is not a period"), "\(badPeriod.stderr)")
    }

    /// A script with a period is recorded even when it never touches the
    /// database (it only prints), so that `--overdue` can miss it; the same
    /// script without the period is not recorded (the control).
    @Test(arguments: Engine.allCases) func aScriptWithAPeriodIsRecordedEvenWhenItOnlyPrints(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try AuditedDatabase(engine, in: sandbox)
        let unscheduled = try sandbox.script("prints.lua", "print('only prints')\n")
        #expect(try database.opsh(["run", unscheduled]).stdout == "only prints\n")
        #expect(try database.opsh(["runs"]).stdout.contains("prints.lua") == false)
        let scheduled = try sandbox.script("heartbeat.lua", "-- @every 1s\nprint('only prints')\n")
        let path = URL(fileURLWithPath: scheduled).resolvingSymlinksInPath().path
        #expect(try database.opsh(["run", scheduled]).stdout == "only prints\n")
        let listed = try database.opsh(["runs"])
        #expect(listed.stdout.contains(path), "\(listed.stdout) \(listed.stderr)")
        #expect(listed.stdout.contains("prints.lua") == false, "\(listed.stdout)")
        var late = listed
        #expect(try waitUntil(30) {
            late = try database.opsh(["runs", "--overdue", "--grace", "1s"])
            return late.status == 1
        }, "\(late.stdout) \(late.stderr)")
        #expect(late.stdout.contains("overdue: \(path)"), "\(late.stdout)")
    }

    /// `opsh runs` on a database that is not opsh's says so and makes
    /// nothing: no SQLite file at the path, no table on the server, and no
    /// file named by a URL.
    @Test(arguments: Engine.allCases) func runsOnADatabaseWithoutOpshsSchemaChangesNothing(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try TestDatabase.empty(engine, in: sandbox.root)
        let runs = try sandbox.run(opshExecutable, ["runs", "--db", db.db])
        #expect(runs.status == 3)
        switch engine {
        case .sqlite:
            #expect(runs.stderr.contains("no database at \(db.db)"), "\(runs.stderr)")
            #expect(!FileManager.default.fileExists(atPath: db.db))
        case .postgresql:
            #expect(runs.stderr.contains("has no opsh schema"), "\(runs.stderr)")
            #expect(try db.count("pg_tables", where: "schemaname = 'public'") == 0)
            let made = try FileManager.default.subpathsOfDirectory(atPath: sandbox.root).filter { $0.contains("postgres") }
            #expect(made.isEmpty, "\(made)")
        }
    }

    /// SQLite only: the write lock is the file's, and the other opsh that
    /// holds it is named from the lock-owner record opsh keeps beside it
    /// (on PostgreSQL the server names the lock's holders:
    /// TransactionControlTests.aLockHeldPastTheBusyTimeoutExitsThreeNamingItsHolder).
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

    /// SQLite only: a file from before migration 003 is opened as it is
    /// (a PostgreSQL database gets opsh's whole schema with --create, and
    /// opsh has never made one without the trail).
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

    /// Batched writes are counted: `telemetry.insertMany` (on SQLite
    /// stepped through its C API, on PostgreSQL one COPY) and an
    /// import's rows; a rolled-back batch is not.
    @Test(arguments: Engine.allCases) func batchedInsertsAreCounted(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try AuditedDatabase(engine, in: sandbox)
        let run = try database.opsh(["-e", """
            telemetry.insertMany{ { event = "a", created_at = 1 }, { event = "b", created_at = 2 }, { event = "c", created_at = 3 } }
            pcall(db.transaction, function() telemetry.insertMany{ { event = "d", created_at = 4 } } error("no") end)
            """])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(try database.sql("SELECT count(*) FROM telemetry") == "3")
        let rows = try database.rows()
        #expect(rows.last.map { Self.counts($0, "telemetry") } == ["inserted": 3, "updated": 0, "deleted": 0], "\(rows)")

        // An import's rows too.
        let document = sandbox.root + "/app.json"
        let exported = try database.opsh(["-e", """
            projects.insert{ bundleIdentifier = "com.example.app", name = "App", gitRepositoryURL = "/srv/app" }
            export.project("com.example.app", { file = "\(document)" })
            projects.delete("com.example.app", { cascade = true })
            """])
        #expect(exported.status == 0, "\(exported.stderr)")
        let imported = try database.opsh(["-e", "import{ file = '\(document)' }"])
        #expect(imported.status == 0, "\(imported.stderr)")
        #expect(try database.rows().last.map { Self.counts($0, "projects") } == ["inserted": 1, "updated": 0, "deleted": 0])
    }

    /// A chunk committed after the question (re-applied from its changeset)
    /// and an undo (a changeset applied) are audited with their counts.
    /// SQLite only: undo() applies SQLite's changesets (on PostgreSQL it
    /// says why not: BatchModeTests.errorsSayWhereAndWhat).
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
    @Test(arguments: Engine.allCases) func aReadFileChunkIsAudited(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try AuditedDatabase(engine, in: sandbox)
        let writes = try sandbox.script("fill.lua", "for i = 1, 2 do db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('r', ?)\", i) end")
        let reads = try sandbox.script("look.lua", "print('seen', db.value('SELECT count(*) FROM telemetry'))")
        let terminal = try database.shell()
        terminal.expect("opsh> ")
        terminal.send(".read \(reads)\r")
        terminal.expect("seen\t0")
        terminal.expect("opsh> ")
        terminal.send(".read \(writes)\r")
        terminal.expect("committed: telemetry: 2 inserted")
        terminal.expect("opsh> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit(timeout: 15) == 0)
        let rows = try database.rows()
        #expect(rows.count == 1, "\(rows)")
        guard rows.count == 1 else { return }
        #expect(rows[0]["code"] as? String == ".read \(writes)")
        #expect(Self.counts(rows[0], "telemetry") == ["inserted": 2, "updated": 0, "deleted": 0], "\(rows[0])")
    }

    /// `telemetry.cleanup` stopped by SIGTERM between its batches (on
    /// SQLite paced by BatchPacing, issue 27): the run exits 143, says how
    /// many rows its committed batches deleted, and its audit row counts
    /// exactly the rows that are gone. Recent rows are untouched.
    @Test(arguments: Engine.allCases) func aCleanupStoppedBySIGTERMIsRecordedWithWhatItDeleted(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try AuditedDatabase(engine, in: sandbox)
        let old = 300_000
        try database.database.sql(engine == .sqlite
            ? "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < \(old)) INSERT INTO telemetry (event, created_at) SELECT 'old', 1000 + i FROM n"
            : "INSERT INTO telemetry (event, created_at) SELECT 'old', 1000 + i FROM generate_series(1, \(old)) AS i")
        try database.database.sql("INSERT INTO telemetry (event, created_at) VALUES ('recent', \(Int(Date().timeIntervalSince1970)))")
        let script = try sandbox.script("cleanup.lua", """
            io.stdout:write("started\\n") io.stdout:flush()
            telemetry.cleanup{ olderThan = "30d" }
            """)
        let child = try sandbox.start(opshExecutable, ["run", "--db", database.database.db, "--no-lock", script])
        let first = readFirstLine(child.standardOutput)
        #expect(String(decoding: first, as: UTF8.self) == "started\n")
        // Once some batches have committed, and before the last.
        let midway = waitUntil(60) { ((try? database.database.count("telemetry", where: "event = 'old'")) ?? old) < old }
        #expect(midway)
        kill(child.pid, SIGTERM)
        let result = child.finish(stdoutPrefix: first)
        let left = try database.database.count("telemetry", where: "event = 'old'")
        #expect(try database.database.count("telemetry", where: "event = 'recent'") == 1)
        if left == 0 { return }  // (the cleanup ended before the signal: nothing to check)
        #expect(result.status == 143, "\(result.stderr)")
        #expect(result.stderr.contains("telemetry.cleanup interrupted: \(old - left) rows deleted"), "\(result.stderr) (\(old - left) deleted)")
        let row = try database.rows().last ?? [:]
        #expect(row["status"] as? Int == 143, "\(row)")
        #expect(Self.counts(row, "telemetry")["deleted"] == old - left, "\(row) (\(old - left) deleted)")
    }
}
