import CSQLBridge
import GRDB
import GRDBSQLite
import Store

/// How the Lua thread reaches the database.
///
/// Outside a transaction each binding call is its own transaction (a read
/// from the pool, or a write). Inside `db.transaction(fn)` (and for the
/// whole of a `--dry-run`) the Lua code runs while the writer connection
/// is held, and every call uses that connection: reads see the
/// transaction's own writes, nested transactions become savepoints, and an
/// error rolls back exactly its own level.
public final class SessionDatabase {
    public let store: Store
    /// Where the `db` module's C fast path runs statements: this class
    /// keeps it in step with `current`, the dry run and the write count.
    let route: UnsafeMutablePointer<opsh_sql_route>
    /// The writer connection while Lua code runs inside a transaction.
    public private(set) var current: Database? {
        didSet { route.pointee.transaction = current?.sqliteConnection }
    }
    /// Savepoint depth inside `current`.
    private var depth = 0
    /// Statements were stepped directly on `current` (the fast path), so
    /// GRDB's observers must be told at commit.
    var changedOutsideGRDB: Bool {
        get { route.pointee.changed_outside != 0 }
        set { route.pointee.changed_outside = newValue ? 1 : 0 }
    }
    /// Counts changes per table during a dry run.
    private(set) var changeCounter: ChangeCounter? {
        didSet { route.pointee.dry_run = changeCounter == nil ? 0 : 1 }
    }

    /// `db.rows` cursors opened on `current`: finalized when the
    /// transaction ends, since the connection goes back to GRDB then.
    private var transactionCursors: [Weak<SQLCursor>] = []

    init(store: Store) {
        self.store = store
        route = opsh_sql_route_new()
        countRawChanges()
    }

    deinit { opsh_sql_route_free(route) }

    func closeAtTransactionEnd(_ cursor: SQLCursor) {
        guard current != nil else { return }
        transactionCursors.removeAll { $0.value == nil }
        transactionCursors.append(Weak(cursor))
    }

    /// Leaves the transaction: the connection is GRDB's again.
    private func endTransaction() {
        LockOwner.endedWriting()
        writeCount &+= 1
        current = nil
        changedOutsideGRDB = false
        for cursor in transactionCursors { cursor.value?.close() }
        transactionCursors.removeAll()
    }

    /// Inside `db.transaction` or a dry run (also one that has not written
    /// yet).
    public var isInTransaction: Bool { current != nil || dryRunConnection != nil }

    /// In the sandbox, the scheme's `buildCommand` (what a runner later
    /// runs with /bin/sh) cannot be written: TEMP triggers on the writer
    /// connection refuse inserting a scheme and updating the command,
    /// whatever route the write takes (db.exec, repositories, import).
    public var protectsBuildCommands = false
    private var buildCommandsProtected = false

    /// The store's writer, with the sandbox's triggers on its connection
    /// (made outside any transaction, so a rollback keeps them).
    private func writer() throws -> any DatabaseWriter {
        let writer = try store.writer
        if protectsBuildCommands && !buildCommandsProtected {
            try writer.writeWithoutTransaction { db in
                guard try db.tableExists("schemes") else { return }
                // No writable_schema: the triggers cannot be edited away;
                // and no DROP TRIGGER from a script (TransactionGuard).
                opsh_sql_set_defensive(db.sqliteConnection)
                try db.execute(sql: Self.sandboxTriggers)
                TransactionGuard.protect(db.sqliteConnection!)
                buildCommandsProtected = true
            }
        }
        return writer
    }

    static let sandboxRefusal = "sandbox: the buildCommand of a scheme cannot be written (a runner runs it as a shell command); run opsh without --sandbox to change schemes"
    static let sandboxTriggers = """
        CREATE TEMP TRIGGER IF NOT EXISTS opsh_sandbox_scheme_insert BEFORE INSERT ON main.schemes
        BEGIN SELECT RAISE(ABORT, '\(sandboxRefusal)'); END;
        CREATE TEMP TRIGGER IF NOT EXISTS opsh_sandbox_build_command BEFORE UPDATE OF buildCommand ON main.schemes
        WHEN NEW.buildCommand IS NOT OLD.buildCommand
        BEGIN SELECT RAISE(ABORT, '\(sandboxRefusal)'); END;
        """

    /// Counts writes this session committed (or started), so the read
    /// connection knows its snapshot is older than them.
    public private(set) var writeCount = 0 {
        didSet {
            route.pointee.write_count = writeCount
            // A write ends the read connection's shared snapshot at once: it
            // would keep the writes' WAL frames from being checkpointed.
            if let reader = route.pointee.reader { opsh_sql_reader_end_snapshot(reader) }
        }
    }
    public var isDryRun: Bool { changeCounter != nil }

    /// Runs a read: on the open transaction, else as one statement on a
    /// pool reader (single statements are atomic; no BEGIN/COMMIT needed).
    public func read<T>(_ body: (Database) throws -> T) throws -> T {
        if let current { return try body(current) }
        if let pool = try store.writer as? DatabasePool { return try pool.unsafeRead(body) }
        return try store.writer.read(body)
    }

    /// Runs a read that needs several statements to agree (a snapshot).
    public func snapshotRead<T>(_ body: (Database) throws -> T) throws -> T {
        if let current { return try body(current) }
        return try store.writer.read(body)
    }

    /// Runs an atomic write: a savepoint in the open transaction, else a
    /// transaction of its own.
    public func write<T>(_ body: (Database) throws -> T) throws -> T {
        try beginDryRunWrite()
        writeCount &+= 1
        if let current {
            var result: T?
            try current.inSavepoint {
                result = try body(current)
                return .commit
            }
            return result!
        }
        return try writer().write { db in
            let result = try body(db)
            try flushNotifications(db)
            return result
        }
    }

    /// Runs a write that is a single statement: no savepoint needed.
    public func writeStatement<T>(_ body: (Database) throws -> T) throws -> T {
        try beginDryRunWrite()
        writeCount &+= 1
        if let current { return try body(current) }
        return try writer().write { db in
            let result = try body(db)
            try flushNotifications(db)
            return result
        }
    }

    /// Runs `body` in a transaction (a savepoint when one is open). It
    /// commits when `body` returns and rolls back when it throws.
    public func transaction<T>(_ body: () throws -> T) throws -> T {
        try beginDryRunWrite()
        if let current {
            depth += 1
            defer { depth -= 1 }
            var result: T?
            let mark = rawChangesMark()
            do {
                try current.inSavepoint {
                    result = try body()
                    return .commit
                }
            } catch {
                rewindRawChanges(to: mark)
                throw error
            }
            return result!
        }
        return try writer().writeWithoutTransaction { db in
            current = db
            defer { endTransaction() }
            var result: T?
            try db.inTransaction(.immediate) {
                LockOwner.beganWriting(database: store.path)
                result = try body()
                try Self.requireOpenTransaction(db, of: "db.transaction")
                try flushNotifications(db)
                return .commit
            }
            return result!
        }
    }

    /// Belt and braces behind ``TransactionGuard``: the transaction opsh
    /// opened must still be open when opsh ends it. If anything ended it
    /// early, what ran after that was committed statement by statement and
    /// cannot be rolled back: say so, never "rolled back".
    static func requireOpenTransaction(_ db: Database, of owner: String) throws {
        guard db.isInsideTransaction, sqlite3_get_autocommit(db.sqliteConnection) == 0 else {
            throw TransactionLost(owner: owner)
        }
    }

    /// Runs `body` with the Lua thread's database calls on `db`, a
    /// connection the caller holds inside a transaction of its own (a
    /// migration's): reads and writes use it, `db.transaction` nests as
    /// savepoints. Refused when a transaction is already open.
    public func run<T>(on db: Database, _ body: () throws -> T) throws -> T {
        guard current == nil else {
            throw DatabaseError(resultCode: .SQLITE_MISUSE, message: "a transaction is already open")
        }
        current = db
        defer { endTransaction() }
        let result = try body()
        try flushNotifications(db)
        return result
    }

    /// Runs `body` in one transaction that is rolled back at the end, and
    /// reports what it would have changed.
    public func dryRun<T>(_ body: () throws -> T) throws -> (T, ChangeSummary) {
        let counter = ChangeCounter()
        changeCounter = counter
        defer { changeCounter = nil }
        return try writer().writeWithoutTransaction { db in
            db.add(transactionObserver: counter, extent: .observerLifetime)
            defer { db.remove(transactionObserver: counter) }
            // The transaction begins at the first write (beginDryRunWrite):
            // a dry run that only reads never takes the write lock, and
            // until it writes its reads go where reads outside a
            // transaction go (no read snapshot on this connection, so the
            // first write can still wait for the lock: SQLite gives up at
            // once on a connection that must upgrade a read).
            dryRunConnection = db
            defer {
                dryRunConnection = nil
                endTransaction()
            }
            do {
                let result = try body()
                let summary = counter.summary
                if current != nil {
                    try Self.requireOpenTransaction(db, of: "the dry run")
                    try db.rollback()
                }
                return (result, summary)
            } catch {
                if db.isInsideTransaction { try? db.rollback() }
                throw error
            }
        }
    }

    /// When the database file was deleted or replaced under opsh, writes
    /// would land in a file nobody opens again: refused, with what still
    /// works (reads, and `backup()` of the copy opsh still has open).
    private func refuseWritesToAFileThatIsGone() throws {
        guard current == nil, let problem = store.replacedFileProblem else { return }
        throw FileGone(problem: problem)
    }

    /// The writer connection a dry run holds before its first write.
    private var dryRunConnection: Database?

    /// At a dry run's first write: BEGIN IMMEDIATE on its connection (it
    /// waits for the lock like any writer), and everything from here on
    /// runs in that transaction.
    private func beginDryRunWrite() throws {
        try refuseWritesToAFileThatIsGone()
        guard current == nil, let db = dryRunConnection else { return }
        try db.beginTransaction(.immediate)
        LockOwner.beganWriting(database: store.path)
        current = db
    }

    /// After statements stepped outside GRDB, tells GRDB's observers
    /// (`watch`) that the database changed.
    private func flushNotifications(_ db: Database) throws {
        if changedOutsideGRDB {
            changedOutsideGRDB = false
            try db.notifyChanges(in: .fullDatabase)
        }
    }
}

/// A write refused because the database file is gone from its path.
public struct FileGone: Error, CustomStringConvertible {
    public let problem: String
    public var description: String {
        "\(problem): writes are refused; backup(\"rescue.sqlite\") saves the copy opsh still has open"
    }
}

/// The transaction opsh opened was ended by something else before opsh
/// ended it: writes made after that point were kept.
public struct TransactionLost: Error, CustomStringConvertible {
    public let owner: String
    public var description: String {
        "\(owner)'s transaction was ended before opsh ended it: writes made after that point were committed and NOT rolled back; check the data"
    }
}

/// Rows inserted, updated and deleted per table during a dry run.
public struct ChangeSummary: Sendable, Equatable {
    public struct Counts: Sendable, Equatable {
        public var inserted = 0
        public var updated = 0
        public var deleted = 0
    }
    public var tables: [String: Counts] = [:]
    public var isEmpty: Bool { tables.isEmpty }
}

/// A GRDB transaction observer that counts row changes per table.
final class ChangeCounter: TransactionObserver, @unchecked Sendable {
    private(set) var summary = ChangeSummary()

    func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool { true }

    func databaseDidChange(with event: DatabaseEvent) {
        var counts = summary.tables[event.tableName] ?? .init()
        switch event.kind {
        case .insert: counts.inserted += 1
        case .update: counts.updated += 1
        case .delete: counts.deleted += 1
        }
        summary.tables[event.tableName] = counts
    }

    func databaseDidCommit(_ db: Database) {}
    func databaseDidRollback(_ db: Database) {}
}

struct Weak<T: AnyObject> {
    weak var value: T?
    init(_ value: T) { self.value = value }
}
