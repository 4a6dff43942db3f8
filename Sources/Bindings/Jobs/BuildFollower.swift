import Foundation
import LuaRuntime
import Store
import Synchronization
import TextCodec

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
    /// The last line read (nil: none yet): where the next page starts (its
    /// cursor on SQLite, its place in the log on PostgreSQL). The reading
    /// thread's only.
    var last: BuildLogLine?
    /// Lines read so far (the closing line says how many were shown).
    private(set) var linesShown = 0
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

    /// Reads the lines of `build` after `after` (nil: from the first), at
    /// most `limit`, with the build as it was when they were read (an
    /// engine's ``JobsEngine/pageReader(_:)``).
    typealias PageReader = @Sendable (_ build: String, _ after: BuildLogLine?, _ limit: Int, _ includeDebug: Bool) throws -> BuildLogPage

    /// The next lines, read by `read(last, limit)` in one snapshot with
    /// the build's status.
    func nextPage(_ read: (_ after: BuildLogLine?, _ limit: Int) throws -> BuildLogPage) throws -> Page {
        let found = try read(last, Self.pageSize)
        var page = Page(texts: found.lines.map { Self.text($0.record) })
        linesShown += page.texts.count
        if let line = found.lines.last { last = line }
        guard let build = found.build else {
            page.ended = "build \(buildId) was deleted"
            page.deleted = true
            return page
        }
        if found.lines.isEmpty, build.status.isFinished { page.ended = Self.summary(build, linesShown: linesShown) }
        return page
    }

    /// A log line as printed: info lines as they are, others with their
    /// level in front unless they start with it (`warning: slow disk`);
    /// control characters visible (``VisibleText``): a build's output
    /// must not drive the operator's terminal.
    static func text(_ record: BuildLogRecord) -> String {
        let level = record.level.rawValue
        let content = VisibleText.of(record.content)
        if record.level == .info || content.prefix(level.count).lowercased() == level { return content }
        return "\(level): \(content)"
    }

    /// The one line that ends a follow: `build 3F2A… #4 (1.1.0) succeeded,
    /// exit code 0, 12.4 s, 42 lines shown` (issue 26: its status, exit
    /// code, how long it ran and what was shown, not the whole record).
    static func summary(_ build: BuildRecord, linesShown: Int) -> String {
        var text = "build \(build.id) #\(build.buildNumber) (\(build.versionString)) \(build.status.rawValue)"
        if let exitCode = build.exitCode { text += ", exit code \(exitCode)" }
        if let start = build.startDate, let end = build.endDate {
            text += String(format: ", %.1f s", max(0, end.timeIntervalSince(start)))
        }
        text += linesShown == 1 ? ", 1 line shown" : ", \(linesShown) lines shown"
        return VisibleText.of(text)
    }

    /// Polls on a thread of its own and posts to `events`.
    func startPolling(read: @escaping PageReader, events: EventQueue, subscription: Int, interval: TimeInterval = 0.05) {
        Thread.detachNewThread { [self] in
            var failures = 0
            while !isStopped {
                do {
                    let page = try nextPage { after, limit in
                        try read(buildId, after, limit, includeDebug)
                    }
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
