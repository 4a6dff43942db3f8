import Foundation
import GRDB
import Testing
@testable import Store

/// Telemetry retention cleanup on real files: what goes, in how many
/// transactions, and that other processes can write between them.
@Suite struct TelemetryCleanupTests {
    /// Rows 1…count with `created_at` = i and event "a" (even i) or "b" (odd i).
    func seed(_ store: Store, count: Int = 1000) throws {
        try store.client.write { db in
            try db.execute(sql: """
                WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
                INSERT INTO telemetry (event, created_at) SELECT CASE WHEN i % 2 = 0 THEN 'a' ELSE 'b' END, i FROM n
                """, arguments: [count])
        }
    }

    func remaining(_ store: Store, _ condition: String = "1") throws -> Int {
        try store.client.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM telemetry WHERE \(condition)") ?? -1 }
    }

    @Test func deletesRowsOlderThanTheCutoffInBatches() throws {
        let directory = TemporaryDirectory()
        let store = try makeStore(in: directory)
        try seed(store)
        var seen: [MaintenanceProgress] = []
        let report = try store.cleanupTelemetry(.init(cutoff: 401, batchSize: 64), progress: { seen.append($0) })
        #expect(report.deleted == 400)
        #expect(report.batches == 7)  // 6 × 64 + 16
        #expect(report.matched == 400)
        #expect(!report.dryRun && !report.stopped)
        #expect(report.longestLockMs > 0 && report.longestLockMs < 5000)
        #expect(try remaining(store) == 600)
        #expect(try remaining(store, "created_at < 401") == 0)
        #expect(seen.map(\.completed) == [0, 64, 128, 192, 256, 320, 384, 400])
        #expect(seen.allSatisfy { $0.total == 400 })
    }

    @Test func keepProtectsTheNewestMatchingRows() throws {
        let directory = TemporaryDirectory()
        let store = try makeStore(in: directory)
        try seed(store)
        // The 700 newest are 301…1000: only 1…300 go.
        #expect(try store.cleanupTelemetry(.init(cutoff: 401, keep: 700, batchSize: 50)).deleted == 300)
        #expect(try remaining(store, "created_at <= 300") == 0)
        #expect(try remaining(store) == 700)
        // The 500 newest are all after the cutoff: keep changes nothing.
        #expect(try store.cleanupTelemetry(.init(cutoff: 451, keep: 500)).deleted == 150)
        // More to keep than there are rows.
        #expect(try store.cleanupTelemetry(.init(cutoff: 2000, keep: 5000)).deleted == 0)
        #expect(try remaining(store) == 550)
    }

    @Test func keepBreaksTiesOnTheSameDateByRowid() throws {
        let directory = TemporaryDirectory()
        let store = try makeStore(in: directory)
        try store.client.write { db in
            for _ in 0..<10 { try db.execute(sql: "INSERT INTO telemetry (event, created_at) VALUES ('t', 5)") }
        }
        #expect(try store.cleanupTelemetry(.init(cutoff: 100, keep: 3, batchSize: 2)).deleted == 7)
        let ids = try store.client.read { db in try Int64.fetchAll(db, sql: "SELECT id FROM telemetry ORDER BY id") }
        #expect(ids == [8, 9, 10])
    }

    @Test func eventLimitsTheCleanupAndTheKeep() throws {
        let directory = TemporaryDirectory()
        let store = try makeStore(in: directory)
        try seed(store)
        #expect(try store.cleanupTelemetry(.init(cutoff: 401, event: "a", batchSize: 30)).deleted == 200)
        #expect(try remaining(store, "event = 'b'") == 500)
        // 'a' rows left: 402, 404 … 1000 (300); keep the 250 newest: 502 … 1000.
        #expect(try store.cleanupTelemetry(.init(cutoff: 2000, keep: 250, event: "a")).deleted == 50)
        #expect(try remaining(store, "event = 'a'") == 250)
        #expect(try remaining(store, "event = 'a' AND created_at < 502") == 0)
        #expect(try store.cleanupTelemetry(.init(cutoff: 2000, event: "nothing")).deleted == 0)
    }

    @Test func dryRunCountsAndDeletesNothing() throws {
        let directory = TemporaryDirectory()
        let store = try makeStore(in: directory)
        try seed(store)
        let report = try store.cleanupTelemetry(.init(cutoff: 401, keep: 700, dryRun: true))
        #expect(report.deleted == 300)
        #expect(report.batches == 0)
        #expect(report.dryRun)
        #expect(try remaining(store) == 1000)
    }

    /// Runs the cleanup of `matching` rows while a `sqlite3` process
    /// inserts a `writer` row (created at `writerDate`) between its
    /// batches: the report, and what each insert that failed said. The
    /// cleanup waits for its progress callback, so had it kept the write
    /// lock across batches, the insert would fail with "database is
    /// locked" once the CLI's 5 s busy timeout ran out.
    func cleanUpWithAWriterBetweenBatches(_ store: Store, path: String, _ options: TelemetryCleanup.Options, matching: Int,
                                          writerDate: Int) throws -> (TelemetryCleanup.Report, [String]) {
        var failures: [String] = []
        let report = try store.cleanupTelemetry(options, progress: { progress in
            guard progress.completed > 0, progress.completed < matching else { return }
            do {
                try sqlite3CLI(path, "INSERT INTO telemetry (event, created_at) VALUES ('writer', \(writerDate))")
            } catch {
                failures.append("\(error)")
            }
        })
        return (report, failures)
    }

    @Test func anotherProcessWritesBetweenBatches() throws {
        let directory = TemporaryDirectory()
        let store = try makeStore(in: directory)
        try seed(store)
        let path = directory.file("opsh.sqlite")
        let (report, failures) = try cleanUpWithAWriterBetweenBatches(store, path: path, .init(cutoff: 401, batchSize: 64),
                                                                      matching: 400, writerDate: 5000)
        #expect(failures == [])
        #expect(report.deleted == 400)
        #expect(try remaining(store, "event = 'writer'") == 6)
    }

    /// Without a batch size, a batch on SQLite holds the lock about
    /// ``BatchPacing/lockAim``: many rows take several batches, and another
    /// process writes between them.
    @Test func batchesWithoutABatchSizeEndByTime() throws {
        let directory = TemporaryDirectory()
        let store = try makeStore(in: directory)
        try seed(store, count: 300_000)
        let path = directory.file("opsh.sqlite")
        let (report, failures) = try cleanUpWithAWriterBetweenBatches(store, path: path, .init(cutoff: 300_001),
                                                                      matching: 300_000, writerDate: 400_000)
        #expect(failures == [])
        #expect(report.deleted == 300_000)
        #expect(report.batches > 1)
        #expect(try remaining(store, "event = 'writer'") == report.batches - 1)
    }

    /// The pause after a batch (when no writer commits sooner) lets every
    /// writer that began waiting during the batch try once while the lock
    /// is free, on SQLite's busy-handler schedule.
    @Test func everyWaitingWriterTriesWhileTheLockIsFree() {
        var tries: [Double] = []
        for attempt in 0..<40 { tries.append(Double(LockWait.delay(afterTries: attempt).prior)) }
        for held in stride(from: 1.0, through: 150, by: 0.5) {
            let free = held...(held + BatchPacing.longestPause(afterHolding: held) - BatchPacing.slack)
            for began in stride(from: 0.0, through: held, by: 0.25) {
                let tried = tries.contains { free.contains(began + $0) }
                #expect(tried, "held \(held) ms, a writer waiting from \(began) ms does not try while the lock is free")
                if !tried { return }
            }
        }
    }

    /// A batch ends before the next try of a writer that began waiting as
    /// it did (53 ms on SQLite's busy-handler schedule).
    @Test func batchesEndBeforeTheTryOfAWriterThatWaitedFromTheirStart() {
        var tries: [Double] = []
        for attempt in 0..<40 { tries.append(Double(LockWait.delay(afterTries: attempt).prior)) }
        #expect(tries.first { $0 > BatchPacing.lockAim } == 53)
    }

    @Test func stoppingBetweenBatchesKeepsTheCommittedOnes() throws {
        let directory = TemporaryDirectory()
        let store = try makeStore(in: directory)
        try seed(store)
        var batches = 0
        let report = try store.cleanupTelemetry(.init(cutoff: 401, batchSize: 64),
                                                shouldStop: { batches >= 3 },
                                                progress: { if $0.completed > 0 { batches += 1 } })
        #expect(report.stopped)
        #expect(report.deleted == 192)
        #expect(report.batches == 3)
        #expect(try remaining(store) == 808)
    }

    @Test func badOptionsAreRefused() throws {
        let directory = TemporaryDirectory()
        let store = try makeStore(in: directory)
        #expect(throws: StoreError.refused(reason: "batch must be a positive number of rows, got 0")) {
            try store.cleanupTelemetry(.init(cutoff: 1, batchSize: 0))
        }
        #expect(throws: StoreError.refused(reason: "keep must be 0 or more rows, got -1")) {
            try store.cleanupTelemetry(.init(cutoff: 1, keep: -1))
        }
    }

    @Test func durations() throws {
        #expect(try DurationText.seconds("30d") == 30 * 86400)
        #expect(try DurationText.seconds("12h") == 12 * 3600)
        #expect(try DurationText.seconds("15m") == 900)
        #expect(try DurationText.seconds("90s") == 90)
        #expect(try DurationText.seconds("2w") == 14 * 86400)
        #expect(try DurationText.seconds("1.5h") == 5400)
        let hint = "write a number and a unit, as \"30d\", \"12h\", \"15m\", \"90s\" or \"2w\""
        for bad in ["30", "d", "30x", "-3d", "3 d", "1e3d", "", "30dd"] {
            #expect(throws: StoreError.refused(reason: "'\(bad)' is not a duration: \(hint)")) {
                try DurationText.seconds(bad)
            }
        }
    }

    @Test func retentionComesFromTheStorageConfiguration() throws {
        let directory = TemporaryDirectory()
        let store = try makeStore(in: directory)
        #expect(try store.telemetryRetentionDays() == nil)
        var configuration = SDKConfiguration(baseURL: "https://api.example.com")
        configuration.storage.telemetryRetentionDays = 12
        try store.client.write { db in try ConfigurationRepository().save(db, configuration) }
        #expect(try store.telemetryRetentionDays() == 12)
    }
}
