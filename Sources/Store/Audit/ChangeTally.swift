import Glibc
import GRDB
import Synchronization

/// Rows inserted, updated and deleted in one table.
public struct TableChangeCounts: Sendable, Equatable {
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

/// Rows committed per table on a store's writer connections, for the
/// audit trail, and the cap a capped scope puts on the rows the script
/// changes through any of them (``ChangeBudget``).
///
/// Each writer connection counts its open transaction's row changes with
/// SQLite's preupdate hook (``ConnectionChanges``): every write of this
/// process, the Lua session's, repositories', imports', the job manager's
/// and the log lines jobs write in the background, however it was stepped.
/// A GRDB transaction observer on the connection adds the counts up when
/// the transaction commits and forgets them when it rolls back. The
/// database file's tables only (no TEMP tables).
public final class ChangeTally: @unchecked Sendable {
    private struct State {
        var committed: TableChanges = [:]
        /// Each writer connection's counter, by connection.
        var connections: [UInt: Weak<ConnectionChanges>] = [:]
        var budget: ChangeBudget?
    }

    private let state = Mutex(State())

    public init() {}

    /// Everything committed so far.
    public var committed: TableChanges { state.withLock { $0.committed } }

    /// Counts what commits on `writer`'s connection. GRDB keeps the
    /// observer, and with it the connection's counter, for the connection's
    /// lifetime: the preupdate hook never outlives its counter.
    public func install(on writer: any DatabaseWriter) {
        writer.writeWithoutTransaction { db in
            guard let connection = db.sqliteConnection, let changes = ConnectionChanges(connection: connection) else { return }
            db.add(transactionObserver: ConnectionObserver(tally: self, changes: changes), extent: .databaseLifetime)
            state.withLock { state in
                state.connections = state.connections.filter { $0.value.value != nil }
                state.connections[UInt(bitPattern: connection)] = Weak(changes)
            }
        }
    }

    /// The counter of a writer connection this tally was installed on.
    public func changes(on connection: OpaquePointer?) -> ConnectionChanges? {
        guard let connection else { return nil }
        return state.withLock { $0.connections[UInt(bitPattern: connection)]?.value }
    }

    // MARK: The cap of a scope

    /// Puts `budget` on every writer connection's commits (nil lifts it).
    func limit(_ budget: ChangeBudget?) {
        state.withLock { $0.budget = budget }
    }

    /// What the script changed through connections other than its scope's
    /// since the budget was set (committed on the script's thread).
    func budgetCommitted() -> TableChanges {
        state.withLock { $0.budget?.committedElsewhere ?? [:] }
    }

    /// Refuses the commit of `changes`' transaction when, on the script's
    /// thread, it would take what the script changed past its budget.
    fileprivate func checkBudget(committing changes: ConnectionChanges) throws {
        guard let budget = state.withLock({ $0.budget }), budget.applies(to: changes) else { return }
        var total = budget.committedElsewhere
        total.add(changes.pending())
        total.add(budget.scope?.pending() ?? [:])
        try budget.check(total)
    }

    fileprivate func commit(_ changes: ConnectionChanges) {
        let pending = changes.pending(includingTemporary: false)
        let all = changes.pending()
        changes.clear()
        state.withLock { state in
            state.committed.add(pending)
            if let budget = state.budget, budget.applies(to: changes) {
                state.budget?.committedElsewhere.add(all)
            }
        }
    }
}

/// A cap on the rows a script changes (`--max-changes`, `{ maxChanges = N }`)
/// put on every writer connection of the process: the scope's own
/// transaction is checked by ``SessionDatabase``; a transaction another
/// connection commits on the script's thread (the job manager's
/// `jobs.delete`, `jobs.create`, a migration's) is refused at its commit
/// when it would take the script past the cap. A build's own run writes
/// on threads of its own (its log lines, its end): those rows are the
/// build's record, audited but not the script's to cap.
struct ChangeBudget {
    let limit: Int
    /// "the run", "the chunk", "the transaction".
    let what: String
    /// The scope's connection: its open transaction counts too.
    let scope: ConnectionChanges?
    /// The script's thread (a GRDB write runs its closure on the caller's
    /// thread).
    let thread: pthread_t
    /// What other connections committed on the script's thread since.
    var committedElsewhere: TableChanges = [:]

    init(limit: Int, what: String, scope: ConnectionChanges?) {
        self.limit = limit
        self.what = what
        self.scope = scope
        thread = pthread_self()
    }

    func applies(to changes: ConnectionChanges) -> Bool {
        changes !== scope && pthread_equal(pthread_self(), thread) != 0
    }

    func check(_ total: TableChanges) throws {
        var summary = ChangeSummary()
        summary.tables = total
        if summary.total > limit {
            throw TooManyChanges(limit: limit, summary: summary, what: what)
        }
    }
}

/// One connection's observer: adds its counter's counts to the tally when
/// a transaction commits, forgets them when it rolls back.
private final class ConnectionObserver: TransactionObserver, @unchecked Sendable {
    /// Weak: GRDB keeps the observer as long as the connection, which may
    /// outlive the store.
    weak var tally: ChangeTally?
    let changes: ConnectionChanges

    init(tally: ChangeTally, changes: ConnectionChanges) {
        self.tally = tally
        self.changes = changes
    }

    /// The counts come from the preupdate hook, not from GRDB's events.
    func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool { false }

    func databaseDidChange(with event: DatabaseEvent) {}

    func databaseWillCommit() throws {
        try tally?.checkBudget(committing: changes)
    }

    func databaseDidCommit(_ db: Database) {
        if let tally { tally.commit(changes) } else { changes.clear() }
    }

    func databaseDidRollback(_ db: Database) {
        changes.clear()
    }
}
