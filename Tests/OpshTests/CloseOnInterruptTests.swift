import Foundation
import Testing

/// A script's own to-be-closed variables (`local x <close> = setmetatable({},
/// { __close = … })`) are closed when Ctrl-C, SIGINT or SIGTERM stops the
/// chunk, as Lua's own `lua` does at its first Ctrl-C: operators release
/// leases and lock files in them. A second interrupt stops a handler that
/// never ends. Before, the interrupt raised again at the handler's first
/// instruction, so it never ran (host objects' __close already did:
/// ShellOnBothEnginesTests.ctrlCInARowsLoopLeavesNoStatementOpen). Pure
/// Lua, the same on either engine: SQLite's file is the session here.
@Suite struct CloseOnInterruptTests {
    static func exists(_ path: String) -> Bool { FileManager.default.fileExists(atPath: path) }

    /// A lease the handler releases by removing the file.
    static func lease(_ path: String) -> String {
        "local lease <close> = setmetatable({}, { __close = function() os.remove('\(path)') end })"
    }

    @Test func ctrlCAtThePromptClosesAScriptsVariablesAndASecondStopsAHandlerThatLoops() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.sqlite)
        let lease = sandbox.root + "/lease"
        let terminal = try sandbox.shell(database)
        // The control: the block ends, the handler runs.
        try "held".write(toFile: lease, atomically: true, encoding: .utf8)
        terminal.send("do \(Self.lease(lease)) end print('block' .. ' ended')\r")
        terminal.expect("block ended")
        terminal.expect("> ")
        #expect(!Self.exists(lease))

        // Ctrl-C in a loop inside the block: the handler runs as it unwinds.
        try "held".write(toFile: lease, atomically: true, encoding: .utf8)
        terminal.send("do \(Self.lease(lease)) print('hold' .. 'ing') while true do end end\r")
        terminal.expect("holding")
        terminal.send("\u{3}")
        terminal.expect("interrupted")
        terminal.expect("> ")
        #expect(waitUntil(10) { !Self.exists(lease) }, "\(terminal.transcript)")

        // A handler that never ends: the first Ctrl-C lets it run, a second stops it.
        let closing = sandbox.root + "/closing"
        terminal.send("do local x <close> = setmetatable({}, { __close = function() io.open('\(closing)', 'w'):close() while true do end end })"
                      + " print('hold' .. 'ing on') while true do end end\r")
        terminal.expect("holding on")
        terminal.send("\u{3}")
        #expect(waitUntil(10) { Self.exists(closing) }, "\(terminal.transcript)")
        terminal.send("\u{3}")
        terminal.expect("interrupted")
        terminal.expect("> ")
        terminal.send("print('still' .. ' here')\r")
        terminal.expect("still here")
        terminal.expect("> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit(timeout: 60) == 0)
    }

    /// `opsh run` stopped by SIGINT or SIGTERM closes the script's
    /// variables, then exits 130 or 143 (README, exit statuses). The
    /// control: the same script that ends on its own.
    @Test(arguments: [SIGINT, SIGTERM]) func aSignalToARunClosesTheScriptsVariables(_ signal: Int32) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.sqlite)
        let lease = sandbox.root + "/lease"
        try "held".write(toFile: lease, atomically: true, encoding: .utf8)
        let ends = try sandbox.script("ends.lua", "\(Self.lease(lease))\nprint('done')\n")
        let control = try sandbox.opsh(["run", ends], on: database)
        #expect(control.status == 0, "\(control.stderr)")
        #expect(!Self.exists(lease))

        try "held".write(toFile: lease, atomically: true, encoding: .utf8)
        let loops = try sandbox.script("loops.lua", """
            \(Self.lease(lease))
            io.stdout:write("started\\n") io.stdout:flush()
            while true do end
            """)
        let child = try sandbox.start(opshExecutable, ["run", "--db", database.db, loops])
        let first = readFirstLine(child.standardOutput)
        #expect(String(decoding: first, as: UTF8.self) == "started\n")
        kill(child.pid, signal)
        let result = child.finish(stdoutPrefix: first)
        #expect(result.status == (signal == SIGINT ? 130 : 143), "\(result.stderr)")
        #expect(!Self.exists(lease), "\(result.stderr)")
    }

    /// `--timeout` lets the handler run too, and still ends a run whose
    /// handler never ends (its grace period, Deadline): exit 124.
    @Test func aTimeoutRunsTheHandlerAndEndsOneThatNeverEnds() throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(.sqlite)
        let script = try sandbox.script("loops.lua", """
            local x <close> = setmetatable({}, { __close = function() io.stderr:write("closing\\n") while true do end end })
            while true do end
            """)
        let result = try sandbox.opsh(["run", "--timeout", "1", script], on: database)
        #expect(result.status == 124, "\(result.stderr)")
        #expect(result.stderr.contains("closing"), "\(result.stderr)")
    }
}
