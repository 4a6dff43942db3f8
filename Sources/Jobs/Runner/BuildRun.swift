import Foundation
import Git
import Store
#if canImport(Glibc)
import Glibc
#endif

/// One build being run: claim, checkout, the build command, and the end.
///
/// Threads: this run's own thread (checkout, spawn, wait for the exit),
/// a reader of the output pipe, and the log sink's flusher.
///
/// The build command runs under a supervisor (``SupervisedProcess``, in a
/// cgroup of its own where there is one: ``BuildContainment``): a cancel
/// sends SIGTERM to every process it started, SIGKILL after the grace
/// period, and when the command ends everything it left behind is killed
/// (after ``JobManager/Configuration/lingerAfterExit``), so no daemon
/// outlives its build and none keeps its output open.
final class BuildRun: @unchecked Sendable {
    let buildId: String
    private let manager: JobManager
    private var configuration: JobManager.Configuration { manager.configuration }
    private var database: any BuildStore { manager.database }

    private let condition = NSCondition()
    // Guarded by `condition`:
    private var cancelRequested = false
    /// Why it was cancelled, for its log line (nil: at the user's request).
    private var cancelReason: String?
    /// Its build was taken back from this manager: stop, record nothing.
    private var abandoned = false
    /// The write that found the build no longer this run's, when one did.
    private var leaseLost: BuildLeaseLost?
    /// The lease this run writes under (set by the claim).
    private var fence: BuildFence?
    /// Its end is being recorded: a finished status in the database is its own.
    private var recordingEnd = false
    /// The build command and what it started, while they run.
    private var buildProcess: SupervisedProcess?
    private var readersRunning = 0
    private var abandonReaders = false
    private var cancelledWithKill = false

    init(buildId: String, manager: JobManager) {
        self.buildId = buildId
        self.manager = manager
    }

    func launch() {
        let thread = Thread { [self] in
            run()
            manager.runEnded(self)
        }
        thread.name = "opsh.job.\(buildId)"
        thread.start()
    }

    /// Stops the build: SIGTERM to its process group now, SIGKILL after
    /// the grace period if it is still there.
    func cancel(reason: String? = nil) {
        condition.lock()
        defer { condition.unlock() }
        guard !cancelRequested else { return }
        cancelRequested = true
        cancelReason = reason
        signalForCancel()
    }

    /// Stops a run whose build this manager no longer holds (another
    /// runner took it back after this manager's heartbeat lapsed): its
    /// processes are stopped as by a cancel, and its end is not recorded
    /// (the build's row belongs to its next run).
    func abandon() {
        condition.withLock { abandoned = true }
        cancel(reason: "this opsh no longer holds the build")
    }

    /// A write found the build no longer this run's (``BuildFence``): the
    /// build is stopped, nothing more is written, and stderr says who has
    /// it now.
    private func lost(_ refusal: BuildLeaseLost) {
        let first = condition.withLock { () -> Bool in
            guard leaseLost == nil else { return false }
            leaseLost = refusal
            abandoned = true
            return true
        }
        guard first else { return }
        manager.notice("\(refusal); stopping its run here, which writes nothing more")
        cancel(reason: "this opsh no longer holds the build")
    }

    /// What became of a write of this run's that must land.
    private enum Persisted<T> {
        case done(T)
        case lost(BuildLeaseLost)
        case failed(any Error)
    }

    /// Runs `write` until it lands (see ``untilTheDatabaseAnswers``); its
    /// lease decides whether it may land at all (``BuildFence``). Any
    /// other error is tried a few times.
    private func persist<T>(_ what: String, _ write: () throws -> T) -> Persisted<T> {
        var refusals = 0
        do {
            return .done(try untilTheDatabaseAnswers(what, firstDelay: 0.05, otherError: { error in
                if error is BuildLeaseLost { throw error }
                refusals += 1
                if refusals >= 5 { throw error }
            }, write))
        } catch let refusal as BuildLeaseLost {
            return .lost(refusal)
        } catch {
            return .failed(error)
        }
    }

    /// Runs `attempt` again for as long as the database does not answer
    /// (a restarting server, a lock held past the busy timeout, a Ctrl-C
    /// on the Lua thread: `Store.interrupt` reaches every connection of
    /// the store, this thread's too), saying so once and again when it
    /// lands; an interrupt is taken again quietly (it was aimed at the Lua
    /// thread's statements). The wait doubles up to 2 s. `otherError`
    /// sees every other error: it throws to give up, returns to try again.
    /// `giveUp` ends the outage's retries early (the error is thrown).
    private func untilTheDatabaseAnswers<T>(_ what: String, firstDelay: TimeInterval,
                                            giveUp: () -> Bool = { false },
                                            otherError: (any Error) throws -> Void,
                                            _ attempt: () throws -> T) throws -> T {
        var delay = firstDelay
        var outageStarted: Date?
        while true {
            do {
                let result = try attempt()
                if let outageStarted {
                    manager.notice("\(what) of build \(buildId) recorded after \(LeaseVerdict.seconds((Date().timeIntervalSince(outageStarted) * 10).rounded() / 10)) without the database")
                }
                return result
            } catch where TransientFailure.matches(error) {
                if giveUp() { throw error }
                if outageStarted == nil && !TransientFailure.isInterrupt(error) {
                    outageStarted = Date()
                    manager.problem("cannot record \(what) of build \(buildId); tried again until the database answers: \(error)")
                }
            } catch {
                try otherError(error)
            }
            Thread.sleep(forTimeInterval: delay)
            delay = min(2, delay * 2)
        }
    }

    /// Called with the lock held, at cancel or when the build command
    /// starts after a cancel (a checkout stops by itself: its git asks
    /// ``isCancelled``).
    private func signalForCancel() {
        guard let process = buildProcess else { return }
        process.terminateAll()
        let grace = configuration.cancelGracePeriod
        // A thread of its own rather than Dispatch: the KILL must come
        // on time even when Dispatch's workers are all busy.
        Thread.detachNewThread { [self] in
            Thread.sleep(forTimeInterval: grace)
            condition.withLock {
                guard let process = buildProcess, process.exitStatus == nil else { return }
                process.killAll()
                cancelledWithKill = true
            }
        }
    }

    private var isCancelled: Bool { condition.withLock { cancelRequested } }

    /// Whether this run is recording its end (its row may say so already).
    var isRecordingEnd: Bool { condition.withLock { recordingEnd } }

    // MARK: - The run

    private func run() {
        // Taken back before it started: the build is someone else's now.
        if condition.withLock({ abandoned }) { return }
        guard !isCancelled else {
            manager.endQueued(buildId, status: .cancelled, note: "cancelled before it started")
            return
        }
        // The claim reads what the build runs (its scheme's command as
        // last set) in its own transaction, before its statement: a
        // trigger that rewrites the scheme meanwhile is refused there.
        let claimed: ClaimedBuild?
        do {
            // Taken again while the database does not answer, as the end
            // is: the build must not stay queued for good because the
            // operator stopped a `jobs.wait` (its Ctrl-C interrupts this
            // thread's connection too).
            claimed = try untilTheDatabaseAnswers("the claim", firstDelay: 0.01,
                                                  giveUp: { isCancelled || condition.withLock { abandoned } },
                                                  otherError: { throw $0 }) {
                try database.claim(buildId, for: manager.holder) { scheme, project in
                    _ = try JobManager.runnable(scheme?.id ?? "?", scheme, project)
                }
            }
        } catch let tampered as SchemeChangedByTrigger {
            manager.endQueued(buildId, status: .failed, note: "\(tampered)")
            return
        } catch let refusal as JobError {
            manager.endQueued(buildId, status: .failed, note: "cannot start: \(refusal)")
            return
        } catch {
            manager.problem("cannot start build \(buildId): \(error)")
            return
        }
        // Cancelled, deleted or taken back meanwhile.
        guard let claimed else { return }
        condition.withLock { fence = claimed.fence }
        manager.changed(buildId)

        // The lines opsh writes itself mask URL credentials and the
        // configuration's API keys, read now (a key set since is known).
        let secrets = (try? database.knownSecrets()) ?? []
        let sink = LogSink(buildId: buildId, database: database, limits: LogSink.Limits(
            flushInterval: configuration.flushInterval, flushLineCount: configuration.flushLineCount,
            maxBatchLines: configuration.maxBatchLines, maxPendingLines: configuration.maxPendingLines,
            recentLineCount: configuration.crashLogLineCount),
            fence: claimed.fence, spoolFolder: manager.workspaces.root,
            mask: { CodeMask.mask(SecretMask.maskingURLCredentials(in: $0), knownSecrets: secrets) },
            onLeaseLost: { [weak self] in self?.lost($0) },
            onNotice: { [weak manager] in manager?.notice($0) },
            onProblem: { [weak manager] in manager?.problem($0) })
        let started = Date()
        let outcome = execute(claimed, sink: sink)
        finish(outcome, sink: sink, started: started)
    }

    private enum Outcome {
        case ended(Termination)
        case failedToStart
        case cancelledBeforeBuild
    }

    private func execute(_ plan: ClaimedBuild, sink: LogSink) -> Outcome {
        let declared: [String]
        do {
            declared = try BuildEnvironment.declaredNames(plan.passEnvironment, scheme: plan.scheme.name)
        } catch {
            sink.note("cannot start the build: \(error)", level: .error)
            return .failedToStart
        }
        // Checkout, into a folder named after the build under the
        // workspaces folder, recorded as opsh's first.
        let workspace = manager.workspaces.freshPath(for: buildId)
        do {
            try manager.workspaces.recordOwner(of: workspace, build: buildId, scheme: plan.scheme.id)
        } catch {
            sink.note("cannot make the workspace: \(error)", level: .error)
            return .failedToStart
        }
        let repository = plan.project.gitRepositoryURL
        sink.note("checking out '\(plan.build.versionString)' of \(repository) into \(workspace)")
        let checkout: Workspace
        var git = configuration.git
        git.stopRequest = { [weak self] in self?.isCancelled == false ? nil : "the build was cancelled" }
        do {
            // git's own lines are opsh's too: git names the URL in them.
            checkout = try git.makeWorkspace(of: repository, at: plan.build.versionString, path: workspace,
                                             onOutput: { sink.add([sink.mask($0)]) })
        } catch {
            if isCancelled { return .cancelledBeforeBuild }
            sink.note("checkout failed: \(error)", level: .error)
            return .failedToStart
        }
        if isCancelled { return .cancelledBeforeBuild }
        if case let .lost(refusal) = persist("the commit", { try database.setCommit(buildId, checkout.commit, fence: plan.fence) }) {
            lost(refusal)
            return .cancelledBeforeBuild
        }
        sink.note("checked out commit \(checkout.commit)")

        // The build command, with an allow-listed environment.
        sink.setPhase("build")
        let environment = BuildEnvironment.make(from: configuration.environment, declared: declared, own: [
            "OPSH_BUILD_ID": buildId,
            "OPSH_BUILD_VERSION": plan.build.versionString,
            "OPSH_BUILD_NUMBER": String(plan.build.buildNumber),
            "OPSH_SCHEME": plan.scheme.name,
            "OPSH_SCHEME_ID": plan.scheme.id,
            "OPSH_PROJECT": plan.scheme.projectBundleIdentifier,
            "OPSH_COMMIT": checkout.commit,
            "OPSH_WORKSPACE": workspace,
            "PWD": workspace,
        ])
        sink.note("$ \(configuration.shell) -c \(GitError.commandLine([plan.scheme.buildCommand]))", level: .debug)
        let cgroup = configuration.containment == .automatic ? BuildCgroup.make() : nil
        defer { cgroup?.remove() }
        let process: SupervisedProcess
        do {
            // One pipe for stdout and stderr: the log keeps the order the
            // build printed in, as a terminal would show it.
            process = try SupervisedProcess.start(executable: configuration.shell, arguments: ["-c", plan.scheme.buildCommand],
                                                  environment: environment, directory: workspace,
                                                  mergeStandardError: true, cgroup: cgroup?.descriptors)
        } catch {
            sink.note("cannot start the build: \(error)", level: .error)
            return .failedToStart
        }
        if let cgroup, cgroup.contains(process.pid) != false {
            sink.note("contained in cgroup \(cgroup.path)", level: .debug)
        } else {
            sink.note("contained by its supervisor (every descendant)", level: .debug)
        }
        let pipes = [process.standardOutput, process.standardError].filter { $0 >= 0 }
        condition.withLock {
            buildProcess = process
            readersRunning = pipes.count
            if cancelRequested { signalForCancel() }
        }
        for fd in pipes {
            let thread = Thread { [self] in read(fd, into: sink) }
            thread.name = "opsh.job.\(buildId).output"
            thread.start()
        }

        let termination = process.waitForExit() ?? .exited(-1)
        // The build command ended. Let the readers drain what is left,
        // then kill everything it left behind: a daemon, `setsid` or not.
        condition.lock()
        if !cancelRequested { waitForReaders(seconds: configuration.lingerAfterExit) }
        condition.unlock()
        process.end()
        condition.lock()
        if !waitForReaders(seconds: 2) {
            // Something outside the build holds the pipe (it was passed on): stop reading.
            abandonReaders = true
            waitForReaders(seconds: 1)
        }
        buildProcess = nil
        condition.unlock()
        return .ended(termination)
    }

    /// Waits (lock held) until both readers are done; false on timeout.
    @discardableResult
    private func waitForReaders(seconds: TimeInterval) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while readersRunning > 0 {
            if !condition.wait(until: deadline) { return readersRunning == 0 }
        }
        return true
    }

    private func read(_ fd: Int32, into sink: LogSink) {
        var splitter = LineSplitter()
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        var lines: [String] = []
        var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        while true {
            let ready = poll(&descriptor, 1, 200)
            if ready == 0 {
                if condition.withLock({ abandonReaders }) { break }
                continue
            }
            if ready < 0 {
                if errno == EINTR { continue }
                break
            }
            let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count > 0 {
                buffer.withUnsafeBytes { bytes in
                    splitter.feed(UnsafeRawBufferPointer(rebasing: bytes[0..<count])) { lines.append($0) }
                }
                sink.add(lines)
                lines.removeAll(keepingCapacity: true)
            } else if count == 0 || (errno != EINTR && errno != EAGAIN) {
                break
            }
        }
        splitter.finish { lines.append($0) }
        sink.add(lines)
        close(fd)
        condition.withLock {
            readersRunning -= 1
            condition.broadcast()
        }
    }

    // MARK: - The end

    private func finish(_ outcome: Outcome, sink: LogSink, started: Date) {
        let elapsed = String(format: "%.2f s", Date().timeIntervalSince(started))
        let (cancelled, killed, reason, abandoned) = condition.withLock {
            recordingEnd = true
            return (cancelRequested, cancelledWithKill, cancelReason, self.abandoned)
        }
        if abandoned {
            // The build is someone else's now (taken back, maybe running
            // again): not a line more in its log, stderr says so.
            sink.close()
            if condition.withLock({ leaseLost }) == nil {
                manager.notice("build \(buildId): pid \(manager.runner.pid) on \(manager.runner.host) lost this build (its heartbeat lapsed and it was taken back); this run's end is not recorded")
            }
            return
        }
        var status: BuildStatus
        var exitCode: Int?
        var crash: CrashLogRecord?
        // The end line lands with the end, in its transaction, or not at all.
        var endLine: BuildLogRecord?
        switch outcome {
        case .failedToStart:
            status = .failed
        case .cancelledBeforeBuild:
            status = .cancelled
            endLine = sink.endLine("build cancelled during the checkout", level: .warning)
        case .ended(let termination):
            exitCode = Int(termination.exitCode)
            if cancelled {
                status = .cancelled
                let how = killed
                    ? "SIGKILL after the \(configuration.cancelGracePeriod) s grace period"
                    : "SIGTERM"
                endLine = sink.endLine("build cancelled (\(how)): \(termination) after \(elapsed)\(reason.map { ": \($0)" } ?? "")",
                                       level: .warning)
            } else {
                switch termination {
                case .exited(0):
                    status = .succeeded
                    endLine = sink.endLine("build succeeded (exit code 0) in \(elapsed)")
                case .exited(let code):
                    status = .failed
                    endLine = sink.endLine("build failed with exit code \(code) after \(elapsed)", level: .error)
                case .signaled(let signal):
                    status = .failed
                    let record = CrashLogRecord(buildId: buildId, content: sink.recentLines.joined(separator: "\n"),
                                                signal: Int(signal))
                    crash = record
                    endLine = sink.endLine("build crashed: \(termination) after \(elapsed); crash log \(record.incidentIdentifier)",
                                           level: .error)
                }
            }
        }
        sink.close()
        if let failure = sink.status.failure {
            // Said on stderr as well (the runner's log): these lines are not in the database.
            manager.problem("\(failure.droppedLines) log line(s) of build \(buildId) could not be written: \(failure.error)")
        }
        let progress: Double? = status == .succeeded ? 1 : nil
        if condition.withLock({ leaseLost }) != nil { return }  // the sink found the build gone: said, nothing recorded
        // Retried until the database answers: a restarted server, a
        // Ctrl-C on the Lua thread (sqlite3_interrupt reaches every
        // connection of the pool) or a busy database must not leave the
        // build `running` for good, nor have it run again.
        let fence = condition.withLock { self.fence }
        switch persist("the end", { try database.finish(buildId, status: status, exitCode: exitCode, progress: progress,
                                                        fence: fence, log: endLine, crash: crash) }) {
        case .done:
            break
        case .lost(let refusal):
            lost(refusal)
            return
        case .failed(let error):
            manager.problem("cannot record the end of build \(buildId): \(error)")
        }
        manager.changed(buildId)
        manager.sweepWorkspaces(ended: buildId)
    }
}
