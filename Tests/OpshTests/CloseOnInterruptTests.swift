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

    /// A statement that runs until stopped, on either engine.
    static func endless(_ engine: Engine) -> String {
        engine == .sqlite
            ? "db.value('WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c')"
            : "db.value('SELECT pg_sleep(60)')"
    }

    /// SQL in a `<close>` handler after SIGINT stopped a statement: as with
    /// lua.c and psql, the first interrupt stops the statement that runs,
    /// and the handler's own statements run (it releases a lease row that
    /// `opsh run` committed). The control: the script that ends on its own.
    @Test(arguments: Engine.allCases) func aHandlerRunsSQLAfterASignalStoppedAStatement(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        try database.sql("CREATE TABLE leases (name TEXT)")
        // The handler's count is long enough for SQLite's progress handler
        // (every 1,000 instructions), which stopped it at the first interrupt.
        let counted = engine == .sqlite
            ? "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000) SELECT count(*) FROM c"
            : "SELECT count(*) FROM generate_series(1, 100000)"
        let release = """
            db.exec("INSERT INTO leases VALUES ('mine')")
            local lease <close> = setmetatable({}, { __close = function()
              local ok, err = pcall(db.exec, "DELETE FROM leases WHERE name = 'mine'")
              local counted, n = pcall(db.value, "\(counted)")
              io.stderr:write('released: ', tostring(ok), ' ', tostring(err), ' counted: ', tostring(counted), ' ', tostring(n), '\\n')
            end })
            io.stdout:write("started\\n") io.stdout:flush()
            """
        let ends = try sandbox.script("ends.lua", release + "print('done')\n")
        let control = try sandbox.opsh(["run", ends], on: database)
        #expect(control.status == 0, "\(control.stderr)")
        #expect(control.stderr.contains("released: true 1 counted: true 100000"), "\(control.stderr)")
        #expect(try database.count("leases") == 0)

        let stopped = try sandbox.script("stopped.lua", release + Self.endless(engine) + "\n")
        let child = try sandbox.start(opshExecutable, ["run", "--db", database.db, stopped])
        let first = readFirstLine(child.standardOutput)
        #expect(String(decoding: first, as: UTF8.self) == "started\n")
        // Inside the statement on PostgreSQL (the server shows it running);
        // SQLite's runs in this process, where the signal lands in it or
        // just before it: the handler's SQL must run either way.
        if engine == .postgresql {
            #expect(try waitUntil(10) { try database.sql("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'SELECT pg_sleep%' AND state = 'active'") == "1" })
        }
        kill(child.pid, SIGINT)
        let result = child.finish(stdoutPrefix: first)
        #expect(result.status == 130, "\(result.stderr)")
        #expect(result.stderr.contains("released: true 1 counted: true 100000"), "\(result.stderr)")
        #expect(try database.count("leases") == 0, "\(result.stderr)")
    }

    /// The same at the prompt: Ctrl-C stops the chunk's statement, and the
    /// handler's SQL runs (in the chunk's transaction, which Ctrl-C rolls
    /// back: what it reads is what the chunk saw). The control: the chunk
    /// whose block ends on its own.
    @Test(arguments: Engine.allCases) func aHandlerRunsSQLAfterCtrlCStoppedAStatementAtThePrompt(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let terminal = try sandbox.shell(database)
        let handler = "local h <close> = setmetatable({}, { __close = function() print('handler: ' .. tostring(select(2, pcall(db.value, 'SELECT 40 + 2')))) end })"
        terminal.send("do \(handler) print('block ' .. 'ran') end\r")
        terminal.expect("handler: 42")
        terminal.expect("> ")
        terminal.send("do \(handler) print('stat' .. 'ement') \(Self.endless(engine)) end\r")
        terminal.expect("statement")
        if engine == .postgresql {
            #expect(try waitUntil(10) { try database.sql("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'SELECT pg_sleep%' AND state = 'active'") == "1" })
        }
        terminal.send("\u{3}")
        terminal.expect("interrupted")
        terminal.expect("> ")
        #expect(terminal.transcript.components(separatedBy: "handler: 42").count == 3, "\(terminal.transcript)")

        // A handler whose own statement never ends: a second Ctrl-C stops it.
        let endlessHandler = "local h <close> = setmetatable({}, { __close = function() print('clos' .. 'ing') \(Self.endless(engine)) end })"
        terminal.send("do \(endlessHandler) print('stat' .. 'ement') \(Self.endless(engine)) end\r")
        terminal.expect("statement")
        if engine == .postgresql {
            #expect(try waitUntil(10) { try database.sql("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'SELECT pg_sleep%' AND state = 'active'") == "1" })
        }
        terminal.send("\u{3}")
        terminal.expect("closing")
        if engine == .postgresql {
            // The first Ctrl-C's cancel must not reach the handler's own
            // statement (the server signals the backend twice; PostgresWire's
            // CancelFence): before, in about one run in ten under load, it
            // failed "canceling statement due to user request".
            #expect(try waitUntil(10) { try database.sql("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'SELECT pg_sleep%' AND state = 'active'") == "1" },
                    "\(terminal.transcript)")
        }
        terminal.send("\u{3}")
        if !terminal.expect("interrupted", timeout: 10) { Issue.record("transcript: \(terminal.transcript)") }
        terminal.expect("> ")
        terminal.send("print('still' .. ' here')\r")
        terminal.expect("still here")
        terminal.expect("> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit(timeout: 60) == 0, "\(terminal.transcript)")
    }
}
