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
    /// The writer connection while Lua code runs inside a transaction.
    public private(set) var current: Database? {
        didSet { route.pointee.transaction = current?.sqliteConnection }
    }
    /// Savepoint depth inside `current`.
    private var depth = 0
    /// Statements were stepped directly on `current` (the fast path), so
    /// GRDB's observers must be told at commit.
    public var changedOutsideGRDB: Bool {
        get { route.pointee.changed_outside != 0 }
        set { route.pointee.changed_outside = newValue ? 1 : 0 }
    }
    /// Counts changes per table during a dry run or a scope. While it
    /// counts, the C fast path leaves writes to GRDB, whose observer counts.
    private(set) var changeCounter: ChangeCounter? {
        didSet { route.pointee.dry_run = changeCounter == nil ? 0 : 1 }
    }
    /// Whether writes are being counted (routed through GRDB).
    public var isCountingChanges: Bool { changeCounter != nil }

    /// `db.rows` cursors opened on `current`: finalized when the
    /// transaction ends, since the connection goes back to GRDB then.
    private var transactionCursors: [Weak<any TransactionBoundCursor>] = []

    public init(store: Store) {
        self.store = store
        route = opsh_session_route_new()
        countRawChanges()
    }

    deinit { opsh_session_route_free(route) }

    /// Closes `cursor` when the open transaction ends (nothing when none is).
    public func closeAtTransactionEnd(_ cursor: any TransactionBoundCursor) {
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

    /// Inside `db.transaction`, a dry run (also one that has not written
    /// yet), or a scope that has written: what needs a connection of its
    /// own, or waits, is refused then.
    public var isInTransaction: Bool { current != nil || (pending != nil && scope == nil) }

    /// Where the open transaction comes from, for refusals: "db.transaction",
    /// "a dry run", or the shell chunk that has written.
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
        if try db.tableExists("schemes") { try db.execute(sql: sandboxTriggers) }
    }

    /// The sandbox on the read connection too: statements prepared there
    /// are checked like the writers' (TEMP objects live on any connection).
    public func confine(_ readConnection: ReadConnection) {
        opsh_sql_set_defensive(readConnection.handle)
        TransactionGuard.protect(readConnection.handle)
    }

    public static let sandboxRefusal = "sandbox: the buildCommand of a scheme cannot be written (a runner runs it as a shell command); run opsh without --sandbox to change schemes"
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
    /// A dry run: nothing is kept (the batch modes' and the shell's
    /// --dry-run, also when the shell works on a private copy).
    public var isDryRun: Bool { dryRunning || markedDryRun }
    private var dryRunning = false
    /// The shell's --dry-run on a private copy: chunks commit into the copy,
    /// which is thrown away, and opsh.dryRun() says true.
    public var markedDryRun = false

    /// Runs a read that needs no snapshot: on the open transaction, else as
    /// one statement on a pool reader (single statements are atomic; no
    /// BEGIN/COMMIT needed). GRDB's name: several statements in `body` may
    /// see different commits (``read(_:)`` is the snapshot-safe one).
    public func unsafeRead<T>(_ body: (Database) throws -> T) throws -> T {
        if let current { return try body(current) }
        if let pool = try store.writer as? DatabasePool { return try pool.unsafeRead(body) }
        return try store.writer.read(body)
    }

    /// Runs a read whose statements all see one snapshot (GRDB's `read`).
    public func read<T>(_ body: (Database) throws -> T) throws -> T {
        if let current { return try body(current) }
        return try store.writer.read(body)
    }

    /// Runs an atomic write: a savepoint in the open transaction, else a
    /// transaction of its own.
    public func write<T>(_ body: (Database) throws -> T) throws -> T {
        try beginPendingWrite()
        writeCount &+= 1
        if let current {
            var result: T?
            try current.inSavepoint {
                result = try body(current)
                return .commit
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

    /// Runs a write that is a single statement: no savepoint needed.
    public func writeStatement<T>(_ body: (Database) throws -> T) throws -> T {
        try beginPendingWrite()
        writeCount &+= 1
        if let current {
            let result = try body(current)
            try afterWrite()
            return result
        }
        return try writer().write { db in
            let result = try body(db)
            try flushNotifications(db)
            return result
        }
    }

    /// Runs `body` in a transaction (a savepoint when one is open). It
    /// commits when `body` returns and rolls back when it throws.
    ///
    /// - parameter changeLimit: most rows it may change
    ///   (`db.transaction(fn, { maxChanges = N })`); past that it rolls
    ///   back with ``TooManyChanges``.
    public func transaction<T>(changeLimit: Int? = nil, _ body: () throws -> T) throws -> T {
        try beginPendingWrite()
        if let current {
            depth += 1
            let wasExplicit = scope?.explicitTransaction ?? false
            scope?.explicitTransaction = true
            defer {
                depth -= 1
                scope?.explicitTransaction = wasExplicit
            }
            // Inside a savepoint GRDB holds back change events until it is
            // released, so a nested limit counts SQLite's row changes.
            let before = sqlite3_total_changes64(current.sqliteConnection)
            var result: T?
            let mark = rawChangesMark()
            do {
                try current.inSavepoint {
                    result = try body()
                    if let changeLimit {
                        let changed = Int(sqlite3_total_changes64(current.sqliteConnection) - before)
                        if changed > changeLimit {
                            throw TooManyChanges(limit: changeLimit, summary: nil, what: "the transaction", rowChanges: changed)
                        }
                    }
                    return .commit
                }
            } catch {
                rewindRawChanges(to: mark)
                throw error
            }
            try afterWrite()
            return result!
        }
        return try writer().writeWithoutTransaction { db in
            let counter = changeLimit == nil ? nil : ChangeCounter()
            if let counter {
                db.add(transactionObserver: counter, extent: .observerLifetime)
                changeCounter = counter
                transactionLimit = changeLimit
            }
            current = db
            defer {
                if let counter {
                    db.remove(transactionObserver: counter)
                    changeCounter = nil
                    transactionLimit = nil
                }
                endTransaction()
            }
            var result: T?
            try db.inTransaction(.immediate) {
                LockOwner.beganWriting(database: store.path)
                result = try body()
                try Self.requireOpenTransaction(db, of: "db.transaction")
                if let counter { try checkChangeLimit(counter, scopeLimit: nil) }
                try flushNotifications(db)
                return .commit
            }
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
        let conflicts = try countingRawChanges(on: current.sqliteConnection!) { try changeset.apply(on: $0) }
        guard conflicts.isEmpty else { throw ChangedSince(conflicts: conflicts, action: refusal) }
        // Stepped outside GRDB: its observers (watch, the counter) are told here.
        changedOutsideGRDB = true
        let summary = changeset.summary()
        changeCounter?.add(summary)
        try afterWrite()
        return summary
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
        dryRunning = true
        defer {
            changeCounter = nil
            dryRunning = false
        }
        return try writer().writeWithoutTransaction { db in
            db.add(transactionObserver: counter, extent: .observerLifetime)
            defer { db.remove(transactionObserver: counter) }
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

    // MARK: Scopes: a transaction that begins at the first write

    /// A shell chunk, or a whole `--max-changes` run: one transaction that
    /// begins at its first write (BEGIN IMMEDIATE then) and ends with the
    /// scope. It runs on a writer connection of the session's own
    /// (``scopeWriter()``), so holding that connection while Lua runs keeps
    /// nothing else of this process waiting, and SQLite's write lock is
    /// taken only from the first write to the end of the scope.
    public struct Scope {
        public enum Kind: Sendable { case chunk, run }
        let kind: Kind
        /// Most rows the scope may change (`--max-changes`).
        let changeLimit: Int?
        /// Inside `db.transaction(fn)` within the scope (refusals name it).
        var explicitTransaction = false
    }
    private var scope: Scope?
    /// The connection a scope or dry run holds before its first write.
    private var pending: Database?
    /// The scope's changes, recorded for undo and for re-applying after a
    /// question (the shell).
    private var recording: ChangeRecording?
    /// Whether the scope records a changeset.
    private var recordsChanges = false
    /// The limit of an outermost `db.transaction(fn, { maxChanges = N })`
    /// (a nested one counts its savepoint's row changes itself).
    private var transactionLimit: Int?

    /// The writer of scopes: a connection of the session's own to the same
    /// file, configured like the store's (``configureConnection``, the
    /// sandbox's triggers). In memory there is no second connection to the
    /// same database: the store's writer serves.
    private var ownWriter: DatabaseQueue?
    /// Settings every connection of the session carries (limits).
    private var connectionSettings: [(Database) -> Void] = []

    /// A setting (a limit) for the session's own connection too.
    public func addConnectionSetting(_ setting: @escaping (Database) -> Void) {
        connectionSettings.append(setting)
        if let ownWriter { try? ownWriter.writeWithoutTransaction { db in setting(db) } }
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

    /// Decides, before a scope commits, whether it may (the shell's
    /// confirmation): `needsAnswer` says whether to ask about these
    /// changes, `ask` asks (true: commit).
    public struct CommitGate {
        public var needsAnswer: (ChangeSummary) -> Bool
        public var ask: (ChangeSummary) -> Bool
        public init(needsAnswer: @escaping (ChangeSummary) -> Bool, ask: @escaping (ChangeSummary) -> Bool) {
            self.needsAnswer = needsAnswer
            self.ask = ask
        }
    }

    /// How a scope ended.
    public struct ScopeOutcome {
        /// Rows inserted, updated and deleted per table (committed or not).
        public var summary = ChangeSummary()
        /// Whether anything was committed.
        public var committed = false
        /// What was committed, row by row, when every change could be
        /// recorded (for `undo()`); nil otherwise.
        public var changeset: Changeset?
        /// Why ``changeset`` is nil although the scope committed changes.
        public var notRecorded: String?
        /// The gate was asked and the answer was not yes.
        public var declined = false
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
        let counter = ChangeCounter()
        return try scopeWriter().writeWithoutTransaction { db in
            db.add(transactionObserver: counter, extent: .observerLifetime)
            changeCounter = counter
            enterScope(Scope(kind: kind, changeLimit: changeLimit), records: records, on: db)
            defer { leaveScope(db, counter) }
            var outcome = ScopeOutcome()
            do {
                let result = try body()
                guard current != nil else { return (result, outcome) }
                try Self.requireOpenTransaction(db, of: kind == .chunk ? "the chunk" : "the run")
                outcome.summary = counter.summary
                try checkChangeLimit(counter, scopeLimit: changeLimit)
                if let gate, gate.needsAnswer(outcome.summary) {
                    try commitAfterAnswer(gate, db: db, outcome: &outcome)
                } else {
                    if records { try keepChangeset(db: db, summary: outcome.summary, outcome: &outcome) }
                    try flushNotifications(db)
                    try db.commit()
                    outcome.committed = true
                }
                return (result, outcome)
            } catch {
                if db.isInsideTransaction { try? db.rollback() }
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
    public func replayScope<T>(carrying carried: Changeset?, _ body: () throws -> T)
        throws -> (result: T, carried: Changeset?, summary: ChangeSummary, notCarried: String?) {
        guard current == nil, pending == nil else { return (try body(), carried, ChangeSummary(), nil) }
        let counter = ChangeCounter()
        return try scopeWriter().writeWithoutTransaction { db in
            enterScope(Scope(kind: .chunk, changeLimit: nil), records: true, on: db)
            defer { leaveScope(db, counter) }
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
                db.add(transactionObserver: counter, extent: .observerLifetime)
                changeCounter = counter
                let result = try body()
                guard current != nil else { return (result, carried, ChangeSummary(), nil) }
                try Self.requireOpenTransaction(db, of: "the dry run's chunk")
                let summary = counter.summary
                let problem = try Self.coverageProblem(of: summary, db: db)
                let next = try recording?.changeset()
                try db.rollback()
                return (result, problem == nil ? next : carried, summary, problem)
            } catch {
                if db.isInsideTransaction { try? db.rollback() }
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

    private func leaveScope(_ db: Database, _ counter: ChangeCounter) {
        db.remove(transactionObserver: counter)
        changeCounter = nil
        scope = nil
        pending = nil
        recording = nil
        recordsChanges = false
        endTransaction()
    }

    /// Asks before committing. When the changeset holds everything the
    /// scope did, the transaction is rolled back first (the backend never
    /// waits on the operator) and re-applied on yes, refusing rows changed
    /// by someone else meanwhile; otherwise the lock is held while asking.
    private func commitAfterAnswer(_ gate: CommitGate, db: Database, outcome: inout ScopeOutcome) throws {
        if let recording, try Self.coverageProblem(of: outcome.summary, db: db) == nil {
            let changeset = try recording.changeset()
            recording.stop()
            self.recording = nil
            try db.rollback()
            guard gate.ask(outcome.summary) else {
                outcome.declined = true
                return
            }
            try db.beginTransaction(.immediate)
            let conflicts = try countingRawChanges(on: db.sqliteConnection!) { try changeset.apply(on: $0) }
            guard conflicts.isEmpty else {
                try db.rollback()
                throw ChangedSince(conflicts: conflicts, action: "the chunk was not committed")
            }
            try db.commit()
            outcome.committed = true
            outcome.changeset = changeset
            return
        }
        let problem = try Self.coverageProblem(of: outcome.summary, db: db)
        guard gate.ask(outcome.summary) else {
            outcome.declined = true
            try db.rollback()
            return
        }
        outcome.notRecorded = problem ?? (recording == nil ? "its changes were not recorded" : nil)
        if outcome.notRecorded == nil, let recording { outcome.changeset = try recording.changeset() }
        try flushNotifications(db)
        try db.commit()
        outcome.committed = true
    }

    /// Keeps the committed scope's changeset, or says why there is none.
    private func keepChangeset(db: Database, summary: ChangeSummary, outcome: inout ScopeOutcome) throws {
        if let problem = try Self.coverageProblem(of: summary, db: db) {
            outcome.notRecorded = problem
        } else if let recording {
            outcome.changeset = try recording.changeset()
        } else {
            outcome.notRecorded = "its changes were not recorded"
        }
    }

    /// Why a changeset cannot hold everything a transaction did: a table
    /// without a PRIMARY KEY, a TEMP table, or a schema change; nil when
    /// it can.
    static func coverageProblem(of summary: ChangeSummary, db: Database) throws -> String? {
        for table in summary.tables.keys.sorted() {
            let columns = try Row.fetchAll(db, sql: "SELECT pk FROM pragma_table_info(?, 'main')", arguments: [table])
            if columns.isEmpty { return "it changed \(table), which is not a table of the database file (TEMP)" }
            if !columns.contains(where: { ($0["pk"] as Int? ?? 0) > 0 }) {
                return "it changed \(table), which has no PRIMARY KEY (SQLite records changes only to tables with one)"
            }
        }
        return nil
    }

    /// `--max-changes` and `db.transaction(fn, { maxChanges = N })`.
    private func checkChangeLimit(_ counter: ChangeCounter, scopeLimit: Int?) throws {
        let summary = counter.summary
        let total = summary.total
        if let scopeLimit, total > scopeLimit {
            throw TooManyChanges(limit: scopeLimit, summary: summary, what: scope?.kind == .chunk ? "the chunk" : "the run")
        }
        if let transactionLimit, total > transactionLimit {
            throw TooManyChanges(limit: transactionLimit, summary: summary, what: "the transaction")
        }
    }

    /// After each write in a scope or limited transaction: the limit is
    /// checked at once, so a runaway loop stops early.
    public func afterWrite() throws {
        guard let counter = changeCounter, scope?.changeLimit != nil || transactionLimit != nil else { return }
        try checkChangeLimit(counter, scopeLimit: scope?.changeLimit)
    }

    /// When the database file was deleted or replaced under opsh, writes
    /// would land in a file nobody opens again: refused, with what still
    /// works (reads, and `backup()` of the copy opsh still has open).
    private func refuseWritesToAFileThatIsGone() throws {
        guard current == nil, let problem = store.replacedFileProblem else { return }
        throw FileGone(problem: problem)
    }

    /// At a dry run's or a scope's first write: BEGIN IMMEDIATE on its
    /// connection (it waits for the lock like any writer), and everything
    /// from here on runs in that transaction.
    private func beginPendingWrite() throws {
        try refuseWritesToAFileThatIsGone()
        guard current == nil, let db = pending else { return }
        try db.beginTransaction(.immediate)
        LockOwner.beganWriting(database: store.path)
        if recordsChanges, recording == nil {
            recording = try ChangeRecording(connection: db.sqliteConnection!)
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
/// (`--max-changes`, `maxChanges`): it was rolled back.
public struct TooManyChanges: Error, CustomStringConvertible {
    public let limit: Int
    public let summary: ChangeSummary?
    public let what: String
    public var rowChanges: Int? = nil
    public init(limit: Int, summary: ChangeSummary?, what: String, rowChanges: Int? = nil) {
        self.limit = limit
        self.summary = summary
        self.what = what
        self.rowChanges = rowChanges
    }
    public var description: String {
        let counts = summary.map { " (" + $0.sentence + ")" } ?? ""
        let total = summary?.total ?? rowChanges ?? 0
        return "\(what) changed \(total) rows\(counts), more than its limit of \(limit) (--max-changes / maxChanges): rolled back, nothing was kept"
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

/// The transaction opsh opened was ended by something else before opsh
/// ended it: writes made after that point were kept.
public struct TransactionLost: Error, CustomStringConvertible {
    public let owner: String
    public var description: String {
        "\(owner)'s transaction was ended before opsh ended it: writes made after that point were committed and NOT rolled back; check the data"
    }
}

/// A GRDB transaction observer that counts row changes per table.
final class ChangeCounter: TransactionObserver, @unchecked Sendable {
    private(set) var summary = ChangeSummary()

    func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool { true }

    /// Changes made outside GRDB's statements (a changeset applied).
    func add(_ other: ChangeSummary) { summary.add(other) }

    func databaseDidChange(with event: DatabaseEvent) {
        summary.count(event.tableName, event.kind)
    }

    func databaseDidCommit(_ db: Database) {}
    func databaseDidRollback(_ db: Database) {}
}

/// A statement left open on the transaction's connection (a `db.rows`
/// cursor): it must be finalized when the transaction ends, since the
/// connection goes back to GRDB then.
public protocol TransactionBoundCursor: AnyObject {
    func close()
}

struct Weak<T> {
    private weak var object: AnyObject?
    var value: T? { object as? T }
    init(_ value: T) { object = value as AnyObject }
}
