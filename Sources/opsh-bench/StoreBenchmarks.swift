import Foundation
import GRDB
import Store

/// Benchmarks of the storage core (issue: the Swift core).
enum StoreBenchmarks {
    /// A point query by key: `build.{id}` parsed and fetched through the
    /// storage client, 20,000 times over 10,000 builds.
    static func pointQueryByKey(directory: String, peer: String?) throws -> Result {
        let store = try Store.open(path: directory + "/point.sqlite")
        let ids: [String] = try store.client.write { db in
            try db.execute(sql: "INSERT INTO projects VALUES ('com.example.app', 'App', 'App', '/srv/app', 0)")
            let scheme = try store.schemes.records.insert(db, SchemeRecord(projectBundleIdentifier: "com.example.app", name: "App"))
            return try (1...10_000).map { number in
                try store.builds.records.insert(db, BuildRecord(schemeId: scheme.id, versionString: "1.0.\(number)", buildNumber: number)).id
            }
        }
        var samples: [Double] = []
        samples.reserveCapacity(20_000)
        for index in 0..<20_000 {
            let text = "build.\(ids[(index * 7919) % ids.count])"
            let start = now()
            let key = try QueryKey(parsing: text)
            let value = try store.value(of: key)
            samples.append(now() - start)
            precondition(value != .null)
        }
        let median = Distribution(samples).median
        let mean = samples.reduce(0, +) / Double(samples.count)
        // The C peer reads the same rows of the same file, in the same order.
        guard let peer, let seconds = runPeer(peer, "point", directory + "/point.sqlite") else {
            return Result(name: "point query by key (`build.{id}`: parse + fetch), median of 20,000",
                          value: formatDuration(median), target: "≤ \(pointRatio)× C", verdict: "no C peer (cc failed)")
        }
        let ratio = mean / (seconds / 20_000)
        return Result(name: "point query by key (`build.{id}`: parse + fetch through the core), 20,000; C peer: the same reads with a reused statement",
                      value: String(format: "median %@, mean %@; C %@; %.1f× C", formatDuration(median), formatDuration(mean),
                                    formatDuration(seconds / 20_000), ratio),
                      target: "≤ \(pointRatio)× C", verdict: ratio <= Double(pointRatio) ? "met" : "**missed**")
    }

    /// The targets as ratios to the C peer in the same run (issue "One data
    /// path"): the old absolute ones (< 50 µs, ≥ 300 k rows/s) were met on a
    /// quiet machine and read as regressions on a busy one.
    static let pointRatio = 4
    static let insertRatio = 0.5

    /// Compiles the storage core's C peer (bench/storage-core/c.c); nil
    /// when no C compiler works.
    static func compilePeer(repository: String, directory: String) -> String? {
        let compiled = directory + "/storage-core-c"
        return LuaBenchmarks.run(["cc", "-O2", "-o", compiled, repository + "/bench/storage-core/c.c", "-lsqlite3"]) != nil ? compiled : nil
    }

    /// Seconds the C peer reports for `work` on `file`.
    static func runPeer(_ peer: String, _ work: String, _ file: String) -> Double? {
        LuaBenchmarks.run([peer, work, file]).flatMap { Double($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
    }

    /// Batched telemetry insert: 1,000,000 rows in one transaction.
    static func batchedTelemetryInsert(directory: String, peer: String?) throws -> Result {
        let store = try Store.open(path: directory + "/telemetry.sqlite")
        let count = 1_000_000
        let base = Date().timeIntervalSince1970
        let names = ["launch", "generation", "error", "download"]
        let events = (0..<count).map { (index: Int) -> TelemetryRepository.Event in
            let properties: String? = index % 3 == 0 ? "{\"latency\":\(index % 997)}" : nil
            let session: String? = index % 5 == 0 ? "s\(index % 101)" : nil
            let date = Date(timeIntervalSince1970: base + Double(index) / 1000)
            return TelemetryRepository.Event(event: names[index & 3], properties: properties, sessionId: session, createdAt: date)
        }
        let start = now()
        try store.client.write { db in try store.telemetry.insertBatch(db, events) }
        let rate = Double(count) / (now() - start)
        // The C peer inserts the same rows into a fresh database of the same schema.
        _ = try Store.open(path: directory + "/telemetry-c.sqlite")
        guard let peer, let seconds = runPeer(peer, "telemetry", directory + "/telemetry-c.sqlite") else {
            return Result(name: "batched telemetry insert, 1,000,000 rows in one transaction",
                          value: formatRate(rate) + " rows/s", target: "≥ \(insertRatio)× C", verdict: "no C peer (cc failed)")
        }
        let peerRate = Double(count) / seconds
        let ratio = rate / peerRate
        return Result(name: "batched telemetry insert, 1,000,000 rows in one transaction; C peer: the same rows, a reused statement",
                      value: String(format: "%@ rows/s; C %@ rows/s; %.2f× C", formatRate(rate), formatRate(peerRate), ratio),
                      target: "≥ \(insertRatio)× C", verdict: ratio >= insertRatio ? "met" : "**missed**")
    }

    /// Change-to-callback latency across processes: a child process commits
    /// one telemetry row every 20 ms stamped with its wall-clock commit time;
    /// an observation here measures when its callback sees each row.
    ///
    /// Commits are spaced a little more than the poll interval apart (with
    /// jitter, so they do not phase-lock with the poll) so that each one is
    /// seen on its own and its latency is measured, not coalesced away.
    static func crossProcessLatency(directory: String, executable: String, pollInterval: Double, writes: Int) throws -> Result {
        let path = directory + "/latency-\(Int(pollInterval * 1000)).sqlite"
        let store = try Store.open(path: path, options: StoreOptions(externalChangePollInterval: pollInterval))
        let latencies = LatencyLog()
        let observation = try QueryObservation(
            client: store.client, tables: ["telemetry"],
            fetch: { db in .real(try Double.fetchOne(db, sql: "SELECT max(created_at) FROM telemetry") ?? 0) },
            onChange: { result in
                let seen = wallClock()
                if case .success(.real(let stamp)) = result, stamp > 0 { latencies.add(seen - stamp) }
            })
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: executable)
        writer.arguments = ["--writer", path, String(writes), String(max(pollInterval * 1.5, 0.02))]
        try writer.run()
        writer.waitUntilExit()
        Thread.sleep(forTimeInterval: pollInterval * 3)
        observation.cancel()
        let distribution = Distribution(latencies.values)
        return Result(
            name: "cross-process change → callback latency (poll every \(Int(pollInterval * 1000)) ms, \(distribution.samples.count) of \(writes) commits seen)",
            value: "median \(formatDuration(distribution.median)), p99 \(formatDuration(distribution.percentile(99)))",
            target: "reported", verdict: "—")
    }

    /// The writer side of ``crossProcessLatency``: a plain GRDB queue, as the
    /// backend would have.
    static func runWriter(path: String, count: Int, interval: Double) throws {
        var configuration = Configuration()
        configuration.busyMode = .timeout(5)
        let queue = try DatabaseQueue(path: path, configuration: configuration)
        for index in 0..<count {
            try queue.write { db in
                try db.execute(sql: "INSERT INTO telemetry (event, properties, created_at) VALUES ('tick', ?, ?)",
                               arguments: ["{\"i\":\(index)}", wallClock()])
            }
            Thread.sleep(forTimeInterval: interval * Double.random(in: 0.8...1.6))
        }
    }
}

final class LatencyLog: @unchecked Sendable {
    private let lock = NSLock()
    private var samples: [Double] = []
    func add(_ value: Double) { lock.lock(); samples.append(value); lock.unlock() }
    var values: [Double] { lock.lock(); defer { lock.unlock() }; return samples }
}
