import Foundation
import GRDB
import Store

/// Telemetry retention cleanup (issue 4): delete the 1,000,000 oldest of
/// 2,000,000 telemetry rows while a second process inserts telemetry
/// continuously, once with `telemetry.cleanup` (batches, each its own
/// transaction) and once with one `DELETE … WHERE created_at < ?` run by
/// the `sqlite3` CLI on an identical copy; the writer reports the longest
/// any of its insert transactions took (its worst wait for the lock).
enum CleanupBenchmarks {
    static let targetRatio = 0.8
    static let targetWorstWait = 0.1

    static let rows = 2_000_000
    static let deleted = 1_000_000

    /// Both ways run this many times, alternating, each on a fresh copy of
    /// the same database: the table shows medians, and the largest worst
    /// wait beside its median (one run each swung the ratio between 57 %
    /// and 115 % on this two-core machine).
    static let rounds = 3

    static func run(directory: String, executable: String) throws -> String {
        // None: telemetry.cleanup's own (on SQLite, rows by time).
        let batch = ProcessInfo.processInfo.environment["OPSH_BENCH_CLEANUP_BATCH"].flatMap(Int.init)
        let templatePath = directory + "/cleanup-template.sqlite"
        let cutoff = try makeDatabase(path: templatePath)

        var cliRuns: [Measured] = []
        var opshRuns: [Measured] = []
        var reports: [TelemetryCleanup.Report] = []
        for round in 0..<rounds {
            // One statement in the sqlite3 CLI.
            let cliPath = directory + "/cleanup-cli-\(round).sqlite"
            try freshCopy(of: templatePath, at: cliPath)
            cliRuns.append(try withWriter(path: cliPath, executable: executable, directory: directory) {
                let process = Process()
                process.executableURL = URL(fileURLWithPath: "/usr/bin/sqlite3")
                process.arguments = ["-bail", "-cmd", ".timeout 60000", cliPath,
                                     "DELETE FROM telemetry WHERE created_at < \(cutoff)"]
                try process.run()
                process.waitUntilExit()
                precondition(process.terminationStatus == 0, "sqlite3 failed")
            })
            try check(path: cliPath, cutoff: cutoff)
            try FileManager.default.removeItem(atPath: cliPath)

            // The core of telemetry.cleanup (the Lua binding only parses options).
            let opshPath = directory + "/cleanup-opsh-\(round).sqlite"
            try freshCopy(of: templatePath, at: opshPath)
            let store = try Store.open(path: opshPath)
            var report = TelemetryCleanup.Report()
            opshRuns.append(try withWriter(path: opshPath, executable: executable, directory: directory) {
                report = try store.cleanupTelemetry(.init(cutoff: cutoff, batchSize: batch))
            })
            precondition(report.deleted == deleted, "cleanup deleted \(report.deleted)")
            try check(path: opshPath, cutoff: cutoff)
            try store.writer.close()
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: opshPath + suffix) }
            reports.append(report)
        }

        let cli = Measured.summary(cliRuns)
        let opsh = Measured.summary(opshRuns)
        func worstWait(_ median: Measured, _ runs: [Measured]) -> String {
            "\(formatDuration(median.worstWait)) (largest \(formatDuration(runs.map(\.worstWait).max() ?? 0)))"
        }
        let report = reports.sorted { $0.batchSeconds < $1.batchSeconds }[reports.count / 2]
        let cliRate = Double(deleted) / cli.seconds
        let opshRate = Double(deleted) / opsh.seconds
        let ratio = opshRate / cliRate
        // Issue 27's targets (issue 17's were 70 % and 200 ms).
        let met = ratio >= targetRatio && opsh.worstWait < targetWorstWait
        let batches = "\(report.batches) batches: \(formatDuration(report.batchSeconds)) in transactions, longest \(String(format: "%.1f ms", report.longestLockMs))"
        // The WAL stays bounded while opsh deletes in batches (issue 17): checked before it is printed.
        precondition(opsh.largestWAL <= BackendBenchmarks.walLimit,
                     "the WAL grew to \(BackendBenchmarks.formatBytes(opsh.largestWAL)) during telemetry.cleanup")
        return """
            ### Telemetry cleanup

            Delete the \(formatCount(deleted)) oldest of \(formatCount(rows)) telemetry rows while another process \
            inserts one row per transaction every 5 ms (busy timeout 60 s); its worst wait is its longest insert transaction. \
            Each way runs \(rounds) times, alternating, on fresh copies: medians, and the largest worst wait of the runs.

            | run | rows/s | time | writer's worst wait | writer's commits | largest `-wal` |
            | --- | --- | --- | --- | --- | --- |
            | `sqlite3`: one `DELETE … WHERE created_at < ?` | \(formatRate(cliRate)) | \(formatDuration(cli.seconds)) | \(worstWait(cli, cliRuns)) | \(cli.commits) | \(BackendBenchmarks.formatBytes(cli.largestWAL)) |
            | opsh: `telemetry.cleanup{\(batch.map { " batch = \($0) " } ?? "")}` (median run: \(batches)) | \(formatRate(opshRate)) | \(formatDuration(opsh.seconds)) | \(worstWait(opsh, opshRuns)) | \(opsh.commits) | \(BackendBenchmarks.formatBytes(opsh.largestWAL)) |

            Target (issue 27): ≥ \(Int(targetRatio * 100)) % of the single statement's throughput with the writer's worst wait under \(Int(targetWorstWait * 1000)) ms (medians). \
            Measured: \(String(format: "%.0f", ratio * 100)) %, \(formatDuration(opsh.worstWait)): **\(met ? "met" : "not met")**.

            Largest `-wal`: the size of the database's `-wal` file, read every 2 ms by a thread of opsh-bench from the \
            start of the deletion to its end, the largest of the \(rounds) runs (the writer's commits are in it too; MB of 10⁶ bytes). \
            opsh's stays within the 64 MB the issue sets for bulk writes (checked before it is printed): it checkpoints between batches.
            """
    }

    /// Copies the database and writes the copy out to disk before the run:
    /// hundreds of megabytes of dirty pages written back during a run stall
    /// the writer's commits and are not the cleanup's doing.
    static func freshCopy(of template: String, at path: String) throws {
        try FileManager.default.copyItem(atPath: template, toPath: path)
        sync()
    }

    /// Fills a new database with `rows` rows one second apart; returns the
    /// cutoff before which the oldest `deleted` rows lie.
    static func makeDatabase(path: String) throws -> Double {
        let base = (Date().timeIntervalSince1970 - 60 * 86400).rounded(.down)
        do {
            let store = try Store.open(path: path)
            let names = ["launch", "generation", "error", "download"]
            let chunk = 200_000
            for start in stride(from: 0, to: rows, by: chunk) {
                let events = (start..<min(start + chunk, rows)).map { (index: Int) -> TelemetryRepository.Event in
                    let properties: String? = index % 3 == 0 ? "{\"latency\":\(index % 997)}" : nil
                    let session: String? = index % 5 == 0 ? "s\(index % 101)" : nil
                    return TelemetryRepository.Event(event: names[index & 3], properties: properties, sessionId: session,
                                                     createdAt: Date(timeIntervalSince1970: base + Double(index)))
                }
                try store.client.write { db in try store.telemetry.insertBatch(db, events) }
            }
            try store.writer.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)") }
        }
        return base + Double(deleted)
    }

    static func check(path: String, cutoff: Double) throws {
        let queue = try DatabaseQueue(path: path)
        let (old, total) = try queue.read { db in
            (try Int.fetchOne(db, sql: "SELECT count(*) FROM telemetry WHERE created_at < ?", arguments: [cutoff]) ?? -1,
             try Int.fetchOne(db, sql: "SELECT count(*) FROM telemetry WHERE event <> 'writer'") ?? -1)
        }
        precondition(old == 0 && total == rows - deleted, "after the cleanup: \(old) old rows, \(total) rows")
        try queue.close()
    }

    struct Measured {
        var seconds: Double
        var worstWait: Double
        var commits: Int
        /// The largest the `-wal` file was while the run deleted.
        var largestWAL: Int64

        /// Medians of the runs' figures, each on its own; the largest WAL of all.
        static func summary(_ runs: [Measured]) -> Measured {
            func median(_ values: [Double]) -> Double { Distribution(values).median }
            return Measured(seconds: median(runs.map(\.seconds)), worstWait: median(runs.map(\.worstWait)),
                            commits: Int(median(runs.map { Double($0.commits) })),
                            largestWAL: runs.map(\.largestWAL).max() ?? 0)
        }
    }

    /// Runs `body` while a writer process inserts; returns how long `body`
    /// took and the writer's figures.
    static func withWriter(path: String, executable: String, directory: String, _ body: () throws -> Void) throws -> Measured {
        let stopFile = directory + "/stop-\(UUID().uuidString)"
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: executable)
        writer.arguments = ["--cleanup-writer", path, stopFile]
        let output = Pipe()
        writer.standardOutput = output
        try writer.run()
        Thread.sleep(forTimeInterval: 0.3)
        // The -wal's size every 2 ms while the cleanup runs.
        let wal = BackendBenchmarks.FileSizeSampler(path: path + "-wal", interval: 0.002)
        let start = now()
        try body()
        let seconds = now() - start
        let walSamples = wal.stop()
        precondition(walSamples.samples > 100, "the WAL was sampled only \(walSamples.samples) times")
        Thread.sleep(forTimeInterval: 0.3)
        _ = FileManager.default.createFile(atPath: stopFile, contents: nil)
        let data = output.fileHandleForReading.readDataToEndOfFile()
        writer.waitUntilExit()
        let fields = String(decoding: data, as: UTF8.self).split(separator: " ").compactMap { Double($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        precondition(fields.count == 2, "writer said \(String(decoding: data, as: UTF8.self))")
        return Measured(seconds: seconds, worstWait: fields[1], commits: Int(fields[0]), largestWAL: walSamples.largest)
    }

    /// The writer process: one telemetry row per transaction every 5 ms
    /// until `stopFile` exists; prints its commits and its longest
    /// transaction in seconds.
    static func runWriter(path: String, stopFile: String) throws {
        var configuration = Configuration()
        configuration.busyMode = .timeout(60)
        let queue = try DatabaseQueue(path: path, configuration: configuration)
        var worst = 0.0
        var commits = 0
        while !FileManager.default.fileExists(atPath: stopFile) {
            let start = now()
            try queue.write { db in
                try db.execute(sql: "INSERT INTO telemetry (event, properties, created_at) VALUES ('writer', ?, ?)",
                               arguments: ["{\"i\":\(commits)}", wallClock()])
            }
            worst = max(worst, now() - start)
            commits += 1
            Thread.sleep(forTimeInterval: 0.005)
        }
        print("\(commits) \(worst)")
    }

    static func formatCount(_ value: Int) -> String {
        let formatter = NumberFormatter()
        formatter.numberStyle = .decimal
        formatter.groupingSeparator = ","
        return formatter.string(from: NSNumber(value: value)) ?? String(value)
    }
}
