import Foundation
import Testing

/// psql's and sqlite3's habits at opsh's prompt (issue 26): `exit`, `quit`
/// and `\q` leave; `\dt`, `\d [table]`, `\timing` and `\x` are other names
/// of opsh's own dot commands, from the one registry. One body, both
/// engines.
@Suite struct PromptAliasesTests {
    @Test(arguments: Engine.allCases) func exitQuitAndBackslashQLeave(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        for word in ["exit", "quit", "\\q"] {
            let terminal = try sandbox.shell(database)
            terminal.send("\(word)\r")
            #expect(terminal.waitForExit(timeout: 30) == 0, "\(word): \(terminal.transcript)")
            #expect(!terminal.transcript.contains("nil"), "\(word): \(terminal.transcript)")
        }
        // Control: a global of that name is the operator's, and stays Lua.
        let terminal = try sandbox.shell(database)
        terminal.send("exit = 'mine'\r")
        terminal.expect("> ")
        terminal.send("exit\r")
        terminal.expect("mine")
        terminal.expect("> ")
        terminal.send("quit\r")
        #expect(terminal.waitForExit(timeout: 30) == 0, "\(terminal.transcript)")
    }

    @Test(arguments: Engine.allCases) func psqlsBackslashCommandsAreDotCommands(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let terminal = try sandbox.shell(database)
        terminal.send("\\dt\r")
        terminal.expect("telemetry")
        terminal.expect("> ")
        // \d alone lists the tables, as psql lists relations (not every CREATE statement).
        terminal.send("\\d\r")
        terminal.expect("telemetry")
        terminal.expect("> ")
        #expect(!terminal.transcript.contains("CREATE TABLE") && !terminal.transcript.contains("Table \"public."), "\(terminal.transcript)")
        terminal.send("\\d builds\r")
        terminal.expect(engine == .sqlite ? "CREATE TABLE builds" : "Table \"public.builds\"")
        terminal.expect("> ")
        terminal.send("\\d nosuchtable\r")
        terminal.expect("no table or view named nosuchtable")
        terminal.expect("> ")
        terminal.send("\\timing\r")
        terminal.expect("timing is on")
        terminal.send("return 1\r")
        terminal.expect("Run Time: ")
        terminal.expect("> ")
        terminal.send("\\timing off\r")
        terminal.expect("> ")
        // Expanded display: a record at a time, then tables again.
        terminal.send("\\x\r")
        terminal.expect("expanded display is on")
        terminal.send("SELECT 1 AS one, 2 AS two;\r")
        terminal.expect("RECORD 1")
        terminal.expect("> ")
        terminal.send("\\x auto\r")
        terminal.expect("expanded display is auto")
        terminal.send("SELECT 1 AS one, 2 AS two;\r")
        terminal.expect("│ one │ two │")
        terminal.expect("> ")
        terminal.send("\\nosuch\r")
        terminal.expect("unknown command \\nosuch; .help lists them")
        terminal.expect("> ")
        // .help names the aliases beside opsh's own names.
        terminal.send(".help\r")
        terminal.expect("(also .exit, .q, \\q)")
        terminal.expect("> ")
        terminal.send("\\q\r")
        #expect(terminal.waitForExit() == 0)
    }
}
