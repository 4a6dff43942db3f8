import Foundation
import Git
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A script that writes numbered transactions is stopped at random moments
/// (SIGKILL, SIGTERM, SIGINT); after each stop the database is sound and
/// every transaction is wholly there or wholly absent.
///
/// `OPSH_RELIABILITY_LONG=1` runs 100 stops per signal instead of 10;
/// `OPSH_RELIABILITY_SEED` replays other random delays.
@Suite(.serialized) struct CrashConsistencyTests {
    /// Rows one transaction writes: 1 project, 2 schemes, 2 builds, 2 × logsPerBuild logs,
    /// 5 telemetry rows, and the counter row updated.
    static let logsPerBuild = 60

    static let setup = """
        db.exec("CREATE TABLE IF NOT EXISTS rel_counter (id INTEGER PRIMARY KEY CHECK (id = 1), n INTEGER NOT NULL)")
        db.exec("INSERT OR IGNORE INTO rel_counter (id, n) VALUES (1, 0)")
        """

    /// Writes transactions n+1, n+2 … until stopped, printing each number once committed.
    /// Every 4th transaction also deletes the logs of an earlier one and
    /// re-inserts them (a cleanup inside the same transaction), and the
    /// telemetry of transaction i-3 (a retention pass).
    static let writer = """
        local logsPerBuild = \(logsPerBuild)
        local i = db.value("SELECT n FROM rel_counter")
        while true do
          i = i + 1
          io.stdout:write("b", i, "\\n")
          io.stdout:flush()
          db.transaction(function()
            local p = string.format("com.rel.t%06d", i)
            local now = os.time()
            db.exec("INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt) VALUES (?, ?, ?, ?, ?)",
                    p, "P" .. i, "Project " .. i, "https://example.com/" .. i .. ".git", now)
            for s = 1, 2 do
              local scheme = string.format("t%06d-s%d", i, s)
              db.exec("INSERT INTO schemes (id, projectBundleIdentifier, name) VALUES (?, ?, ?)", scheme, p, "scheme " .. s)
              local build = scheme .. "-b"
              db.exec("INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt) VALUES (?, ?, '1.0.0', 1, 'running', ?)",
                      build, scheme, now)
              for l = 1, logsPerBuild do
                db.exec("INSERT INTO buildLogs (id, buildId, content, createdAt) VALUES (?, ?, ?, ?)",
                        build .. "-l" .. l, build, string.rep("x", 200), now)
              end
              db.exec("UPDATE builds SET status = 'succeeded', progress = 1 WHERE id = ?", build)
            end
            for t = 1, 5 do
              db.exec("INSERT INTO telemetry (id, event, properties, created_at) VALUES (?, 'rel', ?, ?)", i * 10 + t, '{"n":' .. i .. '}', now)
            end
            if i > 3 then
              db.exec("DELETE FROM telemetry WHERE event = 'rel' AND id BETWEEN ? AND ?", (i - 3) * 10 + 1, (i - 3) * 10 + 5)
            end
            if i % 4 == 0 and i > 4 then
              local old = string.format("t%06d-s1-b", i - 4)
              db.exec("DELETE FROM buildLogs WHERE buildId = ?", old)
              for l = 1, logsPerBuild do
                db.exec("INSERT INTO buildLogs (id, buildId, content, createdAt) VALUES (?, ?, ?, ?)",
                        old .. "-l" .. l, old, "again", now)
              end
            end
            db.exec("UPDATE rel_counter SET n = ? WHERE id = 1", i)
          end)
          io.stdout:write(i, "\\n")
          io.stdout:flush()
        end
        """

    struct Outcome {
        var survived = 0
        var tried = 0
        var lost = 0
        var transactions = 0
        /// Stops that came while a transaction was open (its "b" line printed, its commit not).
        var insideTransaction = 0
    }

    /// The whole check after one stop: integrity, foreign keys, and the rows
    /// of every transaction 1…n (n = the counter) present, none beyond.
    /// Returns n.
    static func verify(_ scratch: Scratch) throws -> (n: Int, problems: [String]) {
        var problems: [String] = []
        let integrity = try scratch.sqlite("PRAGMA integrity_check")
        if integrity != "ok" { problems.append("integrity_check: \(integrity)") }
        let foreignKeys = try scratch.sqlite("PRAGMA foreign_key_check")
        if !foreignKeys.isEmpty { problems.append("foreign_key_check: \(foreignKeys)") }
        let counts = try scratch.sqlite("""
            SELECT (SELECT n FROM rel_counter),
                   (SELECT count(*) FROM projects WHERE bundleIdentifier LIKE 'com.rel.t%'),
                   (SELECT count(*) FROM schemes WHERE id LIKE 't%'),
                   (SELECT count(*) FROM builds WHERE id LIKE 't%' AND status = 'succeeded'),
                   (SELECT count(*) FROM builds WHERE id LIKE 't%'),
                   (SELECT count(*) FROM buildLogs WHERE id LIKE 't%'),
                   (SELECT count(*) FROM telemetry WHERE event = 'rel'),
                   (SELECT count(*) FROM projects WHERE CAST(substr(bundleIdentifier, 10) AS INTEGER) > (SELECT n FROM rel_counter)),
                   (SELECT count(*) FROM telemetry WHERE event = 'rel' AND (id / 10 > (SELECT n FROM rel_counter)
                                                                       OR id / 10 <= (SELECT n FROM rel_counter) - 3)),
                   (SELECT count(*) FROM buildLogs WHERE content = 'again')
            """).split(separator: "|").map { Int($0) ?? -1 }
        guard counts.count == 10 else { return (-1, problems + ["unexpected counts: \(counts)"]) }
        let n = counts[0]
        // IDs are unique and derived from the transaction number: with none
        // beyond n, a total equal to n × (rows per transaction) means every
        // transaction 1…n is complete.
        let expected = [n, n, 2 * n, 2 * n, 2 * n, 2 * n * logsPerBuild, min(n, 3) * 5, 0, 0]
        if Array(counts[0..<9]) != expected { problems.append("after \(n) transactions: counts \(counts) ≠ \(expected)") }
        // Transactions 8, 12, … (i % 4 == 0, i > 4) rewrote transaction i-4's logs.
        let rewrites = n >= 8 ? (n / 4 - 1) : 0
        if counts[9] != rewrites * logsPerBuild { problems.append("rewritten logs \(counts[9]) ≠ \(rewrites * logsPerBuild)") }
        return (n, problems)
    }

    static func run(signal: Int32, fallbackSeed: UInt64) throws -> Outcome {
        let stops = longRun ? 100 : 10
        let seed = reliabilitySeed(fallbackSeed)
        var random = SeededGenerator(seed: seed)
        let scratch = try Scratch()
        let created = try scratch.opsh(["-e", setup])
        #expect(created.status == 0, "\(created.stderr)")
        let script = try scratch.script("writer.lua", writer)
        // Foreign keys are on in opsh's connections; the check here uses the CLI.
        var outcome = Outcome()
        for attempt in 0..<stops {
            let child = try scratch.spawn(opshExecutable, scratch.withDatabase(["run", "--no-lock", script]))
            // After the first commit of this run (so the stop lands in the
            // writing loop, not in start-up), a random delay of 0…250 ms.
            let first = readFirstLine(child.standardOutput)
            usleep(UInt32.random(in: 0...250_000, using: &random))
            kill(child.pid, signal)
            let result = scratch.finish(child, stdoutPrefix: first)
            outcome.tried += 1
            let lines = result.stdout.split(separator: "\n")
            let reported = lines.compactMap { Int($0) }.max() ?? 0
            if lines.last?.hasPrefix("b") == true { outcome.insideTransaction += 1 }
            switch signal {
            case SIGKILL:
                #expect(result.status == 128 + SIGKILL, "attempt \(attempt): \(result.status) \(result.stderr)")
            case SIGTERM:
                #expect(result.status == 143, "attempt \(attempt): status \(result.status), stderr: \(result.stderr)")
                #expect(result.stderr.contains("rolled back"), "attempt \(attempt): \(result.stderr)")
            default:
                #expect(result.status == 130, "attempt \(attempt): status \(result.status), stderr: \(result.stderr)")
                #expect(result.stderr.contains("rolled back"), "attempt \(attempt): \(result.stderr)")
            }
            var (n, problems) = try verify(scratch)
            // A transaction the script saw committed (and printed) must be there.
            if reported > n {
                outcome.lost += reported - n
                problems.append("the script reported \(reported) committed, the database has \(n)")
            }
            for problem in problems { Issue.record("\(Subprocess.signalName(signal)) attempt \(attempt): \(problem)") }
            outcome.transactions = max(n, 0)
            if problems.isEmpty { outcome.survived += 1 }
        }
        let name = Subprocess.signalName(signal)
        reportFigure("crash-consistency \(name): \(outcome.survived)/\(outcome.tried) stops survived (\(outcome.insideTransaction) inside an open transaction), \(outcome.lost) committed transactions lost, \(outcome.transactions) transactions written (\(1 + 2 + 2 + 2 * logsPerBuild + 5) rows inserted and 3 updated each), seed \(seed)")
        return outcome
    }

    @Test func sigkillAtRandomMoments() throws {
        let outcome = try Self.run(signal: SIGKILL, fallbackSeed: 0x5EED_0001)
        #expect(outcome.survived == outcome.tried)
        #expect(outcome.lost == 0)
    }

    @Test func sigtermRollsBackAndExits143() throws {
        let outcome = try Self.run(signal: SIGTERM, fallbackSeed: 0x5EED_0002)
        #expect(outcome.survived == outcome.tried)
        #expect(outcome.lost == 0)
    }

    @Test func sigintRollsBackAndExits130() throws {
        let outcome = try Self.run(signal: SIGINT, fallbackSeed: 0x5EED_0003)
        #expect(outcome.survived == outcome.tried)
        #expect(outcome.lost == 0)
    }
}
