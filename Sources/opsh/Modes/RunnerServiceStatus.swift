import Foundation
import Jobs

/// What `opsh runner` tells systemd under a `Type=notify` unit
/// (docs/runners.md, "Under systemd"): `READY=1` once it has registered
/// and claims builds; `WATCHDOG=1` after each heartbeat the database took,
/// and never after one it did not (a runner that cannot beat is restarted
/// after `WatchdogSec=`); `STOPPING=1` on SIGTERM. `STATUS=` says why in
/// `systemctl status`. Does nothing outside such a unit.
final class RunnerServiceStatus: @unchecked Sendable {
    private let notifier: ServiceManagerNotifier?
    private let heartbeat: Double
    private let log: RunnerLog
    private let lock = NSLock()
    private var stoppingSaid = false
    private var sendFailureSaid = false

    init(notifier: ServiceManagerNotifier?, heartbeat: Double, log: RunnerLog) {
        self.notifier = notifier
        self.heartbeat = heartbeat
        self.log = log
    }

    func tell(_ event: QueueRunner.Event) {
        switch event {
        case .ready:
            send("READY=1\nSTATUS=claiming builds; heartbeat every \(RunnerServiceStatus.seconds(heartbeat))")
        case .heartbeat(recorded: true):
            send("WATCHDOG=1\nSTATUS=heartbeat recorded at \(ISO8601DateFormatter().string(from: Date()))")
        case .heartbeat(recorded: false):
            // No WATCHDOG=1: systemd restarts a runner whose heartbeats fail for WatchdogSec=.
            send("STATUS=cannot record its heartbeat (the journal says why); no watchdog ping")
        case .claimed, .finished, .tookBack, .notice, .problem:
            break
        }
    }

    /// SIGTERM, SIGHUP or SIGINT: the runner stops claiming.
    func stopping(_ signal: String) {
        let first = lock.withLock { () -> Bool in
            defer { stoppingSaid = true }
            return !stoppingSaid
        }
        if first { send("STOPPING=1\nSTATUS=\(signal): claiming no more builds; the running ones finish") }
    }

    /// A watchdog period shorter than two heartbeats would restart a
    /// healthy runner: said at the start, as a problem.
    func checkWatchdog() {
        guard let interval = notifier?.watchdogInterval, interval < 2 * heartbeat else { return }
        log.write(.problem("WatchdogSec= (\(RunnerServiceStatus.seconds(interval))) is shorter than two heartbeats (--heartbeat \(RunnerServiceStatus.seconds(heartbeat))): systemd may restart this runner while it is well; make it at least three heartbeats"))
    }

    private func send(_ state: String) {
        guard let notifier, !notifier.send(state) else { return }
        let reason = String(cString: strerror(errno))
        let first = lock.withLock { () -> Bool in
            defer { sendFailureSaid = true }
            return !sendFailureSaid
        }
        if first { log.write(.problem("cannot notify systemd at NOTIFY_SOCKET=\(notifier.socket): \(reason)")) }
    }

    static func seconds(_ value: Double) -> String {
        value == value.rounded() ? "\(Int(value)) s" : "\(value) s"
    }
}
