import Foundation
import Store

/// `opsh runner`'s loop: claims queued builds from the shared database
/// while it has free slots, runs them with a ``JobManager`` (which
/// heartbeats them), and each heartbeat period takes back the builds whose
/// holder stopped heartbeating (README, "Build runners"; ARCHITECTURE.md,
/// "Build runners and the queue").
///
/// It polls the queue with a read (no lock) and takes the write lock only
/// to claim, one short statement per build. ``stopClaiming()`` lets the
/// running builds finish; ``cancelRunning(reason:)`` cancels them; ``run()``
/// returns once it stopped claiming and its builds ended.
public final class QueueRunner: @unchecked Sendable {
    public struct Configuration: Sendable {
        /// How many builds run at once.
        public var concurrency = max(1, ProcessInfo.processInfo.activeProcessorCount)
        /// How often this runner's builds get a heartbeat and stale builds
        /// are looked for; a build is stale after three missed heartbeats.
        public var heartbeatInterval: TimeInterval = 10
        /// Only builds of these schemes (ids or names); nil: every scheme.
        public var schemes: [String]?
        /// How many times a build is started before a take-back marks it
        /// failed instead of requeueing it.
        public var maxAttempts = 3
        /// Everything else about running builds (workspaces, grace, shell).
        public var jobs = JobManager.Configuration()

        /// How long an idle runner waits before looking at the queue again.
        public var idlePoll: TimeInterval { min(1, heartbeatInterval / 2) }

        public init() {}
    }

    /// What a runner reports, one line each (its log on stderr).
    public enum Event: Sendable {
        /// A build and its scheme (`com.example.app Release`).
        case claimed(BuildRecord, scheme: String)
        case finished(BuildRecord, scheme: String)
        case tookBack(buildId: String, note: String, failed: Bool)
        /// What the job manager tells the operator (a build stopped here
        /// because it was cancelled elsewhere or taken back).
        case notice(String)
        /// Something failed (the database locked past its busy timeout);
        /// the runner goes on and tries again.
        case problem(String)
        /// The runner has registered itself (``RunnerPresence``) and claims
        /// builds from now on: a service manager may call it started.
        case ready
        /// The runner's own heartbeat, and whether the database took it:
        /// what a service manager's watchdog is fed from.
        case heartbeat(recorded: Bool)
    }

    public let database: any BuildStore
    public let configuration: Configuration
    public let manager: JobManager
    private let report: @Sendable (Event) -> Void

    private let condition = NSCondition()
    // Guarded by `condition`:
    private var claiming = true
    /// The database said `builds` changed since the loop last looked.
    private var queueChanged = false

    // The run loop's own (one thread):
    /// This runner could not reach the database at its last try.
    private var lostTheDatabase = false
    /// When (the database's clock) it reached the database again after it
    /// could not: no holder could beat meanwhile either.
    private var reachableAgainAt: Double?
    /// Builds whose lease was found lapsed while the database took writes
    /// at once: the lease then (its last heartbeat) and when (the
    /// database's clock). Taken back only when a later sweep, a heartbeat
    /// interval on, finds the same lease lapsed still.
    private var suspects: [String: (heartbeatAt: Double?, since: Double)] = [:]

    /// A runner on an SQLite store.
    public convenience init(store: Store, configuration: Configuration, report: @escaping @Sendable (Event) -> Void) {
        self.init(database: SQLiteBuildStore(store: store), configuration: configuration, report: report)
    }

    public init(database: any BuildStore, configuration: Configuration, report: @escaping @Sendable (Event) -> Void) {
        self.database = database
        self.configuration = configuration
        self.report = report
        var jobs = configuration.jobs
        jobs.maxConcurrentJobs = configuration.concurrency
        jobs.heartbeatInterval = configuration.heartbeatInterval
        let condition = self.condition
        let previous = jobs.onStatusChange
        jobs.onStatusChange = { build in
            previous?(build)
            guard build.status.isFinished else { return }
            report(.finished(build, scheme: Self.describeScheme(database, build.schemeId)))
            // Its slot frees as its run returns: the loop looks again now, and
            // at the latest one idle poll later.
            condition.withLock { condition.broadcast() }
        }
        jobs.onNotice = { report(.notice($0)) }
        jobs.onProblem = { report(.problem($0)) }
        manager = JobManager(database: database, configuration: jobs)
    }

    /// This runner as `opsh runners` lists it.
    public var registration: RunnerRegistration {
        RunnerRegistration(id: manager.holder.id, host: manager.runner.host, pid: manager.runner.pid,
                           processStartedAt: manager.runner.startedAt, heartbeatInterval: configuration.heartbeatInterval,
                           concurrency: configuration.concurrency, schemes: configuration.schemes)
    }

    /// Claims and runs builds until ``stopClaiming()`` and the builds it
    /// runs have ended. Problems with the database (locked past the busy
    /// timeout, a full disk) are reported and tried again next period: a
    /// runner outlives a busy backend.
    ///
    /// An idle runner looks at the queue when the database says `builds`
    /// changed (``BuildStore/watchQueue(_:)``), and at the latest one idle
    /// poll later (the fallback, also while the watch cannot run).
    public func run() {
        let condition = self.condition
        let watch: StorageCancellable?
        do {
            watch = try database.watchQueue {
                condition.withLock {
                    self.queueChanged = true
                    condition.broadcast()
                }
            }
        } catch {
            watch = nil
            report(.problem("cannot watch the queue (polling every \(LeaseVerdict.seconds(configuration.idlePoll)) instead): \(error)"))
        }
        defer { watch?.cancel() }
        // Listed in opsh_runners, idle or not, until it returns.
        let presence = RunnerPresence(database: database, registration: registration, report: report)
        presence.start()
        defer { presence.stop() }
        report(.ready)
        var nextSweep = Date()
        while true {
            let stillClaiming = condition.withLock { claiming }
            if Date() >= nextSweep {
                takeBackStaleBuilds()
                nextSweep = Date().addingTimeInterval(configuration.heartbeatInterval)
            }
            if stillClaiming {
                claimWhileSlotsAreFree()
            } else if manager.handledCount == 0 {
                manager.stopHeartbeat()
                return
            }
            condition.withLock {
                let wake = min(nextSweep, Date().addingTimeInterval(configuration.idlePoll))
                if claiming == stillClaiming, !queueChanged { _ = condition.wait(until: wake) }
                queueChanged = false
            }
        }
    }

    /// Claims no more builds; ``run()`` returns when the running ones end.
    public func stopClaiming() {
        condition.withLock {
            claiming = false
            condition.broadcast()
        }
    }

    /// Stops claiming and cancels the running builds (`reason` in their log).
    public func cancelRunning(reason: String) {
        stopClaiming()
        manager.cancelAll(reason: reason)
    }

    // MARK: - Claiming

    private func claimWhileSlotsAreFree() {
        while condition.withLock({ claiming }), manager.handledCount < configuration.concurrency {
            let build: BuildRecord?
            do {
                let schemes = configuration.schemes
                // A read first: an idle runner never takes the write lock.
                guard try database.hasClaimable(schemes: schemes) else { return }
                build = try database.reserveNext(for: manager.holder, schemes: schemes)
            } catch let tampered as SchemeChangedByTrigger {
                // Rolled back: failed here, or it would be claimed again for ever.
                guard let id = tampered.buildId, manager.endQueued(id, status: .failed, note: "\(tampered)") else {
                    report(.problem("cannot claim a build (tried again in \(LeaseVerdict.seconds(configuration.idlePoll))): \(tampered)"))
                    return
                }
                report(.problem("build \(id) refused: \(tampered)"))
                continue
            } catch {
                if TransientFailure.matches(error) { lostTheDatabase = true }
                report(.problem("cannot claim a build (tried again in \(LeaseVerdict.seconds(configuration.idlePoll))): \(error)"))
                return
            }
            guard let build else { return }
            report(.claimed(build, scheme: Self.describeScheme(database, build.schemeId)))
            do {
                try manager.start(build.id)
            } catch is SchemeChangedByTrigger {
                continue  // failed by start, saying why
            } catch {
                // It cannot run (its scheme lost its command, its project its
                // repository): ended here rather than claimed again forever.
                manager.endQueued(build.id, status: .failed, note: "cannot start: \(error)")
                report(.problem("build \(build.id) cannot start and is marked failed: \(error)"))
            }
        }
    }

    /// `com.example.app Release`, for the log; the id when it cannot be read.
    static func describeScheme(_ database: any BuildStore, _ id: String) -> String {
        let scheme = (try? database.schemeAndProject(id))?.0
        return scheme.map { "\($0.projectBundleIdentifier) \($0.name)" } ?? "scheme \(id)"
    }

    // MARK: - Taking back

    /// Every running build whose holder missed three heartbeats is
    /// requeued, or marked failed once it has used its attempts, with a log
    /// line saying which and why. Judged by the heartbeat alone, never by a
    /// pid (LeaseVerdict says why).
    ///
    /// An outage is not a missed heartbeat: while the database did not
    /// answer no holder could beat, so after this runner reaches it again
    /// every holder has its three heartbeats anew (and on PostgreSQL they
    /// count from the server's start at the earliest, whoever saw the
    /// restart: ``BuildStore/expiredLeases()``).
    private func takeBackStaleBuilds() {
        let now: Date
        let leases: [BuildLease]
        do {
            // Judged by the database's clock (the server's on PostgreSQL).
            (now, leases) = try database.expiredLeases()
        } catch {
            if TransientFailure.matches(error) { lostTheDatabase = true }
            report(.problem("cannot look for stale builds: \(error)"))
            return
        }
        if lostTheDatabase {
            lostTheDatabase = false
            reachableAgainAt = now.timeIntervalSince1970
        }
        let lapsed = leases.filter { lease in
            guard !manager.isHandling(lease.buildId) else { return false }
            if let reachableAgainAt, let interval = lease.heartbeatInterval,
               reachableAgainAt + BuildLease.missedHeartbeats * interval >= now.timeIntervalSince1970 {
                return false
            }
            return true
        }
        suspects = suspects.filter { id, _ in lapsed.contains { $0.buildId == id } }
        guard !lapsed.isEmpty else { return }
        // A lapse proves a stop only if the database took writes all along:
        // a lapse is suspected while writes go through at once (a lock held
        // elsewhere makes every holder's heartbeat wait too), and acted on
        // a heartbeat interval later, when the holder had the time to beat.
        do {
            try database.takesWrites(within: configuration.heartbeatInterval / 2)
        } catch {
            if TransientFailure.matches(error) { lostTheDatabase = true }
            suspects.removeAll()
            report(error is WritesWereBlocked ? .notice("not judging stale builds yet: \(error)")
                                              : .problem("cannot look for stale builds: \(error)"))
            return
        }
        for lease in lapsed {
            guard let suspected = suspects[lease.buildId], suspected.heartbeatAt == lease.heartbeatAt,
                  now.timeIntervalSince1970 - suspected.since >= (lease.heartbeatInterval ?? configuration.heartbeatInterval) else {
                if suspects[lease.buildId]?.heartbeatAt != lease.heartbeatAt || suspects[lease.buildId] == nil {
                    suspects[lease.buildId] = (lease.heartbeatAt, now.timeIntervalSince1970)
                }
                continue
            }
            let verdict = LeaseVerdict(lease: lease, now: now)
            let me = "runner pid \(manager.runner.pid) on \(manager.runner.host)"
            let action: BuildTakeBack = lease.attempts >= configuration.maxAttempts ? .fail : .requeue
            let note: String
            switch action {
            case .requeue:
                note = "taken back from \(verdict.description); requeued by \(me) (attempt \(lease.attempts) of \(configuration.maxAttempts) was lost: the build did not fail, its runner stopped)"
            case .fail:
                note = "taken back from \(verdict.description); marked failed by \(me): it was started \(lease.attempts) time(s) and its runner stopped each time (at most \(configuration.maxAttempts) attempts), so the build itself may be what stops its runners"
            }
            do {
                let took = try database.takeBack(lease, action, note: note)
                if took { report(.tookBack(buildId: lease.buildId, note: note, failed: action == .fail)) }
            } catch where TransientFailure.matches(error) {
                // Writes were blocked or the database went away: every
                // holder is judged again once this runner reaches it.
                lostTheDatabase = true
                suspects.removeAll()
                report(error is WritesWereBlocked ? .notice("not taking back build \(lease.buildId) yet: \(error)")
                                                  : .problem("cannot take back build \(lease.buildId) now: \(error)"))
                return
            } catch {
                report(.problem("cannot take back build \(lease.buildId): \(error)"))
            }
        }
    }
}
