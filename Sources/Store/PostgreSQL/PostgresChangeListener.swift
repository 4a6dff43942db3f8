import Foundation
import PostgresWire
import Synchronization

/// Hears every process's commits on a PostgreSQL database: the migrations'
/// triggers send `NOTIFY opsh_changes, '<table>'` once per statement, and
/// PostgreSQL delivers the notifications when (and only when) the
/// transaction commits.
///
/// The listener has a connection and a thread of its own. Its connection
/// runs `LISTEN opsh_changes` once and then only waits on its socket: it
/// never sends a query while it listens, so it never sits in a
/// transaction — a listener stuck in a transaction would keep the server's
/// notification queue from draining, and once that queue fills, every
/// writer's COMMIT fails. When the connection breaks, the thread connects
/// again (0.2 s, then up to 2 s apart) and then tells every observer that
/// its tables may have changed: commits made while it was away were not
/// heard, so the watches fetch again.
public final class PostgresChangeListener: Sendable {
    public static let channel = "opsh_changes"

    private struct Observer {
        let tables: Set<String>
        let onChange: @Sendable () -> Void
    }

    private struct State {
        var observers: [Int: Observer] = [:]
        var next = 1
        var running = false
    }

    private let url: PostgresURL
    private let state = Mutex(State())
    /// How many times the thread connected again (for tests).
    public let reconnections = Atomic<Int>(0)

    public init(url: PostgresURL) {
        self.url = url
    }

    /// Calls `onChange` on the listener's thread after each commit that
    /// changed one of `tables` (names as the schema spells them, in any
    /// case), and after each reconnection. The first call connects and
    /// listens before it returns, so a commit made right after is heard.
    public func observe(_ tables: Set<String>, onChange: @escaping @Sendable () -> Void) throws -> StorageCancellable {
        let folded = Set(tables.map { $0.lowercased() })
        let start = state.withLock { state -> Bool in
            defer { state.running = true }
            return !state.running
        }
        if start {
            do {
                let connection = try Self.listening(url)
                let box = UncheckedConnection(connection)
                Thread.detachNewThread { [weak self] in Self.run(box.connection, listener: self) }
            } catch {
                state.withLock { $0.running = false }
                throw error
            }
        }
        let id = state.withLock { state -> Int in
            defer { state.next += 1 }
            state.observers[state.next] = Observer(tables: folded, onChange: onChange)
            return state.next
        }
        return StorageCancellable { [weak self] in
            _ = self?.state.withLock { $0.observers.removeValue(forKey: id) }
        }
    }

    private static func listening(_ url: PostgresURL) throws -> PostgresConnection {
        var listenerURL = url
        listenerURL.applicationName = "opsh listener"
        let connection = try PostgresConnection(url: listenerURL)
        try connection.simpleQuery("LISTEN \(channel)")
        return connection
    }

    /// The thread: wait, dispatch, reconnect. It holds the listener only
    /// for one turn, and ends within half a second of the listener's end.
    private static func run(_ first: PostgresConnection, listener: PostgresChangeListener?) {
        weak let weakListener = listener
        var connection: PostgresConnection? = first
        var delay = 0.2
        while true {
            guard let listener = weakListener else { connection?.close(); return }
            if let current = connection {
                do {
                    if let notification = try current.waitForNotification(timeout: 0.5) {
                        listener.dispatch(table: notification.payload)
                    }
                } catch {
                    current.close()
                    connection = nil
                }
                continue
            }
            Thread.sleep(forTimeInterval: delay)
            if let fresh = try? listening(listener.url) {
                connection = fresh
                delay = 0.2
                listener.reconnections.add(1, ordering: .relaxed)
                // What committed while the listener was away was not heard.
                for observer in listener.state.withLock({ Array($0.observers.values) }) { observer.onChange() }
            } else {
                delay = min(delay * 2, 2)
            }
        }
    }

    private func dispatch(table: String) {
        let name = table.lowercased()
        let matching = state.withLock { state in state.observers.values.filter { $0.tables.contains(name) } }
        for observer in matching { observer.onChange() }
    }
}

/// A connection handed to the listener's thread, which alone uses it
/// from then on.
private final class UncheckedConnection: @unchecked Sendable {
    let connection: PostgresConnection
    init(_ connection: PostgresConnection) { self.connection = connection }
}
