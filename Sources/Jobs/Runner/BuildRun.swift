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
    /// Its end is being recorded: a finished status in the database is its own.
    private var recordingEnd = false
    /// The build's process group while it can be signalled (not reaped).
    private var buildGroup: pid_t?
    /// The git process of the checkout, while it runs.
    private var gitProcess: pid_t?
    private var readersRunning = 0
    private var abandonReaders = false
    private var cancelledWithKill = false
    /// Where this run checked out (a later attempt of a build checks out
    /// into a folder of its own: JobManager.freshWorkspacePath). The run's
    /// thread only.
    private var workspace: String?

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

    /// Called with the lock held, at cancel or when a process appears
    /// after a cancel.
    private func signalForCancel() {
        if let git = gitProcess {
            Subprocess.signalGroup(git, SIGTERM)
        }
        if let group = buildGroup {
            Subprocess.signalGroup(group, SIGTERM)
            let grace = configuration.cancelGracePeriod
            // A thread of its own rather than Dispatch: the KILL must come
            // on time even when Dispatch's workers are all busy.
            Thread.detachNewThread { [self] in
                Thread.sleep(forTimeInterval: grace)
                condition.withLock {
                    // Only while the leader is not reaped: its pid, and so
                    // the group id, cannot belong to anyone else yet.
                    if let group = buildGroup, Subprocess.signalGroup(group, SIGKILL) {
                        cancelledWithKill = true
                    }
                }
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
        let plan: JobManager.Plan
        do {
            plan = try manager.plan(buildId)
        } catch {
            manager.endQueued(buildId, status: .failed, note: "cannot start: \(error)")
            return
        }
        let claimed: Bool
        do {
            claimed = try database.claim(buildId, for: manager.holder)
        } catch {
            manager.notice("cannot start build \(buildId): \(error)")
            return
        }
        // Cancelled, deleted or taken back meanwhile.
        guard claimed else { return }
        manager.changed(buildId)

        let sink = LogSink(buildId: buildId, database: database, limits: LogSink.Limits(
            flushInterval: configuration.flushInterval, flushLineCount: configuration.flushLineCount,
            maxBatchLines: configuration.maxBatchLines, maxPendingLines: configuration.maxPendingLines,
            recentLineCount: configuration.crashLogLineCount))
        let started = Date()
        let outcome = execute(plan, sink: sink)
        finish(outcome, sink: sink, started: started)
    }

    private enum Outcome {
        case ended(Termination)
        case failedToStart
        case cancelledBeforeBuild
    }

    private func execute(_ plan: JobManager.Plan, sink: LogSink) -> Outcome {
        // Checkout.
        let workspace = manager.freshWorkspacePath(buildId)
        self.workspace = workspace
        sink.note("checking out '\(plan.build.versionString)' of \(plan.repository) into \(workspace)")
        let checkout: Workspace
        do {
            checkout = try configuration.git.makeWorkspace(
                of: plan.repository, at: plan.build.versionString, path: workspace,
                onOutput: { sink.add([$0]) },
                onSpawn: { pid in
                    self.condition.withLock {
                        self.gitProcess = pid
                        if self.cancelRequested { Subprocess.signalGroup(pid, SIGTERM) }
                    }
                })
            condition.withLock { gitProcess = nil }
        } catch {
            condition.withLock { gitProcess = nil }
            if isCancelled { return .cancelledBeforeBuild }
            sink.note("checkout failed: \(error)", level: .error)
            return .failedToStart
        }
        if isCancelled { return .cancelledBeforeBuild }
        try? database.setCommit(buildId, checkout.commit)
        sink.note("checked out commit \(checkout.commit)")

        // The build command.
        sink.setPhase("build")
        var environment = configuration.environment
        environment["OPSH_BUILD_ID"] = buildId
        environment["OPSH_BUILD_VERSION"] = plan.build.versionString
        environment["OPSH_BUILD_NUMBER"] = String(plan.build.buildNumber)
        environment["OPSH_SCHEME"] = plan.scheme.name
        environment["OPSH_SCHEME_ID"] = plan.scheme.id
        environment["OPSH_PROJECT"] = plan.scheme.projectBundleIdentifier
        environment["OPSH_COMMIT"] = checkout.commit
        environment["OPSH_WORKSPACE"] = workspace
        environment["PWD"] = workspace
        sink.note("$ \(configuration.shell) -c \(GitError.commandLine([plan.scheme.buildCommand]))", level: .debug)
        let process: SpawnedProcess
        do {
            // One pipe for stdout and stderr: the log keeps the order the
            // build printed in, as a terminal would show it.
            process = try Subprocess.spawn(executable: configuration.shell, arguments: ["-c", plan.scheme.buildCommand],
                                           environment: environment, directory: workspace, newProcessGroup: true,
                                           mergeStandardError: true)
        } catch {
            sink.note("cannot start the build: \(error)", level: .error)
            return .failedToStart
        }
        let pipes = [process.standardOutput, process.standardError].filter { $0 >= 0 }
        condition.withLock {
            buildGroup = process.pid
            readersRunning = pipes.count
            if cancelRequested { signalForCancel() }
        }
        for fd in pipes {
            let thread = Thread { [self] in read(fd, into: sink) }
            thread.name = "opsh.job.\(buildId).output"
            thread.start()
        }

        Subprocess.waitForExit(process.pid)
        // The leader is gone (a zombie, not reaped). Let the readers drain
        // what is left, then end the processes it left behind in its group.
        condition.lock()
        if !cancelRequested { waitForReaders(seconds: configuration.lingerAfterExit) }
        Subprocess.signalGroup(process.pid, SIGKILL)
        if !waitForReaders(seconds: 2) {
            // A process left the group (setsid) and kept the pipe: stop reading.
            abandonReaders = true
            waitForReaders(seconds: 1)
        }
        buildGroup = nil
        condition.unlock()
        return .ended(Subprocess.reap(process.pid))
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
            sink.note("stopped here: pid \(manager.runner.pid) on \(manager.runner.host) lost this build (its heartbeat lapsed and it was taken back); this run's end is not recorded",
                      level: .warning)
            sink.close()
            return
        }
        var status: BuildStatus
        var exitCode: Int?
        var crash: CrashLogRecord?
        switch outcome {
        case .failedToStart:
            status = .failed
        case .cancelledBeforeBuild:
            status = .cancelled
            sink.note("build cancelled during the checkout", level: .warning)
        case .ended(let termination):
            exitCode = Int(termination.exitCode)
            if cancelled {
                status = .cancelled
                let how = killed
                    ? "SIGKILL after the \(configuration.cancelGracePeriod) s grace period"
                    : "SIGTERM"
                sink.note("build cancelled (\(how)): \(termination) after \(elapsed)\(reason.map { ": \($0)" } ?? "")",
                          level: .warning)
            } else {
                switch termination {
                case .exited(0):
                    status = .succeeded
                    sink.note("build succeeded (exit code 0) in \(elapsed)")
                case .exited(let code):
                    status = .failed
                    sink.note("build failed with exit code \(code) after \(elapsed)", level: .error)
                case .signaled(let signal):
                    status = .failed
                    let record = CrashLogRecord(buildId: buildId, content: sink.recentLines.joined(separator: "\n"),
                                                signal: Int(signal))
                    crash = record
                    sink.note("build crashed: \(termination) after \(elapsed); crash log \(record.incidentIdentifier)",
                              level: .error)
                }
            }
        }
        sink.close()
        if let failure = sink.status.failure {
            // Said on stderr as well: these lines are not in the database.
            let message = "opsh: \(failure.droppedLines) log line(s) of build \(buildId) could not be written: \(failure.error)\n"
            FileHandle.standardError.write(Data(message.utf8))
        }
        let progress: Double? = status == .succeeded ? 1 : nil
        // Retried: a Ctrl-C on the Lua thread (sqlite3_interrupt reaches
        // every connection of the pool) or a busy database must not leave
        // the build `running` for good.
        for attempt in 0..<5 {
            do {
                _ = try database.finish(buildId, status: status, exitCode: exitCode, progress: progress,
                                        heldBy: manager.holder.id, log: nil, crash: crash)
                break
            } catch {
                if attempt == 4 {
                    FileHandle.standardError.write(Data("opsh: cannot record the end of build \(buildId): \(error)\n".utf8))
                }
                Thread.sleep(forTimeInterval: 0.05 * Double(attempt + 1))
            }
        }
        if configuration.removeWorkspaceWhenDone {
            if let workspace { try? configuration.git.removeWorkspace(workspace) }
        }
        manager.changed(buildId)
    }
}
