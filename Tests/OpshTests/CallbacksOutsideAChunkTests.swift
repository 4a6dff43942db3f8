import Foundation
import Testing

/// A watch's callback runs Lua no one typed: at the prompt when its event
/// arrives, in a batch run when the script ends with its event queued. It
/// runs as a chunk does, inside what the session promises: `--max-changes`,
/// the dry run, the audit row (scripts/reliability-attacks.md, 27u). Each
/// test's trigger is another process's row (`event = 'go'`); the callback
/// deletes the 300 rows older than 1301 (TelemetryCleanupCountingTests'
/// seed: 500 old rows and a recent one). One body, both engines.
@Suite struct CallbacksOutsideAChunkTests {
    static let old = TelemetryCleanupCountingTests.old
    static let watchThatDeletes = """
        w = watch("SELECT count(*) AS n FROM telemetry WHERE event = 'go'", function() \
        print('callback ran') db.exec('DELETE FROM telemetry WHERE created_at < 1301') end)
        """
    static let go = "INSERT INTO telemetry (event, created_at) VALUES ('go', 5000)"

    func shell(_ sandbox: Sandbox, _ database: TestDatabase, _ extra: [String]) throws -> PseudoTerminal {
        var environment = sandbox.environment
        // SQLite's dry run replays each chunk (the private copy would not
        // see the other process's row); PostgreSQL's spans the session.
        environment["OPSH_DRY_RUN_COPY_LIMIT_MB"] = "0"
        let terminal = try PseudoTerminal(arguments: ["--db", database.db] + extra, environment: environment)
        terminal.expect("> ")
        terminal.send(Self.watchThatDeletes + "\r")
        terminal.expect("> ")
        try database.sql(Self.go)
        terminal.expect("callback ran")
        return terminal
    }

    /// Under `--max-changes 250` the callback's 300 deletions are refused,
    /// saying so, as a typed chunk's are; the control: under 1000 they are
    /// committed, said, and the audit trail has their row.
    @Test(arguments: Engine.allCases) func aWatchCallbackAtThePromptIsCappedAndAudited(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try TelemetryCleanupCountingTests().seeded(engine, in: sandbox)
        let capped = try shell(sandbox, database, ["--max-changes", "250"])
        capped.expect("the chunk changed 300 rows")
        capped.expect("more than its limit of 250")
        capped.send(".quit\r")
        #expect(capped.waitForExit() == 0, "\(capped.transcript)")
        #expect(try database.count("telemetry") == Self.old + 2)
        #expect(try database.count("opsh_audit", where: "code LIKE '%callbacks run at the prompt%'") == 0)

        try database.sql("DELETE FROM telemetry WHERE event = 'go'")
        let control = try shell(sandbox, database, ["--max-changes", "1000"])
        control.expect("300 deleted")
        control.send(".quit\r")
        #expect(control.waitForExit() == 0, "\(control.transcript)")
        #expect(try database.count("telemetry") == Self.old + 2 - 300)
        #expect(try database.count("opsh_audit", where: "code LIKE '%callbacks run at the prompt%'") == 1)
    }

    /// The shell's `--dry-run`: the callback's deletions are reported and
    /// not kept (on SQLite too large to copy they were committed to the
    /// file); the control: without `--dry-run` they are.
    @Test(arguments: Engine.allCases) func aWatchCallbackAtThePromptOfADryRunKeepsNothing(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try TelemetryCleanupCountingTests().seeded(engine, in: sandbox)
        let dry = try shell(sandbox, database, ["--dry-run"])
        dry.expect("300 deleted")
        dry.send(".quit\r")
        #expect(dry.waitForExit() == 0, "\(dry.transcript)")
        #expect(try database.count("telemetry") == Self.old + 2)

        try database.sql("DELETE FROM telemetry WHERE event = 'go'")
        let real = try shell(sandbox, database, [])
        real.expect("committed")
        real.send(".quit\r")
        #expect(real.waitForExit() == 0, "\(real.transcript)")
        #expect(try database.count("telemetry") == Self.old + 2 - 300)
    }

    /// `opsh run --dry-run`: a script that ends with its watch's event
    /// queued has the callback run inside the dry run, counted in its
    /// summary, not kept; it ran after the dry run had ended and its
    /// deletions were committed. The control: the same run without
    /// `--dry-run` deletes them and its audit row counts them.
    @Test(arguments: Engine.allCases) func aCallbackAfterABatchScriptRunsInsideItsDryRun(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try TelemetryCleanupCountingTests().seeded(engine, in: sandbox)
        // The script waits for the other process's row, then long enough
        // for the watch's poll (every 0.1 s) to queue its change, without
        // running callbacks (opsh.wait would run it inside the script).
        let script = try sandbox.script("ends-with-a-change.lua", Self.watchThatDeletes + """

            print('ready') io.stdout:flush()
            io.read()
            -- (Reads within 50 ms may share a snapshot taken before the row.)
            repeat until db.value("SELECT count(*) FROM telemetry WHERE event = 'go'") == 1
            local started = os.clock()
            while os.clock() - started < 1 do end
            """)
        func run(_ extra: [String]) throws -> TestFolder.Result {
            let child = try sandbox.start(opshExecutable, ["run", "--db", database.db] + extra + [script], keepingStdinOpen: true)
            let ready = readFirstLine(child.standardOutput)
            try database.sql(Self.go)
            child.write("go on\n")
            child.closeInput()
            return child.finish(stdoutPrefix: ready)
        }
        let dry = try run(["--dry-run"])
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout.contains("callback ran"), "\(dry.stdout)")
        #expect(dry.stderr.contains("telemetry: 0 inserted, 0 updated, 300 deleted"), "\(dry.stderr)")
        #expect(try database.count("telemetry") == Self.old + 2)

        try database.sql("DELETE FROM telemetry WHERE event = 'go'")
        let real = try run([])
        #expect(real.status == 0, "\(real.stderr)")
        #expect(real.stdout.contains("callback ran"), "\(real.stdout)")
        #expect(try database.count("telemetry") == Self.old + 2 - 300)
        #expect(try database.count("opsh_audit", where: "dryRun = 0 AND changes LIKE '%300%'") == 1)
    }

    /// A `db.rows` loop a watch's callback leaves open at the prompt (`it`
    /// kept in a global) is closed with the callback's chunk: it kept the
    /// read connection's snapshot, and the backend's WAL, while the operator
    /// sat there, and the next chunk read the table as it was (27w, as 27q
    /// for a typed chunk). Reading on says it was closed. The control: a
    /// callback whose loop ends.
    @Test(arguments: Engine.allCases) func aRowsLoopAWatchCallbackLeavesOpenIsClosedWithIt(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try TelemetryCleanupCountingTests().seeded(engine, in: sandbox)
        for leftOpen in [true, false] {
            try database.sql("DELETE FROM telemetry WHERE event IN ('go', 'later')")
            let terminal = try PseudoTerminal(arguments: ["--db", database.db], environment: sandbox.environment)
            terminal.expect("> ")
            let loop = leftOpen ? "it = db.rows('SELECT id FROM telemetry') it()" : "for r in db.rows('SELECT id FROM telemetry') do end"
            terminal.send("w = watch(\"SELECT count(*) AS n FROM telemetry WHERE event = 'go'\", function() \(loop) print('callback ran') end)\r")
            terminal.expect("> ")
            try database.sql(Self.go)
            terminal.expect("callback ran")
            try database.sql("INSERT INTO telemetry (event, created_at) VALUES ('later', 6000)")
            // The answer (1007) is not in the echo of the line typed.
            terminal.send("db.value(\"SELECT count(*) * 1000 + 7 FROM telemetry WHERE event = 'later'\")\r")
            terminal.expect("1007")
            // (PostgreSQL's db.rows read its rows at once: nothing is held.)
            if leftOpen, engine == .sqlite {
                terminal.send("it()\r")
                terminal.expect("this loop was closed when the transaction or chunk that opened it ended")
            }
            terminal.send(".quit\r")
            #expect(terminal.waitForExit() == 0, "\(terminal.transcript)")
        }
    }

    /// A callback's `os.exit(3)` ends the run as the script's own does: the
    /// status 3, the run's writes kept by the mode's rule (committed under
    /// `--max-changes`), its audit row. After a batch script it was a script
    /// error (exit 1, "os.exit(3)" as the message) that rolled the run back;
    /// at the prompt the shell said "os.exit(3)", rolled the callback's chunk
    /// back and went on (28a). The control: the same `os.exit(3)` at the
    /// script's own end.
    @Test(arguments: Engine.allCases) func aCallbacksExitEndsTheRunAsTheScriptsOwnDoes(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try TelemetryCleanupCountingTests().seeded(engine, in: sandbox)
        let deleteThenExit = "db.exec('DELETE FROM telemetry WHERE created_at < 1101') os.exit(3)"
        let control = try sandbox.opsh(["run", "--max-changes", "1000", try sandbox.script("exits.lua", deleteThenExit)], on: database)
        #expect(control.status == 3, "\(control.stderr)")
        #expect(try database.count("telemetry") == Self.old + 1 - 100)

        let watchThatExits = Self.watchThatDeletes.replacingOccurrences(of: "1301') end)", with: "1301') os.exit(3) end)")
        #expect(watchThatExits != Self.watchThatDeletes)
        let script = try sandbox.script("callback-exits.lua", watchThatExits + """

            print('ready') io.stdout:flush()
            io.read()
            repeat until db.value("SELECT count(*) FROM telemetry WHERE event = 'go'") == 1
            local started = os.clock()
            while os.clock() - started < 1 do end
            """)
        let child = try sandbox.start(opshExecutable, ["run", "--db", database.db, "--max-changes", "1000", script], keepingStdinOpen: true)
        let ready = readFirstLine(child.standardOutput)
        try database.sql(Self.go)
        child.write("go on\n")
        child.closeInput()
        let batch = child.finish(stdoutPrefix: ready)
        #expect(batch.stdout.contains("callback ran"), "\(batch.stdout)")
        #expect(batch.status == 3, "\(batch.stderr)")
        #expect(try database.count("telemetry", where: "created_at < 1301") == 0, "the callback's deletions were rolled back")
        #expect(try database.count("opsh_audit", where: "status = 3 AND changes LIKE '%200%'") == 1)

        try database.sql("DELETE FROM telemetry WHERE event = 'go'")
        try database.sql("INSERT INTO telemetry (event, created_at) SELECT 'old', created_at - 200 FROM telemetry WHERE created_at BETWEEN 1301 AND 1500")
        let terminal = try PseudoTerminal(arguments: ["--db", database.db], environment: sandbox.environment)
        terminal.expect("> ")
        terminal.send(watchThatExits + "\r")
        terminal.expect("> ")
        try database.sql(Self.go)
        terminal.expect("callback ran")
        #expect(terminal.waitForExit() == 3, "\(terminal.transcript)")
        #expect(try database.count("telemetry", where: "created_at < 1301") == 0, "the callback's deletions were rolled back")
    }

    /// The init file's `os.exit(4)` ends the shell with status 4, its write
    /// kept as a typed chunk's is; it was ignored and the prompt came (28a).
    /// The control: the same init file without `os.exit` leaves the prompt.
    @Test(arguments: Engine.allCases) func theInitFilesExitEndsTheShell(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        try FileManager.default.createDirectory(atPath: sandbox.root + "/config/opsh", withIntermediateDirectories: true)
        let initFile = sandbox.root + "/config/opsh/init.lua"
        let write = "db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('init', 1)\") print('init ' .. 'ran')"
        try (write + "\n").write(toFile: initFile, atomically: true, encoding: .utf8)
        let control = try PseudoTerminal(arguments: ["--db", database.db], environment: sandbox.environment)
        control.expect("init ran")
        control.expect("> ")
        control.send("\u{4}")
        #expect(control.waitForExit() == 0, "\(control.transcript)")

        try (write + " os.exit(4)\n").write(toFile: initFile, atomically: true, encoding: .utf8)
        let exits = try PseudoTerminal(arguments: ["--db", database.db], environment: sandbox.environment)
        exits.expect("init ran")
        #expect(exits.waitForExit() == 4, "\(exits.transcript)")
        #expect(try database.count("telemetry", where: "event = 'init'") == 2)
    }
}
