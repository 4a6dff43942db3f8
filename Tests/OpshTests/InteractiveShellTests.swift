import Foundation
import Testing

/// The interactive shell through a real pseudo-terminal.
@Suite struct InteractiveShellTests {
    func shell(_ sandbox: Sandbox, _ extra: [String] = []) throws -> PseudoTerminal {
        let terminal = try PseudoTerminal(arguments: ["--db", sandbox.database, "--create"] + extra, environment: sandbox.environment)
        terminal.expect("opsh> ")
        return terminal
    }

    @Test func anExpressionPrintsItsValueAndRowsPrintAsATable() throws {
        let sandbox = try Sandbox()
        let terminal = try shell(sandbox)
        terminal.send("20 + 22\r")
        terminal.expect("42")
        terminal.send("=string.rep('ab', 2)\r")
        terminal.expect("abab")
        terminal.send("db.query(\"SELECT 7 AS id, NULL AS note, 'sk-live-abcdef987654' AS api_key\")\r")
        terminal.expect("│ id │ note │ api_key  │")
        terminal.expect("│  7 │ ∅    │ ••••7654 │")
        terminal.expect("(1 row)")
        terminal.send("{b = {1, 2}, a = 'x'}\r")
        terminal.expect("{ a = \"x\", b = { 1, 2 } }")
        terminal.send("error('boom')\r")
        terminal.expect("stdin:1: boom")
        terminal.expect("opsh> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit() == 0)
    }

    @Test func historyIsKeptWithMode0600AndAMultiLineChunkIsOneEntry() throws {
        let sandbox = try Sandbox()
        let terminal = try shell(sandbox)
        terminal.send("function double(a)\r")
        terminal.expect("  ... ")
        terminal.send("return a * 2\r")
        terminal.expect("  ... ")
        terminal.send("end\r")
        terminal.expect("opsh> ")
        terminal.send("double(21)\r")
        terminal.expect("42")
        terminal.send("double(21)\r")
        terminal.expect("42")
        terminal.expect("opsh> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit() == 0)

        let path = sandbox.root + "/state/opsh/history"
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        let lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n")
        #expect(lines == ["function double(a)\\nreturn a * 2\\nend", "double(21)"])

        // A new shell recalls the chunk as one entry (Up twice, Enter).
        let again = try shell(sandbox)
        again.send("\u{1B}[A\u{1B}[A\r")
        again.expect("opsh> ")
        again.send("double(50)\r")
        again.expect("100")
        again.expect("opsh> ")
        again.send("\u{4}")
        #expect(again.waitForExit() == 0)
    }

    @Test func tabCompletesFieldsQueryKeysAndSQLNames() throws {
        let sandbox = try Sandbox()
        let terminal = try shell(sandbox)
        terminal.send("db.qu\t")
        terminal.expect("db.query")
        terminal.send("(\"SELECT bundleIdent\t")
        terminal.expect("bundleIdentifier")
        terminal.send(" FROM proj\t")
        terminal.expect("projects")
        terminal.send("\")\r")
        terminal.expect("(0 rows)")
        terminal.send("string.fo\t")
        terminal.expect("string.format")
        terminal.send("\u{3}")
        terminal.expect("opsh> ")
        terminal.send("query(\"projects.al\t")
        terminal.expect("projects.all")
        terminal.send("\u{3}")
        terminal.expect("opsh> ")
        terminal.send(".sch\t")
        terminal.expect(".schema")
        terminal.send(" proj\t")
        terminal.expect("projects")
        terminal.send("\r")
        terminal.expect("CREATE TABLE projects")
        terminal.expect("opsh> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit() == 0)
    }

    @Test func ctrlCClearsTheLineAndInterruptsARunningChunk() throws {
        let sandbox = try Sandbox()
        let terminal = try shell(sandbox)
        terminal.send("abc")
        // Once the line editor echoes the text, as a person would see it.
        terminal.expect("abc")
        terminal.send("\u{3}")
        terminal.expect("opsh> ")
        terminal.send("4 + 4\r")
        terminal.expect("8")
        // Interrupted once it runs (it says so; the echo of the line is spelled apart).
        terminal.send("print('spin' .. 'ning') while true do pcall(function() while true do end end) end\r")
        terminal.expect("spinning")
        terminal.send("\u{3}")
        terminal.expect("interrupted")
        terminal.expect("opsh> ")
        terminal.send("5 + 5\r")
        terminal.expect("10")
        terminal.expect("opsh> ")
        terminal.send(".quit\r")
        #expect(terminal.waitForExit() == 0)
    }

    /// A statement waiting for another process's write lock is a running
    /// chunk too: Ctrl-C stops it at once (not after --busy-timeout) and
    /// the shell goes on.
    @Test func ctrlCStopsAChunkWaitingForALock() throws {
        let sandbox = try Sandbox()
        let terminal = try shell(sandbox, ["--busy-timeout", "60"])
        try sandbox.whileAnotherProcessHolds("BEGIN IMMEDIATE;") {
            // Once the chunk runs (it says so right before its statement,
            // which then waits; the echo of the line is spelled apart).
            terminal.send("print('wait' .. 'ing') db.exec(\"DELETE FROM projects\")\r")
            terminal.expect("waiting")
            terminal.send("\u{3}")
            terminal.expect("interrupted")
            terminal.expect("opsh> ")
            terminal.send("6 * 7\r")
            terminal.expect("42")
            terminal.send(".quit\r")
            #expect(terminal.waitForExit() == 0)
        }
    }

    @Test func dotCommands() throws {
        let sandbox = try Sandbox()
        let terminal = try shell(sandbox)
        terminal.send(".tables\r")
        terminal.expect("projects")
        terminal.send(".schema projects\r")
        terminal.expect("CREATE TABLE projects")
        terminal.send(".schema project\r")
        terminal.expect("no table or view named project")
        terminal.send(".mode line\r")
        terminal.send("db.query(\"SELECT 'com.example.app' AS bundleIdentifier, NULL AS note\")\r")
        terminal.expect("-[ RECORD 1 ]")
        terminal.expect("bundleIdentifier | com.example.app")
        terminal.expect("note             | ∅")
        terminal.send(".mode json\r")
        terminal.send("{1, 2}\r")
        terminal.expect("[1,2]")
        // .output: returned values to a file, what the chunk prints still here.
        let results = sandbox.root + "/results.csv"
        terminal.send(".mode csv\r")
        terminal.send(".output \(results)\r")
        terminal.expect("returned values go to \(results)")
        // (Output spelled apart in the input, so that the echo cannot match.)
        terminal.send("print('print' .. 'ed') return db.query(\"SELECT 1 AS a, 'x' AS b\")\r")
        terminal.expect("printed")
        terminal.send(".output\r")
        terminal.send("'ba' .. 'ck'\r")
        terminal.expect("back")
        #expect((try? String(contentsOfFile: results, encoding: .utf8)) == "a,b\n1,x\n")
        terminal.send(".output /nonexistent/folder/x.csv\r")
        terminal.expect("cannot write /nonexistent/folder/x.csv: No such file or directory")
        terminal.send(".mode json\r")
        terminal.send(".timer on\r")
        terminal.send("1\r")
        terminal.expect("Run Time:")
        let script = try sandbox.script("helper.lua", "helper = 'loaded'\n")
        terminal.send(".read \(script)\r")
        terminal.send("helper\r")
        terminal.expect("\"loaded\"")
        terminal.expect("opsh> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit() == 0)
    }

    @Test func theInitFileRunsUnlessNoInit() throws {
        let sandbox = try Sandbox()
        try FileManager.default.createDirectory(atPath: sandbox.root + "/config/opsh", withIntermediateDirectories: true)
        try "greeting = 'from init'\n".write(toFile: sandbox.root + "/config/opsh/init.lua", atomically: true, encoding: .utf8)
        let terminal = try shell(sandbox)
        terminal.send("greeting\r")
        terminal.expect("from init")
        terminal.expect("opsh> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit() == 0)
        let without = try shell(sandbox, ["--no-init"])
        without.send("greeting\r")
        without.expect("nil")
        without.expect("opsh> ")
        without.send("\u{4}")
        #expect(without.waitForExit() == 0)
    }

    // A watch firing while the prompt waits: both engines in
    // ShellOnBothEnginesTests.aWatchPrintsAtThePrompt.

    /// Ctrl-C while a huge result prints stops the printing and the shell
    /// goes on (issue 17, section 4).
    @Test func ctrlCStopsPrintingAHugeResult() throws {
        let sandbox = try Sandbox()
        let terminal = try shell(sandbox)
        terminal.send(".rows all\r")
        terminal.expect("opsh> ")
        terminal.send("r = db.query('WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300000) SELECT i AS id, i * 2 AS twice FROM n')\r")
        terminal.expect("opsh> ", timeout: 60)
        terminal.send("r\r")
        // Once the rows are being printed (row 2,000's twice is not in anything typed).
        terminal.expect("4000", timeout: 60)
        terminal.send("\u{3}")
        terminal.expect("printing stopped by Ctrl-C", timeout: 30)
        terminal.expect("opsh> ")
        terminal.send(".rows 5\r")
        terminal.expect("opsh> ")
        terminal.send("r\r")
        terminal.expect("(showing the first 5 of 300000 rows")
        terminal.expect("opsh> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit(timeout: 15) == 0)
    }
}
