import Foundation
import Store

/// Collects the lines of one build and writes them to `buildLogs` in
/// batches.
///
/// Reader threads ``add(_:category:)`` lines; a flusher thread writes
/// whatever is pending every `flushInterval`, or as soon as `flushLineCount`
/// lines wait, in one short transaction (``BuildStore/appendLog(build:_:progress:)``:
/// a cached prepared statement on SQLite, multi-row INSERTs on PostgreSQL). Under load a batch grows (up to `maxBatchLines`), so a build
/// printing a million lines costs few commits; when `maxPendingLines` wait
/// the readers block, which in turn blocks the build on its pipe instead of
/// growing memory without bound.
///
/// Lines get their level from ``LogClassifier/level(of:)`` and their
/// category from the phase (checkout, then build, switching to test). Their
/// `createdAt` never goes backwards, so ordering by (createdAt, rowid) is
/// insertion order, which followers rely on.
final class LogSink: @unchecked Sendable {
    struct Limits {
        var flushInterval: TimeInterval
        var flushLineCount: Int
        var maxBatchLines: Int
        var maxPendingLines: Int
        var recentLineCount: Int
    }

    let buildId: String
    private let database: any BuildStore
    private let limits: Limits
    private let idPrefix: String
    /// What the lines opsh writes itself go through: URL credentials and
    /// the configuration's API keys masked (``note(_:level:)``; the
    /// checkout's git lines are passed through it by the run).
    let mask: @Sendable (String) -> String

    private let condition = NSCondition()
    // Guarded by `condition`:
    private var pending: [NewBuildLogLine] = []
    private var classifier = LogClassifier(category: "checkout")
    private var sequence = 0
    private var lastCreatedAt = 0.0
    private var recent: [String] = []
    private var recentStart = 0
    private var progress: Double?
    private var closed = false
    private var flusherDone = false
    private var failure: (error: String, droppedLines: Int)?
    private var written = 0

    init(buildId: String, database: any BuildStore, limits: Limits,
         mask: @escaping @Sendable (String) -> String = { $0 }) {
        self.buildId = buildId
        self.database = database
        self.limits = limits
        self.mask = mask
        // One prefix per run: a build taken back and run again (README,
        // "Build runners") writes lines beside its earlier run's.
        self.idPrefix = buildId + "-" + UUID().uuidString.prefix(8).lowercased() + "-"
        let thread = Thread { [self] in flushLoop() }
        thread.name = "opsh.job.\(buildId).logs"
        thread.start()
    }

    /// The category that lines get from now on (`checkout`, `build`).
    func setPhase(_ category: String) {
        condition.withLock { classifier = LogClassifier(category: category) }
    }

    /// The current category (`test` once the output said tests run).
    var category: String { condition.withLock { classifier.category } }

    /// Adds lines of output. `category` overrides the phase's.
    func add(_ lines: [String], category: String? = nil) {
        guard !lines.isEmpty else { return }
        let levels = lines.map(LogClassifier.level(of:))
        let latestProgress = lines.lazy.reversed().compactMap(ProgressParser.progress(in:)).first
        append(lines, levels: levels, category: category, progress: latestProgress, output: true)
    }

    /// Adds a line of opsh's own (what it runs, how the build ended),
    /// masked (``mask``).
    func note(_ line: String, level: BuildLogLevel = .info) {
        append([mask(line)], levels: [level], category: nil, progress: nil, output: false)
    }

    /// The last lines of output (not opsh's notes), oldest first.
    var recentLines: [String] {
        condition.withLock { Array(recent[recentStart...] + recent[..<recentStart]) }
    }

    /// The latest progress seen, if any.
    var lastProgress: Double? { condition.withLock { progress } }

    /// Lines written so far, and why some could not be written.
    var status: (written: Int, failure: (error: String, droppedLines: Int)?) {
        condition.withLock { (written, failure) }
    }

    /// Writes what is pending and stops the flusher.
    func close() {
        condition.lock()
        closed = true
        condition.broadcast()
        while !flusherDone { condition.wait() }
        condition.unlock()
    }

    private func append(_ lines: [String], levels: [BuildLogLevel], category: String?, progress newProgress: Double?, output: Bool) {
        condition.lock()
        defer { condition.unlock() }
        while pending.count >= limits.maxPendingLines && !closed { condition.wait() }
        let now = max(Date().timeIntervalSince1970, lastCreatedAt)
        lastCreatedAt = now
        pending.reserveCapacity(pending.count + lines.count)
        for (line, level) in zip(lines, levels) {
            sequence += 1
            let lineCategory = category ?? (output ? classifier.category(of: line) : classifier.category)
            pending.append(NewBuildLogLine(id: idPrefix + Self.padded(sequence), level: level, category: lineCategory,
                                           content: line, createdAt: now))
            if output { remember(line) }
        }
        if let newProgress { progress = newProgress }
        if pending.count >= limits.flushLineCount { condition.broadcast() }
    }

    private func remember(_ line: String) {
        guard limits.recentLineCount > 0 else { return }
        if recent.count < limits.recentLineCount {
            recent.append(line)
        } else {
            recent[recentStart] = line
            recentStart = (recentStart + 1) % recent.count
        }
    }

    private var writtenProgress: Double?

    private func flushLoop() {
        condition.lock()
        while true {
            let deadline = Date().addingTimeInterval(limits.flushInterval)
            while pending.count < limits.flushLineCount && !closed {
                if !condition.wait(until: deadline) { break }
            }
            let newProgress = progress != writtenProgress ? progress : nil
            if pending.isEmpty && newProgress == nil {
                if closed { break }
                continue
            }
            let batch: [NewBuildLogLine]
            if pending.count <= limits.maxBatchLines {
                batch = pending
                pending.removeAll(keepingCapacity: true)
            } else {
                batch = Array(pending.prefix(limits.maxBatchLines))
                pending.removeFirst(limits.maxBatchLines)
            }
            writtenProgress = progress
            condition.broadcast() // readers waiting for room
            condition.unlock()
            let error = write(batch, progress: newProgress)
            condition.lock()
            if let error {
                failure = (failure?.error ?? error, (failure?.droppedLines ?? 0) + batch.count)
            } else {
                written += batch.count
            }
        }
        flusherDone = true
        condition.broadcast()
        condition.unlock()
    }

    /// One transaction; a busy database is retried a few times before the
    /// batch is given up (and counted).
    private func write(_ batch: [NewBuildLogLine], progress: Double?) -> String? {
        var lastError = ""
        for attempt in 0..<3 {
            do {
                try database.appendLog(build: buildId, batch, progress: progress)
                return nil
            } catch {
                lastError = "\(error)"
                Thread.sleep(forTimeInterval: 0.05 * Double(attempt + 1))
            }
        }
        return lastError
    }

    /// Eight digits at least, so that ids sort in line order.
    private static func padded(_ number: Int) -> String {
        let digits = String(number)
        return digits.count >= 8 ? digits : String(repeating: "0", count: 8 - digits.count) + digits
    }
}
