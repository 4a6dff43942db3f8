import Foundation
import GRDB
import LuaRuntime
import Store
import Synchronization

/// What a background follower posts from its thread.
enum FollowEvent: Sendable {
    case lines([String])
    /// The build ended (or was deleted): the closing line.
    case ended(String)
    case failed(String)
}

/// Follows one build's log: reads the lines after its cursor, page by
/// page, until the build has ended and every line is read.
///
/// `jobs.follow(id)` reads on the Lua thread and prints as it goes; with
/// `background = true` a thread of its own polls every 50 ms and posts
/// the lines to the session's event queue, and they are printed when the
/// shell (at its prompt) or `opsh.wait` delivers events. The handle
/// Lua gets (`opsh.follow`) can stop it; dropping the handle does not.
final class BuildFollower: @unchecked Sendable {
    let buildId: String
    let includeDebug: Bool
    /// The last line read (0: none yet). The reading thread's only.
    var cursor: Int64 = 0
    // Lua thread only:
    var printer: LuaReference?
    var subscription: Int?

    private let stopped = Mutex(false)
    static let pageSize = 1000

    init(buildId: String, includeDebug: Bool) {
        self.buildId = buildId
        self.includeDebug = includeDebug
    }

    var isActive: Bool { subscription != nil && !isStopped }
    var isStopped: Bool { stopped.withLock { $0 } }
    func stop() { stopped.withLock { $0 = true } }

    struct Page {
        var texts: [String] = []
        /// The closing line once the build has ended and its log is read.
        var ended: String?
        var deleted = false
    }

    /// The next lines, in one snapshot with the build's status: a build
    /// seen ended with no line after the cursor has no line left to come
    /// (the runner writes its last lines before it ends the build).
    func nextPage(_ store: Store, _ db: Database) throws -> Page {
        let lines = try store.buildLogs.lines(db, build: buildId, after: cursor, limit: Self.pageSize,
                                              includeDebug: includeDebug)
        var page = Page(texts: lines.map { Self.text($0.record) })
        if let last = lines.last { cursor = last.cursor }
        guard let build = try store.builds.records.get(db, buildId) else {
            page.ended = "build \(buildId) was deleted"
            page.deleted = true
            return page
        }
        if lines.isEmpty, build.status.isFinished { page.ended = Self.summary(build) }
        return page
    }

    /// A log line as printed: info lines as they are, others with their
    /// level in front unless they start with it (`warning: slow disk`).
    static func text(_ record: BuildLogRecord) -> String {
        let level = record.level.rawValue
        if record.level == .info || record.content.prefix(level.count).lowercased() == level { return record.content }
        return "\(level): \(record.content)"
    }

    /// `build 3F2A… #4 (1.1.0) succeeded, exit code 0`.
    static func summary(_ build: BuildRecord) -> String {
        var text = "build \(build.id) #\(build.buildNumber) (\(build.versionString)) \(build.status.rawValue)"
        if let exitCode = build.exitCode { text += ", exit code \(exitCode)" }
        return text
    }

    /// Polls on a thread of its own and posts to `events`.
    func startPolling(store: Store, events: EventQueue, subscription: Int, interval: TimeInterval = 0.05) {
        Thread.detachNewThread { [self] in
            var failures = 0
            while !isStopped {
                do {
                    let page = try store.client.read { db in try nextPage(store, db) }
                    failures = 0
                    if !page.texts.isEmpty { events.post(subscription, FollowEvent.lines(page.texts)) }
                    if let ended = page.ended {
                        events.post(subscription, FollowEvent.ended(ended))
                        return
                    }
                    if page.texts.count == Self.pageSize { continue }
                } catch {
                    // A busy database, or a read interrupted by Ctrl-C on
                    // the Lua thread (sqlite3_interrupt reaches every
                    // connection): try again for a while.
                    failures += 1
                    if failures >= 40 {
                        events.post(subscription, FollowEvent.failed("\(error)"))
                        return
                    }
                }
                Thread.sleep(forTimeInterval: interval)
            }
        }
    }
}
