import Foundation
import Testing

/// opsh never pins the WAL (issue 17, section 2): no read snapshot stays
/// open while a script does something else, bulk writes keep the WAL
/// small, and a copy of the database file after opsh exits holds what it
/// committed.
@Suite struct WALTests {
    func walSize(_ sandbox: Sandbox) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: sandbox.database + "-wal"))?[.size] as? Int) ?? 0
    }

    /// Whether another process's `PRAGMA wal_checkpoint(TRUNCATE)` empties
    /// the WAL within `seconds` (tried until it does: no reader pins it),
    /// and what its last try said.
    func checkpointEmptiesTheWAL(_ sandbox: Sandbox, within seconds: Double) throws -> (emptied: Bool, said: String) {
        var said = ""
        let emptied = try waitUntil(seconds) {
            said = try sandbox.sqlite("PRAGMA wal_checkpoint(TRUNCATE)")
            return said.hasPrefix("0|") && walSize(sandbox) == 0
        }
        return (emptied, said)
    }

    @Test func aReadDoesNotPinTheWALWhileTheScriptDoesOtherWork() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        try sandbox.sqlite("INSERT INTO telemetry (event, created_at) VALUES ('a', 1)")
        let script = sandbox.withDatabase(["-e", """
            db.value("SELECT count(*) FROM telemetry")
            io.stdout:write("read\\n") io.stdout:flush()
            local t = os.clock() repeat until os.clock() - t > 2
            """])
        let child = try sandbox.start(opshExecutable, script)
        #expect(String(decoding: readFirstLine(child.standardOutput), as: UTF8.self) == "read\n")
        usleep(300_000)  // longer than the 50 ms a snapshot may be shared
        // Another process writes, then checkpoints the whole WAL away.
        try sandbox.sqlite("INSERT INTO telemetry (event, created_at) VALUES ('b', 2)")
        let checkpoint = try sandbox.sqlite("PRAGMA wal_checkpoint(TRUNCATE)")
        #expect(checkpoint.hasPrefix("0|"), "busy: the checkpoint was blocked by opsh's open read (\(checkpoint))")
        #expect(walSize(sandbox) == 0)
        #expect(child.finish().status == 0)
    }

    /// The snapshot's watchdog ends an expired read from its own thread,
    /// on the read connection the Lua thread uses (opened NOMUTEX; the
    /// reader's lock keeps the two apart, opsh_reader.h): here it does so
    /// in the middle of a `db.rows` loop paused past the window and between
    /// the loop's own point reads. The loop still reads every row of its
    /// snapshot, and once it ends nothing pins the WAL.
    @Test func aRowsLoopPausedPastTheSnapshotWindowReadsItsRowsAndThenFreesTheWAL() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        _ = try sandbox.sqlite("""
            WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300)
            INSERT INTO telemetry (event, created_at) SELECT 'a', x FROM c
            """)
        let script = sandbox.withDatabase(["-e", """
            local n, sum = 0, 0
            for row in db.rows("SELECT created_at FROM telemetry ORDER BY id") do
              n = n + 1
              sum = sum + math.tointeger(row.created_at)
              if n % 100 == 0 then
                local t = os.clock() repeat until os.clock() - t > 0.12
                for i = 1, 20 do assert(db.value("SELECT count(*) FROM telemetry WHERE event = 'a'") == 300) end
              end
            end
            io.stdout:write(string.format("%d %d\\n", n, sum)) io.stdout:flush()
            local t = os.clock() repeat until os.clock() - t > 5
            """])
        let child = try sandbox.start(opshExecutable, script)
        #expect(String(decoding: readFirstLine(child.standardOutput), as: UTF8.self) == "300 45150\n")
        // Another process writes, then checkpoints the whole WAL away while
        // the script works on: it can once opsh's last snapshot has ended.
        _ = try sandbox.sqlite("INSERT INTO telemetry (event, created_at) VALUES ('b', 2)")
        let checkpoint = try checkpointEmptiesTheWAL(sandbox, within: 4)
        #expect(checkpoint.emptied, "the checkpoint was blocked by opsh's open read (\(checkpoint.said))")
        #expect(child.finish().status == 0)
    }

    /// While a `db.rows` statement is open on the read connection, the
    /// watchdog leaves the connection alone (the loop steps without the
    /// reader's lock, opsh_reader.h); every way of leaving a loop early
    /// gives the connection back, so the expired snapshot still ends and
    /// nothing pins the WAL while the script works on.
    @Test(arguments: [
        "for row in db.rows(sql) do break end",
        "pcall(function() for row in db.rows(sql) do error('stop') end end)",
        "local next, shape, _, cursor = db.rows(sql) next(shape) cursor:close()",
        "do local next, shape = db.rows(sql) next(shape) end collectgarbage() collectgarbage()",
    ])
    func aRowsLoopLeftEarlyDoesNotPinTheWAL(_ leaving: String) throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        _ = try sandbox.sqlite("""
            WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100)
            INSERT INTO telemetry (event, created_at) SELECT 'a', x FROM c
            """)
        let script = sandbox.withDatabase(["-e", """
            local sql = "SELECT created_at FROM telemetry"
            \(leaving)
            io.stdout:write("left\\n") io.stdout:flush()
            local t = os.clock() repeat until os.clock() - t > 5
            """])
        let child = try sandbox.start(opshExecutable, script)
        #expect(String(decoding: readFirstLine(child.standardOutput), as: UTF8.self) == "left\n", "\(leaving)")
        _ = try sandbox.sqlite("INSERT INTO telemetry (event, created_at) VALUES ('b', 2)")
        let checkpoint = try checkpointEmptiesTheWAL(sandbox, within: 4)
        #expect(checkpoint.emptied, "\(leaving): the checkpoint was blocked by opsh's open read (\(checkpoint.said))")
        #expect(child.finish().status == 0)
    }

    /// A shell idle at its prompt after key reads (`query(key…)`, a route
    /// of their own since issue 27) and repository reads holds no
    /// snapshot: another process's writes are checkpointed whole, again and
    /// again, so the WAL does not grow while the operator looks away.
    @Test func keyReadsAtThePromptDoNotPinTheWAL() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        _ = try sandbox.sqlite("""
            INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt) VALUES ('a', 'App', 'App', '/r', 1);
            INSERT INTO schemes (id, projectBundleIdentifier, name, "order") VALUES ('s1', 'a', 'Release', 0);
            INSERT INTO builds (id, schemeId, versionString, buildNumber, createdAt) VALUES ('b1', 's1', '1.0', 1, 2);
            """)
        let terminal = try PseudoTerminal(arguments: ["--db", sandbox.database], environment: sandbox.environment)
        terminal.expect("opsh> ")
        terminal.send("print(query(key.build('b1')).status, #query(key.project('a').latestBuilds(5)), #builds.list(), 'read' .. 'done')\r")
        terminal.expect("readdone")
        terminal.expect("opsh> ")
        for round in 1...3 {
            _ = try sandbox.sqlite("INSERT INTO telemetry (event, created_at) VALUES ('w', \(round))")
            let checkpoint = try checkpointEmptiesTheWAL(sandbox, within: 5)
            #expect(checkpoint.emptied, "round \(round): the checkpoint was blocked by the idle shell (\(checkpoint.said))")
        }
        // And the next key read sees those commits.
        terminal.send("print('count ' .. query(key.telemetry.counts).w)\r")
        terminal.expect("count 3")
        // At the prompt: a Ctrl-D typed while the line still runs is the
        // terminal's end of input in canonical mode, which readline's raw
        // mode does not get.
        terminal.expect("opsh> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit(timeout: 60) == 0)
    }

    @Test func insertsAfterAReadKeepTheWALSmall() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        let result = try sandbox.opsh(["-e", """
            db.value("SELECT count(*) FROM builds")
            for i = 1, 5000 do db.exec("INSERT INTO telemetry (event, created_at) VALUES (?, ?)", string.rep("x", 200), i) end
            """])
        #expect(result.status == 0, "\(result.stderr)")
        // SQLite checkpoints every 1,000 pages (4 MB) once nothing pins the WAL.
        #expect(walSize(sandbox) < 6 << 20, "WAL of \(walSize(sandbox)) bytes after 5,000 inserts")
    }

    @Test func aCopyOfTheFileAfterOpshExitsHoldsWhatItCommitted() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        // Another process keeps the database open (reading nothing), so the
        // WAL is not checkpointed and removed at the last close.
        let other = try sandbox.start("/usr/bin/sqlite3", [sandbox.database], stdin: "SELECT 1;\n", keepingStdinOpen: true)
        defer {
            other.closeInput()
            _ = other.finish()
        }
        #expect(waitUntil(30) { processHasOpen(other.pid, sandbox.database) })
        let result = try sandbox.opsh(["-e", "for i = 1, 100 do db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('kept', ?)\", i) end"])
        #expect(result.status == 0, "\(result.stderr)")
        let copy = sandbox.root + "/copy.sqlite"
        try FileManager.default.copyItem(atPath: sandbox.database, toPath: copy)
        #expect(try sqlite3CLI(copy, "SELECT count(*) FROM telemetry WHERE event = 'kept'") == "100")
    }
}
