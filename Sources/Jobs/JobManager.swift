import Foundation
import Git
import Store
import TextCodec

/// Runs builds: checks the project's repository out at the build's version
/// into a fresh workspace (``Workspaces``), runs the scheme's build command
/// there with `/bin/sh -c` under a supervisor (``BuildContainment``), with
/// an allow-listed environment (``BuildEnvironment``), and streams its
/// output into `buildLogs`.
///
/// Thread-safe; every method is synchronous (the Lua side calls it from its
/// one thread). Builds run on threads of their own; at most
/// ``Configuration/maxConcurrentJobs`` at once, the others wait in FIFO
/// order and stay `queued` until they run.
///
/// Every build it starts is held in the database first (``BuildHolder``,
/// `Store/Repositories/BuildQueueQueries`): a queued build it waits to run
/// is reserved for it, so no `opsh runner` takes it, and the builds it
/// holds get a heartbeat every ``Configuration/heartbeatInterval``
/// (ARCHITECTURE.md, "Build runners and the queue").
///
/// ```swift
/// let jobs = JobManager(store: store)
/// let build = try jobs.run(scheme: schemeId, version: "1.4.0")
/// let done = try jobs.wait(build.id, timeout: 600)
/// for line in try jobs.logs(build.id, tail: 20) { print(line.record.content) }
/// ```
public final class JobManager: @unchecked Sendable {
    public struct Configuration: Sendable {
        /// Where workspaces go (`<root>/<folder named after the build>`,
        /// ``Workspaces``); nil: `workspaces` next to the database file (a
        /// temporary folder for an in-memory store).
        public var workspaceRoot: String?
        /// How many builds run at once.
        public var maxConcurrentJobs = max(1, ProcessInfo.processInfo.activeProcessorCount)
        /// How long a cancelled build has between SIGTERM and SIGKILL.
        public var cancelGracePeriod: TimeInterval = 5
        /// Log lines are written at least this often…
        public var flushInterval: TimeInterval = 0.05
        /// …or as soon as this many wait.
        public var flushLineCount = 1000
        /// The most lines one transaction writes.
        public var maxBatchLines = 5000
        /// Readers (and so the build) wait when this many lines are not written yet.
        public var maxPendingLines = 200_000
        /// Lines of output kept in a crash log.
        public var crashLogLineCount = 50
        /// After the build's main process exits, how long processes it left
        /// in its group may keep its output open before they are killed.
        public var lingerAfterExit: TimeInterval = 1
        /// How many builds of each scheme keep their workspaces: when a
        /// build ends, the workspaces of older ended builds of its scheme
        /// are removed, and those of deleted builds (0: a build's
        /// workspace goes when it ends).
        public var keepWorkspaces = 5
        /// How a build's processes are kept together (a cgroup where
        /// there is one; ``BuildContainment``).
        public var containment = BuildContainment.automatic
        public var git = Git()
        /// The shell that runs build commands (with `-c`).
        public var shell = "/bin/sh"
        /// opsh's environment: builds get only ``BuildEnvironment/allowed``
        /// of it and what their scheme declares (plus `OPSH_BUILD_ID`,
        /// `OPSH_BUILD_VERSION`, `OPSH_SCHEME` …).
        public var environment = ProcessInfo.processInfo.environment
        /// Called (on a job thread) with the build's row whenever a build
        /// this manager handles changes status.
        public var onStatusChange: (@Sendable (BuildRecord) -> Void)?
        /// How often the builds this manager holds get a heartbeat; they
        /// are stale after three missed ones.
        public var heartbeatInterval: TimeInterval = 10
        /// Where messages for the operator go (a heartbeat that could not
        /// be written, a build taken back from this manager); nil: stderr.
        public var onNotice: (@Sendable (String) -> Void)?
        /// Where problems go (a heartbeat or a build's end that could not
        /// be written, a workspace that cannot be removed): `opsh runner`
        /// says them as `problem:` lines. Nil: as notices.
        public var onProblem: (@Sendable (String) -> Void)?

        public init() {}
    }

    /// The database, through the one seam the runner has (``BuildStore``):
    /// SQLite's store, or PostgreSQL's queue.
    public let database: any BuildStore
    public let configuration: Configuration
    /// The folder holding the workspaces.
    public var workspaceRoot: String { workspaces.root }
    /// The workspaces, and what this manager's database owns there.
    public let workspaces: Workspaces
    /// This process, recorded on the builds it runs.
    public let runner: RunnerIdentity
    /// This manager as the holder of its builds in the database.
    public let holder: BuildHolder

    private let condition = NSCondition()
    // Guarded by `condition`:
    private var waiting: [String] = []
    private var active: [String: BuildRun] = [:]
    private var heartbeat: Heartbeat?
    /// One sweep of the workspaces at a time.
    private let sweeping = NSLock()

    /// A job manager on an SQLite store.
    public convenience init(store: Store, configuration: Configuration = Configuration()) {
        self.init(database: SQLiteBuildStore(store: store), configuration: configuration)
    }

    public init(database: any BuildStore, configuration: Configuration = Configuration()) {
        self.database = database
        self.configuration = configuration
        let runner = RunnerIdentity.current
        self.runner = runner
        self.holder = BuildHolder(id: UUID().uuidString.lowercased(), host: runner.host, pid: runner.pid,
                                  startedAt: runner.startedAt, heartbeatInterval: configuration.heartbeatInterval)
        let root: String
        if let configured = configuration.workspaceRoot {
            root = configured
        } else if let path = database.path {
            root = (path as NSString).deletingLastPathComponent + "/workspaces"
        } else {
            root = NSTemporaryDirectory() + "opsh-workspaces-\(getpid())"
        }
        // An SQLite file by its absolute path: a session that named it
        // `./x.sqlite` and a runner that named it in full own the same folders.
        let owner = database.path.map { URL(fileURLWithPath: $0).standardizedFileURL.path } ?? database.label
        workspaces = Workspaces(root: root, database: owner)
    }

    deinit {
        heartbeat?.stop()
    }

    /// Where the workspace of a build's first run is.
    public func workspacePath(_ id: String) -> String {
        workspaces.path(for: id)
    }

    /// The workspaces of every run of build `id` that exist.
    public func workspacePaths(_ id: String) -> [String] {
        workspaces.paths(of: id)
    }

    // MARK: - Life of a build

    /// Records a queued build of `scheme` at `version` (a tag, branch or
    /// commit) with the scheme's next build number. Refuses a scheme without
    /// a build command and a project without a repository.
    ///
    /// - parameter reserved: hold it for this manager in the same
    ///   transaction (``run(scheme:version:)``), so that no runner takes it
    ///   before ``start(_:)``; otherwise it waits for whoever starts or
    ///   claims it first (`jobs.enqueue`).
    public func create(scheme schemeId: String, version: String, reserved: Bool = false) throws -> BuildRecord {
        guard !version.isEmpty, !version.hasPrefix("-"), !version.contains(where: \.isNewline) else {
            throw JobError.invalidVersion(version)
        }
        return try database.create(scheme: schemeId, version: version, reservedFor: reserved ? holder : nil) { scheme, project in
            _ = try Self.runnable(schemeId, scheme, project)
        }
    }

    /// Starts a queued build: it runs as soon as a slot is free. The build
    /// is held for this manager first, in one conditional statement: a
    /// build a runner (or another opsh) holds is refused, saying who.
    @discardableResult
    public func start(_ id: String) throws -> BuildRecord {
        if isHandling(id) { throw JobError.alreadyStarted(id) }
        let build = try get(id)
        guard build.status == .queued else { throw JobError.notQueued(id: id, status: build.status) }
        _ = try runnable(scheme: build.schemeId)
        let reserved: Bool
        do {
            reserved = try database.reserve(id, for: holder)
        } catch let tampered as SchemeChangedByTrigger {
            endQueued(id, status: .failed, note: "\(tampered)")
            throw tampered
        }
        if !reserved, let held = try database.lease(id) {
            if held.status != .queued { throw JobError.notQueued(id: id, status: held.status) }
            throw JobError.heldByAnother(id: id, host: held.runnerHost ?? "?", pid: held.runnerPid ?? 0)
        }
        try condition.withLock {
            guard active[id] == nil, !waiting.contains(id) else { throw JobError.alreadyStarted(id) }
            waiting.append(id)
            startHeartbeat()
        }
        pump()
        return build
    }

    /// ``create(scheme:version:reserved:)`` (held for this manager) then
    /// ``start(_:)``.
    @discardableResult
    public func run(scheme schemeId: String, version: String) throws -> BuildRecord {
        let build = try create(scheme: schemeId, version: version, reserved: true)
        try start(build.id)
        return build
    }

    /// Cancels a build: a queued one ends `cancelled` at once; a running
    /// one gets SIGTERM on its whole process group, SIGKILL after the grace
    /// period, and ends `cancelled`. Returns false for a build that had
    /// ended already. Does not wait (see ``wait(_:timeout:)``).
    @discardableResult
    public func cancel(_ id: String) throws -> Bool {
        let (isWaiting, run) = condition.withLock { (waiting.contains(id), active[id]) }
        if let run {
            run.cancel()
            return true
        }
        let build = try get(id)
        switch build.status {
        case .queued:
            // Ended in the database first, so that a run taking it meanwhile
            // finds it no longer queued. A write refused (a cap on the
            // script's changes) is the caller's error.
            let ended = try finishQueued(id, status: .cancelled, note: "cancelled before it started")
            if isWaiting {
                condition.withLock {
                    waiting.removeAll { $0 == id }
                    condition.broadcast()
                }
            }
            return ended
        case .running:
            if let run = condition.withLock({ active[id] }) {
                run.cancel()
                return true
            }
            if let cancelled = try cancelHeldElsewhere(id) { return cancelled }
            throw JobError.runByAnotherProcess(id: id, host: build.runnerHost ?? "?", pid: build.runnerPid ?? 0)
        case .succeeded, .failed, .cancelled:
            return false
        }
    }

    /// Cancels a build another job manager runs and heartbeats (an `opsh
    /// runner`, another shell): it is recorded `cancelled` here, only while
    /// that holder still has it, and its holder stops the build's processes
    /// at its next heartbeat (``beat()``). Nil when nobody heartbeats it
    /// (a build started before 004_runners): it cannot be told.
    private func cancelHeldElsewhere(_ id: String) throws -> Bool? {
        guard let lease = try database.lease(id),
              let holderId = lease.runnerId, lease.heartbeatAt != nil, let interval = lease.heartbeatInterval else { return nil }
        let note = "cancelled by pid \(runner.pid) on \(runner.host); its runner (pid \(lease.runnerPid ?? 0) on \(lease.runnerHost ?? "?")) stops the build at its next heartbeat (every \(LeaseVerdict.seconds(interval)))"
        let cancelled: Bool
        do {
            cancelled = try database.finish(id, status: .cancelled, exitCode: nil, progress: nil,
                                            fence: BuildFence(runnerId: holderId, attempt: lease.attempts),
                                            log: BuildLogRecord(buildId: id, level: .warning, category: "runner", content: note),
                                            crash: nil)
        } catch is BuildLeaseLost {
            cancelled = false  // taken back or claimed again meanwhile
        }
        if cancelled { changed(id) }
        return cancelled
    }

    /// Cancels every build this manager has queued or running; `reason`
    /// goes into each running build's log line.
    public func cancelAll(reason: String? = nil) {
        let (ids, runs) = condition.withLock { (waiting, Array(active.values)) }
        for run in runs { run.cancel(reason: reason) }
        for id in ids { _ = try? cancel(id) }
    }

    /// How many builds this manager has waiting or running.
    public var handledCount: Int {
        condition.withLock { waiting.count + active.count }
    }

    /// Deletes a build with its logs, crash logs and workspaces (never
    /// through a link: ``Workspaces/remove(_:)``). A running build is refused.
    public func delete(_ id: String) throws {
        try condition.withLock {
            if active[id] != nil { throw JobError.buildIsRunning(id) }
            waiting.removeAll { $0 == id }
        }
        let build = try get(id)
        if build.status == .running { throw JobError.buildIsRunning(id) }
        try database.delete(id)
        for workspace in workspacePaths(id) {
            do {
                try workspaces.remove(workspace)
            } catch {
                problem("build \(id) is deleted; its workspace is not: \(error)")
            }
        }
    }

    /// Removes the workspaces this database no longer needs: those of
    /// deleted builds, and of each scheme's ended builds but the newest
    /// ``Configuration/keepWorkspaces`` (a queued or running build's is
    /// never removed, but counts). Only folders opsh recorded for this
    /// database (``Workspaces/owned()``). Called when a build ends
    /// (`ended`: that build, still handled by its run, counts as ended).
    public func sweepWorkspaces(ended: String? = nil) {
        sweeping.lock()
        defer { sweeping.unlock() }
        var byScheme: [String: [(owner: Workspaces.Owner, build: BuildRecord)]] = [:]
        for owner in workspaces.owned() {
            let build: BuildRecord?
            do {
                build = try database.build(owner.build)
            } catch {
                problem("cannot look at the workspaces in \(workspaces.root): \(error)")
                return
            }
            guard let build else {
                removeWorkspace(owner, because: "its build \(owner.build) was deleted")
                continue
            }
            byScheme[build.schemeId, default: []].append((owner, build))
        }
        for (_, folders) in byScheme {
            // Newest build first; a build's attempts together.
            let builds = Dictionary(folders.map { ($0.build.id, $0.build) }, uniquingKeysWith: { first, _ in first }).values
                .sorted { ($0.createdAt, $0.buildNumber) > ($1.createdAt, $1.buildNumber) }
            let kept = Set(builds.prefix(max(0, configuration.keepWorkspaces)).map(\.id))
            for folder in folders where !kept.contains(folder.build.id) && folder.build.status.isFinished
                && (folder.build.id == ended || !isHandling(folder.build.id)) {
                removeWorkspace(folder.owner, because: "only the workspaces of the last \(configuration.keepWorkspaces) builds of a scheme are kept")
            }
        }
    }

    private func removeWorkspace(_ owner: Workspaces.Owner, because reason: String) {
        do {
            try workspaces.remove(workspaces.root + "/" + owner.folder)
        } catch {
            problem("cannot remove workspace \(owner.folder) (\(reason)): \(error)")
        }
    }

    /// Blocks until the build has ended and returns its final row.
    ///
    /// - throws: ``JobError/timedOut(id:seconds:)`` after `timeout` seconds;
    ///   ``JobError/notStarted(_:)`` for a queued build nobody started.
    public func wait(_ id: String, timeout: TimeInterval? = nil) throws -> BuildRecord {
        let deadline = timeout.map { Date().addingTimeInterval($0) }
        while true {
            condition.lock()
            while waiting.contains(id) || active[id] != nil {
                if let deadline {
                    if !condition.wait(until: deadline), waiting.contains(id) || active[id] != nil {
                        condition.unlock()
                        throw JobError.timedOut(id: id, seconds: timeout ?? 0)
                    }
                } else {
                    condition.wait()
                }
            }
            condition.unlock()
            let build = try get(id)
            if build.status.isFinished { return build }
            if build.status == .queued { throw JobError.notStarted(id) }
            // Running in another process: poll.
            if let deadline, Date() >= deadline { throw JobError.timedOut(id: id, seconds: timeout ?? 0) }
            Thread.sleep(forTimeInterval: 0.05)
        }
    }

    // MARK: - Reading

    /// A build's row.
    public func get(_ id: String) throws -> BuildRecord {
        guard let build = try database.build(id) else {
            throw JobError.unknownBuild(id)
        }
        return build
    }

    /// Builds, newest first, optionally of one status and/or scheme.
    public func list(status: BuildStatus? = nil, scheme: String? = nil, limit: Int? = nil) throws -> [BuildRecord] {
        try database.list(status: status, scheme: scheme, limit: limit)
    }

    /// The last `tail` lines of a build's log, oldest first, each with the
    /// cursor to follow from (see ``logs(_:after:limit:includeDebug:)``).
    public func logs(_ id: String, tail: Int = 100, includeDebug: Bool = true) throws -> [BuildLogLine] {
        _ = try get(id)
        return try database.logs(id, tail: tail, includeDebug: includeDebug)
    }

    /// The lines written after the line `cursor` (0: from the first line),
    /// at most `limit`: poll with the last line's cursor to follow a
    /// running build. Cheap however long the log is.
    public func logs(_ id: String, after cursor: Int64, limit: Int = 1000, includeDebug: Bool = true) throws -> [BuildLogLine] {
        _ = try get(id)
        return try database.logs(id, after: cursor, limit: limit, includeDebug: includeDebug)
    }

    /// A build's crash logs, oldest first.
    public func crashLogs(_ id: String) throws -> [CrashLogRecord] {
        _ = try get(id)
        return try database.crashLogs(id)
    }

    /// Whether this manager has the build queued or running.
    public func isHandling(_ id: String) -> Bool {
        condition.withLock { waiting.contains(id) || active[id] != nil }
    }

    // MARK: - Stale builds

    /// Builds left `running` by a runner that is gone (an opsh that
    /// crashed or was killed): it missed three heartbeats, or, on this
    /// host, its recorded pid no longer runs or runs a process started at
    /// another time (``LeaseVerdict``). Builds without a heartbeat or a
    /// runner of this host cannot be judged and are not listed.
    public func staleBuilds() throws -> [BuildRecord] {
        let now = try database.clock()
        let leases = try database.runningLeases()
        let stale = leases.filter { !isHandling($0.buildId) && LeaseVerdict(lease: $0, now: now).isStale }
        return try stale.compactMap { try database.build($0.buildId) }
    }

    /// Ends a stale build as `failed`, with a log line saying why. A build
    /// whose runner is alive is refused unless `force`; one this manager
    /// runs is refused (cancel it).
    @discardableResult
    public func markStale(_ id: String, reason: String, force: Bool = false) throws -> BuildRecord {
        guard let lease = try database.lease(id) else { throw JobError.unknownBuild(id) }
        guard lease.status == .running else { throw JobError.notRunning(id: id, status: lease.status) }
        if isHandling(id) { throw JobError.buildIsRunning(id) }
        let verdict = LeaseVerdict(lease: lease, now: try database.clock())
        if let identity = verdict.identity, !verdict.isStale, !force {
            throw JobError.runnerAlive(id: id, host: identity.host, pid: identity.pid)
        }
        let runnerText = verdict.description
        let note = BuildLogRecord(buildId: id, level: .error, category: "build",
                                  content: "marked failed as stale: \(reason) (\(runnerText))")
        guard try database.finish(id, status: .failed, exitCode: nil, progress: nil, fence: nil, log: note, crash: nil) else {
            throw JobError.notRunning(id: id, status: try database.build(id)?.status ?? .failed)
        }
        let ended = try get(id)
        configuration.onStatusChange?(ended)
        return ended
    }

    // MARK: - For the runs

    /// Ends a build that never ran (status queued → `status`) with a log
    /// line; false when it was not queued any more.
    @discardableResult
    func endQueued(_ id: String, status: BuildStatus, note: String) -> Bool {
        (try? finishQueued(id, status: status, note: note)) ?? false
    }

    /// ``endQueued(_:status:note:)``, throwing why the row could not be ended.
    func finishQueued(_ id: String, status: BuildStatus, note: String) throws -> Bool {
        let line = BuildLogRecord(buildId: id, level: status == .failed ? .error : .warning, content: note)
        let ended = try database.finish(id, status: status, exitCode: nil, progress: nil, fence: nil, log: line, crash: nil)
        if ended { changed(id) }
        return ended
    }

    /// Tells the observer that a build changed.
    func changed(_ id: String) {
        guard let onStatusChange = configuration.onStatusChange, let build = try? get(id) else { return }
        onStatusChange(build)
    }

    /// Says something to the operator (``Configuration/onNotice``, else
    /// stderr), URL credentials masked and control characters visible.
    func notice(_ message: String) {
        let shown = VisibleText.of(SecretMask.maskingURLCredentials(in: message))
        if let onNotice = configuration.onNotice {
            onNotice(shown)
        } else {
            FileHandle.standardError.write(Data("opsh: \(shown)\n".utf8))
        }
    }

    /// Says a problem to the operator (``Configuration/onProblem``, else
    /// as a notice), masked and made visible as ``notice(_:)`` does.
    func problem(_ message: String) {
        guard let onProblem = configuration.onProblem else { return notice(message) }
        onProblem(VisibleText.of(SecretMask.maskingURLCredentials(in: message)))
    }

    // MARK: - Heartbeat

    /// Starts the heartbeat thread, once (lock held).
    private func startHeartbeat() {
        guard heartbeat == nil else { return }
        heartbeat = Heartbeat(interval: configuration.heartbeatInterval) { [weak self] in self?.beat() }
    }

    /// Stops the heartbeat thread (the builds this manager holds then go
    /// stale after three intervals). For a runner that exits.
    public func stopHeartbeat() {
        condition.withLock { heartbeat }?.stop()
    }

    /// One heartbeat for every build this manager holds; a build it no
    /// longer holds (taken back after its heartbeat lapsed) is stopped here.
    private func beat() {
        let handled = condition.withLock { Set(waiting).union(active.keys) }
        guard !handled.isEmpty else { return }
        let held: Set<String>?
        do {
            held = try database.heartbeat(for: holder)
        } catch {
            problem("cannot record the heartbeat of \(handled.count) build(s) (tried again in \(LeaseVerdict.seconds(configuration.heartbeatInterval))): \(error)")
            return
        }
        guard let held else { return }
        for id in handled.subtracting(held) {
            // Ended meanwhile (still ours), or taken back (someone else's, or queued for anyone).
            guard let lease = try? database.lease(id) else { continue }
            if lease.runnerId == holder.id {
                // Ended by its own run, or from another opsh (jobs.cancel there) while it runs here: stop it.
                guard lease.status.isFinished, let run = condition.withLock({ active[id] }), !run.isRecordingEnd else { continue }
                notice("build \(id) was \(lease.status.rawValue) from another opsh: stopping its run here")
                run.cancel(reason: "it was \(lease.status.rawValue) from another opsh")
                continue
            }
            let (wasWaiting, run) = condition.withLock { () -> (Bool, BuildRun?) in
                let wasWaiting = waiting.contains(id)
                waiting.removeAll { $0 == id }
                condition.broadcast()
                return (wasWaiting, active[id])
            }
            guard wasWaiting || run != nil else { continue }
            notice("build \(id) was taken back from this opsh (its heartbeat lapsed); it is \(lease.status.rawValue) now\(run != nil ? ": stopping its run here" : "")")
            run?.abandon()
        }
    }

    /// A run has ended: free its slot and start the next waiting build.
    func runEnded(_ run: BuildRun) {
        condition.withLock {
            active[run.buildId] = nil
            condition.broadcast()
        }
        pump()
    }

    /// Starts waiting builds while slots are free.
    private func pump() {
        let runs: [BuildRun] = condition.withLock {
            var runs: [BuildRun] = []
            while active.count < max(1, configuration.maxConcurrentJobs), !waiting.isEmpty {
                let id = waiting.removeFirst()
                let run = BuildRun(buildId: id, manager: self)
                active[id] = run
                runs.append(run)
            }
            return runs
        }
        for run in runs { run.launch() }
    }

    /// The scheme and project of a build, refusing what cannot run.
    private func runnable(scheme schemeId: String) throws -> (SchemeRecord, ProjectRecord) {
        let (scheme, project) = try database.schemeAndProject(schemeId)
        return try Self.runnable(schemeId, scheme, project)
    }

    static func runnable(_ schemeId: String, _ scheme: SchemeRecord?, _ project: ProjectRecord?) throws -> (SchemeRecord, ProjectRecord) {
        guard let scheme else { throw JobError.unknownScheme(schemeId) }
        guard !scheme.buildCommand.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else {
            throw JobError.schemeHasNoBuildCommand(schemeId: scheme.id, name: scheme.name)
        }
        guard let project else { throw StoreError.notFound(table: "projects", key: "\"\(scheme.projectBundleIdentifier)\"") }
        guard !project.gitRepositoryURL.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else {
            throw JobError.projectHasNoRepository(project: project.bundleIdentifier)
        }
        return (scheme, project)
    }
}
