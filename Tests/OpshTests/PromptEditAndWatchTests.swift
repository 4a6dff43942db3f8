import Foundation
import Testing

/// psql's `\e` and `\watch` at opsh's prompt (issue 26): the last chunk in
/// the editor, run when saved, as a typed chunk (its transaction and
/// note); the last chunk re-run every few seconds until Ctrl-C. One body,
/// both engines.
@Suite struct PromptEditAndWatchTests {
    @Test(arguments: Engine.allCases) func backslashERunsTheEditedChunkWhenSaved(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        // An "editor" that changes the chunk as an operator would.
        var environment = sandbox.environment
        environment["VISUAL"] = "sed -i s/alpha/bravo/"
        let terminal = try PseudoTerminal(arguments: ["--db", database.db], environment: environment)
        terminal.expect("> ")
        terminal.send("INSERT INTO telemetry (event, created_at) VALUES ('alpha', 0);\r")
        terminal.expect("committed: telemetry: 1 inserted")
        terminal.expect("> ")
        terminal.send("\\e\r")
        terminal.expect("committed: telemetry: 1 inserted")
        terminal.expect("> ")
        #expect(try database.count("telemetry", where: "event = 'bravo'") == 1)
        // Control: an editor that saves no change runs nothing.
        terminal.send("1 + 1\r")
        terminal.expect("2")
        terminal.send("\\e\r")
        terminal.expect("unchanged: nothing was run")
        terminal.expect("> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit() == 0)
        #expect(try database.count("telemetry") == 2)
    }

    @Test(arguments: Engine.allCases) func backslashWatchRerunsUntilCtrlC(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let terminal = try PseudoTerminal(arguments: ["--db", database.db], environment: sandbox.environment)
        terminal.expect("> ")
        terminal.send("SELECT count(*) AS n FROM telemetry;\r")
        terminal.expect("> ")
        terminal.send("\\watch 0.2\r")
        terminal.expect("Every 0.2 s: SELECT count(*) AS n FROM telemetry;")
        // Another process's insert shows in a later round.
        try database.sql("INSERT INTO telemetry (event, created_at) VALUES ('w', 0), ('w', 0), ('w', 0)")
        terminal.expect("│ 3 │")
        terminal.send("\u{3}")
        terminal.expect("> ")
        // The prompt works again after Ctrl-C.
        terminal.send("40 + 2\r")
        terminal.expect("42")
        // (Ctrl-D once the prompt is back: typed while a chunk runs, the
        // terminal's cooked mode would take it.)
        terminal.expect("> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit() == 0, "\(terminal.transcript)")
    }
}
