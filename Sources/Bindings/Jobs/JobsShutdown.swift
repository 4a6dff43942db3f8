import Foundation
import Jobs
import Store
import Synchronization

/// Builds run only while the opsh that started them runs.
///
/// When a session ends (its Lua state is closed) or the process exits
/// through `exit` (the shell on Ctrl-D, a batch script at its end), the
/// builds its job manager has queued or running are cancelled — their
/// process groups get SIGTERM, then SIGKILL after the grace period — and
/// opsh waits for them to be recorded `cancelled`, saying so on stderr. A
/// process killed outright (SIGKILL, a crash, `_exit` on a signal) cannot
/// do this: its builds stay `running` and `jobs.stale()` finds them later.
enum JobsShutdown {
    // Locked, not a static Mutex (Store's LockOwner says why).
    private static let managers = Locked<[ObjectIdentifier: JobManager]>([:])
    private static let atExit: Void = {
        atexit { JobsShutdown.shutdownAll() }
    }()

    /// Makes `manager` part of the process's exit.
    static func register(_ manager: JobManager) {
        _ = atExit
        managers.withLock { $0[ObjectIdentifier(manager)] = manager }
    }

    static func shutdownAll() {
        let all = managers.withLock { managers in
            defer { managers.removeAll() }
            return Array(managers.values)
        }
        for manager in all { shutdown(manager, registered: false) }
    }

    /// Cancels what `manager` has queued or running and waits (bounded by
    /// the grace period and a little more) until each build has ended.
    static func shutdown(_ manager: JobManager, registered: Bool = true) {
        if registered { _ = managers.withLock { $0.removeValue(forKey: ObjectIdentifier(manager)) } }
        let handled = ((try? manager.list(status: .running)) ?? []) + ((try? manager.list(status: .queued)) ?? [])
        let builds = handled.filter { manager.isHandling($0.id) }
        guard !builds.isEmpty else { return }
        let names = builds.map { "\($0.id) (\($0.versionString), \($0.status.rawValue))" }.joined(separator: ", ")
        FileHandle.standardError.write(Data(
            "opsh: cancelling \(builds.count) build(s) of this session, which run only while opsh runs: \(names)\n".utf8))
        for build in builds { _ = try? manager.cancel(build.id) }
        let limit = manager.configuration.cancelGracePeriod + manager.configuration.lingerAfterExit + 2
        let deadline = Date().addingTimeInterval(limit)
        for build in builds {
            _ = try? manager.wait(build.id, timeout: max(0.01, deadline.timeIntervalSinceNow))
        }
    }
}
