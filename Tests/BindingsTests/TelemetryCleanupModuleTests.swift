import Foundation
import LuaRuntime
import Testing
@testable import Bindings
@testable import Store

/// `telemetry.cleanup` from Lua, and the progress bar it draws.
@Suite struct TelemetryCleanupModuleTests {
    /// Rows 1…1000 with `created_at` = i, event "a" (even) or "b" (odd).
    func seeded() throws -> TestSession {
        let test = try TestSession()
        try test.run("""
            db.exec([[WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000)
                      INSERT INTO telemetry (event, created_at)
                      SELECT CASE WHEN i % 2 = 0 THEN 'a' ELSE 'b' END, i FROM n]])
            """)
        return test
    }

    @Test func deletesInBatchesAndReports() throws {
        let test = try seeded()
        let results = try test.run("""
            local r = telemetry.cleanup{ olderThan = 401, batch = 100 }
            return r.deleted, r.batches, r.dryRun, type(r.longestLockMs), r.longestLockMs < 5000, type(r.seconds)
            """)
        #expect(results == [400, 4, false, "number", true, "number"])
        #expect(try test.sqlite3("SELECT count(*), min(created_at) FROM telemetry") == "600|401.0")
    }

    @Test func keepEventAndOnBatch() throws {
        let test = try seeded()
        let results = try test.run("""
            local seen = {}
            local r = telemetry.cleanup{ olderThan = 401, keep = 700, batch = 100,
                                         onBatch = function(p) seen[#seen + 1] = p.deleted .. "/" .. p.matched end }
            local e = telemetry.cleanup{ olderThan = 2000, event = "a", keep = 100 }
            return r.deleted, table.concat(seen, " "), e.deleted
            """)
        // keep 700 newest: 301…1000; then of the 350 'a' rows left (302…1000), keep 100.
        #expect(results == [300, "100/300 200/300 300/300", 250])
        #expect(try test.sqlite3("SELECT count(*) FROM telemetry WHERE event = 'a'") == "100")
    }

    @Test func durationsCountBackFromNow() throws {
        let test = try TestSession()
        let now = Date().timeIntervalSince1970
        try test.run("""
            local now = ...
            for i = 1, 10 do db.exec("INSERT INTO telemetry (event, created_at) VALUES ('old', ?)", now - 40 * 86400) end
            for i = 1, 5 do db.exec("INSERT INTO telemetry (event, created_at) VALUES ('recent', ?)", now - 10 * 86400) end
            """, [.number(now)])
        #expect(try test.run("return telemetry.cleanup{ olderThan = '6w' }.deleted") == [0])
        #expect(try test.run("return telemetry.cleanup{ olderThan = '30d' }.deleted") == [10])
        #expect(try test.run("return telemetry.cleanup{ olderThan = '168h' }.deleted") == [5])
    }

    @Test func retentionDefaultsToTheStorageConfiguration() throws {
        let test = try TestSession()
        let now = Date().timeIntervalSince1970
        try test.run("""
            local now = ...
            db.exec("INSERT INTO telemetry (event, created_at) VALUES ('old', ?), ('new', ?)", now - 25 * 86400, now - 15 * 86400)
            """, [.number(now)])
        #expect(test.failure("telemetry.cleanup{}") == "test:1: telemetry.cleanup: no olderThan given and the database has no storage configuration (storage_config) to take the retention from; pass one, e.g. olderThan = \"30d\"")
        try test.run("""
            db.exec("INSERT INTO configuration (id, base_url, created_at, updated_at) VALUES ('default', 'https://api', 0, 0)")
            db.exec("INSERT INTO storage_config (configuration_id, telemetry_retention_days) VALUES ('default', 20)")
            """)
        #expect(try test.run("return telemetry.cleanup().deleted") == [1])
        #expect(try test.sqlite3("SELECT event FROM telemetry") == "new")
    }

    @Test func dryRunsDeleteNothing() throws {
        let test = try seeded()
        #expect(try test.run("local r = telemetry.cleanup{ olderThan = 401, dryRun = true } return r.deleted, r.batches, r.dryRun")
                == [400, 0, true])
        // The whole script under --dry-run.
        let (results, _) = try test.session.database.dryRun {
            try test.run("local r = telemetry.cleanup{ olderThan = 401 } return r.deleted, r.dryRun")
        }
        #expect(results == [400, true])
        #expect(try test.sqlite3("SELECT count(*) FROM telemetry") == "1000")
    }

    @Test func refusedInsideATransaction() throws {
        let test = try seeded()
        #expect(test.failure("db.transaction(function() telemetry.cleanup{ olderThan = 401 } end)")
                == "test:1: telemetry.cleanup cannot run inside db.transaction: it commits each batch on its own so that other writers are not blocked; call it outside the transaction")
        #expect(try test.sqlite3("SELECT count(*) FROM telemetry") == "1000")
    }

    @Test func badArguments() throws {
        let test = try TestSession()
        let hint = "write a number and a unit, as \"30d\", \"12h\", \"15m\", \"90s\" or \"2w\""
        let cases: [(String, String)] = [
            ("telemetry.cleanup{ olderThan = '3x' }", "bad argument #1 to 'cleanup' (olderThan: '3x' is not a duration: \(hint))"),
            ("telemetry.cleanup{ olderThan = true }", "bad argument #1 to 'cleanup' (olderThan: a duration (\"30d\") or a date (seconds since 1970) expected, got boolean)"),
            ("telemetry.cleanup{ olderThan = '1d', batch = 0 }", "bad argument #1 to 'cleanup' (batch: a positive number of rows expected, got 0)"),
            ("telemetry.cleanup{ olderThan = '1d', batch = 2.5 }", "bad argument #1 to 'cleanup' (batch: a whole number expected, got 2.5)"),
            ("telemetry.cleanup{ olderThan = '1d', keep = -1 }", "bad argument #1 to 'cleanup' (keep: 0 or more rows expected, got -1)"),
            ("telemetry.cleanup{ olderThan = '1d', event = 3 }", "bad argument #1 to 'cleanup' (event: a string expected, got number)"),
            ("telemetry.cleanup{ olderThan = '1d', dryRun = 'yes' }", "bad argument #1 to 'cleanup' (dryRun: a boolean expected, got string)"),
            ("telemetry.cleanup{ olderThan = '1d', onBatch = 1 }", "bad argument #1 to 'cleanup' (onBatch: a function expected, got number)"),
            ("telemetry.cleanup{ olderthan = '1d' }", "bad argument #1 to 'cleanup' (unknown option 'olderthan' (options: olderThan, keep, event, batch, dryRun, onBatch))"),
            ("telemetry.cleanup('30d')", "bad argument #1 to 'cleanup' (table expected, got string)"),
        ]
        for (code, message) in cases {
            #expect(test.failure(code) == "test:1: " + message)
        }
    }

    @Test func anInterruptStopsBetweenBatchesAndKeepsWhatWasDone() throws {
        let test = try seeded()
        let runtime = test.session.runtime
        runtime.register("interruptNow") { _ in
            runtime.interrupt(.interrupted)
            return 0
        }
        let message = test.failure("""
            telemetry.cleanup{ olderThan = 401, batch = 100, onBatch = function(p) if p.deleted == 200 then interruptNow() end end }
            """)
        #expect(message != nil)
        #expect(try test.sqlite3("SELECT count(*) FROM telemetry") == "800")
        // The state works again afterwards.
        #expect(try test.run("return telemetry.cleanup{ olderThan = 401 }.deleted") == [200])
    }

    // MARK: Progress bar

    @Test func progressLine() {
        #expect(ProgressBar.render(label: "cleanup", unit: "rows", completed: 500, total: 1000, elapsed: 2)
                == "cleanup ████████████              50%  500/1,000 rows  250 rows/s  0:02 left")
        #expect(ProgressBar.render(label: "backup", unit: "pages", completed: 1_234_567, total: 1_234_567, elapsed: 61)
                == "backup ████████████████████████ 100%  1,234,567/1,234,567 pages  20.2 k pages/s  1:01")
        // 1/7 of 24 cells = 27 eighths → 3 full cells, ▍ (3/8), 20 empty.
        #expect(ProgressBar.render(label: "x", unit: "", completed: 1, total: 7, elapsed: 0)
                == "x ███▍" + String(repeating: " ", count: 20) + "  14%  1/7")
        #expect(ProgressBar.render(label: "x", unit: "", completed: 0, total: 0, elapsed: 0)
                == "x ████████████████████████ 100%  0/0")
    }

    @Test func progressBarDrawsThrottledAndOnlyWithAnOutput() {
        var lines: [String] = []
        var time = 0.0
        let bar = ProgressBar(label: "t", unit: "rows", output: { lines.append($0) }, interval: 0.1, clock: { time })
        time = 1
        bar.update(completed: 10, total: 100)
        time = 1.05
        bar.update(completed: 20, total: 100)   // too soon: skipped
        time = 2
        bar.update(completed: 100, total: 100)
        bar.finish()
        #expect(lines.count == 3)
        #expect(lines[0].hasPrefix("\rt ██▍") && lines[0].hasSuffix("\u{1B}[K"))
        #expect(lines[1].contains("100/100 rows  50 rows/s  0:02"))
        #expect(lines[2] == "\n")
        let silent = ProgressBar(label: "t", output: nil)
        #expect(!silent.isVisible)
        silent.update(completed: 1, total: 2)
        silent.finish()
    }
}
