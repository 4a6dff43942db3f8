import Foundation
import GRDB

/// What the job runner (Sources/Jobs: `JobManager`, its runs, their log
/// sinks, `QueueRunner`) needs of the database, and nothing else: the one
/// seam between the runner and an engine (ARCHITECTURE.md, "Build runners
/// and the queue").
///
/// ``SQLiteBuildStore`` is SQLite's (the statements of BuildQueueQueries
/// and BuildJobQueries through the store's writer and readers);
/// ``PostgresBuildQueue`` is PostgreSQL's (`SELECT … FOR UPDATE SKIP
/// LOCKED`, the server's clock). Every method is synchronous and may be
/// called from any thread: the job manager calls it from the Lua thread,
/// its runs' threads, their log flushers and its heartbeat.
///
/// Times an engine writes on its own (heartbeats, a claim's start, an
/// end) come from ``clock()``: the machine's on SQLite (every process
/// shares one machine), the server's on PostgreSQL (runners on many
/// machines, whose clocks need not agree).
public protocol BuildStore: AnyObject, Sendable {
    /// The database for messages: a path, or a URL without its password.
    var label: String { get }
    /// The SQLite file (workspaces go next to it); nil on PostgreSQL.
    var path: String? { get }

    /// The time leases are judged by: the machine's on SQLite, the
    /// server's on PostgreSQL.
    func clock() throws -> Date

    // MARK: Reading

    func build(_ id: String) throws -> BuildRecord?
    /// A scheme and its project (either nil when missing).
    func schemeAndProject(_ schemeId: String) throws -> (SchemeRecord?, ProjectRecord?)
    /// Whether the database has migration 004_runners' columns.
    func queueColumnsExist() throws -> Bool
    /// Whether a scheme has this id or name.
    func schemeExists(idOrName: String) throws -> Bool
    /// Builds, newest first, optionally of one status and/or scheme.
    func list(status: BuildStatus?, scheme: String?, limit: Int?) throws -> [BuildRecord]
    /// The last `count` lines of a build's log, oldest first.
    func logs(_ id: String, tail count: Int, includeDebug: Bool) throws -> [BuildLogLine]
    /// The lines of a build's log after the line `cursor`.
    func logs(_ id: String, after cursor: Int64, limit: Int, includeDebug: Bool) throws -> [BuildLogLine]
    func crashLogs(_ id: String) throws -> [CrashLogRecord]
    /// A page of a build's log after `line` (nil: from the first), with the
    /// build as it is now, read together (a follower's next page).
    func logPage(build: String, after line: BuildLogLine?, limit: Int, includeDebug: Bool) throws -> BuildLogPage
    /// Deletes a build with its logs and crash logs (a running one is refused).
    func delete(_ id: String) throws

    // MARK: Holding (BuildQueueQueries)

    /// Inserts a queued build with the scheme's next number, in one
    /// transaction with `check` (given the scheme and its project, either
    /// nil when missing; it throws to refuse) and, with `holder`, the
    /// build reserved for it.
    func create(scheme schemeId: String, version: String, reservedFor holder: BuildHolder?,
                check: (SchemeRecord?, ProjectRecord?) throws -> Void) throws -> BuildRecord
    /// Holds the queued build for `holder`; false when it is not queued or
    /// another holder with a live heartbeat has it.
    func reserve(_ id: String, for holder: BuildHolder) throws -> Bool
    /// Whether a queued build nobody holds waits (of `schemes`; nil: any).
    func hasClaimable(schemes: [String]?) throws -> Bool
    /// Calls `onChange` soon after any process commits a change to
    /// `builds` (and sometimes after other commits), until cancelled: what
    /// wakes an idle runner when a build is queued. SQLite polls `PRAGMA
    /// data_version` every 50 ms on a read connection of its own (no lock);
    /// PostgreSQL listens for the schema's `opsh_changes` notifications.
    /// Nil where nothing can tell (an in-memory database).
    func watchQueue(_ onChange: @escaping @Sendable () -> Void) throws -> StorageCancellable?
    /// Holds the oldest queued build nobody holds, for `holder`.
    func reserveNext(for holder: BuildHolder, schemes: [String]?) throws -> BuildRecord?
    /// Queued and held by `holder` → running, one more attempt; nil when
    /// it is no longer queued and held by `holder`. What the build runs
    /// is read in the same transaction before the claim's statement (the
    /// rows as last set, before any trigger the claim fires) and given to
    /// `check` (the scheme and project, either nil when missing; it throws
    /// to refuse, and nothing is written).
    ///
    /// - throws: ``SchemeChangedByTrigger`` when a trigger wrote a scheme
    ///   or project during the claim (rolled back), as `create`,
    ///   `reserve` and `reserveNext` do.
    func claim(_ id: String, for holder: BuildHolder,
               check: (SchemeRecord?, ProjectRecord?) throws -> Void) throws -> ClaimedBuild?
    /// Refreshes the heartbeat of every build `holder` holds; the ids it
    /// still holds, or nil without 004_runners.
    func heartbeat(for holder: BuildHolder) throws -> Set<String>?
    func lease(_ id: String) throws -> BuildLease?
    func runningLeases() throws -> [BuildLease]
    /// Running builds whose holder missed three heartbeats, and the time
    /// (``clock()``) they were judged at.
    func expiredLeases() throws -> (now: Date, leases: [BuildLease])
    /// Returns once the database takes a write (it writes nothing);
    /// throws ``WritesWereBlocked`` when that took longer than `seconds`
    /// (SQLite: its write lock held elsewhere), or the connection's error.
    /// What the runners' take-back asks before judging leases: a holder
    /// cannot beat while nothing can be written.
    func takesWrites(within seconds: Double) throws
    /// Requeues or fails a build still under `lease`, with `note` in its log.
    func takeBack(_ lease: BuildLease, _ action: BuildTakeBack, note: String) throws -> Bool

    // MARK: The runner itself (RunnerRegistry, migration 007_runnerRegistry)

    /// Records `runner` in `opsh_runners`, started and beating now, after
    /// deleting the rows of runners that ended more than
    /// ``RunnerRegistry/keptAfterEnd`` ago. False on a database without
    /// the table (nothing written).
    func registerRunner(_ runner: RunnerRegistration) throws -> Bool
    /// The runner's heartbeat: one short statement refreshing its row
    /// (written again when someone removed it). Without the table
    /// (`registered` false) a write that changes nothing, so that a
    /// heartbeat that returns still means the database takes writes.
    func beatRunner(_ runner: RunnerRegistration, registered: Bool) throws
    /// Marks the runner stopped (it exits cleanly).
    func runnerStopped(_ id: String) throws

    // MARK: Running and ending (BuildJobQueries)

    /// Ends a queued or running build (with `fence`: only while that
    /// lease is the build's, ``BuildFence``); `crash` and `log` are
    /// recorded only when it ended here. One transaction. False when it
    /// had ended.
    ///
    /// - throws: ``BuildLeaseLost`` when `fence` is no longer the build's
    ///   (nothing is written).
    func finish(_ id: String, status: BuildStatus, exitCode: Int?, progress: Double?, fence: BuildFence?,
                log: BuildLogRecord?, crash: CrashLogRecord?) throws -> Bool
    /// Records the commit a build checked out (with `fence`: only while
    /// that lease is the build's; ``BuildLeaseLost`` otherwise).
    func setCommit(_ id: String, _ commit: String, fence: BuildFence?) throws
    /// One batch of a build's log lines, and its progress when it changed,
    /// in one transaction (with `fence`: only while that lease is the
    /// build's; ``BuildLeaseLost`` otherwise, and nothing lands). A line
    /// whose id is in the log already is skipped: a batch sent again after
    /// its commit's answer was lost lands once.
    func appendLog(build buildId: String, _ lines: [NewBuildLogLine], progress: Double?, fence: BuildFence?) throws

    /// The secrets opsh masks in the lines it writes itself (the
    /// configuration's API keys), as the audit trail masks them.
    func knownSecrets() throws -> [String]
}

/// What a claimed build runs: its row, its scheme and project, read in
/// the claim's transaction before the claim's statement.
public struct ClaimedBuild: Sendable {
    public var build: BuildRecord
    public var scheme: SchemeRecord
    public var project: ProjectRecord
    /// The scheme's `passEnvironment` (JSON text, migration
    /// 006_schemeEnvironment); nil on a database without it.
    public var passEnvironment: String?
    /// The lease the run writes under; nil on a database without
    /// 004_runners (nothing to fence by).
    public var fence: BuildFence?

    public init(build: BuildRecord, scheme: SchemeRecord, project: ProjectRecord, passEnvironment: String?, fence: BuildFence?) {
        self.build = build
        self.scheme = scheme
        self.project = project
        self.passEnvironment = passEnvironment
        self.fence = fence
    }
}

/// The job runner's database on SQLite: today's statements through the
/// store's writer (one short write transaction each) and readers.
public final class SQLiteBuildStore: BuildStore {
    public let store: Store

    public init(store: Store) {
        self.store = store
    }

    public var label: String { store.path ?? ":memory:" }
    public var path: String? { store.path }

    public func clock() throws -> Date { Date() }

    public func build(_ id: String) throws -> BuildRecord? {
        try store.client.read { db in try store.builds.records.get(db, id) }
    }

    public func schemeAndProject(_ schemeId: String) throws -> (SchemeRecord?, ProjectRecord?) {
        try store.client.read { db in try Self.schemeAndProject(store, db, schemeId) }
    }

    static func schemeAndProject(_ store: Store, _ db: Database, _ schemeId: String) throws -> (SchemeRecord?, ProjectRecord?) {
        guard let scheme = try store.schemes.records.get(db, schemeId) else { return (nil, nil) }
        return (scheme, try store.projects.records.get(db, scheme.projectBundleIdentifier))
    }

    public func queueColumnsExist() throws -> Bool {
        try store.client.read { db in try store.builds.queueColumnsExist(db) }
    }

    public func schemeExists(idOrName: String) throws -> Bool {
        try store.client.read { db in
            try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM schemes WHERE id = ?1 OR name = ?1)", arguments: [idOrName]) ?? false
        }
    }

    public func list(status: BuildStatus?, scheme: String?, limit: Int?) throws -> [BuildRecord] {
        var filters: [ColumnFilter] = []
        if let status { filters.append(ColumnFilter("status", .equal, status.rawValue)) }
        if let scheme { filters.append(ColumnFilter("schemeId", .equal, scheme)) }
        let request = ListRequest(filters: filters,
                                  order: [ColumnOrder("createdAt", descending: true), ColumnOrder("buildNumber", descending: true)],
                                  limit: limit)
        return try store.client.read { db in try store.builds.records.list(db, request) }
    }

    public func logs(_ id: String, tail count: Int, includeDebug: Bool) throws -> [BuildLogLine] {
        try store.client.read { db in try store.buildLogs.lastLines(db, build: id, count: count, includeDebug: includeDebug) }
    }

    public func logs(_ id: String, after cursor: Int64, limit: Int, includeDebug: Bool) throws -> [BuildLogLine] {
        try store.client.read { db in
            try store.buildLogs.lines(db, build: id, after: cursor, limit: limit, includeDebug: includeDebug)
        }
    }

    public func logPage(build: String, after line: BuildLogLine?, limit: Int, includeDebug: Bool) throws -> BuildLogPage {
        try store.logPage(build: build, after: line?.cursor ?? 0, limit: limit, includeDebug: includeDebug)
    }

    public func crashLogs(_ id: String) throws -> [CrashLogRecord] {
        try store.client.read { db in
            try store.crashLogs.records.list(db, ListRequest(filters: [ColumnFilter("buildId", .equal, id)],
                                                                    order: [ColumnOrder("createdAt")]))
        }
    }

    public func delete(_ id: String) throws {
        try store.client.write { db in _ = try store.builds.delete(db, id) }
    }

    public func create(scheme schemeId: String, version: String, reservedFor holder: BuildHolder?,
                       check: (SchemeRecord?, ProjectRecord?) throws -> Void) throws -> BuildRecord {
        try store.client.write { db in
            let (scheme, project) = try Self.schemeAndProject(store, db, schemeId)
            try check(scheme, project)
            return try TableWriteWatch.refusingSchemeWrites(db, subject: { _ in (nil, schemeId) }) {
                let build = try store.builds.create(db, scheme: schemeId, version: version)
                if let holder { _ = try store.builds.reserve(db, build.id, for: holder) }
                return build
            }
        }
    }

    public func reserve(_ id: String, for holder: BuildHolder) throws -> Bool {
        try store.client.write { db in
            let scheme = try String.fetchOne(db, sql: "SELECT schemeId FROM builds WHERE id = ?", arguments: [id]) ?? "?"
            return try TableWriteWatch.refusingSchemeWrites(db, subject: { _ in (id, scheme) }) {
                try store.builds.reserve(db, id, for: holder)
            }
        }
    }

    public func hasClaimable(schemes: [String]?) throws -> Bool {
        // A read: an idle runner never takes the write lock.
        try store.client.read { db in try store.builds.hasClaimable(db, schemes: schemes) }
    }

    public func watchQueue(_ onChange: @escaping @Sendable () -> Void) throws -> StorageCancellable? {
        guard let path = store.path else { return nil }
        let monitor = ExternalChangeMonitor(path: path, interval: 0.05)
        let subscription = monitor.subscribe(onChange)
        return StorageCancellable { withExtendedLifetime(monitor) { subscription.cancel() } }
    }

    public func reserveNext(for holder: BuildHolder, schemes: [String]?) throws -> BuildRecord? {
        try store.client.write { db in
            try TableWriteWatch.refusingSchemeWrites(db, subject: { ($0?.id, $0?.schemeId ?? "?") }) {
                try store.builds.reserveNext(db, for: holder, schemes: schemes)
            }
        }
    }

    public func claim(_ id: String, for holder: BuildHolder,
                      check: (SchemeRecord?, ProjectRecord?) throws -> Void) throws -> ClaimedBuild? {
        try store.client.write { db in
            guard let build = try store.builds.records.get(db, id) else { return nil }
            let (scheme, project) = try Self.schemeAndProject(store, db, build.schemeId)
            try check(scheme, project)
            guard let scheme, let project else { return nil }
            let passEnvironment = try db.columns(in: "schemes").contains { $0.name.lowercased() == "passenvironment" }
                ? try String.fetchOne(db, sql: "SELECT passEnvironment FROM schemes WHERE id = ?", arguments: [scheme.id])
                : nil
            let claimed = try TableWriteWatch.refusingSchemeWrites(db, subject: { _ in (id, scheme.id) }) {
                try store.builds.claim(db, id, for: holder)
            }
            guard claimed else { return nil }
            let fence = try store.builds.queueColumnsExist(db)
                ? (try store.builds.lease(db, id)).map { BuildFence(runnerId: holder.id, attempt: $0.attempts) }
                : nil
            return ClaimedBuild(build: build, scheme: scheme, project: project, passEnvironment: passEnvironment, fence: fence)
        }
    }

    public func heartbeat(for holder: BuildHolder) throws -> Set<String>? {
        try store.client.write { db in try store.builds.heartbeat(db, for: holder) }
    }

    public func lease(_ id: String) throws -> BuildLease? {
        try store.client.read { db in try store.builds.lease(db, id) }
    }

    public func runningLeases() throws -> [BuildLease] {
        try store.client.read { db in try store.builds.runningLeases(db) }
    }

    public func expiredLeases() throws -> (now: Date, leases: [BuildLease]) {
        let now = Date()
        return (now, try store.client.read { db in try store.builds.expiredLeases(db, at: now) })
    }

    public func takesWrites(within seconds: Double) throws {
        let asked = Date()
        try store.client.write { db in try Self.requireWriteLock(db, asked: asked, within: seconds) }
    }

    /// Takes the write lock (a statement that changes nothing) and throws
    /// ``WritesWereBlocked`` when that came more than `seconds` after
    /// `asked`: a lock held elsewhere, which kept every holder's heartbeat
    /// waiting too.
    private static func requireWriteLock(_ db: Database, asked: Date, within seconds: Double) throws {
        try db.execute(sql: "UPDATE builds SET id = id WHERE 0")
        let waited = Date().timeIntervalSince(asked)
        if waited > seconds { throw WritesWereBlocked(seconds: waited) }
    }

    public func takeBack(_ lease: BuildLease, _ action: BuildTakeBack, note: String) throws -> Bool {
        let asked = Date()
        return try store.client.write { db in
            // A write that waited half a heartbeat for the lock found the database
            // unwritable: its holder's heartbeats waited as well, so its
            // lapse says nothing about it (a lock is SQLite's outage).
            try Self.requireWriteLock(db, asked: asked, within: (lease.heartbeatInterval ?? .infinity) / 2)
            return try store.builds.takeBack(db, lease, action, note: note)
        }
    }

    public func finish(_ id: String, status: BuildStatus, exitCode: Int?, progress: Double?, fence: BuildFence?,
                       log: BuildLogRecord?, crash: CrashLogRecord?) throws -> Bool {
        try store.client.write { db in
            try requireFence(db, id, fence)
            let finished = try store.builds.finish(db, id, status: status, exitCode: exitCode, progress: progress)
            // A run's end line (fenced: the run still holds the build) lands
            // with its end, and also when the build was ended elsewhere
            // meanwhile (jobs.cancel); a resent end's line lands once.
            guard finished || fence != nil else { return false }
            if finished, let crash { try store.crashLogs.records.insert(db, crash) }
            if let log { try store.buildLogs.appendBatch(db, build: id, [NewBuildLogLine(log)]) }
            return finished
        }
    }

    public func setCommit(_ id: String, _ commit: String, fence: BuildFence?) throws {
        try store.client.write { db in
            try requireFence(db, id, fence)
            try store.builds.setCommit(db, id, commit)
        }
    }

    public func appendLog(build buildId: String, _ lines: [NewBuildLogLine], progress: Double?, fence: BuildFence?) throws {
        try store.client.write { db in
            try requireFence(db, buildId, fence)
            try store.buildLogs.appendBatch(db, build: buildId, lines)
            if let progress { try store.builds.setProgress(db, buildId, progress) }
        }
    }

    /// Throws ``BuildLeaseLost`` when `fence` is no longer the build's,
    /// read in the write's own transaction (under the write lock).
    private func requireFence(_ db: Database, _ id: String, _ fence: BuildFence?) throws {
        guard let fence else { return }
        let lease = try store.builds.lease(db, id)
        guard lease?.runnerId != fence.runnerId || lease?.attempts != fence.attempt else { return }
        let note = try String.fetchOne(db, sql: """
            SELECT content FROM buildLogs WHERE buildId = ? AND category = 'runner' ORDER BY createdAt DESC, rowid DESC LIMIT 1
            """, arguments: [id])
        if let refusal = fence.refusal(buildId: id, lease: lease, takenBackBy: note) { throw refusal }
    }

    public func knownSecrets() throws -> [String] {
        try store.read { db in AuditTrail.knownSecrets(db) }
    }
}
