import Foundation
import GRDB

/// Notices commits made by other processes to the database file.
///
/// GRDB observations only see writes made through their own pool. The
/// backend's processes write to the same file, so a dedicated read-only
/// connection polls `PRAGMA data_version`, whose value changes whenever
/// another connection commits. The poll runs only while someone subscribes,
/// and it also sees this process's own commits (they come from another
/// connection): subscribers re-fetch and compare, so that costs one fetch.
public final class ExternalChangeMonitor: @unchecked Sendable {
    private struct State {
        var subscribers: [Int: @Sendable () -> Void] = [:]
        var nextID = 0
        var timer: DispatchSourceTimer?
        var connection: DatabaseQueue?
        var lastVersion: Int?
    }

    private let path: String
    private let interval: TimeInterval
    // Guards `state`; @unchecked because the timer is not Sendable.
    private let lock = NSLock()
    private var state = State()
    private let queue = DispatchQueue(label: "opsh.store.external-changes")

    /// - parameters:
    ///   - path: the database file.
    ///   - interval: time between two polls.
    public init(path: String, interval: TimeInterval) {
        self.path = path
        self.interval = interval
    }

    /// Calls `onChange` (on an internal queue) after each poll that found a
    /// new commit, until the returned value is cancelled.
    public func subscribe(_ onChange: @escaping @Sendable () -> Void) -> StorageCancellable {
        let (id, needsStart) = withState { state -> (Int, Bool) in
            let id = state.nextID
            state.nextID += 1
            state.subscribers[id] = onChange
            return (id, state.timer == nil)
        }
        if needsStart { start() }
        return StorageCancellable { [weak self] in self?.unsubscribe(id) }
    }

    /// How many subscriptions are active (for tests: nothing leaks).
    public var subscriberCount: Int {
        withState { $0.subscribers.count }
    }

    deinit {
        withState { state in
            state.timer?.cancel()
        }
    }

    private func withState<T>(_ body: (inout State) -> T) -> T {
        lock.lock()
        defer { lock.unlock() }
        return body(&state)
    }

    private func unsubscribe(_ id: Int) {
        withState { state in
            state.subscribers[id] = nil
            if state.subscribers.isEmpty {
                state.timer?.cancel()
                state.timer = nil
                state.connection = nil
                state.lastVersion = nil
            }
        }
    }

    private func start() {
        // Take the baseline now, so a commit between subscribing and the
        // first tick is not missed.
        queue.sync { poll() }
        let timer = DispatchSource.makeTimerSource(queue: queue)
        let nanoseconds = Int(max(interval, 0.001) * 1_000_000_000)
        timer.schedule(deadline: .now(), repeating: .nanoseconds(nanoseconds), leeway: .milliseconds(1))
        timer.setEventHandler { [weak self] in self?.poll() }
        let installed = withState { state -> Bool in
            guard state.timer == nil, !state.subscribers.isEmpty else { return false }
            state.timer = timer
            return true
        }
        if installed { timer.resume() }
    }

    private func poll() {
        let (connection, subscribers) = withState { state -> (DatabaseQueue?, [@Sendable () -> Void]) in
            if state.connection == nil {
                var configuration = Configuration()
                configuration.readonly = true
                configuration.label = "opsh.external-changes"
                state.connection = try? DatabaseQueue(path: path, configuration: configuration)
            }
            return (state.connection, Array(state.subscribers.values))
        }
        guard let connection, !subscribers.isEmpty else { return }
        // A failed poll (file replaced, busy) is retried on the next tick.
        guard let version = try? connection.inDatabase({ db in
            try Int.fetchOne(db, sql: "PRAGMA data_version")
        }) ?? nil else { return }
        let changed = withState { state -> Bool in
            defer { state.lastVersion = version }
            return state.lastVersion != nil && state.lastVersion != version
        }
        if changed {
            for subscriber in subscribers { subscriber() }
        }
    }
}
