import Foundation
import Testing

/// The audit trail on a real PostgreSQL server: the same rows as on SQLite
/// (AuditTrailTests' checks, run here on the other engine), the trail's
/// protection, reasons, the shell's chunks, `opsh runs`, and a run that
/// changed nothing not waiting long behind a lock (AuditIntegrityTests).
@Suite struct PostgresAuditTests {
    let server = try! PostgresServer.shared()
    let sandbox = try! Sandbox()

    @Test func runsAndOneLinersAreRecordedAsOnSQLite() throws {
        try AuditTrailTests.recordsRunsAsSQLiteDoes(try .postgres(sandbox, server: server))
    }

    /// Statements outside a transaction, one after another, each counted
    /// once: the reading before a statement is left out only while nothing
    /// else ran on the connection since the last one flushed the counters
    /// (a query between them, a transaction before them, a SELECT of a
    /// function that writes).
    @Test func autocommitStatementsAreEachCountedOnce() throws {
        let database = try AuditedDatabase.postgres(sandbox, server: server)
        _ = try database.sql("""
            CREATE FUNCTION add_event(e text) RETURNS int LANGUAGE sql AS $$
              INSERT INTO telemetry (event, created_at) VALUES (e, 9) RETURNING 1 $$
            """)
        let run = try database.opsh(["-e", """
            db.transaction(function() db.exec("INSERT INTO telemetry (event, created_at) VALUES ('t', 1)") end)
            for i = 1, 3 do db.exec("INSERT INTO telemetry (event, created_at) VALUES ('a', ?)", i) end
            print(db.value("SELECT count(*) FROM telemetry"))
            db.exec("UPDATE telemetry SET event = 'b' WHERE created_at = 1")
            print(db.value("SELECT add_event('f')"))
            db.exec("DELETE FROM telemetry WHERE created_at = 2")
            """])
        #expect(run.status == 0, "\(run.stderr)")
        let rows = try database.rows()
        #expect(rows.count == 1, "\(rows)")
        guard let row = rows.first else { return }
        #expect(AuditTrailTests.counts(row, "telemetry") == ["inserted": 5, "updated": 2, "deleted": 1], "\(row)")
    }

    /// The migration's triggers keep the trail append-only whoever writes;
    /// `audit.prune` is the one way rows leave, never the last day.
    @Test func theTrailIsAppendOnlyAndLeavesOnlyThroughPrune() throws {
        let database = try AuditedDatabase.postgres(sandbox, server: server)
        let old = Date().timeIntervalSince1970 - 100 * 86400
        _ = try database.sql("INSERT INTO opsh_audit (startedAt, endedAt, \"user\", host, pid, version, mode, status) VALUES (\(old), \(old), 'u', 'h', 1, 'v', 'run', 0)")
        let update = try database.opsh(["-e", "db.exec(\"UPDATE opsh_audit SET reason = 'forged'\")"])
        #expect(update.status == 1)
        #expect(update.stderr.contains("opsh_audit is append-only: audit rows cannot be changed"), "\(update.stderr)")
        #expect(throws: (any Error).self) { try database.sql("DELETE FROM opsh_audit") }
        let tooRecent = try database.opsh(["-e", "return audit.prune{ olderThan = '1h' }"])
        #expect(tooRecent.status == 1)
        #expect(tooRecent.stderr.contains("the audit trail keeps at least its last day"), "\(tooRecent.stderr)")
        #expect(try database.sql("SELECT count(*) FROM opsh_audit WHERE startedAt < \(old + 1)") == "1")
        #expect(try database.sql("SELECT count(*) FROM opsh_audit WHERE reason = 'forged'") == "0")

        // Control: prune removes the old row, and only it.
        let before = Int(try database.sql("SELECT count(*) FROM opsh_audit"))!
        let prune = try database.opsh(["-e", "return audit.prune{ olderThan = '90d' }.deleted"])
        #expect(prune.status == 0, "\(prune.stderr)")
        #expect(prune.stdout == "1\n")
        #expect(try database.sql("SELECT count(*) FROM opsh_audit WHERE startedAt < \(old + 1)") == "0")
        #expect(try database.sql("SELECT count(*) FROM opsh_audit") == String(before))  // -1 old, +1 the prune's own row
        // Control: without the trigger the same update lands.
        _ = try database.sql("DROP TRIGGER opsh_audit_no_update ON opsh_audit")
        let unprotected = try database.opsh(["-e", "return (db.exec(\"UPDATE opsh_audit SET reason = 'forged'\"))"])
        #expect(unprotected.status == 0, "\(unprotected.stderr)")
        #expect(unprotected.stdout != "0\n")
    }

    /// `audit.requireReason(true)`: a run without a reason is refused
    /// before its script reads or writes anything; with one it runs and
    /// the reason is recorded.
    @Test func aDatabaseThatAsksForAReasonRefusesARunWithoutOne() throws {
        let database = try AuditedDatabase.postgres(sandbox, server: server)
        let script = try sandbox.script("write.lua", "db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('w', 1)\")\n")
        #expect(try database.opsh(["-e", "audit.requireReason(true)"]).status == 0)
        let refused = try database.opsh(["run", script])
        #expect(refused.status == 2)
        #expect(refused.stderr.contains("this database requires a reason for every run"), "\(refused.stderr)")
        #expect(try database.sql("SELECT count(*) FROM telemetry") == "0")
        // Control: with a reason the same run writes, and is recorded.
        let allowed = try database.opsh(["run", "--reason", "INC-9", script])
        #expect(allowed.status == 0, "\(allowed.stderr)")
        #expect(try database.sql("SELECT count(*) FROM telemetry") == "1")
        #expect(try database.rows().last?["reason"] as? String == "INC-9")
    }

    /// The shell asks for a reason when told to, and records each chunk
    /// that committed changes (not one that only read or failed); a
    /// `--dry-run` session records nothing.
    @Test func theShellRecordsChunksThatCommitted() throws {
        let database = try AuditedDatabase.postgres(sandbox, server: server)
        var environment = sandbox.environment
        environment["OPSH_REQUIRE_REASON"] = "1"
        let terminal = try database.shell(environment: environment)
        terminal.expect("why are you here?")
        terminal.send("INC-7 cleaning up\r")
        terminal.expect("opsh> ")
        terminal.send("projects.count()\r")
        terminal.expect("opsh> ")
        terminal.send("db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('lost', 1)\"); error('no')\r")
        terminal.expect("stdin:1: no")
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
        #expect((rows.first?["code"] as? String)?.contains("'shell'") == true)
        #expect(rows.first.map { AuditTrailTests.counts($0, "telemetry") } == ["inserted": 1, "updated": 0, "deleted": 0])

        // --dry-run: the same kind of chunk leaves no row.
        let dry = try database.shell(["--dry-run"])
        dry.expect("opsh> ")
        dry.send("db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('dry', 2)\")\r")
        dry.expect("dry run: telemetry: 1 inserted")
        dry.expect("opsh> ")
        dry.send("\u{4}")
        #expect(dry.waitForExit(timeout: 15) == 0)
        #expect(try database.rows().count == 1)
        #expect(try database.sql("SELECT count(*) FROM telemetry") == "1")
    }

    /// `opsh runs` lists the trail and finds the script that missed its
    /// period, with the same output as on SQLite.
    @Test func runsListsRunsAndTheOverdueScript() throws {
        let database = try AuditedDatabase.postgres(sandbox, server: server)
        let script = try sandbox.script("every-second.lua", "-- @every 1s\nreturn builds.count()\n")
        #expect(try database.opsh(["run", script]).status == 0)
        let onTime = try database.opsh(["runs", "--overdue", "--grace", "1s"])
        #expect(onTime.status == 0, "\(onTime.stdout) \(onTime.stderr)")
        #expect(onTime.stderr.contains("no script is overdue"))
        let listed = try database.opsh(["runs"])
        #expect(listed.status == 0, "\(listed.stderr)")
        #expect(listed.stdout.hasPrefix("script"), "\(listed.stdout)")
        #expect(listed.stdout.contains("every-second.lua"), "\(listed.stdout)")
        #expect(listed.stdout.contains("none  "), "\(listed.stdout)")

        // The same run on SQLite lists the same line (but for its times).
        let onSQLite = try AuditedDatabase.sqlite(sandbox)
        #expect(try onSQLite.opsh(["run", script]).status == 0)
        let sqliteListed = try onSQLite.opsh(["runs"]).stdout
        func shape(_ text: String) -> String {
            text.replacingOccurrences(of: #"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d  \d+\.\d\d s"#, with: "TIME", options: .regularExpression)
        }
        #expect(shape(listed.stdout) == shape(sqliteListed), "\(listed.stdout)\n\(sqliteListed)")

        usleep(2_600_000)
        let late = try database.opsh(["runs", "--overdue", "--grace", "1s"])
        #expect(late.status == 1, "\(late.stdout) \(late.stderr)")
        #expect(late.stdout.contains("overdue: \(URL(fileURLWithPath: script).resolvingSymlinksInPath().path): its last successful run started"), "\(late.stdout)")
    }

    /// `opsh runs` on a PostgreSQL database without opsh's schema says so
    /// and makes nothing, neither there nor as a file named by the URL.
    @Test func runsOnADatabaseWithoutOpshsSchemaChangesNothing() throws {
        let url = try server.makeDatabase()
        let runs = try sandbox.opsh(["--db", url, "runs"], database: false)
        #expect(runs.status == 3)
        #expect(runs.stderr.contains("has no opsh schema"), "\(runs.stderr)")
        #expect(try server.sql("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'", url: url) == "0")
        let made = try FileManager.default.subpathsOfDirectory(atPath: sandbox.root).filter { $0.contains("postgres") }
        #expect(made.isEmpty, "\(made)")
    }

    // A run that changed nothing beside a lock on the trail: both engines
    // in AuditIntegrityTests.aReadBesideAHeldLockIsSpooledQuietly.
}
