import Foundation
import Testing

/// `os.exit` ends a run the way returning does — the mode's commit or
/// rollback, the dry run's summary, the audit row — and only then does
/// the process exit, with the status the script gave (issue "Every hole
/// found by attack", item 4). One body, both engines.
@Suite struct ExitPathTests {
    static let insertThree = "for i = 1, 3 do db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('exit-path', ?)\", i) end"

    /// Under `--max-changes` the run is one transaction: before, `os.exit`
    /// left the process with it open, and the writes were lost without a
    /// word. Now they are committed as a return commits them.
    @Test(arguments: Engine.allCases) func osExitCommitsAMaxChangesRunAsReturningDoes(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let exited = try sandbox.opsh(["--max-changes", "10", "-e", Self.insertThree + "; os.exit(0)"], on: database)
        #expect(exited.status == 0, "\(exited.stderr)")
        #expect(try database.count("telemetry", where: "event = 'exit-path'") == 3)
        // Past the limit os.exit changes nothing: rolled back, exit 1.
        let over = try sandbox.opsh(["--max-changes", "2", "-e", Self.insertThree + "; os.exit(0)"], on: database)
        #expect(over.status == 1)
        #expect(over.stderr.contains("more than its limit of 2"), "\(over.stderr)")
        #expect(try database.count("telemetry", where: "event = 'exit-path'") == 3)
        // Control: returning commits the same way.
        let returned = try sandbox.opsh(["--max-changes", "10", "-e", Self.insertThree], on: database)
        #expect(returned.status == 0, "\(returned.stderr)")
        #expect(try database.count("telemetry", where: "event = 'exit-path'") == 6)
    }

    /// The status the script gave is the process's, and the audit trail
    /// records the run with it (before, a run that called os.exit left no
    /// row).
    @Test(arguments: Engine.allCases) func osExitLeavesItsAuditRowAndStatus(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let script = try sandbox.script("purge.lua", Self.insertThree + "\nos.exit(4)\nprint('never')\n")
        let run = try sandbox.opsh(["run", script], on: database)
        #expect(run.status == 4, "\(run.stderr)")
        #expect(!run.stdout.contains("never"))
        #expect(try database.count("telemetry", where: "event = 'exit-path'") == 3)
        #expect(try database.sql("SELECT status FROM opsh_audit WHERE mode = 'run'") == "4")
        // true and false, as lua takes them.
        #expect(try sandbox.opsh(["-e", "os.exit(false)"], on: database).status == 1)
        #expect(try sandbox.opsh(["-e", "os.exit(true)"], on: database).status == 0)
    }

    /// A dry run that calls os.exit still says what it would have changed,
    /// and keeps nothing.
    @Test(arguments: Engine.allCases) func osExitInADryRunStillPrintsItsSummary(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let run = try sandbox.opsh(["--dry-run", "-e", Self.insertThree + "; os.exit(0)"], on: database)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stderr.contains("dry run: rolled back; it would have changed:"), "\(run.stderr)")
        #expect(run.stderr.contains("telemetry: 3 inserted"), "\(run.stderr)")
        #expect(try database.count("telemetry") == 0)
    }

    /// A script's pcall cannot catch os.exit, and inside db.transaction the
    /// transaction is rolled back (it never ended), as when a process exits
    /// with one open.
    @Test(arguments: Engine.allCases) func osExitCannotBeCaughtAndLeavesNoHalfTransaction(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let caught = try sandbox.opsh(["-e", "pcall(os.exit, 3); print('went on')"], on: database)
        #expect(caught.status == 3)
        #expect(!caught.stdout.contains("went on"))
        let inTransaction = try sandbox.opsh(["-e", "db.transaction(function() \(Self.insertThree); os.exit(6) end)"], on: database)
        #expect(inTransaction.status == 6, "\(inTransaction.stderr)")
        #expect(try database.count("telemetry") == 0)
        // Control: the same transaction without os.exit commits.
        let committed = try sandbox.opsh(["-e", "db.transaction(function() \(Self.insertThree) end)"], on: database)
        #expect(committed.status == 0, "\(committed.stderr)")
        #expect(try database.count("telemetry") == 3)
    }

    /// At the prompt, os.exit ends the chunk as a chunk ends (committed,
    /// and said), then leaves the shell with the status.
    @Test(arguments: Engine.allCases) func osExitAtThePromptCommitsTheChunkThenLeaves(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let terminal = try PseudoTerminal(arguments: ["--db", database.db], environment: sandbox.environment)
        terminal.expect("> ")
        terminal.send(Self.insertThree + "; os.exit(5)\r")
        terminal.expect("committed: telemetry: 3 inserted")
        #expect(terminal.waitForExit() == 5)
        #expect(try database.count("telemetry", where: "event = 'exit-path'") == 3)
    }
}
