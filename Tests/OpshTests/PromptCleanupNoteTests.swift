import Foundation
import Testing

/// `telemetry.cleanup` typed at the prompt commits batch by batch outside
/// the chunk's transaction, and the chunk itself changes nothing: the
/// shell's "committed: …" note never comes, so the cleanup's own note must
/// name what its batches deleted (before, it said only that they commit as
/// they go). One body, both engines.
@Suite struct PromptCleanupNoteTests {
    @Test(arguments: Engine.allCases) func theCleanupsNoteAtThePromptNamesTheRowsItsBatchesDeleted(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try TelemetryCleanupCountingTests().seeded(engine, in: sandbox)
        let terminal = try sandbox.shell(database)
        terminal.send("telemetry.cleanup{ olderThan = '30d', batch = 100 }\r")
        terminal.expect("each batch is committed as it goes")
        terminal.expect("telemetry.cleanup: \(TelemetryCleanupCountingTests.old) rows deleted in 5 batches, each committed as it went (undo() cannot take them back)", timeout: 10)
        terminal.expect("> ")
        #expect(try database.count("telemetry") == 1)
        terminal.send("\u{4}")
        #expect(terminal.waitForExit(timeout: 60) == 0)

        // The control: in `opsh -e` the batches commit as they go too, and
        // no note is written (the script has the count in its result).
        let script = try sandbox.opsh(["-e", "print(telemetry.cleanup{ olderThan = '30d' }.deleted)"], on: database)
        #expect(script.status == 0, "\(script.stderr)")
        #expect(script.stdout == "0\n")
        #expect(!script.stderr.contains("rows deleted in"), "\(script.stderr)")
    }
}
