import Bindings
import Foundation
import Jobs
import LuaRuntime
import Store

/// Benchmarks of the job runner (issue 3): how much a build's output costs
/// when every line goes into `buildLogs`.
enum JobBenchmarks {
    /// A build printing 1,000,000 log-like lines (awk: `[i/N] Compiling …`,
    /// a warning every 100th line) run through the job manager into a
    /// database, next to the same command writing to /dev/null. Meanwhile
    /// another thread commits one small row every 10 ms, to see how long
    /// the ingestion makes other writers wait.
    static func logIngestion(directory: String, lines: Int = 1_000_000) throws -> [Result] {
        let command = """
            awk 'BEGIN { n = \(lines); for (i = 1; i <= n; i++) { if (i % 100 == 0) print "src/file" i ".c:1:1: warning: unused variable"; \
            else printf "[%d/%d] Compiling src/file%d.c\\n", i, n, i } }'
            """

        // The command alone, output to /dev/null.
        let baselineStart = now()
        try shell(command, output: FileHandle(forWritingAtPath: "/dev/null")!)
        let baseline = now() - baselineStart

        // A repository to check out, a project and a scheme.
        let repository = directory + "/jobs-repo"
        try shell("""
            set -e
            git init -q -b main '\(repository)' && cd '\(repository)'
            echo hello > README && git add README
            git -c user.name=bench -c user.email=bench@example.com commit -q -m one && git tag 1.0.0
            """, output: FileHandle.standardError)
        let store = try Store.open(path: directory + "/jobs.sqlite")
        let scheme = try store.client.write { db in
            try store.projects.records.insert(db, ProjectRecord(bundleIdentifier: "com.example.bench", name: "Bench",
                                                                gitRepositoryURL: repository))
            return try store.schemes.records.insert(db, SchemeRecord(projectBundleIdentifier: "com.example.bench",
                                                                     name: "Bench", buildCommand: command))
        }
        let jobs = JobManager(store: store)

        // Another writer, committing a row every 10 ms.
        let stop = Flag()
        let latencies = LatencyLog()
        let writer = Thread {
            while !stop.isSet {
                let start = now()
                try? store.client.write { db in
                    try store.telemetry.insertBatch(db, [TelemetryRepository.Event(event: "tick")])
                }
                latencies.add(now() - start)
                Thread.sleep(forTimeInterval: 0.01)
            }
            stop.acknowledge()
        }
        writer.start()

        let start = now()
        let build = try jobs.run(scheme: scheme.id, version: "1.0.0")
        let ended = try jobs.wait(build.id, timeout: 600)
        let wall = now() - start
        stop.set()
        stop.waitForAcknowledge()
        precondition(ended.status == .succeeded, "the benchmark build \(ended.status.rawValue)")
        let stored = try store.client.read { db in
            try store.buildLogs.records.count(db, ListRequest(filters: [ColumnFilter("category", .equal, "build"),
                                                                        ColumnFilter("buildId", .equal, build.id)]))
        }
        precondition(stored >= lines, "only \(stored) of \(lines) lines were stored")

        let rate = Double(lines) / wall
        let others = Distribution(latencies.values)
        let sqlRate = try dbModuleInsertRate(store: store, build: build.id, lines: lines)
        let ratio = rate / sqlRate
        return [
            Result(name: "build printing 1,000,000 log lines, the command alone with output to /dev/null",
                   value: formatDuration(baseline), target: "reported", verdict: "—"),
            Result(name: "the same build through the job manager (checkout, classification, batched inserts into `buildLogs`)",
                   value: "\(formatDuration(wall)), \(formatRate(rate)) lines/s", target: "reported", verdict: "—"),
            Result(name: "wall time the job manager adds to that build", value: formatDuration(wall - baseline),
                   target: "reported", verdict: "—"),
            Result(name: "another writer's commit (one every 10 ms) during that ingestion, \(others.samples.count) commits",
                   value: "median \(formatDuration(others.median)), max \(formatDuration(others.percentile(100)))",
                   target: "max < 200 ms", verdict: others.percentile(100) < 0.2 ? "met" : "**missed**"),
            Result(name: "the `db` module inserting the same rows (same columns and widths) in one transaction, in the same run",
                   value: "\(formatRate(sqlRate)) rows/s; ingestion at \(String(format: "%.2f", ratio))× that",
                   target: "ingestion ≥ 0.5×", verdict: ratio >= 0.5 ? "met" : "**missed**"),
        ]
    }

    /// Rows per second `db.exec` inserts into `buildLogs`, rows like the
    /// build's (its ids with another prefix, the same lines), in one
    /// transaction, from Lua in this process.
    static func dbModuleInsertRate(store: Store, build: String, lines: Int) throws -> Double {
        let session = try OpshSession(store: store)
        session.runtime.register("monotonic") { call in call.results(.number(now())) }
        let values = try session.runtime.execute("""
            local n, build = \(lines), '\(build)'
            local started = monotonic()
            db.transaction(function()
              for i = 1, n do
                local line = (i % 100 == 0) and ('src/file' .. i .. '.c:1:1: warning: unused variable')
                  or string.format('[%d/%d] Compiling src/file%d.c', i, n, i)
                db.exec('INSERT INTO buildLogs (id, buildId, level, category, content, createdAt) VALUES (?, ?, ?, ?, ?, ?)',
                        string.format('%s-sql-%09d', build, i), build, (i % 100 == 0) and 'warning' or 'info', 'build', line, 1.7e9 + i)
              end
            end)
            local seconds = monotonic() - started
            db.exec("DELETE FROM buildLogs WHERE id LIKE ?", build .. '-sql-%')
            return seconds
            """, chunkName: "=(bench: db insert)")
        guard case let .number(seconds)? = values.first else { throw JobBenchmarkError(message: "no time") }
        return Double(lines) / seconds
    }

    private static func shell(_ script: String, output: FileHandle) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", script]
        process.standardOutput = output
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw JobBenchmarkError(message: "`\(script)` exited with \(process.terminationStatus)")
        }
    }
}

struct JobBenchmarkError: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}

/// A stop flag a thread acknowledges.
final class Flag: @unchecked Sendable {
    private let condition = NSCondition()
    private var value = false
    private var acknowledged = false

    var isSet: Bool { condition.withLock { value } }
    func set() { condition.withLock { value = true } }

    func acknowledge() {
        condition.withLock {
            acknowledged = true
            condition.broadcast()
        }
    }

    func waitForAcknowledge() {
        condition.lock()
        while !acknowledged { condition.wait() }
        condition.unlock()
    }
}
