import CSQLiteStore
import GRDB
import GRDBSQLite

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
    /// keeps it in step with `current`, the dry run and the write count;
    /// the Lua adapter points its own route at it and sets `reader`.
    public let route: UnsafeMutablePointer<opsh_session_route>
    /// The writer connection while Lua code runs inside a transaction
    /// (above Store: ``transactionConnection``).
    private(set) var current: Database? {
        didSet {
            schemaEpoch &+= 1
            route.pointee.transaction = current?.sqliteConnection
            currentChanges = current.flatMap(changes(of:))
        }
    }
    /// `current`'s row counter, looked up once per transaction: the
    /// store's lookup (a lock and a dictionary) was a fortieth of a
    /// repository write in a `db.transaction` loop (BENCHMARKS.md, "The
    /// domain layer against hand-written SQL").
    private var currentChanges: ConnectionChanges?
    /// Savepoint depth inside `current`.
    private var depth = 0
    /// Statements were stepped directly on `current` (the fast path), so
    /// GRDB's observers must be told at commit.
    public var changedOutsideGRDB: Bool {
        get { route.pointee.changed_outside != 0 }
        set { route.pointee.changed_outside = newValue ? 1 : 0 }
    }
    /// What a dry run, a scope or a capped transaction counts (its
    /// connection's rows, from SQLite's preupdate hook: ``ConnectionChanges``).
    /// While it counts, the C fast path leaves writes to Swift, which
    /// checks the cap after each one.
    var counting: Counting? {
        didSet { route.pointee.dry_run = counting == nil ? 0 : 1 }
    }
    /// Whether writes are being counted.
    public var isCountingChanges: Bool { counting != nil }
    /// Whether a schema change may pass a cap (`--allow-schema-changes`);
    /// without it any schema change is over every cap. A `db.transaction`
    /// may say otherwise for itself (`allowSchemaChanges`).
    public var allowsSchemaChanges = false
    /// Where the session's notes go (``DatabaseSession/sayNotes(_:)``):
    /// the `db` module's C row path says through it that a loop keeps its
    /// snapshot.
    public internal(set) var sayNote: @Sendable (String) -> Void = noteOnStandardError

    /// `db.rows` cursors opened on `current`, or in the shell's chunk:
    /// finalized when the transaction ends, since the connection goes back
    /// to GRDB then, or when the chunk ends (``closeAtTransactionOrChunkEnd(_:)``).
    private var transactionCursors: [Weak<any TransactionBoundCursor>] = []

    public init(store: Store) {
        self.store = store
        route = opsh_session_route_new()
    }

    deinit { opsh_session_route_free(route) }

    /// Closes `cursor` when the open transaction ends, or, opened by one
    /// of the shell's chunks on the read connection, when the chunk ends: a
    /// loop left open at the prompt would keep the read connection's
    /// snapshot (and the backend's WAL) for as long as the operator sits
    /// there (ARCHITECTURE.md, decision 8). Nothing when neither is open.
    public func closeAtTransactionOrChunkEnd(_ cursor: any TransactionBoundCursor) {
        guard current != nil || scope?.kind == .chunk else { return }
        transactionCursors.removeAll { $0.value == nil }
        transactionCursors.append(Weak(cursor))
    }

    /// Leaves the transaction: the connection is GRDB's again. Unless it
    /// `committed`, what it did to the schema may have been rolled back
    /// (``schemaRollbacks``).
    private func endTransaction(committed: Bool = false) {
        if !committed { schemaRollbacks &+= 1 }
        LockOwner.endedWriting()
        writeCount &+= 1
        current = nil
        changedOutsideGRDB = false
        for cursor in transactionCursors { cursor.value?.closeAtItsEnd() }
        transactionCursors.removeAll()
    }

    /// Inside `db.transaction`, a dry run (also one that has not written
    /// yet), or a scope that has written: what needs a connection of its
    /// own, or waits, is refused then.
    public var isInTransaction: Bool { current != nil || (pending != nil && scope == nil) }

    /// Where the open transaction comes from, for refusals: "db.transaction",
    /// "a dry run", or the shell chunk that has written.
    public var transactionRefusingMigrations: String? { isInTransaction ? openTransactionName : nil }

    public var openTransactionName: String {
        if isDryRun { return "a dry run" }
        if let scope, depth == 0, !scope.explicitTransaction {
            return scope.kind == .chunk
                ? "a chunk that has written (a chunk at the prompt is one transaction until it ends: run this in a chunk of its own, or before the chunk's first write)"
                : "a --max-changes run that has written (the run is one transaction)"
        }
        return "db.transaction"
    }

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
            try writer.writeWithoutTransaction { db in try Self.confine(db) }
            buildCommandsProtected = true
        }
        return writer
    }

    /// The sandbox on a writer connection: no schema change from a script
    /// (``TransactionGuard``: no trigger, no replaced table, no dropped
    /// sandbox trigger), no writable_schema (the triggers cannot be edited
    /// away), and the triggers that keep build commands.
    static func confine(_ db: Database) throws {
        opsh_sql_set_defensive(db.sqliteConnection)
        TransactionGuard.protect(db.sqliteConnection!)
        guard try db.tableExists("schemes") else { return }
        try db.execute(sql: sandboxTriggers)
        if try db.columns(in: "schemes").contains(where: { $0.name == "passEnvironment" }) {
            try db.execute(sql: sandboxEnvironmentTrigger)
        }
    }

    /// The sandbox on the read connection too: statements prepared there
    /// are checked like the writers' (TEMP objects live on any connection).
    public func confine(_ readConnection: ReadConnection) {
        readConnection.lending { handle in
            opsh_sql_set_defensive(handle)
            TransactionGuard.protect(handle)
        }
    }

    public static let sandboxRefusal = "sandbox: the buildCommand of a scheme cannot be written (a runner runs it as a shell command); run opsh without --sandbox to change schemes"
    static let sandboxTriggers = """
        CREATE TEMP TRIGGER IF NOT EXISTS opsh_sandbox_scheme_insert BEFORE INSERT ON main.schemes
        BEGIN SELECT RAISE(ABORT, '\(sandboxRefusal)'); END;
        CREATE TEMP TRIGGER IF NOT EXISTS opsh_sandbox_build_command BEFORE UPDATE OF buildCommand ON main.schemes
        WHEN NEW.buildCommand IS NOT OLD.buildCommand
        BEGIN SELECT RAISE(ABORT, '\(sandboxRefusal)'); END;
        """
    /// What a scheme's builds get of their runner's environment
    /// (006_schemeEnvironment) is theirs to say as little as the command.
    public static let sandboxEnvironmentRefusal = "sandbox: the passEnvironment of a scheme cannot be written (a runner gives its builds those variables of its environment); run opsh without --sandbox to change schemes"
    static let sandboxEnvironmentTrigger = """
        CREATE TEMP TRIGGER IF NOT EXISTS opsh_sandbox_pass_environment BEFORE UPDATE OF passEnvironment ON main.schemes
        WHEN NEW.passEnvironment IS NOT OLD.passEnvironment
        BEGIN SELECT RAISE(ABORT, '\(sandboxEnvironmentRefusal)'); END;
        """

    /// Counts writes this session committed (or started), so the read
    /// connection knows its snapshot is older than them.
    public private(set) var writeCount = 0 {
        didSet {
            schemaEpoch &+= 1
            route.pointee.write_count = writeCount
            // A write ends the read connection's shared snapshot at once: it
            // would keep the writes' WAL frames from being checkpointed.
            if let reader = route.pointee.reader { opsh_sql_reader_end_snapshot(reader) }
        }
    }
    /// Changes whenever the schema the open transaction sees may have
    /// changed by this session's own hand: after each statement that
    /// changes the schema (``countingDroppedRows(of:on:_:)``, which every
    /// script statement Store runs passes; the `db` module's C path leaves
    /// such statements to Store), at every write Store runs itself
    /// (``writeCount``: migrations, scripts), as a transaction or savepoint
    /// begins or ends (a rolled-back savepoint takes its schema changes
    /// back), and as a write fails. No other connection changes the schema the open
    /// transaction sees once it has read it (SQLite's snapshot and single
    /// writer), so the repositories read `PRAGMA schema_version` again
    /// only when this changed (``transactionConnection``; issue 27).
    public internal(set) var schemaEpoch = 0
    /// Changes whenever a transaction or savepoint of this session may
    /// have been rolled back (every end of ``current`` but a known commit,
    /// every savepoint that failed). SQLite takes `PRAGMA schema_version`
    /// back with a rolled-back schema change, and the next change gives
    /// the same number to another schema: what the repositories read of a
    /// table under a number is theirs only while this stays (issue 27's
    /// table specs; RepositorySchemaCacheTests).
    public private(set) var schemaRollbacks = 0
    /// A dry run: nothing is kept (the batch modes' and the shell's
    /// --dry-run, also when the shell works on a private copy).
    public var isDryRun: Bool { dryRunning || markedDryRun }
    private var dryRunning = false
    /// The shell's --dry-run on a private copy: chunks commit into the copy,
    /// which is thrown away, and opsh.dryRun() says true.
    public var markedDryRun = false
    /// What the dry run's operations counted instead of changing, over the
    /// whole dry run (the shell's chunk after chunk): a later cleanup
    /// leaves those rows out (``CountedInsteadOfChanged``).
    var countedInDryRun = CountedInsteadOfChanged()
    /// The connection of the store's writer while a dry run holds it and
    /// it is a DatabaseQueue (GRDB's queue is not reentrant): reads before
    /// the dry run's first write run on it.
    private var heldQueue: Database?

    /// Runs a read that needs no snapshot: on the open transaction, else as
    /// one statement on a pool reader (single statements are atomic; no
    /// BEGIN/COMMIT needed). GRDB's name: several statements in `body` may
    /// see different commits (``read(_:)`` is the snapshot-safe one).
    func unsafeRead<T>(_ body: (Database) throws -> T) throws -> T {
        if let current { return try body(current) }
        if let heldQueue { return try Self.readTransaction(on: heldQueue, body) }
        if let pool = try store.writer as? DatabasePool { return try pool.unsafeRead(body) }
        return try store.writer.read(body)
    }

    /// Runs a read whose statements all see one snapshot (GRDB's `read`).
    func read<T>(_ body: (Database) throws -> T) throws -> T {
        if let current { return try body(current) }
        if let heldQueue { return try Self.readTransaction(on: heldQueue, body) }
        return try store.writer.read(body)
    }

    /// A read on a connection this session holds, in a read transaction of
    /// its own that ends with it (no snapshot is kept: the dry run's first
    /// write must not have to upgrade one).
    private static func readTransaction<T>(on db: Database, _ body: (Database) throws -> T) throws -> T {
        var result: T?
        try db.inTransaction(.deferred) {
            result = try body(db)
            return .commit
        }
        return result!
    }

    /// Runs an atomic write: a savepoint in the open transaction, else a
    /// transaction of its own.
    func write<T>(_ body: (Database) throws -> T) throws -> T {
        try beginPendingWrite()
        writeCount &+= 1
        if let current {
            var result: T?
            let mark = changes(of: current)?.mark()
            do {
                try current.inSavepoint {
                    result = try body(current)
                    return .commit
                }
            } catch {
                if let mark { changes(of: current)?.rewind(to: mark) }
                schemaEpoch &+= 1
                schemaRollbacks &+= 1
                throw error
            }
            try afterWrite()
            return result!
        }
        return try writer().write { db in
            let result = try body(db)
            try flushNotifications(db)
            return result
        }
    }

    /// Whether a shell chunk is open and has not written yet: an operation
    /// that commits batch by batch (``writeOnItsOwn(_:)``) runs outside it.
    public var isInUnwrittenChunk: Bool { scope?.kind == .chunk && current == nil && pending != nil }

    /// Runs an atomic write that commits on its own: in a shell chunk that
    /// has not written yet, a transaction on the store's writer, outside
    /// the chunk's (whose lock would otherwise be held for every batch of
    /// `telemetry.cleanup` until the chunk ends); elsewhere as ``write(_:)``.
    func writeOnItsOwn<T>(_ body: (Database) throws -> T) throws -> T {
        guard isInUnwrittenChunk else { return try write(body) }
        try refuseWritesToAFileThatIsGone()
        writeCount &+= 1
        return try writer().write { db in
            let result = try body(db)
            try flushNotifications(db)
            return result
        }
    }

    /// Runs one repository call whose only write is one statement
    /// (``RecordTable``'s insert and update; its other statements read):
    /// no savepoint of its own, which cost two statements per call in a
    /// transaction, since SQLite undoes a failed statement whole (its
    /// statement journal). The change counts go back as ``write(_:)``'s do.
    func writeOneStatement<T>(_ body: (Database) throws -> T) throws -> T {
        try beginPendingWrite()
        writeCount &+= 1
        if let current {
            let changes = currentChanges
            let mark = changes?.mark()
            let result: T
            do {
                result = try body(current)
            } catch {
                if let mark { changes?.rewind(to: mark) }
                schemaEpoch &+= 1
                throw error
            }
            try afterWrite()
            return result
        }
        return try writer().write { db in
            let result = try body(db)
            try flushNotifications(db)
            return result
        }
    }

    /// Runs a write that is a single statement: no savepoint needed.
    public func writeStatement<T>(_ body: (SQLiteWriterConnection) throws -> T) throws -> T {
        try beginPendingWrite()
        writeCount &+= 1
        if let current {
            let result = try body(SQLiteWriterConnection(db: current))
            try afterWrite()
            return result
        }
        return try writer().write { db in
            let result = try body(SQLiteWriterConnection(db: db))
            try flushNotifications(db)
            return result
        }
    }

    /// Runs `body` in a transaction (a savepoint when one is open). It
    /// commits when `body` returns and rolls back when it throws.
    ///
    /// - parameter changeLimit: most rows it may change
    ///   (`db.transaction(fn, { maxChanges = N })`); past that it rolls
    ///   back with ``TooManyChanges``, as it does for a schema change
    ///   unless `allowSchemaChanges` (nil: the session's
    ///   ``allowsSchemaChanges``).
    public func transaction<T>(changeLimit: Int? = nil, allowSchemaChanges: Bool? = nil,
                               _ body: () throws -> T) throws -> T {
        try beginPendingWrite()
        let allowSchemaChanges = allowSchemaChanges ?? allowsSchemaChanges
        if let current {
            depth += 1
            let wasExplicit = scope?.explicitTransaction ?? false
            scope?.explicitTransaction = true
            schemaEpoch &+= 1
            defer {
                depth -= 1
                scope?.explicitTransaction = wasExplicit
                schemaEpoch &+= 1
            }
            // Inside a savepoint a nested limit counts what its savepoint
            // changed on the connection.
            let changes = changes(of: current)
            let mark = changes?.mark()
            let before = changes?.pending() ?? [:]
            let schema = changeLimit == nil ? nil : try SchemaSnapshot.take(current)
            var result: T?
            do {
                try current.inSavepoint {
                    result = try body()
                    if let changeLimit, let schema {
                        var summary = ChangeSummary()
                        summary.tables = (changes?.pending() ?? [:]).since(before)
                        summary.schemaChanges = try schema.changes(now: current)
                        try TooManyChanges.check(summary, limit: changeLimit, allowSchemaChanges: allowSchemaChanges,
                                                 what: "the transaction")
                    }
                    return .commit
                }
            } catch {
                if let mark { changes?.rewind(to: mark) }
                schemaEpoch &+= 1
                schemaRollbacks &+= 1
                throw error
            }
            try afterWrite()
            return result!
        }
        return try writer().writeWithoutTransaction { db in
            let changes = changes(of: db)
            if let changeLimit {
                counting = Counting(changes: changes, limit: changeLimit, what: "the transaction",
                                    allowSchemaChanges: allowSchemaChanges)
                store.committedChanges.limit(ChangeBudget(limit: changeLimit, what: "the transaction", scope: changes))
            }
            current = db
            var committed = false
            defer {
                if changeLimit != nil {
                    counting = nil
                    store.committedChanges.limit(nil)
                }
                endTransaction(committed: committed)
            }
            var result: T?
            try db.inTransaction(.immediate) {
                LockOwner.beganWriting(database: store.path)
                try beganCountedTransaction(db)
                result = try body()
                try Self.requireOpenTransaction(db, of: "db.transaction")
                if let counting { try check(counting, db: db) }
                try flushNotifications(db)
                return .commit
            }
            committed = true
            return result!
        }
    }

    /// Applies `changeset` (an undo) in the open scope or transaction, or
    /// in a transaction of its own: all of it, or nothing and
    /// ``ChangedSince`` when a row it touches was changed by someone else
    /// since. Returns what it changed.
    public func apply(_ changeset: Changeset, refusal: String) throws -> ChangeSummary {
        try beginPendingWrite()
        guard let current else {
            return try transaction { try apply(changeset, refusal: refusal) }
        }
        writeCount &+= 1
        // The preupdate hook counts what it applies; a conflict rolls all
        // of it back, so its counts go too.
        let mark = changes(of: current)?.mark()
        let conflicts = try changeset.apply(on: current.sqliteConnection!)
        guard conflicts.isEmpty else {
            if let mark { changes(of: current)?.rewind(to: mark) }
            throw ChangedSince(conflicts: conflicts, action: refusal)
        }
        // Stepped outside GRDB: its observers (watch) are told here.
        changedOutsideGRDB = true
        try afterWrite()
        return changeset.summary()
    }

    /// Belt and braces behind ``TransactionGuard``: the transaction opsh
    /// opened must still be open when opsh ends it. Only SQLite can have
    /// ended it (TransactionGuard refuses a script's COMMIT and ROLLBACK),
    /// by rolling it back, and no write ran after that
    /// (``beginPendingWrite()``, the C path's own check): say so.
    static func requireOpenTransaction(_ db: Database, of owner: String) throws {
        guard db.isInsideTransaction, sqlite3_get_autocommit(db.sqliteConnection) == 0 else {
            throw TransactionLost(owner: owner)
        }
    }

    /// Runs `body` with the Lua thread's database calls on `db`, a
    /// connection the caller holds inside a transaction of its own (a
    /// migration's): reads and writes use it, `db.transaction` nests as
    /// savepoints. Refused when a transaction is already open.
    func run<T>(on db: Database, _ body: () throws -> T) throws -> T {
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
        dryRunning = true
        defer {
            counting = nil
            dryRunning = false
            countedInDryRun = CountedInsteadOfChanged()
        }
        let dryRunWriter = try writer()
        return try dryRunWriter.writeWithoutTransaction { db in
            // The store's writer is a queue when the file was busy as it
            // opened (Store.open): held here, a read must not enter it again.
            if dryRunWriter is DatabaseQueue { heldQueue = db }
            defer { heldQueue = nil }
            counting = Counting(changes: changes(of: db), limit: nil, what: "the dry run", allowSchemaChanges: true)
            // The transaction begins at the first write (beginPendingWrite):
            // a dry run that only reads never takes the write lock, and
            // until it writes its reads go where reads outside a
            // transaction go (no read snapshot on this connection, so the
            // first write can still wait for the lock: SQLite gives up at
            // once on a connection that must upgrade a read).
            pending = db
            defer {
                pending = nil
                endTransaction()
            }
            do {
                let result = try body()
                var summary = ChangeSummary()
                if current != nil, let counting {
                    try Self.requireOpenTransaction(db, of: "the dry run")
                    summary = try self.summary(of: counting, db: db)
                    try db.rollback()
                } else if let counting {
                    summary.tables = counting.notChanged
                }
                return (result, summary)
            } catch {
                if db.isInsideTransaction { try? db.rollback() }
                throw error
            }
        }
    }

    // MARK: Scopes: a transaction that begins at the first write

    /// A shell chunk, or a whole `--max-changes` run: one transaction that
    /// begins at its first write (BEGIN IMMEDIATE then) and ends with the
    /// scope. It runs on a writer connection of the session's own
    /// (``scopeWriter()``), so holding that connection while Lua runs keeps
    /// nothing else of this process waiting, and SQLite's write lock is
    /// taken only from the first write to the end of the scope.
    public struct Scope {
        public typealias Kind = ScopeKind
        let kind: Kind
        /// Most rows the scope may change (`--max-changes`).
        let changeLimit: Int?
        /// Inside `db.transaction(fn)` within the scope (refusals name it).
        var explicitTransaction = false
    }
    private var scope: Scope?
    /// The connection a scope or dry run holds before its first write.
    private var pending: Database?
    /// The scope's connection while it records its changes, for undo and
    /// for re-applying after a question (the shell).
    private var recording: ConnectionChanges?
    /// Whether the scope records a changeset.
    private var recordsChanges = false

    /// The writer of scopes: a connection of the session's own to the same
    /// file, configured like the store's (``configureConnection``, the
    /// sandbox's triggers). In memory there is no second connection to the
    /// same database: the store's writer serves.
    private var ownWriter: DatabaseQueue?
    /// Settings every connection of the session carries (limits).
    private var connectionSettings: [(Database) -> Void] = []

    /// A setting (a limit) for the session's own connection too.
    func addConnectionSetting(_ setting: @escaping (Database) -> Void) {
        connectionSettings.append(setting)
        if let ownWriter { try? ownWriter.writeWithoutTransaction { db in setting(db) } }
    }

    /// The row counter of `db`'s connection (the store installs one on
    /// each of its writer connections).
    func changes(of db: Database) -> ConnectionChanges? {
        store.committedChanges.changes(on: db.sqliteConnection)
    }

    private func scopeWriter() throws -> any DatabaseWriter {
        let storeWriter = try writer()
        if let ownWriter { return ownWriter }
        guard store.path != nil else { return storeWriter }
        let queue = try store.openSecondWriter()
        try queue.writeWithoutTransaction { db in
            for setting in connectionSettings { setting(db) }
            if protectsBuildCommands { try Self.confine(db) }
        }
        ownWriter = queue
        return queue
    }

    /// Interrupts what runs on the session's own connection (Ctrl-C).
    public func interrupt() {
        ownWriter?.interrupt()
    }

    /// Runs `body` as one transaction that begins at its first write and
    /// commits when `body` returns (after `gate`, when given), or rolls
    /// back when it throws or the gate says no.
    ///
    /// - parameter records: keep a changeset of what is committed.
    /// - parameter changeLimit: roll back with ``TooManyChanges`` when more
    ///   rows than this changed (`--max-changes`).
    public func scope<T>(_ kind: Scope.Kind, records: Bool = false, changeLimit: Int? = nil,
                         gate: CommitGate? = nil, _ body: () throws -> T) throws -> (T, ScopeOutcome) {
        // Inside a dry run or a transaction (the shell's --dry-run on a
        // large database): the chunk is part of that.
        guard current == nil, pending == nil else { return (try body(), ScopeOutcome()) }
        return try scopeWriter().writeWithoutTransaction { db in
            let what = kind == .chunk ? "the chunk" : "the run"
            let changes = changes(of: db)
            counting = Counting(changes: changes, limit: changeLimit, what: what, allowSchemaChanges: allowsSchemaChanges)
            // The cap holds for what the script commits through other
            // connections meanwhile (jobs.*, migrations) too.
            if let changeLimit { store.committedChanges.limit(ChangeBudget(limit: changeLimit, what: what, scope: changes)) }
            enterScope(Scope(kind: kind, changeLimit: changeLimit), records: records, on: db)
            defer {
                if changeLimit != nil { store.committedChanges.limit(nil) }
                leaveScope(db)
            }
            var outcome = ScopeOutcome()
            let countedBefore = countedInDryRun
            do {
                let result = try body()
                guard current != nil, let counting else {
                    // A dry run on the private copy: what an operation
                    // counted instead of changing.
                    outcome.summary.tables = self.counting?.notChanged ?? [:]
                    return (result, outcome)
                }
                try Self.requireOpenTransaction(db, of: kind == .chunk ? "the chunk" : "the run")
                outcome.summary = try summary(of: counting, db: db)
                try check(counting, db: db)
                if let gate, gate.needsAnswer(outcome.summary) {
                    try commitAfterAnswer(gate, kind: kind, db: db, outcome: &outcome)
                } else {
                    if records { try keepChangeset(db: db, summary: outcome.summary, outcome: &outcome) }
                    beforeCommit(kind, db: db, summary: outcome.summary)
                    try flushNotifications(db)
                    try db.commit()
                    outcome.committed = true
                }
                return (result, outcome)
            } catch {
                if db.isInsideTransaction { try? db.rollback() }
                countedInDryRun = countedBefore
                throw error
            }
        }
    }

    /// A chunk of the shell's `--dry-run` on a database too large to copy:
    /// the chunk runs in a transaction that starts by re-applying what
    /// the session's earlier chunks changed (`carried`), and is rolled back
    /// at its end, keeping the changes so far as the new changeset. The
    /// write lock is held only while a chunk runs (from its start once the
    /// session has changed anything, else from its first write), never at
    /// the prompt.
    ///
    /// - returns: the chunk's result, the changes the session carries on,
    ///   what this chunk changed, and why some of it cannot be carried
    ///   (nil when all can).
    public func replayScope<T>(carrying carried: Changeset?, changeLimit: Int?, _ body: () throws -> T)
        throws -> (result: T, carried: Changeset?, summary: ChangeSummary, notCarried: String?) {
        guard current == nil, pending == nil else { return (try body(), carried, ChangeSummary(), nil) }
        return try scopeWriter().writeWithoutTransaction { db in
            // Capped (--max-changes) as the real chunk would be.
            counting = Counting(changes: changes(of: db), limit: changeLimit, what: "the chunk",
                                allowSchemaChanges: changeLimit == nil || allowsSchemaChanges)
            enterScope(Scope(kind: .chunk, changeLimit: changeLimit), records: true, on: db)
            defer { leaveScope(db) }
            let countedBefore = countedInDryRun
            do {
                if let carried, !carried.isEmpty {
                    try beginPendingWrite()  // records from here: the carried changes, then the chunk's
                    let conflicts = try carried.apply(on: db.sqliteConnection!)
                    if !conflicts.isEmpty {
                        try db.rollback()
                        throw ChangedSince(conflicts: conflicts, action: "dry run: the changes of this session's earlier chunks cannot be re-applied, and are dropped (the session now sees the database as it is; run the chunk again)")
                    }
                }
                // Counted from here: this chunk's own changes.
                let carriedCounts = counting?.changes?.pending() ?? [:]
                counting?.baseline = carriedCounts
                let result = try body()
                guard current != nil, let counting else {
                    var summary = ChangeSummary()
                    summary.tables = self.counting?.notChanged ?? [:]
                    return (result, carried, summary, nil)
                }
                try Self.requireOpenTransaction(db, of: "the dry run's chunk")
                let summary = try self.summary(of: counting, db: db)
                try check(counting, db: db)
                let problem = try coverageProblem(of: summary, db: db)
                let next = try recording?.changeset()
                try db.rollback()
                return (result, problem == nil ? next : carried, summary, problem)
            } catch {
                if db.isInsideTransaction { try? db.rollback() }
                countedInDryRun = countedBefore
                throw error
            }
        }
    }

    /// The scope's state while `db` (held by the caller) waits for the
    /// first write.
    private func enterScope(_ newScope: Scope, records: Bool, on db: Database) {
        scope = newScope
        recordsChanges = records
        pending = db
    }

    private func leaveScope(_ db: Database) {
        counting = nil
        scope = nil
        pending = nil
        recording?.stopRecording()
        recording = nil
        recordsChanges = false
        endTransaction()
    }

    /// Asks before committing. When the changeset holds everything the
    /// scope did, the transaction is rolled back first (the backend never
    /// waits on the operator) and re-applied on yes, refusing rows changed
    /// by someone else meanwhile; otherwise the lock is held while asking.
    private func commitAfterAnswer(_ gate: CommitGate, kind: Scope.Kind, db: Database, outcome: inout ScopeOutcome) throws {
        if let recording, try coverageProblem(of: outcome.summary, db: db) == nil {
            let changeset = try recording.changeset()
            recording.stopRecording()
            self.recording = nil
            try db.rollback()
            guard gate.ask(outcome.summary) else {
                outcome.declined = true
                return
            }
            try db.beginTransaction(.immediate)
            changes(of: db)?.clear()
            // The preupdate hook counts what is applied for the audit trail.
            let conflicts = try changeset.apply(on: db.sqliteConnection!)
            guard conflicts.isEmpty else {
                try db.rollback()
                throw ChangedSince(conflicts: conflicts, action: "the chunk was not committed")
            }
            beforeCommit(kind, db: db, summary: outcome.summary)
            try db.commit()
            outcome.committed = true
            outcome.changeset = changeset
            return
        }
        let problem = try coverageProblem(of: outcome.summary, db: db)
        guard gate.ask(outcome.summary) else {
            outcome.declined = true
            try db.rollback()
            return
        }
        outcome.notRecorded = problem ?? (recording == nil ? "its changes were not recorded" : nil)
        if outcome.notRecorded == nil, let recording { outcome.changeset = try recording.changeset() }
        beforeCommit(kind, db: db, summary: outcome.summary)
        try flushNotifications(db)
        try db.commit()
        outcome.committed = true
    }

    /// ``DatabaseSession/beforeChunkCommit``: called once the chunk's
    /// changeset is taken, on its connection.
    public var beforeChunkCommit: ((ChunkCommit) -> Void)?

    private func beforeCommit(_ kind: Scope.Kind, db: Database, summary: ChangeSummary) {
        guard kind == .chunk, !summary.isEmpty, let beforeChunkCommit else { return }
        let connection = StoreDatabase(db)
        beforeChunkCommit(ChunkCommit(changes: summary.tables, connection: connection) { body in
            var stamp: AuditRowStamp?
            try db.inSavepoint {
                stamp = try body()
                return .commit
            }
            return stamp!
        })
    }

    /// Keeps the committed scope's changeset, or says why there is none.
    private func keepChangeset(db: Database, summary: ChangeSummary, outcome: inout ScopeOutcome) throws {
        if let problem = try coverageProblem(of: summary, db: db) {
            outcome.notRecorded = problem
        } else if let recording {
            outcome.changeset = try recording.changeset()
        } else {
            outcome.notRecorded = "its changes were not recorded"
        }
    }

    /// Why a changeset cannot hold everything a transaction did: a schema
    /// change, a table without a PRIMARY KEY, a TEMP table, rows that could
    /// not be kept; nil when it can.
    func coverageProblem(of summary: ChangeSummary, db: Database) throws -> String? {
        if !summary.schemaChanges.isEmpty {
            return "it changed the schema (\(summary.schemaSentence)), which a changeset cannot hold"
        }
        for table in summary.tables.keys.sorted() {
            let columns = try Row.fetchAll(db, sql: "SELECT pk FROM pragma_table_info(?, 'main')", arguments: [table])
            if columns.isEmpty { return "it changed \(table), which is not a table of the database file (TEMP)" }
            if !columns.contains(where: { ($0["pk"] as Int? ?? 0) > 0 }) {
                return "it changed \(table), which has no PRIMARY KEY (SQLite records changes only to tables with one)"
            }
        }
        if let table = recording?.unrecordedTable, summary.tables[table] != nil {
            return "it changed \(table), whose rows opsh could not record (generated columns, or its columns changed)"
        }
        return nil
    }

    /// After each write in a scope or capped transaction: the cap is
    /// checked at once, so a runaway loop stops early.
    public func afterWrite() throws {
        guard let counting, counting.limit != nil, let current else { return }
        try check(counting, db: current)
    }

    /// When the database file was deleted or replaced under opsh, writes
    /// would land in a file nobody opens again: refused, with what still
    /// works (reads, and `backup()` of the copy opsh still has open).
    private func refuseWritesToAFileThatIsGone() throws {
        guard current == nil, let problem = store.replacedFileProblem else { return }
        throw FileGone(problem: problem)
    }

    /// Refuses a statement on `current` once SQLite ended the transaction
    /// itself (a trigger's `RAISE(ROLLBACK)`, an error it rolls back on):
    /// stepped then, a write would commit on its own, whatever the
    /// transaction does next.
    func refuseOnceSQLiteEndedTheTransaction(_ current: Database) throws {
        guard sqlite3_get_autocommit(current.sqliteConnection) == 0 else {
            throw TransactionRolledBack(owner: openTransactionName)
        }
    }

    /// At a dry run's or a scope's first write: BEGIN IMMEDIATE on its
    /// connection (it waits for the lock like any writer), and everything
    /// from here on runs in that transaction.
    private func beginPendingWrite() throws {
        try refuseWritesToAFileThatIsGone()
        if let current {
            // Every write route passes here.
            try refuseOnceSQLiteEndedTheTransaction(current)
            return
        }
        guard let db = pending else { return }
        try db.beginTransaction(.immediate)
        LockOwner.beganWriting(database: store.path)
        try beganCountedTransaction(db)
        if recordsChanges, recording == nil, let changes = changes(of: db) {
            changes.startRecording()
            recording = changes
        }
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

/// A scope or transaction that changed more rows than its limit
/// (`--max-changes`, `maxChanges`), or changed the schema when that was not
/// allowed: it was rolled back.
public struct TooManyChanges: Error, CustomStringConvertible {
    public let limit: Int
    public let summary: ChangeSummary?
    public let what: String
    public var rowChanges: Int? = nil
    /// Rows the script committed through other connections before (the
    /// job manager's, a migration's): not rolled back.
    public var kept: TableChanges = [:]
    /// Refused for its schema change: what changed.
    public var schemaChange: String?

    public init(limit: Int, summary: ChangeSummary?, what: String, rowChanges: Int? = nil,
                kept: TableChanges = [:], schemaChange: String? = nil) {
        self.limit = limit
        self.summary = summary
        self.what = what
        self.rowChanges = rowChanges
        self.kept = kept
        self.schemaChange = schemaChange
    }

    /// Throws when `summary` is past `limit`, or changes the schema and
    /// schema changes are not allowed.
    public static func check(_ summary: ChangeSummary, limit: Int, allowSchemaChanges: Bool, what: String,
                             kept: TableChanges = [:]) throws {
        if !summary.schemaChanges.isEmpty && !allowSchemaChanges {
            throw TooManyChanges(limit: limit, summary: summary, what: what, kept: kept, schemaChange: summary.schemaSentence)
        }
        if summary.total > limit { throw TooManyChanges(limit: limit, summary: summary, what: what, kept: kept) }
    }

    public var description: String {
        var keptNote = ""
        if !kept.isEmpty {
            var summary = ChangeSummary()
            summary.tables = kept
            keptNote = "; what it committed on its own before (jobs.*, migrations) stays: \(summary.sentence)"
        }
        if let schemaChange {
            return "\(what) changed the schema (\(schemaChange)), which is over any limit (--max-changes / maxChanges) unless schema changes are allowed (--allow-schema-changes, or allowSchemaChanges = true): rolled back\(keptNote.isEmpty ? ", nothing was kept" : keptNote)"
        }
        let counts = summary.map { $0.rowsSentence.isEmpty ? "" : " (" + $0.rowsSentence + ")" } ?? ""
        let schema = summary.map { $0.schemaChanges.isEmpty ? "" : " and the schema (\($0.schemaSentence))" } ?? ""
        let total = summary?.total ?? rowChanges ?? 0
        return "\(what) changed \(total) rows\(counts)\(schema), more than its limit of \(limit) (--max-changes / maxChanges): rolled back\(keptNote.isEmpty ? ", nothing was kept" : keptNote)"
    }
}

/// A changeset not applied because rows it touches were changed by
/// someone else since: nothing was applied.
public struct ChangedSince: Error, CustomStringConvertible {
    public let conflicts: [String]
    public let action: String
    public var description: String {
        "\(action): \(conflicts.count == 1 ? "a row it would change was" : "rows it would change were") changed by someone else since, and opsh never overwrites another writer's change:\n  "
            + conflicts.joined(separator: "\n  ")
    }
}

/// A write refused because the database file is gone from its path.
public struct FileGone: Error, CustomStringConvertible {
    public let problem: String
    public var description: String {
        "\(problem): writes are refused; backup(\"rescue.sqlite\") saves the copy opsh still has open"
    }
}

/// The transaction opsh opened was ended by the database before opsh
/// ended it (SQLite rolled it back): nothing of it stays, and every write
/// after that was refused.
public struct TransactionLost: Error, CustomStringConvertible {
    public let owner: String
    public var description: String {
        "\(owner)'s transaction was rolled back by the database before opsh ended it (a trigger's RAISE(ROLLBACK), or an error SQLite rolls back on): nothing it wrote was kept, and no write ran after that"
    }
}

/// SQLite rolled the transaction opsh opened back itself (a trigger's
/// `RAISE(ROLLBACK)`): nothing in it stays, and nothing more runs in it.
public struct TransactionRolledBack: Error, CustomStringConvertible {
    public let owner: String
    public var description: String {
        "the database rolled back \(owner)'s transaction (a trigger's RAISE(ROLLBACK)): nothing it wrote was kept, and nothing more runs in it"
    }
}

/// A statement left open on the transaction's connection (a `db.rows`
/// cursor): it must be finalized when the transaction ends, since the
/// connection goes back to GRDB then; or on the read connection by one of
/// the shell's chunks, finalized when the chunk ends.
public protocol TransactionBoundCursor: AnyObject {
    /// Finalizes the statement; reading on says it was closed by its end.
    func closeAtItsEnd()
}

struct Weak<T> {
    private weak var object: AnyObject?
    var value: T? { object as? T }
    init(_ value: T) { object = value as AnyObject }
}
