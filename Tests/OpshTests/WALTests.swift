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

    /// A table of every type SQLite stores (an integer, a float with and
    /// without a fraction, text, a BLOB, NULL) that a `db.rows` loop reads
    /// slowly, with text wide enough that a copy of it passes the copy's
    /// page cache (and so has a file).
    func createReadings(_ sandbox: Sandbox, rows: Int) throws {
        _ = try sandbox.sqlite("""
            CREATE TABLE readings (id INTEGER PRIMARY KEY, v, wide TEXT);
            WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < \(rows))
            INSERT INTO readings (id, v, wide) SELECT x, CASE x % 6 WHEN 0 THEN x * 7 WHEN 1 THEN x + 0.5
                WHEN 2 THEN CAST(x AS REAL) WHEN 3 THEN 'r' || x WHEN 4 THEN CAST('b' || x AS BLOB) END,
                printf('%.500c', 'w') FROM c
            """)
    }

    /// Lua: waits (polling) until the file at `path` exists; `released(path)`
    /// says whether it does; `slow()` is a row's slow work (a cron script's
    /// `os.execute`, git, a job).
    let luaWaiting = """
        local function released(path) local f = io.open(path) if f then f:close() return true end return false end
        local function slow() local c = os.clock() repeat until os.clock() - c > 0.003 end
        local function waitFor(path) local t = os.time() repeat slow() until released(path) or os.time() - t > 60 end
        """

    /// A `db.rows` loop whose work per row is slow (a cron script's
    /// `os.execute` per row) holds a read statement open for as long as it
    /// runs; once its snapshot is older than the reader's window it reads
    /// the rest of its result into a private copy and ends the snapshot
    /// (opsh_rows_spill.h), so another process's checkpoint empties the WAL
    /// while the loop still runs. The loop yields exactly the rows of its
    /// one snapshot: every value with its type and the row's columns, and
    /// none of the rows the other process added meanwhile. SQLite only:
    /// PostgreSQL's row path reads a result at once and holds no snapshot
    /// while the script works. (Run with `OPSH_TEST_EXECUTABLE` set to a
    /// build without the copy, the checkpoint stays blocked.)
    @Test func aSlowRowsLoopDoesNotPinTheWALAndYieldsItsSnapshot() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        try createReadings(sandbox, rows: 2000)
        let checkpointed = sandbox.root + "/checkpointed"
        let script = sandbox.withDatabase(["-e", luaWaiting + "\n" + """
            local sql = "SELECT id, v FROM readings ORDER BY id"
            local expected = db.query(sql)
            local function same(a, b) return a == b and type(a) == type(b) and math.type(a) == math.type(b) end
            local n, mismatches, releasedAt = 0, 0, nil
            for row in db.rows(sql) do
              n = n + 1
              local e = expected[n]
              if not e or not same(row.id, e.id) or not same(row.v, e.v)
                 or table.concat(getmetatable(row).columns, ",") ~= "id,v" then mismatches = mismatches + 1 end
              if n == 1 then io.stdout:write("reading\\n") io.stdout:flush() end
              if not releasedAt then
                slow()
                if released("\(checkpointed)") then releasedAt = n end
              end
            end
            io.stdout:write(string.format("%d %d %d %s\\n", n, #expected, mismatches, tostring(releasedAt)))
            """])
        let child = try sandbox.start(opshExecutable, script)
        #expect(String(decoding: readFirstLine(child.standardOutput), as: UTF8.self) == "reading\n")
        // Another process writes (rows the loop must not yield), then
        // checkpoints the whole WAL away while the loop still runs.
        _ = try sandbox.sqlite("INSERT INTO readings (v) VALUES ('added'), ('added')")
        let checkpoint = try checkpointEmptiesTheWAL(sandbox, within: 5)
        _ = FileManager.default.createFile(atPath: checkpointed, contents: Data())
        #expect(checkpoint.emptied, "the checkpoint was blocked by the db.rows loop's snapshot (\(checkpoint.said))")
        let result = child.finish()
        #expect(result.status == 0, "\(result.stderr)")
        let fields = result.stdout.split(separator: " ").map(String.init)
        #expect(fields.count == 4, "\(result.stdout)")
        guard fields.count == 4 else { return }
        #expect(fields[0] == "2000" && fields[1] == "2000", "rows yielded and rows of the snapshot: \(result.stdout)")
        #expect(fields[2] == "0", "rows unlike the snapshot's: \(result.stdout)")
        // The loop still ran when the checkpoint completed.
        #expect(Int(fields[3].trimmingCharacters(in: .whitespacesAndNewlines)).map { $0 < 2000 } == true, "\(result.stdout)")
    }

    /// The copy's temporary files that process `pid` holds open (SQLite
    /// names them etilqs_…, deleted as they open).
    func copyFiles(of pid: pid_t) -> Int {
        let folder = "/proc/\(pid)/fd"
        let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
        return descriptors.filter { ((try? FileManager.default.destinationOfSymbolicLink(atPath: folder + "/" + $0)) ?? "").contains("etilqs_") }.count
    }

    /// Every way out of a loop that reads from its copy closes the copy
    /// (its file goes): the end of its rows, `break` (the generic `for`'s
    /// to-be-closed value), `cursor:close()`, an error.
    @Test(arguments: [
        "for row in db.rows(sql) do if released(copied) then break end slow() end",
        "local done = false for row in db.rows(sql) do if not done then done = released(copied) slow() end end",
        "local next, shape, _, cursor = db.rows(sql) while next(shape) and not released(copied) do slow() end cursor:close()",
        "pcall(function() for row in db.rows(sql) do if released(copied) then error('stop') end slow() end end)",
    ])
    func leavingARowsLoopClosesItsCopy(_ leaving: String) throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        try createReadings(sandbox, rows: 3000)
        let copied = sandbox.root + "/copied", looked = sandbox.root + "/looked"
        let script = sandbox.withDatabase(["-e", luaWaiting + "\n" + """
            local sql, copied = "SELECT * FROM readings ORDER BY id", "\(copied)"
            \(leaving)
            io.stdout:write("left\\n") io.stdout:flush()
            waitFor("\(looked)")
            """])
        let child = try sandbox.start(opshExecutable, script)
        defer { _ = FileManager.default.createFile(atPath: looked, contents: Data()) }
        // The loop's snapshot grows old while it works: its rows are copied.
        #expect(try waitUntil(10) { copyFiles(of: child.pid) > 0 }, "\(leaving): no copy")
        _ = FileManager.default.createFile(atPath: copied, contents: Data())
        #expect(String(decoding: readFirstLine(child.standardOutput), as: UTF8.self) == "left\n", "\(leaving)")
        #expect(try waitUntil(5) { copyFiles(of: child.pid) == 0 }, "\(leaving): the copy is still open")
        _ = FileManager.default.createFile(atPath: looked, contents: Data())
        #expect(child.finish().status == 0, "\(leaving)")
    }

    /// A slow loop whose statement fails at a later row (malformed JSON at
    /// row 600) meets the failure after the 599 rows before it, as a fast
    /// loop does: the copy met it while copying and the loop failed at once,
    /// hundreds of rows early, their work per row never done (27y). Ctrl-C
    /// and --timeout still stop a copy at once (CloseOnInterruptTests). The
    /// control: the same loop, fast (no copy). SQLite only: PostgreSQL's
    /// row path reads a result at once, failing before its first row.
    @Test func aSlowLoopMeetsALaterRowsFailureAfterTheRowsBeforeIt() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        let script = sandbox.withDatabase(["-e", luaWaiting + "\n" + """
            local sql = [[WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 800)
              SELECT x, CASE WHEN x = 600 THEN json('{bad') ELSE printf('%.2000c', 'w') END AS wide FROM c]]
            for _, slowly in ipairs({ false, true }) do
              local n, sum = 0, 0
              local ok, failure = pcall(function()
                for row in db.rows(sql) do
                  n = n + 1 sum = sum + row.x
                  if slowly then slow() end
                end
              end)
              print(slowly and "slow" or "fast", n, sum, ok, failure:match("malformed JSON") ~= nil)
              io.stdout:flush()
            end
            """])
        let child = try sandbox.start(opshExecutable, script)
        let fast = String(decoding: readFirstLine(child.standardOutput), as: UTF8.self)
        #expect(fast == "fast\t599\t179700\tfalse\ttrue\n")
        // The slow loop's rest (1.6 MB) passes the copy's page cache: a file.
        #expect(try waitUntil(10) { copyFiles(of: child.pid) > 0 }, "no copy")
        let result = child.finish(stdoutPrefix: Array(fast.utf8))
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == fast + "slow\t599\t179700\tfalse\ttrue\n", "\(result.stdout)")
    }

    /// A slow loop over a result without end (a recursive CTE the script
    /// leaves by `break`) copies at most twice the database of its rest
    /// (here the least, OPSH_ROWS_COPY_LEAST_MOST: 64 MiB), then reads on
    /// from its statement: it leaves at its 20,000th
    /// row, every row once and in order. The copy read on until the disk
    /// was full, and the loop never left (27z). Reading on from its
    /// statement, the loop keeps its snapshot: it says so once on stderr,
    /// naming the script, the loop's line and the copy's most, where it
    /// said nothing. The control: the loop's first rows are slow, so its
    /// rest is copied (a file); a copy that holds the whole rest says
    /// nothing (aSlowLoopWhoseCopyCannotBeWrittenReadsEveryRow).
    @Test func aSlowLoopOverAResultWithoutEndLeavesWhereItBreaks() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        let copied = sandbox.root + "/copied"
        let text = luaWaiting + "\n" + """
            local sql = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x, printf('%.8000c', 'w') AS wide FROM c"
            local n, sum, copiedAt = 0, 0, nil
            for row in db.rows(sql) do
              n = n + 1 sum = sum + row.x
              if n == 1 then io.stdout:write("reading\\n") io.stdout:flush() end
              if not copiedAt then
                slow()
                if released("\(copied)") then copiedAt = n end
              end
              if n == 20000 then break end
            end
            print(n, sum, copiedAt ~= nil and copiedAt < 20000)
            """
        let script = sandbox.withDatabase(["run", "--timeout", "60", try sandbox.script("endless.lua", text)])
        let child = try sandbox.start(opshExecutable, script)
        #expect(String(decoding: readFirstLine(child.standardOutput), as: UTF8.self) == "reading\n")
        #expect(try waitUntil(30) { copyFiles(of: child.pid) > 0 }, "no copy")
        _ = FileManager.default.createFile(atPath: copied, contents: Data())
        let result = child.finish()
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "20000\t200010000\ttrue\n", "\(result.stdout)")
        let notes = keptSnapshotNotes(result.stderr)
        #expect(notes.count == 1 && result.stderr == (notes.first ?? "") + "\n", "\(result.stderr)")
        #expect(notes.first?.contains("a slow db.rows loop at ") == true, "\(result.stderr)")
        #expect(notes.first?.contains("endless.lua:\(rowsLoopLine(text)) copied 64 MiB of its rest aside, the most its copy holds, "
                                      + "and reads the rest from its statement: it keeps its read snapshot, and the WAL, until it ends") == true,
                "\(result.stderr)")
    }

    /// The line of `script` that calls `db.rows` (1 for the first).
    func rowsLoopLine(_ script: String) -> Int {
        (script.components(separatedBy: "\n").firstIndex { $0.contains("db.rows(") } ?? -1) + 1
    }

    /// The lines of `stderr` that say a loop keeps its snapshot
    /// (opsh_rows_spill.h).
    func keptSnapshotNotes(_ stderr: String) -> [String] {
        stderr.split(separator: "\n").map(String.init).filter { $0.contains("keeps its read snapshot") }
    }

    /// A slow loop whose copy cannot be written (opsh under a file-size
    /// limit, `ulimit -f` in dash's 512-byte blocks, SIGXFSZ ignored: the
    /// copy's writes fail as on a full temporary directory) reads every row
    /// of its snapshot, in order and with its values, and exits 0: the copy
    /// is abandoned and the loop keeps its snapshot, as any long scan. It
    /// failed after 11 of 3,000 rows with "disk I/O error", naming the
    /// loop's SQL (28c). Under 1 MiB the copy's first batch cannot be
    /// written; under 3 MiB a later one, after two commits
    /// (OPSH_ROWS_COPY_BATCH_BYTES). It says so once, on stderr: a note
    /// naming the script and the loop's line, the copy's error and what it
    /// costs (the WAL waits for the loop), where it said nothing and the
    /// operator whose WAL grew could not tell which loop held it; `--quiet`
    /// drops it as it drops every note. The control (no limit): the same
    /// loop is seen copying (a file) and says nothing. SQLite only:
    /// PostgreSQL's row path makes no copy.
    @Test(arguments: [(nil, false), (2048, false), (6144, false), (2048, true)] as [(Int?, Bool)])
    func aSlowLoopWhoseCopyCannotBeWrittenReadsEveryRow(_ limitBlocks: Int?, _ quiet: Bool) throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        let seen = sandbox.root + "/seen"
        if limitBlocks != nil { _ = FileManager.default.createFile(atPath: seen, contents: Data()) }
        let text = luaWaiting + "\n" + """
            local sql = [[WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000)
              SELECT x, x + 0.5 AS half, CASE WHEN x % 7 = 0 THEN NULL ELSE CAST('b' || x AS BLOB) END AS b,
                printf('%.2000c', char(65 + x % 26)) || char(0) || x AS wide FROM c]]
            local n, bad = 0, 0
            for row in db.rows(sql) do
              n = n + 1
              if row.x ~= n or math.type(row.x) ~= "integer" or row.half ~= n + 0.5
                 or row.b ~= (n % 7 ~= 0 and "b" .. n or nil)
                 or row.wide ~= string.rep(string.char(65 + n % 26), 2000) .. "\\0" .. n
                 or table.concat(getmetatable(row).columns, ",") ~= "x,half,b,wide" then bad = bad + 1 end
              if n <= 100 or not released("\(seen)") then slow() end
            end
            print(n, bad)
            """
        let script = sandbox.withDatabase(["run"] + (quiet ? ["--quiet"] : []) + [try sandbox.script("slow-loop.lua", text)])
        let child: ChildProcess
        if let limitBlocks {
            child = try sandbox.start("/bin/sh", ["-c", "trap '' XFSZ; ulimit -f \(limitBlocks); exec \"$0\" \"$@\"", opshExecutable] + script)
        } else {
            child = try sandbox.start(opshExecutable, script)
            #expect(try waitUntil(10) { copyFiles(of: child.pid) > 0 }, "no copy")
            _ = FileManager.default.createFile(atPath: seen, contents: Data())
        }
        let result = child.finish()
        let label = "\(String(describing: limitBlocks)), quiet \(quiet)"
        #expect(result.status == 0, "\(label): \(result.stderr)")
        #expect(result.stdout == "3000\t0\n", "\(label): \(result.stdout)")
        guard limitBlocks != nil, !quiet else {
            #expect(result.stderr.isEmpty, "\(label): \(result.stderr)")
            return
        }
        let notes = keptSnapshotNotes(result.stderr)
        #expect(notes.count == 1 && result.stderr == notes[0] + "\n", "\(label): \(result.stderr)")
        guard let note = notes.first else { return }
        #expect(note.hasPrefix("opsh: note: a slow db.rows loop at "), "\(label): \(note)")
        // Lua shortens a long chunk name from the left: its end.
        #expect(note.contains("slow-loop.lua:\(rowsLoopLine(text)) could not copy its rest aside ("), "\(label): \(note)")
        #expect(note.hasSuffix("): it keeps its read snapshot, and the WAL, until it ends"), "\(label): \(note)")
    }

    /// A slow loop inside another loop (the outer one's open statement
    /// keeps the read connection's snapshot, and the watchdog's marks,
    /// going) is copied once, and its rows after the copy come as fast as
    /// they are asked for: every second row after the copy asked the pace
    /// rule again and copied the copy's rest again, 61 s of CPU for 12,000
    /// rows where one copy takes 0.3 s, and `--timeout 60` stopped it (28d).
    /// The control: the same loop with no loop around it.
    @Test func aSlowLoopInsideALoopIsCopiedOnce() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        try createReadings(sandbox, rows: 12000)
        let result = try sandbox.opsh(["--timeout", "60", "-e", luaWaiting + "\n" + """
            for _, nested in ipairs({ false, true }) do
              local outer = nested and db.rows("SELECT id FROM readings ORDER BY id") or nil
              if outer then outer() end
              local n = 0
              for row in db.rows("SELECT id, wide FROM readings ORDER BY id") do
                n = n + 1
                if n <= 100 then slow() end
              end
              print(nested and "nested" or "alone", n)
            end
            """])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "alone\t12000\nnested\t12000\n", "\(result.stdout)")
    }

    /// A loop one of the shell's chunks left open after its rows were
    /// copied is closed as the chunk ends (`closeAtTransactionOrChunkEnd`):
    /// its copy goes too, and reading on says the loop was closed.
    @Test func aChunksLoopLeftOpenClosesItsCopyAtTheChunksEnd() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        try createReadings(sandbox, rows: 3000)
        let copied = sandbox.root + "/copied"
        let terminal = try PseudoTerminal(arguments: ["--db", sandbox.database, "--no-init"], environment: sandbox.environment)
        terminal.expect("opsh> ")
        let helpers = luaWaiting.replacingOccurrences(of: "local function ", with: "function ").replacingOccurrences(of: "\n", with: " ")
        terminal.send(helpers + "\r")
        terminal.expect("opsh> ")
        terminal.send("it = db.rows('SELECT * FROM readings ORDER BY id') n = 0 while not released('\(copied)') do it() n = n + 1 slow() end print('left' .. ' open', n > 0)\r")
        #expect(try waitUntil(10) { copyFiles(of: terminal.pid) > 0 }, "no copy")
        _ = FileManager.default.createFile(atPath: copied, contents: Data())
        terminal.expect("left open\ttrue")
        terminal.expect("opsh> ")
        #expect(try waitUntil(5) { copyFiles(of: terminal.pid) == 0 }, "the copy is still open at the prompt")
        terminal.send("print('read on', pcall(it))\r")
        terminal.expect("this loop was closed when the transaction or chunk that opened it ended")
        terminal.expect("opsh> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit(timeout: 60) == 0)
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
