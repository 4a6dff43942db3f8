import CSQLiteStore
import Foundation
import GRDB

// SQLite's side of the session seam (``DatabaseSession``): the store's
// connections and the session's transactions, scopes and dry runs.

extension SessionDatabase: DatabaseSession {
    public var engine: DatabaseEngine { .sqlite }
    public var dialect: SQLDialect { .sqlite }
    public var label: String { store.path ?? ":memory:" }
    public var shortName: String { ((store.path ?? ":memory:") as NSString).lastPathComponent }
    public var serverDescription: String? { nil }
    public var isReadOnly: Bool { store.options.readOnly }
    public var pendingMigrations: [String] { store.pendingMigrations }
    public var createdAtOpening: Bool { store.createdAtOpening }

    public var undoUnavailable: String? { nil }
    public var dryRunSpansTheSession: Bool { false }

    public var rowsCountedInsteadOfChanged: TableChanges { countedInDryRun.tables }
    public func markAsDryRun() { markedDryRun = true }

    /// Counted from the start: ``Store/committedChanges`` is a transaction
    /// observer on every writer connection the store opens.
    public func startCountingCommits(exactly: Bool) {}
    public var connectionFailure: String? { store.connectionFailure }

    public func auditDestination(busyTimeout: Double) -> any AuditDestination {
        SQLiteAuditDestination(store: store)
    }

    public func requiresReason() throws -> Bool {
        try store.read { try AuditTrail.requiresReason($0) }
    }

    public var catalog: any DatabaseCatalog { SQLiteCatalog(session: self) }

    public var writeProblem: String? { store.replacedFileProblem }

    public func hints(for message: String) -> [String] {
        var hints: [String] = []
        if let hint = store.missingMigrationHint(for: message) { hints.append(hint) }
        // A write that gave up waiting: say who holds the lock.
        if message.contains("database is locked"), let path = store.path, let holders = LockHolders.sentence(for: path) {
            hints.append("the database's lock is \(holders) (.locks shows it again)")
        }
        return hints
    }

    public func announceLockWaits(after seconds: TimeInterval, _ say: @escaping @Sendable (String) -> Void) {
        guard let path = store.path else { return }
        let timeout = store.lockWait.timeout
        store.lockWait.announce(after: seconds) { waited in
            say(LockWaitNotice.sentence(holders: LockHolders.sentence(for: path) ?? "held by another process",
                                        waited: waited, timeout: timeout))
        }
    }

    public func sayNotes(_ say: @escaping @Sendable (String) -> Void) {
        sayNote = say
    }

    /// SQLite's progress handler on every connection Store opens
    /// (`opsh_stop.h`): sqlite3_interrupt reaches only a statement already
    /// running.
    public func stopStatements(whenSet flag: UnsafeRawPointer?) {
        opsh_stop_statements_when(flag)
    }

    public var interruptRunning: @Sendable () -> Void {
        let store = store
        let own = UncheckedBox(self)
        return {
            store.interrupt()
            own.value?.interrupt()
        }
    }

    /// A passive checkpoint (it waits for nobody), so that a plain copy of
    /// the database file holds what opsh committed. Nothing when opsh never
    /// connected or opened the file read-only.
    public func close() {
        guard store.isConnected, !store.options.readOnly else { return }
        _ = try? store.checkpoint(.passive)
    }
}

/// A weak reference another thread may load.
final class UncheckedBox<T: AnyObject>: @unchecked Sendable {
    weak var value: T?
    init(_ value: T) { self.value = value }
}

/// SQLite's catalog: `sqlite_master` and `pragma_table_info` where the
/// session reads (inside its transaction, its own tables too), and the
/// locks of `/proc/locks` (``LockHolders``).
struct SQLiteCatalog: DatabaseCatalog {
    let session: SessionDatabase

    func tables() throws -> [String] {
        try session.read { db in
            try String.fetchAll(db, sql: """
                SELECT name FROM sqlite_master WHERE type IN ('table', 'view')
                AND name NOT LIKE 'sqlite_%' ORDER BY name
                """)
        }
    }

    func columns(of table: String) throws -> [String] {
        try session.read { db in try String.fetchAll(db, sql: "SELECT name FROM pragma_table_info(?)", arguments: [table]) }
    }

    func schemaText(of table: String?) throws -> [String] {
        try session.read { db in
            try String.fetchAll(db, sql: """
                SELECT sql || ';' FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%'
                \(table == nil ? "" : "AND tbl_name = ? COLLATE NOCASE")
                ORDER BY tbl_name, type DESC, name
                """, arguments: StatementArguments(table.map { [$0] } ?? []))
        }
    }

    func locks() throws -> [String] {
        guard let path = session.store.path else { return [] }
        return LockHolders.sentence(for: path).map { ["locks " + $0] } ?? []
    }
}

/// An SQLite file: a connection of the trail's own to the file the store
/// opened, waiting for locks as the store's writer does.
struct SQLiteAuditDestination: AuditDestination {
    let store: Store
    let trail: AuditConnection

    init(store: Store) {
        self.store = store
        trail = AuditConnection.sqlite(store)
    }

    var wasUsed: Bool { store.isConnected && store.path != nil }
}
