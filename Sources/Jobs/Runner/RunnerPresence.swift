import Foundation
import Store

/// A runner's own row in `opsh_runners` (``RunnerRegistry``, migration
/// 007_runnerRegistry): registered when the runner starts, its heartbeat
/// refreshed every heartbeat interval on a thread of its own (one short
/// statement: ``BuildStore/beatRunner(_:registered:)``), marked stopped
/// when the runner exits cleanly. What `opsh runners` lists, idle runners
/// included; and what the service manager's watchdog is tied to: each
/// heartbeat's outcome is reported (``QueueRunner/Event/heartbeat(recorded:)``),
/// so only a runner whose heartbeat went through says it is alive
/// (docs/runners.md, "Under systemd").
final class RunnerPresence: @unchecked Sendable {
    private let database: any BuildStore
    private let registration: RunnerRegistration
    private let report: @Sendable (QueueRunner.Event) -> Void
    private let lock = NSLock()
    // Guarded by `lock`:
    /// Whether the table exists; nil until a registration went through.
    private var registered: Bool?
    private var heartbeat: Heartbeat?

    init(database: any BuildStore, registration: RunnerRegistration, report: @escaping @Sendable (QueueRunner.Event) -> Void) {
        self.database = database
        self.registration = registration
        self.report = report
    }

    /// Registers the runner (a database without the table is said once)
    /// and starts its heartbeat. A registration that fails is tried again
    /// at the next heartbeat.
    func start() {
        _ = register()
        lock.withLock {
            heartbeat = Heartbeat(interval: registration.heartbeatInterval) { [weak self] in self?.beat() }
        }
    }

    /// Stops the heartbeat and records that the runner stopped.
    func stop() {
        let (heartbeat, registered) = lock.withLock { (self.heartbeat, self.registered) }
        heartbeat?.stop()
        guard registered == true else { return }
        do {
            try database.runnerStopped(registration.id)
        } catch {
            report(.problem("cannot record that this runner stopped (`opsh runners --all` shows it lost once its heartbeat lapses): \(error)"))
        }
    }

    /// One heartbeat: the row refreshed (or registered, if that had
    /// failed), its outcome reported.
    private func beat() {
        guard let registered = lock.withLock({ self.registered }) else {
            report(.heartbeat(recorded: register()))
            return
        }
        do {
            try database.beatRunner(registration, registered: registered)
            report(.heartbeat(recorded: true))
        } catch {
            report(.problem("cannot record this runner's heartbeat (tried again in \(LeaseVerdict.seconds(registration.heartbeatInterval))): \(error)"))
            report(.heartbeat(recorded: false))
        }
    }

    /// Writes the runner's row; whether the database took the write.
    private func register() -> Bool {
        do {
            let exists = try database.registerRunner(registration)
            lock.withLock { registered = exists }
            if !exists {
                report(.notice("this database lacks migration \(RunnerRegistry.migration): `opsh runners` does not list this runner until `opsh migrate` applies it"))
            }
            return true
        } catch {
            report(.problem("cannot record this runner in \(RunnerRegistry.table) (tried again in \(LeaseVerdict.seconds(registration.heartbeatInterval))): \(error)"))
            return false
        }
    }
}
