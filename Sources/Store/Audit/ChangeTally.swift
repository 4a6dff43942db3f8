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
/// the writer connection through SQLite's C API (the `db` module's fast
/// path), which GRDB's transaction observers are not told about (GRDB
/// hands them only the changes of statements it executes itself).
public protocol RawChangeSource: AnyObject, Sendable {
    /// The changes counted since the last drain, which forgets them.
    func drain() -> TableChanges
    /// The changes counted since the last drain, kept.
    func peek() -> TableChanges
}

/// Rows committed per table on a store's writer connection, for the
/// audit trail: a GRDB transaction observer counts the rows of the
/// current transaction and adds them up only when it commits (a rollback
/// forgets them), together with what a ``RawChangeSource`` counted.
///
/// It sees every write on the writer: the Lua session's, repositories',
/// imports', and the log lines jobs write in the background. The main
/// schema only (no TEMP tables).
public final class ChangeTally: TransactionObserver, @unchecked Sendable {
    private struct State {
        var pending: TableChanges = [:]
        var committed: TableChanges = [:]
        var raw: [any RawChangeSource] = []
    }

    private let state = Mutex(State())

    public init() {}

    /// Everything committed so far.
    public var committed: TableChanges { state.withLock { $0.committed } }

    /// The open transaction's changes so far (GRDB's buffered savepoint
    /// events excepted until their savepoint is released).
    public var pending: TableChanges {
        state.withLock { state in
            var all = state.pending
            for raw in state.raw { all.add(raw.peek()) }
            return all
        }
    }

    /// Counts from statements GRDB does not execute (see ``RawChangeSource``);
    /// the tally keeps the source alive.
    public func attach(_ source: any RawChangeSource) {
        state.withLock { $0.raw.append(source) }
    }

    // MARK: TransactionObserver

    public func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool { true }

    public func databaseDidChange(with event: DatabaseEvent) {
        guard event.databaseName == "main" else { return }
        let table = event.tableName
        state.withLock { state in
            var counts = state.pending[table] ?? .init()
            switch event.kind {
            case .insert: counts.inserted += 1
            case .update: counts.updated += 1
            case .delete: counts.deleted += 1
            }
            state.pending[table] = counts
        }
    }

    public func databaseDidCommit(_ db: Database) {
        state.withLock { state in
            state.committed.add(state.pending)
            for raw in state.raw { state.committed.add(raw.drain()) }
            state.pending = [:]
        }
    }

    public func databaseDidRollback(_ db: Database) {
        state.withLock { state in
            state.pending = [:]
            for raw in state.raw { _ = raw.drain() }
        }
    }
}
