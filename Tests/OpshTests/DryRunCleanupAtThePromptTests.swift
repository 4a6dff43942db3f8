import Foundation
import Testing

/// The shell's `--dry-run` with `telemetry.cleanup`, which in a dry run
/// counts the rows it would delete instead of deleting them (the session's
/// `countedInsteadOfChanged`). The shell's dry run is one of three kinds:
/// on SQLite a private copy (chunks commit into it), on SQLite too large to
/// copy a replay (each chunk re-applies the session's earlier changes and
/// is rolled back), on PostgreSQL one transaction spanning the session.
/// Each must cap the chunk with `--max-changes` and report what a real
/// session would have done. One body, both engines (`tooLargeToCopy` only
/// changes SQLite's kind).
@Suite struct DryRunCleanupAtThePromptTests {
    static let old = TelemetryCleanupCountingTests.old
    static let cleanup = TelemetryCleanupCountingTests.cleanup

    func shell(_ sandbox: Sandbox, _ database: TestDatabase, tooLargeToCopy: Bool, _ extra: [String]) throws -> PseudoTerminal {
        var environment = sandbox.environment
        if tooLargeToCopy { environment["OPSH_DRY_RUN_COPY_LIMIT_MB"] = "0" }
        let terminal = try PseudoTerminal(arguments: ["--db", database.db] + extra, environment: environment)
        terminal.expect("> ")
        return terminal
    }

    /// `--max-changes 250` refuses a chunk whose cleanup would delete 500
    /// rows, saying so, as it refuses a chunk whose SQL deletes 300; the
    /// control: under `--max-changes 1000` the same chunk reports the 500.
    @Test(arguments: Engine.allCases, [false, true])
    func maxChangesCapsAShellDryRunsChunks(_ engine: Engine, tooLargeToCopy: Bool) throws {
        let sandbox = try Sandbox()
        let database = try TelemetryCleanupCountingTests().seeded(engine, in: sandbox)
        let capped = try shell(sandbox, database, tooLargeToCopy: tooLargeToCopy, ["--dry-run", "--max-changes", "250"])
        capped.send("db.exec('DELETE FROM telemetry WHERE created_at < 1301')\r")
        capped.expect("the chunk changed 300 rows")
        capped.expect("more than its limit of 250")
        capped.expect("> ")
        capped.send(Self.cleanup + "\r")
        capped.expect("changed \(Self.old) rows")
        capped.expect("more than its limit of 250")
        capped.expect("> ")
        capped.send("\u{4}")
        capped.expect("no rows would have changed")
        #expect(capped.waitForExit(timeout: 60) == 0)
        #expect(try database.count("telemetry") == Self.old + 1)

        let control = try shell(sandbox, database, tooLargeToCopy: tooLargeToCopy, ["--dry-run", "--max-changes", "1000"])
        control.send(Self.cleanup + "\r")
        control.expect("\(Self.old)\ttrue")
        control.expect("telemetry: \(Self.old) deleted")
        control.expect("> ")
        control.send("\u{4}")
        control.expect("telemetry: 0 inserted, 0 updated, \(Self.old) deleted")
        #expect(control.waitForExit(timeout: 60) == 0)
        #expect(try database.count("telemetry") == Self.old + 1)
    }

    /// Two cleanups in one dry-run session: the second finds nothing left,
    /// as in a real session, and the session's summary names the 500 rows
    /// once (not twice, not never). The control: the real session.
    @Test(arguments: Engine.allCases, [false, true])
    func aShellDryRunCountsTheCleanupsRowsOnce(_ engine: Engine, tooLargeToCopy: Bool) throws {
        let sandbox = try Sandbox()
        let database = try TelemetryCleanupCountingTests().seeded(engine, in: sandbox)
        let dry = try shell(sandbox, database, tooLargeToCopy: tooLargeToCopy, ["--dry-run"])
        dry.send(Self.cleanup + "\r")
        dry.expect("\(Self.old)\ttrue")
        dry.expect("> ")
        dry.send(Self.cleanup + "\r")
        dry.expect("\n0\ttrue")
        dry.expect("> ")
        dry.send("\u{4}")
        dry.expect("telemetry: 0 inserted, 0 updated, \(Self.old) deleted")
        #expect(dry.waitForExit(timeout: 60) == 0)
        #expect(try database.count("telemetry") == Self.old + 1)

        let real = try shell(sandbox, database, tooLargeToCopy: tooLargeToCopy, [])
        real.send(Self.cleanup + "\r")
        real.expect("\(Self.old)\tfalse")
        real.expect("> ")
        real.send(Self.cleanup + "\r")
        real.expect("\n0\tfalse")
        real.expect("> ")
        real.send("\u{4}")
        #expect(real.waitForExit(timeout: 60) == 0)
        #expect(try database.count("telemetry") == 1)
    }

    /// `opsh run --dry-run --max-changes` (the batch route): a script's two
    /// cleanups count the 500 rows once, so a cap of 600 holds; the control:
    /// a cap of 250 refuses the dry run, naming its 500 rows.
    @Test(arguments: Engine.allCases) func aDryRunScriptCountsTwoCleanupsOnceUnderItsCap(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try TelemetryCleanupCountingTests().seeded(engine, in: sandbox)
        let script = try sandbox.script("twice.lua", Self.cleanup + "\n" + Self.cleanup)
        let held = try sandbox.opsh(["run", "--dry-run", "--max-changes", "600", script], on: database)
        #expect(held.status == 0, "\(held.stderr)")
        #expect(held.stdout == "\(Self.old)\ttrue\n0\ttrue\n", "\(held.stdout)")
        #expect(held.stderr.contains("telemetry: 0 inserted, 0 updated, \(Self.old) deleted"), "\(held.stderr)")

        let capped = try sandbox.opsh(["run", "--dry-run", "--max-changes", "250", script], on: database)
        #expect(capped.status == 1, "\(capped.stderr)")
        #expect(capped.stderr.contains("the dry run changed \(Self.old) rows"), "\(capped.stderr)")
        #expect(capped.stderr.contains("more than its limit of 250"), "\(capped.stderr)")
        #expect(try database.count("telemetry") == Self.old + 1)
    }

    /// Old rows written between two cleanups of one dry run (an import of
    /// old events): the second cleanup counts them, as a real run's second
    /// cleanup deletes them; it left them out with the first one's rows, so
    /// the dry run said 800 changes where the run makes 1,100, under a cap
    /// of 1,000 the run then exceeds (27v). The control: the real run.
    @Test(arguments: Engine.allCases) func oldRowsWrittenBetweenTwoCleanupsAreCountedByTheSecond(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try TelemetryCleanupCountingTests().seeded(engine, in: sandbox)
        let script = try sandbox.script("import-between.lua", Self.cleanup + "\n" + """
            for i = 1, 300 do db.exec("INSERT INTO telemetry (event, created_at) VALUES ('imported', ?)", 2000 + i) end
            """ + "\n" + Self.cleanup)
        let dry = try sandbox.opsh(["run", "--dry-run", "--max-changes", "1000", script], on: database)
        #expect(dry.status == 1, "\(dry.stderr)")
        #expect(dry.stdout == "\(Self.old)\ttrue\n300\ttrue\n", "\(dry.stdout)")
        #expect(dry.stderr.contains("telemetry: 300 inserted, 0 updated, \(Self.old + 300) deleted"), "\(dry.stderr)")
        #expect(dry.stderr.contains("more than its limit of 1000"), "\(dry.stderr)")
        #expect(try database.count("telemetry") == Self.old + 1)

        let real = try sandbox.opsh(["run", script], on: database)
        #expect(real.status == 0, "\(real.stderr)")
        #expect(real.stdout == "\(Self.old)\tfalse\n300\tfalse\n", "\(real.stdout)")
        #expect(try database.count("telemetry") == 1)
    }
}
