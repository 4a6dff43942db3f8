import Foundation
import Testing

/// `telemetry.cleanup` killed (SIGKILL) at random moments: every batch is a
/// transaction, so the rows it removed are a whole number of batches, recent
/// rows are never touched, and the file stays sound.
@Suite struct CleanupCrashTests {
    static let batch = 7000
    static let old = 300_000
    static let recent = 1000

    static func fill(_ scratch: Scratch) throws {
        _ = try scratch.sqlite("""
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < \(old))
            INSERT INTO telemetry (event, properties, created_at) SELECT 'old', '{"i":' || i || '}', 1000 + i FROM n;
            """)
    }

    @Test func cleanupKilledMidwayKeepsWholeBatches() throws {
        let stops = longRun ? 50 : 5
        let seed = reliabilitySeed(0x5EED_0010)
        var random = SeededGenerator(seed: seed)
        let scratch = try Scratch()
        let created = try scratch.opsh(["-e", "return 1"])
        #expect(created.status == 0, "\(created.stderr)")
        try Self.fill(scratch)
        _ = try scratch.sqlite("""
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < \(Self.recent))
            INSERT INTO telemetry (event, created_at) SELECT 'recent', unixepoch() FROM n;
            """)
        let script = try scratch.script("cleanup.lua", """
            io.stdout:write("started\\n") io.stdout:flush()
            telemetry.cleanup{ olderThan = "30d", batch = \(Self.batch) }
            """)
        var survived = 0, midway = 0, deletedTotal = 0, wholeStops = 0, recentTouched = 0
        for attempt in 0..<stops {
            let before = Int(try scratch.sqlite("SELECT count(*) FROM telemetry WHERE event = 'old'")) ?? -1
            if before == 0 { try Self.fill(scratch) }
            let start = before == 0 ? Self.old : before
            let child = try scratch.spawn(opshExecutable, scratch.withDatabase(["run", "--no-lock", script]))
            let first = readFirstLine(child.standardOutput)
            usleep(UInt32.random(in: 0...400_000, using: &random))
            kill(child.pid, SIGKILL)
            let result = scratch.finish(child, stdoutPrefix: first)
            let integrity = try scratch.sqlite("PRAGMA integrity_check")
            let after = Int(try scratch.sqlite("SELECT count(*) FROM telemetry WHERE event = 'old'")) ?? -1
            let recentLeft = Int(try scratch.sqlite("SELECT count(*) FROM telemetry WHERE event = 'recent'")) ?? -1
            // The oldest rows go first: what is left is the newest `after` of them.
            let oldest = Int(try scratch.sqlite("SELECT CAST(coalesce(min(created_at), 0) AS INTEGER) FROM telemetry WHERE event = 'old'")) ?? -1
            let deleted = start - after
            let whole = deleted % Self.batch == 0 || after == 0
            let ordered = after == 0 || oldest == 1000 + Self.old - after + 1
            let ok = integrity == "ok" && whole && ordered && recentLeft == Self.recent
            #expect(ok, "attempt \(attempt) (status \(result.status)): integrity \(integrity), deleted \(deleted) of \(start) (batch \(Self.batch)), oldest left \(oldest), recent \(recentLeft)")
            if ok { survived += 1 }
            if whole { wholeStops += 1 }
            recentTouched += Self.recent - recentLeft
            if after > 0 && deleted > 0 { midway += 1 }
            deletedTotal += max(deleted, 0)
        }
        reportFigure("telemetry.cleanup under SIGKILL: \(survived)/\(stops) stops survived (\(midway) after some batches and before the last), \(deletedTotal) rows deleted, in whole batches of \(Self.batch) (or up to the end) after \(wholeStops)/\(stops) stops, \(recentTouched) recent rows touched, seed \(seed)")
    }
}
