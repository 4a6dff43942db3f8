import Foundation
import Testing

/// `telemetry.cleanup`'s batches are the session's writes on every route:
/// a dry run's summary names what they would delete (it said "no rows
/// would have changed" while the cleanup said 500 deleted: the dry run
/// counts them, without deleting or locking, and the count did not reach
/// the session's summary), and `--max-changes` caps them. The audit
/// row's count is AuditTrailTests.aCleanupStoppedBySIGTERMIsRecordedWithWhatItDeleted.
/// One body, both engines.
@Suite struct TelemetryCleanupCountingTests {
    static let old = 500

    func seeded(_ engine: Engine, in sandbox: Sandbox) throws -> TestDatabase {
        let database = try sandbox.createdDatabase(engine)
        try database.sql(engine == .sqlite
            ? "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < \(Self.old)) INSERT INTO telemetry (event, created_at) SELECT 'old', 1000 + i FROM n"
            : "INSERT INTO telemetry (event, created_at) SELECT 'old', 1000 + i FROM generate_series(1, \(Self.old)) AS i")
        try database.sql("INSERT INTO telemetry (event, created_at) VALUES ('recent', \(Int(Date().timeIntervalSince1970)))")
        return database
    }

    static let cleanup = "local r = telemetry.cleanup{ olderThan = '30d', batch = 100 } print(r.deleted, r.dryRun)"

    /// The dry run's summary names the rows the cleanup's batches would
    /// have deleted, the cleanup says they would have gone (not that they
    /// went), and nothing is deleted. The control: the same run without
    /// --dry-run deletes them.
    @Test(arguments: Engine.allCases) func aDryRunsSummaryCountsWhatTheCleanupWouldHaveDeleted(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try seeded(engine, in: sandbox)
        let dry = try sandbox.opsh(["--dry-run", "-e", Self.cleanup], on: database)
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout == "\(Self.old)\ttrue\n", "\(dry.stdout)")
        #expect(dry.stderr.contains("dry run: rolled back; it would have changed:"), "\(dry.stderr)")
        #expect(dry.stderr.contains("telemetry: 0 inserted, 0 updated, \(Self.old) deleted"), "\(dry.stderr)")
        #expect(dry.stderr.contains("telemetry.cleanup: dry run: \(Self.old) rows would have been deleted"), "\(dry.stderr)")
        #expect(!dry.stderr.contains("no rows would have changed"), "\(dry.stderr)")
        #expect(try database.count("telemetry") == Self.old + 1)

        let real = try sandbox.opsh(["-e", Self.cleanup], on: database)
        #expect(real.status == 0, "\(real.stderr)")
        #expect(real.stdout == "\(Self.old)\tfalse\n", "\(real.stdout)")
        #expect(!real.stderr.contains("would have been deleted"), "\(real.stderr)")
        #expect(try database.count("telemetry") == 1)
    }

    /// A dry run's cleanup counts without deleting, so it takes no write
    /// lock and does not stall the backend: it finishes, naming the rows,
    /// while another process holds the lock the deletion would need
    /// (SQLite's write lock; on PostgreSQL the rows themselves, FOR UPDATE).
    /// The control: the real cleanup under the same lock waits, and gives
    /// up after `--busy-timeout` saying why.
    @Test(arguments: Engine.allCases) func aDryRunsCleanupTakesNoLockTheBackendNeeds(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try seeded(engine, in: sandbox)
        let holder: ChildProcess
        switch engine {
        case .sqlite:
            holder = try sandbox.start("/usr/bin/sqlite3", [database.db], stdin: ".timeout 10000\nBEGIN IMMEDIATE;\n", keepingStdinOpen: true)
            #expect(try waitUntil(10) { (try? database.sql("BEGIN IMMEDIATE; ROLLBACK;")) == nil })
        case .postgresql:
            holder = try sandbox.start(try PostgresServer.shared().tool("psql"), ["-X", "-q", "-d", database.db],
                                       stdin: "BEGIN;\nSELECT count(*) FROM (SELECT id FROM telemetry FOR UPDATE) AS locked;\n", keepingStdinOpen: true)
            #expect(try waitUntil(10) {
                try database.sql("SELECT count(*) FROM pg_locks WHERE relation = 'telemetry'::regclass AND mode = 'RowShareLock' AND granted") == "1"
            })
        }
        defer {
            holder.write("ROLLBACK;\n")
            holder.closeInput()
            _ = sandbox.finish(holder)
        }
        let dry = try sandbox.opsh(["--dry-run", "--busy-timeout", "0.5", "-e", Self.cleanup], on: database)
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout == "\(Self.old)\ttrue\n", "\(dry.stdout)")
        #expect(dry.stderr.contains("telemetry: 0 inserted, 0 updated, \(Self.old) deleted"), "\(dry.stderr)")
        #expect(dry.stderr.contains("no write lock taken"), "\(dry.stderr)")

        let real = try sandbox.opsh(["--busy-timeout", "0.5", "-e", Self.cleanup], on: database)
        #expect(real.status != 0, "\(real.stderr)")
        #expect(real.stderr.contains("lock"), "\(real.stderr)")
        #expect(try database.count("telemetry") == Self.old + 1)
    }

    /// At the prompt the cleanup commits batch by batch outside the chunk's
    /// transaction: its chunk's audit row counts the rows it deleted, and
    /// on SQLite `undo()` of the chunk before it (whose row the cleanup
    /// deleted) refuses to write over the cleanup's change, naming it,
    /// rather than take back around it. (PostgreSQL has no undo().) The
    /// control: undo() of that chunk without the cleanup takes it back.
    @Test(arguments: Engine.allCases) func atThePromptTheCleanupIsAuditedAndNeverUndoneAround(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try seeded(engine, in: sandbox)
        let audited = AuditedDatabase(sandbox: sandbox, database: database)
        let terminal = try audited.shell()
        terminal.expect("> ")
        terminal.send("db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('typed', 2)\")\r")
        terminal.expect("committed: telemetry: 1 inserted")
        terminal.expect("> ")
        terminal.send(Self.cleanup + "\r")
        terminal.expect("\(Self.old + 1)\tfalse")
        terminal.expect("> ")
        #expect(try database.count("telemetry") == 1)
        if engine == .sqlite {
            terminal.send("undo()\r")
            terminal.expect("a row it would change was changed by someone else since")
            terminal.expect("): deleted since")
            terminal.expect("> ")
            #expect(try database.count("telemetry") == 1)
            // The control: a chunk nothing changed since is taken back.
            terminal.send("db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('typed', 3)\")\r")
            terminal.expect("committed: telemetry: 1 inserted")
            terminal.expect("> ")
            terminal.send("undo()\r")
            terminal.expect("> ")
            #expect(waitUntil(10) { (try? database.count("telemetry")) == 1 }, "\(terminal.transcript)")
        }
        terminal.send("\u{4}")
        #expect(terminal.waitForExit(timeout: 60) == 0)
        let rows = try audited.rows()
        let cleanupRow = rows.first { ($0["code"] as? String)?.contains("telemetry.cleanup") == true } ?? [:]
        #expect(AuditTrailTests.counts(cleanupRow, "telemetry") == ["inserted": 0, "updated": 0, "deleted": Self.old + 1], "\(rows)")
    }

    /// `--max-changes` counts the cleanup's batches: over the cap the run
    /// fails, says why, and every row is still there; under it, they go.
    @Test(arguments: Engine.allCases) func maxChangesCapsTheCleanupsBatches(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try seeded(engine, in: sandbox)
        let script = try sandbox.script("cleanup.lua", Self.cleanup)
        let capped = try sandbox.opsh(["run", "--max-changes", "250", script], on: database)
        #expect(capped.status == 1, "\(capped.stderr)")
        #expect(capped.stderr.contains("more than its limit of 250 (--max-changes / maxChanges): rolled back, nothing was kept"), "\(capped.stderr)")
        #expect(try database.count("telemetry") == Self.old + 1)

        let control = try sandbox.opsh(["run", "--max-changes", "1000", script], on: database)
        #expect(control.status == 0, "\(control.stderr)")
        #expect(try database.count("telemetry") == 1)
    }
}
