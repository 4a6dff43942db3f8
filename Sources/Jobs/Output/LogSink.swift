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
/// Every batch carries the run's lease (``BuildFence``): once the build is
/// no longer the run's, the sink drops what waits, takes no more lines and
/// tells the run (``onLeaseLost``). While the database does not answer
/// (a server restarting, a lock held past the busy timeout) the sink keeps
/// its lines and tries again until it does, spilling them to a
/// ``LogSpool`` file once `maxPendingLines` wait (README, "Build runners").
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
    private let fence: BuildFence?
    /// Where a ``LogSpool`` may go (the workspaces folder); nil: none.
    private let spoolFolder: String?
    private let onLeaseLost: @Sendable (BuildLeaseLost) -> Void
    private let onNotice: @Sendable (String) -> Void
    private let onProblem: @Sendable (String) -> Void
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
    /// Set once a write found the lease gone: nothing more is written.
    private var lost: BuildLeaseLost?
    /// Lines older than every pending one, kept on disk during an outage.
    private var spool: LogSpool?

    init(buildId: String, database: any BuildStore, limits: Limits, fence: BuildFence? = nil, spoolFolder: String? = nil,
         mask: @escaping @Sendable (String) -> String = { $0 },
         onLeaseLost: @escaping @Sendable (BuildLeaseLost) -> Void = { _ in },
         onNotice: @escaping @Sendable (String) -> Void = { _ in },
         onProblem: @escaping @Sendable (String) -> Void = { _ in }) {
        self.buildId = buildId
        self.database = database
        self.limits = limits
        self.fence = fence
        self.spoolFolder = spoolFolder
        self.mask = mask
        self.onLeaseLost = onLeaseLost
        self.onNotice = onNotice
        self.onProblem = onProblem
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

    /// The run's end line ("build succeeded …"), masked, dated and numbered
    /// after every line added so far, for the end's own transaction
    /// (``BuildStore/finish``) rather than this sink: written here, it
    /// stayed in the log of a build taken back before its end was recorded
    /// and then run again.
    func endLine(_ line: String, level: BuildLogLevel = .info) -> BuildLogRecord {
        condition.withLock {
            let now = max(Date().timeIntervalSince1970, lastCreatedAt)
            lastCreatedAt = now
            sequence += 1
            return BuildLogRecord(id: idPrefix + Self.padded(sequence), buildId: buildId, level: level,
                                  category: classifier.category, content: mask(line),
                                  createdAt: Date(timeIntervalSince1970: now))
        }
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
        while pending.count >= limits.maxPendingLines && !closed && lost == nil {
            condition.broadcast()  // the flusher may spool them
            condition.wait()
        }
        if lost != nil { return }
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

    /// What became of one batch.
    private enum Outcome {
        case written
        /// The database did not answer; the batch is kept and sent again.
        case unreachable(String)
        /// Refused for good (after a few tries): dropped and counted.
        case refused(String)
        case leaseLost(BuildLeaseLost)
    }

    private func flushLoop() {
        condition.lock()
        var retryDelay = 0.0          // > 0 while the database does not answer
        var outageStarted: Date?
        while lost == nil {
            let waitFor = retryDelay > 0 ? retryDelay : limits.flushInterval
            let deadline = Date().addingTimeInterval(waitFor)
            while !closed || retryDelay > 0 {
                if retryDelay == 0 && pending.count >= limits.flushLineCount { break }
                if retryDelay > 0 && pending.count >= limits.maxPendingLines { spill() }
                if !condition.wait(until: deadline) { break }
            }
            // Oldest first: what the spool keeps, then what waits in memory.
            let fromSpool = spool.map { $0.peek(limits.maxBatchLines) }
            if let fromSpool, fromSpool.lines.isEmpty {
                // Nothing readable is left in it (a short write at a full disk).
                spool?.remove()
                spool = nil
                continue
            }
            let batch = fromSpool?.lines ?? Array(pending.prefix(limits.maxBatchLines))
            let newProgress = progress != writtenProgress ? progress : nil
            if batch.isEmpty && newProgress == nil {
                if closed { break }
                continue
            }
            let sentProgress = progress
            condition.unlock()
            let outcome = write(batch, progress: newProgress)
            condition.lock()
            switch outcome {
            case .written, .refused:
                if let fromSpool, let spool {
                    spool.consume(lines: fromSpool.lines.count, bytes: fromSpool.bytes)
                    if spool.count == 0 {
                        spool.remove()
                        self.spool = nil
                    }
                } else {
                    pending.removeFirst(batch.count)
                }
                condition.broadcast()  // readers waiting for room
                if case let .refused(error) = outcome {
                    failure = (failure?.error ?? error, (failure?.droppedLines ?? 0) + batch.count)
                } else {
                    written += batch.count
                    writtenProgress = sentProgress
                }
                if let started = outageStarted {
                    outageStarted = nil
                    retryDelay = 0
                    let waited = LeaseVerdict.seconds((Date().timeIntervalSince(started) * 10).rounded() / 10)
                    notice("the log of build \(buildId) is written again after \(waited) without the database; no line was lost")
                }
            case .unreachable(let error):
                if outageStarted == nil {
                    outageStarted = Date()
                    problem("cannot write the log of build \(buildId); its lines are kept and written once the database answers: \(error)")
                }
                retryDelay = min(2, max(0.1, retryDelay * 2))
            case .leaseLost(let refusal):
                lost = refusal
                pending.removeAll()
                spool?.remove()
                spool = nil
                condition.broadcast()
                condition.unlock()
                onLeaseLost(refusal)
                condition.lock()
            }
        }
        flusherDone = true
        condition.broadcast()
        condition.unlock()
    }

    /// Moves what waits in memory to the spool file (lock held), so that
    /// the build keeps running while the database does not answer. Without
    /// a spool file the readers wait instead: slower, nothing lost.
    private func spill() {
        guard let spoolFolder, !pending.isEmpty else { return }
        if spool == nil { spool = LogSpool(in: spoolFolder) }
        guard let spool, spool.append(pending[...]) else { return }
        if spool.count == pending.count {
            notice("\(pending.count) line(s) of build \(buildId) wait in \(spool.path) until the database answers")
        }
        pending.removeAll(keepingCapacity: true)
        condition.broadcast()
    }

    /// Says something on the runner's stderr, without the lock.
    private func notice(_ message: String) {
        condition.unlock()
        onNotice(message)
        condition.lock()
    }

    /// Says a problem (a `problem:` line of the runner's), without the lock.
    private func problem(_ message: String) {
        condition.unlock()
        onProblem(message)
        condition.lock()
    }

    /// One transaction. A database that does not answer is the caller's to
    /// retry (for as long as it takes); anything else is tried a few times
    /// before the batch is given up (and counted).
    private func write(_ batch: [NewBuildLogLine], progress: Double?) -> Outcome {
        var lastError = ""
        for attempt in 0..<3 {
            do {
                try database.appendLog(build: buildId, batch, progress: progress, fence: fence)
                return .written
            } catch let refusal as BuildLeaseLost {
                return .leaseLost(refusal)
            } catch where TransientFailure.matches(error) {
                return .unreachable("\(error)")
            } catch {
                lastError = "\(error)"
                Thread.sleep(forTimeInterval: 0.05 * Double(attempt + 1))
            }
        }
        return .refused(lastError)
    }

    /// Eight digits at least, so that ids sort in line order.
    private static func padded(_ number: Int) -> String {
        let digits = String(number)
        return digits.count >= 8 ? digits : String(repeating: "0", count: 8 - digits.count) + digits
    }
}
