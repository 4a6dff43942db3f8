import Foundation
import Jobs
import Shell
import Store
import TextCodec

/// `opsh runner`: opens the build queue (``Databases/openBuildQueue(_:leaseLength:)``:
/// an SQLite file, or PostgreSQL's), checks it can hold a queue (migration
/// 004_runners) and that each `--scheme` names a scheme, then runs a
/// ``QueueRunner`` until SIGTERM, logging one line per claim, finished
/// build and take-back on stderr.
struct RunnerMode {
    let command: RunnerCommand

    func run() throws -> Int32 {
        let options = command.options
        let launch = Launch(options: options)
        let log = RunnerLog(quiet: options.quiet)
        let database: any BuildStore
        let close: () -> Void
        do {
            // A build is stale after three missed heartbeats (QueueRunner).
            (database, close) = try Databases.openBuildQueue(launch.databaseOptions(interactive: true),
                                                             leaseLength: 3 * command.heartbeat)
            guard try database.queueColumnsExist() else {
                throw Stop(.databaseUnavailable, "this database lacks migration 004_runners, which opsh runner needs (a heartbeat per build): run `opsh migrate` first")
            }
            for scheme in command.schemes {
                guard try database.schemeExists(idOrName: scheme) else {
                    throw UsageError("--scheme '\(scheme)': no scheme has that id or name", command: RunnerCommand.help)
                }
            }
        } catch let error as UsageError {
            throw error
        } catch {
            // A database it cannot run on: said as every runner line is (the journal's).
            let stop = error as? Stop ?? Launch.stop(opening: error)
            if let message = stop.message { log.write(.problem(message)) }
            throw Stop(stop.status)
        }

        var configuration = QueueRunner.Configuration()
        if let concurrency = command.concurrency { configuration.concurrency = concurrency }
        configuration.heartbeatInterval = command.heartbeat
        configuration.schemes = command.schemes.isEmpty ? nil : command.schemes
        configuration.maxAttempts = command.maxAttempts
        // An absolute folder: a database named `--db ./x.sqlite` must not
        // put builds in a path relative to wherever they run. Next to an
        // SQLite file; on PostgreSQL in opsh's data folder of this machine.
        let workspaces = command.workspaces
            ?? database.path.map { URL(fileURLWithPath: $0).deletingLastPathComponent().appendingPathComponent("workspaces").path }
            ?? DatabaseLocation.dataDirectory() + "/workspaces"
        configuration.jobs.workspaceRoot = URL(fileURLWithPath: workspaces).standardizedFileURL.path
        configuration.jobs.keepWorkspaces = command.keepWorkspaces
        // Under a Type=notify unit: READY=1, WATCHDOG=1 per recorded heartbeat, STOPPING=1.
        let service = RunnerServiceStatus(notifier: ServiceManagerNotifier(), heartbeat: command.heartbeat, log: log)
        let runner = QueueRunner(database: database, configuration: configuration) { event in
            log.write(event)
            service.tell(event)
        }
        let identity = runner.manager.runner
        log.progress("started: pid \(identity.pid) on \(identity.host), database \(database.label), \(configuration.concurrency) at once, heartbeat every \(command.heartbeat) s, schemes: \(configuration.schemes?.joined(separator: ", ") ?? "all")")
        service.checkWatchdog()

        let stop = RunnerStop()
        RunnerSignals.install { signal in
            service.stopping(RunnerStop.name(signal))
            switch stop.received(signal) {
            case .finishRunning:
                log.progress("\(RunnerStop.name(signal)): claiming no more builds; waiting for \(runner.manager.handledCount) running build(s) to finish (a second SIGTERM, or SIGINT, cancels them)")
                runner.stopClaiming()
            case .cancelRunning:
                log.progress("\(RunnerStop.name(signal)): cancelling \(runner.manager.handledCount) running build(s)")
                runner.cancelRunning(reason: "opsh runner pid \(identity.pid) on \(identity.host) was stopped (\(RunnerStop.name(signal)))")
            case .nothingMore:
                break
            }
        }
        runner.run()
        close()
        let status = stop.exitStatus
        log.progress("stopped (exit status \(status.rawValue))")
        return status.rawValue
    }
}

/// What each signal does to a runner: the first SIGTERM (or SIGHUP) lets
/// running builds finish; a second, or SIGINT, cancels them.
final class RunnerStop: @unchecked Sendable {
    enum Action { case finishRunning, cancelRunning, nothingMore }

    private let lock = NSLock()
    private var signals: [Int32] = []

    func received(_ signal: Int32) -> Action {
        lock.withLock {
            signals.append(signal)
            let cancels = signal == SIGINT || signals.count == 2
            if cancels { return .cancelRunning }
            return signals.count == 1 ? .finishRunning : .nothingMore
        }
    }

    /// 0 after a stop that let the builds finish; 143 (130 for SIGINT,
    /// 129 for SIGHUP) after one that cancelled them.
    var exitStatus: ExitStatus {
        lock.withLock {
            guard signals.count >= 2 || signals.contains(SIGINT) else { return .success }
            switch signals.last {
            case SIGINT: return .interrupted
            case SIGHUP: return .hangup
            default: return .terminated
            }
        }
    }

    static func name(_ signal: Int32) -> String {
        switch signal {
        case SIGINT: return "SIGINT"
        case SIGHUP: return "SIGHUP"
        default: return "SIGTERM"
        }
    }
}

/// The runner's log on stderr: one line per event, with the UTC time, so
/// that systemd's journal, a container's log and a file all read alike.
struct RunnerLog: Sendable {
    let quiet: Bool
    /// A problem said again and again (the database down: every claim and
    /// every sweep fails) is said once each half minute, with how often it
    /// recurred meanwhile.
    private let repeats = RepeatedLines(window: 30)

    init(quiet: Bool) {
        self.quiet = quiet
    }

    func write(_ event: QueueRunner.Event) {
        switch event {
        case let .claimed(build, scheme):
            if !quiet { line("claimed build \(build.id) (\(scheme) #\(build.buildNumber), version \(build.versionString))") }
        case let .finished(build, scheme):
            guard !quiet else { return }
            let took = zip(build.startDate, build.endDate).map { String(format: " in %.1f s", $1.timeIntervalSince($0)) } ?? ""
            let code = build.exitCode.map { " (exit code \($0))" } ?? ""
            line("build \(build.id) (\(scheme) #\(build.buildNumber)) \(build.status.rawValue)\(code)\(took)")
        case let .tookBack(id, note, failed):
            line("build \(id) \(failed ? "marked failed" : "requeued"): \(note)")
        case let .notice(message):
            line(message)
        case let .problem(message):
            guard let again = repeats.shouldSay(message) else { return }
            line("problem: \(message)" + (again > 0 ? " (\(again) more time(s) in the last \(Int(repeats.window)) s)" : ""))
        case .ready, .heartbeat:
            break  // for the service manager (RunnerServiceStatus)
        }
    }

    /// A line about the runner itself (started, stopping, stopped): not
    /// with --quiet, which keeps take-backs, notices and problems.
    func progress(_ text: String) {
        if !quiet { line(text) }
    }

    /// Names and versions come from the database and errors from git:
    /// URL credentials masked, control characters visible.
    func line(_ text: String) {
        let formatter = ISO8601DateFormatter()
        let shown = VisibleText.of(SecretMask.maskingURLCredentials(in: text))
        Terminal.write("\(formatter.string(from: Date())) opsh runner: \(shown)\n", to: 2)
    }
}

private func zip(_ first: Date?, _ second: Date?) -> (Date, Date)? {
    guard let first, let second else { return nil }
    return (first, second)
}

/// Which lines to say of those that repeat: each text once per `window`.
final class RepeatedLines: @unchecked Sendable {
    let window: TimeInterval
    private let lock = NSLock()
    private var said: [String: (at: Date, heldBack: Int)] = [:]

    init(window: TimeInterval) {
        self.window = window
    }

    /// Nil to hold `text` back; else how often it was held back since it
    /// was last said.
    func shouldSay(_ text: String) -> Int? {
        lock.withLock {
            let now = Date()
            if let last = said[text], now.timeIntervalSince(last.at) < window {
                said[text] = (last.at, last.heldBack + 1)
                return nil
            }
            let heldBack = said[text]?.heldBack ?? 0
            said = said.filter { now.timeIntervalSince($0.value.at) < window }
            said[text] = (now, 0)
            return heldBack
        }
    }
}
