import Foundation
import Testing

/// `telemetry.cleanup` typed at the prompt (issue 24, item 14) commits
/// batch by batch outside the chunk's transaction, as README promises:
/// another process sees the count fall while it runs, the backend's
/// writer never waits long, nothing is asked at the end, and a Ctrl-C's
/// "rows deleted (committed)" is what the database holds. (SQLite: the
/// store's writer, not the chunk's connection; PostgreSQL: a session of
/// the cleanup's own, not the chunk's transaction.)
@Suite struct PromptCleanupTests {
    static let oldRows = 60_000

    /// `rows` telemetry rows from 1970 (older than any retention).
    static func oldTelemetry(_ database: TestDatabase, rows: Int) throws {
        switch database.engine {
        case .sqlite:
            try database.sql("""
                WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < \(rows))
                INSERT INTO telemetry (event, created_at) SELECT 'old', i FROM n
                """)
        case .postgresql:
            try database.sql("INSERT INTO telemetry (event, created_at) SELECT 'old', i FROM generate_series(1, \(rows)) AS i")
        }
    }

    /// A backend writer (another opsh process) inserting one row per
    /// transaction for `seconds`, printing its commits and its longest wait.
    static let backend = """
        local function now() return db.value("SELECT (julianday('now') - 2440587.5) * 86400.0") end
        local seconds, start, commits, worst = tonumber(arg[1]), now(), 0, 0
        io.stdout:write("writing\\n") io.stdout:flush()
        while now() - start < seconds do
          local t0 = now()
          db.exec("INSERT INTO telemetry (event, created_at) VALUES ('backend', ?)", t0)
          commits = commits + 1
          worst = math.max(worst, now() - t0)
        end
        print(commits, string.format("%.4f", worst))
        """

    @Test(arguments: Engine.allCases)
    func aCleanupAtThePromptCommitsEachBatch(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        try Self.oldTelemetry(database, rows: Self.oldRows)
        let terminal = try PseudoTerminal(arguments: ["--db", database.db, "--no-init"], environment: sandbox.environment)
        terminal.expect("opsh> ")
        let writer = engine == .sqlite
            ? try sandbox.start(opshExecutable, ["run", "--db", database.db, "--no-lock", try sandbox.script("backend.lua", Self.backend), "6"])
            : nil
        if let writer { _ = readFirstLine(writer.standardOutput) }
        terminal.send("r = telemetry.cleanup{ olderThan = '30d', batch = 1000 }; print('deleted', r.deleted, r.batches)\r")
        // Another process sees the count fall while the cleanup runs.
        var seenBetween = false
        _ = waitUntil(30) {
            terminal.readPending()
            // A question at the end: one transaction, nothing falls.
            if terminal.transcript.contains("commit? [y/N]") || terminal.transcript.contains("type the table's name") { return true }
            let left = (try? database.count("telemetry", where: "event = 'old'")) ?? -1
            if left > 0 && left < Self.oldRows { seenBetween = true }
            return left == 0
        }
        #expect(seenBetween, "no other process saw the cleanup's batches commit while it ran")
        terminal.expect("deleted\t\(Self.oldRows)\t60", timeout: 30)
        terminal.expect("opsh> ")
        #expect(terminal.transcript.contains("outside the chunk's transaction: each batch is committed as it goes"))
        #expect(!terminal.transcript.contains("commit? [y/N]"))
        #expect(try database.count("telemetry", where: "event = 'old'") == 0)
        terminal.send("\u{4}")
        #expect(terminal.waitForExit(timeout: 15) == 0)
        if let writer {
            let result = writer.finish()
            #expect(result.status == 0, "\(result.stderr)")
            let fields = result.stdout.split(separator: "\n").last?.split(separator: "\t") ?? []
            let worst = Double(fields.last ?? "") ?? -1
            #expect(worst >= 0 && worst < 1.0, "the backend's writer waited \(worst) s beside the cleanup")
            print("figure: backend writer's worst wait beside telemetry.cleanup at the prompt (\(Self.oldRows) rows, batches of 1000): \(Int(worst * 1000)) ms")
        }
    }

    /// Ctrl-C in the middle: what it says was deleted and committed is
    /// what the database holds; the control is a chunk that wrote first,
    /// where the cleanup is refused (it would commit the chunk's write
    /// with it).
    @Test(arguments: Engine.allCases)
    func ctrlCInTheMiddleSaysWhatWasCommitted(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        try Self.oldTelemetry(database, rows: Self.oldRows)
        let terminal = try PseudoTerminal(arguments: ["--db", database.db, "--no-init"], environment: sandbox.environment)
        terminal.expect("opsh> ")
        // Slowed by its onBatch so that Ctrl-C lands in the middle.
        terminal.send("telemetry.cleanup{ olderThan = '30d', batch = 200, onBatch = function() local t = os.clock() repeat until os.clock() - t > 0.01 end }\r")
        #expect(waitUntil(30) {
            terminal.readPending()
            return ((try? database.count("telemetry")) ?? Self.oldRows) < Self.oldRows - 2000
        })
        terminal.send("\u{3}")
        terminal.expect("telemetry.cleanup interrupted: ", timeout: 10)
        terminal.expect("opsh> ")
        let said = terminal.transcript.components(separatedBy: "telemetry.cleanup interrupted: ").last ?? ""
        let deleted = Int(said.split(separator: " ").first ?? "") ?? -1
        #expect(deleted > 0)
        #expect(try database.count("telemetry") == Self.oldRows - deleted, "it said \(deleted) rows were deleted and committed")
        // Control: after a write in the same chunk the cleanup is refused.
        terminal.send("db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('new', 1)\"); telemetry.cleanup{ olderThan = '30d' }\r")
        terminal.expect("telemetry.cleanup cannot run inside a chunk that has written")
        terminal.expect("opsh> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit(timeout: 15) == 0)
        #expect(try database.count("telemetry") == Self.oldRows - deleted)
    }
}
