import GRDB
import Synchronization

/// Rows inserted, updated and deleted in one table.
public struct TableChangeCounts: Sendable, Equatable, Codable {
    public var inserted = 0
    public var updated = 0
    public var deleted = 0

    public init(inserted: Int = 0, updated: Int = 0, deleted: Int = 0) {
        self.inserted = inserted
        self.updated = updated
        self.deleted = deleted
    }

    public var total: Int { inserted + updated + deleted }

    public static func + (left: Self, right: Self) -> Self {
        Self(inserted: left.inserted + right.inserted, updated: left.updated + right.updated,
             deleted: left.deleted + right.deleted)
    }

    public static func - (left: Self, right: Self) -> Self {
        Self(inserted: left.inserted - right.inserted, updated: left.updated - right.updated,
             deleted: left.deleted - right.deleted)
    }
}

/// Counts per table name.
public typealias TableChanges = [String: TableChangeCounts]

extension Dictionary where Key == String, Value == TableChangeCounts {
    /// Adds `other`'s counts to these.
    public mutating func add(_ other: TableChanges) {
        for (table, counts) in other { self[table] = (self[table] ?? .init()) + counts }
    }

    /// What was added since `earlier` (a snapshot of the same tally):
    /// tables that did not change are left out.
    public func since(_ earlier: TableChanges) -> TableChanges {
        var result: TableChanges = [:]
        for (table, counts) in self {
            let delta = counts - (earlier[table] ?? .init())
            if delta.total != 0 { result[table] = delta }
        }
        return result
    }
}

/// Where row changes GRDB does not see come from: statements stepped on
/// a writer connection through SQLite's C API (the `db` module's fast
/// path), which GRDB's transaction observers are not told about (GRDB
/// hands them only the changes of statements it executes itself).
public protocol RawChangeSource: AnyObject, Sendable {
    /// The changes counted on `connection` since the last drain, which
    /// forgets them; none when the counts are another connection's.
    func drain(connection: OpaquePointer?) -> TableChanges
    /// The changes counted since the last drain, kept.
    func peek() -> TableChanges
}

/// Rows committed per table on a store's writer connections, for the
/// audit trail: a GRDB transaction observer on each connection counts the
/// rows of its current transaction and adds them up only when it commits
/// (a rollback forgets them), together with what a ``RawChangeSource``
/// counted on that connection.
///
/// It sees every write of this process: the Lua session's, repositories',
/// imports', and the log lines jobs write in the background. The main
/// schema only (no TEMP tables).
public final class ChangeTally: @unchecked Sendable {
    private struct State {
        var committed: TableChanges = [:]
        var raw: [any RawChangeSource] = []
        var observers: [ConnectionObserver] = []
    }

    private let state = Mutex(State())

    public init() {}

    /// Everything committed so far.
    public var committed: TableChanges { state.withLock { $0.committed } }

    /// Counts from statements GRDB does not execute (see ``RawChangeSource``);
    /// the tally keeps the source alive.
    public func attach(_ source: any RawChangeSource) {
        state.withLock { $0.raw.append(source) }
    }

    /// Counts what commits on `writer`'s connection (the tally keeps the
    /// observer alive).
    public func install(on writer: any DatabaseWriter) {
        let observer = ConnectionObserver(tally: self)
        state.withLock { $0.observers.append(observer) }
        writer.writeWithoutTransaction { db in
            db.add(transactionObserver: observer, extent: .observerLifetime)
            if let connection = db.sqliteConnection {
                Self.observers.withLock { $0[UInt(bitPattern: connection)] = observer }
            }
        }
    }

    /// The observers by connection, for ``countRaw(_:table:inserted:)``.
    // Locked, not a static Mutex: see LockOwner.state.
    fileprivate static let observers = Locked<[UInt: ConnectionObserver]>([:])

    /// Rows a Store fast path inserted by stepping a statement through
    /// SQLite's C API on `db` (batched telemetry and build-log inserts),
    /// which GRDB's observers do not see: counted with the connection's
    /// open transaction.
    public static func countRaw(_ db: Database, table: String, inserted: Int) {
        guard inserted > 0, let connection = db.sqliteConnection,
              let observer = observers.withLock({ $0[UInt(bitPattern: connection)] }) else { return }
        observer.add(table: table, inserted: inserted)
    }

    fileprivate func commit(_ pending: TableChanges, connection: OpaquePointer?) {
        state.withLock { state in
            state.committed.add(pending)
            for raw in state.raw { state.committed.add(raw.drain(connection: connection)) }
        }
    }

    fileprivate func rollback(connection: OpaquePointer?) {
        let sources = state.withLock { $0.raw }
        for raw in sources { _ = raw.drain(connection: connection) }
    }
}

/// One connection's observer: its transaction's counts until it ends.
private final class ConnectionObserver: TransactionObserver, @unchecked Sendable {
    unowned let tally: ChangeTally
    private let pending = Mutex<TableChanges>([:])

    init(tally: ChangeTally) { self.tally = tally }

    func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool { true }

    func databaseDidChange(with event: DatabaseEvent) {
        guard event.databaseName == "main" else { return }
        let table = event.tableName
        pending.withLock { pending in
            var counts = pending[table] ?? .init()
            switch event.kind {
            case .insert: counts.inserted += 1
            case .update: counts.updated += 1
            case .delete: counts.deleted += 1
            }
            pending[table] = counts
        }
    }

    func add(table: String, inserted: Int) {
        pending.withLock { pending in
            var counts = pending[table] ?? .init()
            counts.inserted += inserted
            pending[table] = counts
        }
    }

    func databaseDidCommit(_ db: Database) {
        let counts = pending.withLock { pending in
            defer { pending = [:] }
            return pending
        }
        tally.commit(counts, connection: db.sqliteConnection)
    }

    func databaseDidRollback(_ db: Database) {
        pending.withLock { $0 = [:] }
        tally.rollback(connection: db.sqliteConnection)
    }
}
