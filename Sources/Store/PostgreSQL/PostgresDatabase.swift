import Foundation
import PostgresWire

/// A PostgreSQL database opened by opsh: one connection, driven from the
/// Lua thread, with the session's rules on it — the same promises the
/// SQLite session keeps (ARCHITECTURE.md, "PostgreSQL: the session").
///
/// - **Placeholders.** Statements are written as on SQLite (`?`, `?NNN`,
///   `:name`); ``PostgresPlaceholders`` rewrites them into `$n`.
/// - **Values.** Integers are 64-bit and exact, `bytea` comes back as
///   bytes, NULL as ``StoreValue/null``, booleans as 1 and 0 (as SQLite
///   gives them, so `if db.value("SELECT EXISTS …") == 1` runs on both);
///   numeric, dates and JSON as their text.
/// - **Names.** Rows are keyed by the schema's spelling (``PostgresNames``).
/// - **Transactions.** ``transaction(_:)`` is `BEGIN`, nested ones are
///   savepoints. Inside one, each statement runs under a savepoint of its
///   own, so that a failed statement a script catches with `pcall` does
///   not doom the transaction (psql's ON_ERROR_ROLLBACK).
/// - **Transaction control** from a script never commits opsh's
///   transaction: each one opsh opens holds a ``CommitGuard`` the server
///   fails any other commit on, and what the server reports of a statement
///   (``TransactionControl``) refuses the rest, as SQLite's guard does.
/// - **Read-only** is the server's: each statement outside a transaction
///   runs in `BEGIN READ ONLY` and a savepoint (inside a subtransaction
///   the server refuses `SET transaction_read_only = off`), and a
///   transaction is `BEGIN READ ONLY`; and every read-only transaction
///   ends in ROLLBACK, so that what the server lets a read-only
///   transaction do (large objects, NOTIFY) is not kept either
///   (`PostgresDatabase+ReadOnly`). No statement text is inspected.
/// - **Locks.** `--busy-timeout` is `lock_timeout`; a statement that waits
///   longer fails as "database is locked", naming the sessions that hold
///   the lock (``LockWitness``).
/// - **Dry run.** ``dryRun(_:)`` runs everything in one transaction that
///   is rolled back, and that the server refuses to commit whatever the
///   script sends (``dryRunGuard``), and reports each table's inserted,
///   updated and deleted rows from the server's own counters.
/// - **Cancel.** ``canceller`` stops the running statement on the server
///   (Ctrl-C, `--timeout`): it fails with SQLSTATE 57014.
/// - **The audit's counts.** With ``countsCommits``, the rows each
///   committed transaction of this connection changed are added up in
///   ``committed``, table by table, from the server's counters
///   (``CommitTally``).
public final class PostgresDatabase {
    public struct Options: Sendable {
        /// Every statement in a read-only transaction (`--read-only`).
        public var readOnly = false
        /// Create opsh's schema in an empty database (`--create`).
        public var create = false
        /// How long a statement waits for a lock (`--busy-timeout`, the
        /// session's `lock_timeout`); nil: as the server is set (by
        /// default, for ever).
        public var lockTimeout: Double?
        /// How long connecting may take at most (`--timeout`), when shorter
        /// than the URL's `connect_timeout`.
        public var connectTimeLimit: Double?
        /// `--sandbox`: every statement is checked by the server's counters
        /// and rolled back when it wrote the catalog or a scheme's build
        /// command (``PostgresSandbox``).
        public var sandbox = false
        /// The `search_path` to connect with (a session's pinned one, for
        /// another connection of opsh's): the role's and database's
        /// settings, which a script may have changed since the session
        /// opened (28n), are then not used.
        public var searchPath: String?

        public init(readOnly: Bool = false, create: Bool = false, lockTimeout: Double? = nil, connectTimeLimit: Double? = nil,
                    sandbox: Bool = false, searchPath: String? = nil) {
            self.readOnly = readOnly
            self.create = create
            self.lockTimeout = lockTimeout
            self.connectTimeLimit = connectTimeLimit
            self.sandbox = sandbox
            self.searchPath = searchPath
        }
    }

    public let url: PostgresURL
    /// The URL as given (with its password): what another connection of
    /// opsh's to the same database opens (the audit trail's own).
    public let urlText: String
    public let options: Options
    /// The session's connection; replaced by ``reconnectIfLost()`` when
    /// the server closed it (a restart, `pg_terminate_backend`).
    private(set) var connection: PostgresConnection
    /// For another thread: cancels the statement that runs now (on the
    /// connection of the moment).
    public var canceller: PostgresCanceller { currentCanceller.withLock { $0 } }
    private let currentCanceller: Locked<PostgresCanceller>
    /// What the connection is opened with (`--busy-timeout`'s lock_timeout).
    private let settings: [(name: String, value: String)]
    /// Told when the session connected again: a note on stderr unless the
    /// caller says otherwise.
    public var onReconnect: (@Sendable (String) -> Void)? = noteOnStandardError
    /// The canceller of a connection of its own that maintenance holds
    /// now (``onConnectionOfItsOwn(_:)``).
    let sideCanceller = Locked<PostgresCanceller?>(nil)

    /// For another thread (Ctrl-C, `--timeout`): cancels what runs now on
    /// the session's connection, and on a connection of its own that
    /// `vacuum()` or `checkpoint()` holds.
    public var cancelRunning: @Sendable () -> Void {
        let main = currentCanceller
        let side = sideCanceller
        // A cancel is sent only for a statement in flight, and the
        // connection's next statement waits until the server has handled
        // it (PostgresWire's CancelFence).
        return {
            try? main.withLock({ $0 }).cancel()
            if let other = side.withLock({ $0 }) { try? other.cancel() }
        }
    }

    /// The built-in migrations this database has, by name.
    public internal(set) var appliedMigrations: [String] = []
    /// The migrations opening applied (`--create` on an empty database).
    public private(set) var appliedAtOpening: [String] = []

    /// Writes sent by ``send(_:_:origin:)`` and not run yet, in order
    /// (PostgresDatabase+Pipeline).
    var deferredWrites: [DeferredWrite] = []
    /// The batch of them sent last, not read yet.
    var batchInFlight: BatchInFlight?
    /// The last statement ``send(_:_:origin:)`` deferred, as written and rewritten.
    var lastSent: (sql: String, statement: PostgresPlaceholders, deferrable: Bool)?
    /// The statements (as rewritten) the server ran as an INSERT, UPDATE,
    /// DELETE or MERGE without result columns: those ``send(_:_:origin:)``
    /// may defer.
    var deferrableStatements: Set<String> = []
    /// The command tag of the last statement ``execute(_:_:)`` ran.
    var lastCommandTag = ""

    /// Statements rewritten for PostgreSQL, by their text as written.
    private var rewritten: [String: PostgresPlaceholders] = [:]
    /// Open transactions and savepoints (0: none).
    public private(set) var depth = 0
    private(set) var dryRunning = false
    /// The level (``depth``) whose transaction or savepoint holds the
    /// ``CommitGuard`` now; nil when none does (a dry run has its own).
    var commitGuardDepth: Int?
    /// `--read-only`: the SET and RESET statements of the open read-only
    /// transaction, with the level they ran at, to run again for the
    /// session once it is rolled back (`PostgresDatabase+ReadOnly`).
    var readOnlySettings: [(depth: Int, sql: String)] = []
    /// Names the sessions a statement waits for (`--busy-timeout`).
    var lockWitness: LockWitness?
    /// The repositories' view of each table (``tableSpec(_:primaryKey:jsonColumns:booleans:)``),
    /// forgotten when a statement changes the schema.
    var tableSpecs: [String: TableSpec] = [:]

    /// Whether ``committed`` adds up what this connection commits (the
    /// audit trail of a run or a shell that is not read-only).
    public var countsCommits = false
    /// Whether a measured transaction reads the counters after each
    /// statement, so that what a statement that failed (and was caught)
    /// wrote before failing is left out of the counts, as SQLite's are.
    /// The shell keeps it on; `opsh run` and `-e` turn it off, for a
    /// reading per statement doubles the server's work on a loop of
    /// small writes: there such a statement's rolled-back rows stay in
    /// the audit's counts. A dry run always reads per statement.
    public var countsFailedStatementsExactly = true
    /// Rows changed per table by the transactions this connection
    /// committed while ``countsCommits`` was on (SQLite's `ChangeTally`).
    public internal(set) var committed: TableChanges = [:]
    /// What the process writes through connections of their own for this
    /// session (the job manager's, a cleanup's at the prompt): counted for
    /// the audit trail and against a scope's cap.
    public let writesElsewhere = PostgresWritesElsewhere()
    /// Statements run through ``execute(_:_:)`` so far: whether a script
    /// used the database at all.
    public internal(set) var statementCount = 0
    /// The relations whose counters ``committed`` reads, until a statement
    /// changes the schema.
    var knownTallyRelations: CommitTally.Relations?
    /// Which result columns are times (``PostgresTimeColumns``), until a
    /// statement changes the schema.
    var knownTimeColumns: PostgresTimeColumns?
    /// `--sandbox`: the check after each statement, made at the first one.
    var sandbox: PostgresSandbox?
    /// The counters the next statement's check compares with; nil until
    /// read in the open transaction (and after a statement failed, which
    /// may have moved them).
    var sandboxBaseline: PostgresSandbox.Baseline?
    /// The schema opsh's own statements name its tables in
    /// (``PostgresHomeSchema``, 27x); found as the session opens, nil
    /// while the database has no opsh schema.
    var homeSchema: PostgresHomeSchema? {
        didSet { ownPath = homeSchema.map { PostgresOwnPath(home: $0) } }
    }
    /// The search_path opsh's own statements run with (``PostgresOwnPath``, 28e).
    var ownPath: PostgresOwnPath?
    /// What the statements being sent need of the search_path; the
    /// connection's ``PostgresConnection/prelude`` asks.
    var pathNeed: PostgresOwnPath.Need = .none
    /// True while a script's statement runs (``scriptStatements(_:)``):
    /// its text is run as written; every other statement is opsh's own.
    var runsScript = false
    /// Texts of opsh's own statements, rewritten and qualified.
    var rewrittenOwn: [String: PostgresPlaceholders] = [:]

    /// Connects and checks the schema: an empty database gets opsh's
    /// schema with ``Options/create``; a database with tables but no opsh
    /// schema is refused, and so is one a newer opsh migrated.
    public init(url text: String, options: Options = Options()) throws {
        do {
            url = try PostgresURL(text)
        } catch {
            throw PostgresStoreError.invalidURL("\(error)")
        }
        urlText = text
        self.options = options
        // --busy-timeout: the session's lock_timeout from its start, so a
        // script's RESET returns to it. (PostgreSQL's 0 is "for ever",
        // SQLite's busy timeout of 0 "not at all": at least 1 ms.)
        settings = (options.lockTimeout.map { [(name: "lock_timeout", value: "\(max(Int(($0 * 1000).rounded()), 1))ms")] } ?? [])
            + (options.searchPath.map { [(name: "search_path", value: $0)] } ?? [])
        connection = try Self.connect(url, options, settings)
        currentCanceller = Locked(connection.canceller)
        if options.lockTimeout != nil { lockWitness = LockWitness(url: url) }
        watchLocks()
        askForPath()
        try prepareSchema()
    }

    /// The connection asks, as it writes each statement, for the step
    /// that sets the search_path its kind needs (``PostgresOwnPath``).
    private func askForPath() {
        let connection = connection
        connection.prelude = { [unowned self, unowned connection] in
            self.ownPath?.step(for: self.pathNeed, on: connection)
        }
    }

    /// Runs `body` sending statements of kind `need` (``PostgresOwnPath``).
    func sending<T>(_ need: PostgresOwnPath.Need, _ body: () throws -> T) rethrows -> T {
        let outer = pathNeed
        pathNeed = need
        defer { pathNeed = outer }
        return try body()
    }

    private static func connect(_ url: PostgresURL, _ options: Options,
                                _ settings: [(name: String, value: String)]) throws -> PostgresConnection {
        do {
            return try PostgresConnection(url: url, timeLimit: options.connectTimeLimit, settings: settings)
        } catch PostgresClientError.timedOut(let reason, let seconds) where seconds == options.connectTimeLimit {
            throw PostgresStoreError.connectTimedOut(url.description, seconds: seconds, reason: reason)
        }
    }

    /// `--busy-timeout`: a statement waiting for a lock names who holds it.
    private func watchLocks() {
        guard let seconds = options.lockTimeout, let witness = lockWitness else { return }
        let processID = connection.processID
        connection.whileWaiting = (LockWitness.delay(forBusyTimeout: seconds), { waited in
            witness.look(at: processID)
            witness.announceIfLong(waited: waited, timeout: seconds)
        })
    }

    /// Outside opsh's transactions, before a statement: a connection the
    /// server closed (it restarted, or `pg_terminate_backend` ended the
    /// session) is replaced by a new one, as psql does, and
    /// ``onReconnect`` says so; the statements are prepared again as they
    /// come. Inside a transaction nothing is replaced: the statement fails
    /// (``PostgresStoreError/connectionLost(_:)``) and the transaction
    /// with it, which the server rolled back; the next one reconnects.
    ///
    /// A closed connection is seen before anything is sent: the socket is
    /// read without waiting, which finds the server's goodbye (its FATAL
    /// message, the end of the stream) on an idle connection.
    func reconnectIfLost() throws {
        guard depth == 0 else { return }
        guard connection.serverHasHungUp() else { return }
        let fresh: PostgresConnection
        do {
            fresh = try Self.connect(url, options, settings)
        } catch {
            throw PostgresStoreError.connectionLost("the connection to \(label) was lost, and connecting again failed: \(error)")
        }
        connection = fresh
        currentCanceller.withLock { $0 = fresh.canceller }
        watchLocks()
        askForPath()
        sandboxBaseline = nil
        onReconnect?("the connection to \(label) was lost (the server restarted or ended the session); connected again (server process \(fresh.processID))")
    }

    deinit { connection.close() }

    /// The URL without its password, for messages.
    public var label: String { url.description }

    /// The server's version (`15.18 (Debian …)`).
    public var serverVersion: String { connection.serverVersion ?? "?" }

    public var isInTransaction: Bool { depth > 0 }

    // MARK: Schema

    /// The built-in migrations the database lacks.
    public var pendingMigrations: [String] {
        PostgresMigrations.all.map(\.name).filter { !appliedMigrations.contains($0) }
    }

    private func prepareSchema() throws {
        try PostgresHomeSchema.refuseAPathSetAway(on: connection, label: label)
        if try hasBookkeeping() {
            appliedMigrations = try readApplied()
        } else {
            let tables = try connection.query(
                "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()").scalar
            if case let .integer(count)? = tables, count > 0 {
                throw PostgresStoreError.notOpsh(label, tables: Int(count))
            }
            guard options.create else { throw PostgresStoreError.empty(label) }
            guard !options.readOnly else { throw PostgresStoreError.empty(label) }
        }
        let known = Set(PostgresMigrations.all.map(\.name))
        let unknown = appliedMigrations.filter { !known.contains($0) && !$0.hasPrefix(Self.luaMigrationPrefix) }
        if !unknown.isEmpty { throw PostgresStoreError.newerSchema(label, unknown: unknown) }
        if options.create && !options.readOnly && appliedMigrations.isEmpty {
            appliedAtOpening = try migrate()
        }
        // Before any statement of a script: the schema the migrations made
        // the tables in.
        homeSchema = try PostgresHomeSchema(on: connection, label: label)
    }

    /// Lua migrations' names carry this prefix, as on SQLite.
    static let luaMigrationPrefix = "lua:"

    private func hasBookkeeping() throws -> Bool {
        try connection.query("SELECT to_regclass('opsh_migrations') IS NOT NULL").scalar == .bool(true)
    }

    func readApplied() throws -> [String] {
        try connection.query(ownText("SELECT identifier FROM opsh_migrations ORDER BY identifier")).rows.compactMap {
            if case let .text(name) = $0[0] { return name }
            return nil
        }
    }

    /// Applies the pending built-in migrations, each in a transaction of
    /// its own, under an advisory lock: two opsh processes creating the
    /// schema at once take turns, and the second finds it made.
    @discardableResult
    public func migrate() throws -> [String] {
        guard depth == 0 else { throw PostgresStoreError.inTransaction("migrating") }
        try reconnectIfLost()
        var applied: [String] = []
        for (name, sql) in PostgresMigrations.all {
            try connection.simpleQuery("BEGIN")
            do {
                _ = try connection.query("SELECT pg_advisory_xact_lock(\(Self.migrationLock))")
                try connection.simpleQuery(ownText(PostgresMigrations.bookkeeping))
                let done = try connection.query(ownText("SELECT 1 FROM opsh_migrations WHERE identifier = $1"), [.text(name)])
                if done.rows.isEmpty {
                    try connection.simpleQuery(sql)
                    _ = try connection.query(ownText("INSERT INTO opsh_migrations (identifier) VALUES ($1)"), [.text(name)])
                    applied.append(name)
                }
                try connection.simpleQuery("COMMIT")
            } catch {
                if connection.transactionStatus != .idle { _ = try? connection.simpleQuery("ROLLBACK") }
                throw error
            }
        }
        appliedMigrations = try readApplied()
        knownTallyRelations = nil
        knownTimeColumns = nil
        if homeSchema == nil { homeSchema = try PostgresHomeSchema(on: connection, label: label) }
        return applied
    }

    /// The advisory lock of opsh's migrations ("opsh" in ASCII).
    static let migrationLock: Int64 = 0x6F_70_73_68

    // MARK: Statements

    /// A statement's values: by position (`?`, `?2`), or a table that
    /// gives `:name`s by name and `?`s by position.
    public typealias Arguments = SQLArguments

    /// What a statement returned.
    public struct Result: Sendable {
        /// Column names, keyed as rows are (``PostgresNames``).
        public var columns: [String]
        /// The values as the client decoded them; read through ``rows`` or
        /// ``value(row:column:)`` (no row is converted until asked for: a
        /// scan pushed into Lua converts each value once, on the way).
        /// Empty after ``PostgresDatabase/execute(_:_:eachRow:)``.
        var raw: [[PostgresValue]]
        /// Columns of type numeric (`sum(bigint)`, `avg`, `numeric(10,2)`),
        /// whose text comes back as a number, as SQLite's sums and averages do.
        let numericColumns: Set<Int>
        /// Rows inserted, updated or deleted (nil for other statements).
        public var changes: Int?

        public var rowCount: Int { raw.count }

        /// Every row's values, in ``columns``' order.
        public var rows: [[StoreValue]] {
            raw.indices.map { row in columns.indices.map { value(row: row, column: $0) } }
        }

        public func value(row: Int, column: Int) -> StoreValue {
            let value = raw[row][column]
            if case let .text(text) = value, numericColumns.contains(column) { return PostgresDatabase.number(text) }
            return PostgresDatabase.value(value)
        }
    }

    /// Runs one statement with the session's rules (see the type's
    /// documentation). Errors quote the SQL and the SQLSTATE.
    @discardableResult
    public func execute(_ sql: String, _ arguments: Arguments = .positional([])) throws -> Result {
        var rows: [[PostgresValue]] = []
        var result = try execute(sql, arguments) { rows.append(try $0.values()) }
        result.raw = rows
        return result
    }

    /// Runs one statement as ``execute(_:_:)`` does, handing each row to
    /// `eachRow` as the connection reads it, in place
    /// (``PostgresConnection/query(_:_:eachRow:)``: valid only during the
    /// call; the columns' names as rows are keyed are
    /// ``rowKeys(_:)`` of its layout): for a caller that makes its own
    /// values (the `db` module's Lua tables) without the
    /// ``PostgresValue``s and ``StoreValue``s in between. Values mean what
    /// ``value(_:)`` and ``number(_:)`` say. The result has no rows.
    ///
    /// A failure after some rows is thrown after them (the server's
    /// error, or `eachRow`'s, once the rest was read): the caller drops
    /// what it made of them.
    @discardableResult
    public func execute(_ sql: String, _ arguments: Arguments = .positional([]),
                        eachRow: (PostgresDataRow) throws -> Void) throws -> Result {
        let statement = try rewrite(sql)
        let parameters = try bind(statement, arguments, sql: sql)
        try reconnectIfLost()
        statementCount += 1
        lockWitness?.reset()
        let result: PostgresResult
        // opsh's own statement with the search_path pinned, a script's with
        // its own (PostgresOwnPath).
        let outerNeed = pathNeed
        pathNeed = runsScript ? .script : .own
        defer { pathNeed = outerNeed }
        do {
            if depth > 0 {
                result = try underSavepoint(statement.sql, parameters, eachRow: eachRow)
            } else if checksSandbox {
                // Checked under a savepoint of a transaction of its own, so
                // that what the check refuses can be rolled back.
                result = try transaction { try underSavepoint(statement.sql, parameters, eachRow: eachRow) }
            } else {
                result = try autocommit(statement.sql, parameters, eachRow: eachRow)
            }
        } catch where depth == 0 && !connection.isOpen && !(error is PostgresStoreError) {
            throw PostgresStoreError.connectionLost(
                "the connection to \(label) was lost during the statement, which may or may not have been committed (\(error)); the next statement connects again: \(statement.sql)")
        } catch let error as PostgresError where error.code == "55P03" {
            throw PostgresStoreError.locked(statement.sql, server: error.message, busyTimeout: options.lockTimeout,
                                            holders: lockWitness?.blockers)
        }
        lastCommandTag = result.commandTag
        if Self.changesSchema(result.commandTag) {
            tableSpecs = [:]
            knownTallyRelations = nil
            knownTimeColumns = nil
        knownTimeColumns = nil
            schemaChanged = true
        }
        return Self.convert(result)
    }

    /// The names of a result's columns as rows are keyed (``PostgresNames``).
    public static func rowKeys(_ layout: PostgresRowLayout) -> [String] {
        layout.columns.map { PostgresNames.rowKey($0.name) }
    }

    /// Runs a script of several statements given without values (a
    /// migration's DDL through `db.exec`), as SQLite runs one: all in one
    /// transaction (a savepoint inside an open one), so it keeps all or
    /// nothing, each statement on its own through ``execute(_:_:)``, so
    /// each is under the session's rules: a `COMMIT` among them stops the
    /// script with ``PostgresStoreError/endedTransaction(_:)`` (and is
    /// refused by the server in a dry run, ``dryRunGuard``). The result is
    /// the last statement's; a script of one statement is that statement.
    @discardableResult
    public func executeScript(_ sql: String) throws -> Result {
        let statements = PostgresPlaceholders.statements(in: sql)
        guard statements.count > 1 else { return try execute(sql) }
        return try transaction {
            var last: Result?
            for statement in statements { last = try execute(statement) }
            return last!
        }
    }

    /// The statement with PostgreSQL's placeholders; opsh's own statements
    /// also with their names of opsh's tables qualified (``PostgresHomeSchema``).
    func rewrite(_ sql: String) throws -> PostgresPlaceholders {
        let qualifier = runsScript ? nil : homeSchema?.qualifier
        if let known = qualifier == nil ? rewritten[sql] : rewrittenOwn[sql] { return known }
        let statement: PostgresPlaceholders
        do {
            statement = try PostgresPlaceholders(rewriting: sql, qualifying: qualifier)
        } catch let failure as PostgresPlaceholders.Failure {
            throw PostgresStoreError.statement(failure.description)
        }
        if qualifier == nil {
            if rewritten.count < 1024 { rewritten[sql] = statement }
        } else if rewrittenOwn.count < 1024 {
            rewrittenOwn[sql] = statement
        }
        return statement
    }

    /// An own statement's text sent to the connection directly (native
    /// `$n` placeholders), qualified as ``rewrite(_:)`` qualifies.
    func ownText(_ sql: String) -> String {
        guard let qualifier = homeSchema?.qualifier else { return sql }
        return (try? PostgresPlaceholders(rewriting: sql, qualifying: qualifier).sql) ?? sql
    }

    private func bind(_ statement: PostgresPlaceholders, _ arguments: Arguments, sql: String) throws -> [PostgresValue] {
        try PostgresArguments.parameters(for: statement, arguments, sql: sql)
    }

    /// Outside opsh's transactions: the statement in a read-only
    /// transaction (`--read-only`), between two readings of the counters
    /// (the audit's), or alone. A statement the server reports as
    /// transaction control is refused (``TransactionControl``): a `BEGIN`
    /// that opened a transaction of the script's own is rolled back first,
    /// so nothing the script does next waits in it for a commit.
    private func autocommit(_ sql: String, _ parameters: [PostgresValue],
                            eachRow: (PostgresDataRow) throws -> Void) throws -> PostgresResult {
        let result: PostgresResult
        do {
            if options.readOnly {
                result = try readOnly(sql, parameters, eachRow: eachRow)
            } else if countsCommits {
                result = try counted(sql, parameters, eachRow: eachRow)
            } else {
                result = try connection.query(sql, parameters, eachRow: eachRow)
            }
        } catch {
            if connection.isOpen, connection.transactionStatus != .idle {
                _ = try? connection.simpleQuery("ROLLBACK")
                throw PostgresStoreError.transactionControl(sql, server: nil)
            }
            throw TransactionControl.reported(error, sql)
        }
        if connection.transactionStatus != .idle {
            _ = try? connection.simpleQuery("ROLLBACK")
            throw PostgresStoreError.transactionControl(sql, server: nil)
        }
        if TransactionControl.isControl(result.commandTag) { throw PostgresStoreError.transactionControl(sql, server: nil) }
        return result
    }

    /// Inside a transaction: the statement under a savepoint of its own,
    /// released when it succeeds and rolled back to when it fails, so the
    /// transaction goes on. The three go to the server in one round trip
    /// (a pipeline: one Sync); only a failure costs a second one. In a
    /// measured transaction a reading of the counters follows in the same
    /// round trip, and what a failed statement did before it failed
    /// (which the server's counters keep) is set aside (``Measure``).
    ///
    /// What the server reports of the statement decides what transaction
    /// control it was (``TransactionControl``): refused and the transaction
    /// goes on when it changed nothing; rolled back whole when it ended
    /// the transaction or broke opsh's savepoints (nothing committed:
    /// ``CommitGuard``), after which every statement is refused until
    /// opsh's transaction ends.
    ///
    /// A kept statement gone stale (0A000 "cached plan must not change
    /// result type" after another session's ALTER TABLE, 26000 after
    /// DISCARD ALL) is refused at its Bind, before it runs: rolled back to
    /// its savepoint, it is prepared and run once more there, so a
    /// backend's migration does not fail the operator's transaction
    /// (``PostgresConnection`` forgot the statement already).
    private func underSavepoint(_ sql: String, _ parameters: [PostgresValue], preparedAgain: Bool = false,
                                eachRow: (PostgresDataRow) throws -> Void) throws -> PostgresResult {
        // A statement ended opsh's transaction: nothing more runs in it.
        if connection.transactionStatus == .idle { throw dryRunning ? PostgresStoreError.dryRunEnded : PostgresStoreError.transactionEnded }
        var steps: [(sql: String, parameters: [PostgresValue])] = [("SAVEPOINT opsh_statement", []), (sql, parameters)]
        // --sandbox: the check before the savepoint is released (PostgresSandbox).
        let sandboxIndex = steps.count
        let sandboxCheck = try sandboxStep()
        if let sandboxCheck { steps.append(sandboxCheck) }
        // The counters are read before the savepoint is released (they
        // count the open savepoint's rows too): a reading the statement
        // made fail (DEALLOCATE ALL dropped it) leaves the savepoint to
        // roll back to.
        let reading = steps.count
        let relations = measure != nil && (dryRunning || countsFailedStatementsExactly) ? try tallyRelations() : nil
        if let relations { steps.append(CommitTally.stepOnceWritten(relations)) }
        let release = steps.count
        steps.append(("RELEASE SAVEPOINT opsh_statement", []))
        var results: [PostgresResult]
        var checked: [PostgresValue] = []
        var handedRows = false
        do {
            var readings: [[PostgresValue]] = []
            results = try connection.pipeline(steps) { step, row in
                if step == 1 {
                    handedRows = true
                    try eachRow(row)
                } else if step == reading { readings.append(try row.values()) }
                else if step == sandboxIndex, sandboxCheck != nil { checked = try row.values() }
            }
            if results.count > reading { results[reading].rows = readings }
        } catch let error as PostgresError {
            // A statement that failed may have written the catalog first.
            sandboxBaseline = nil
            let refusal = sandboxCheck != nil && error.step == sandboxIndex ? PostgresSandbox.refusal(in: error) : nil
            // (Any other failure of the check is rolled back too, below.)
            switch connection.transactionStatus {
            case .failed where refusal != nil:
                // The check refused the statement: rolled back to its
                // savepoint (what it changed set aside), the transaction goes on.
                try rollBackStatement(relations)
                throw PostgresStoreError.sandboxRefused(PostgresSandbox.message(refusal!), sql: sql)
            case .failed where error.code == "26000" && (error.step ?? 0) > 1 && !handedRows && !preparedAgain:
                // The statement dropped opsh's prepared statements (DEALLOCATE
                // ALL, or a function that runs it), and a step after it found
                // its own gone: the savepoint stands. Rolled back to it, the
                // statement runs once more with every step parsed again in
                // order, so those after it are prepared after it ran.
                try rollBackStatement(relations)
                connection.forgetPreparedStatements()
                return try underSavepoint(sql, parameters, preparedAgain: true, eachRow: eachRow)
            case .failed where error.step == release:
                // The statement released opsh's savepoint, or rolled back
                // past it (RELEASE or ROLLBACK TO one of opsh's): the
                // savepoints opsh rolls back to are gone.
                _ = try? connection.simpleQuery("ROLLBACK")
                throw PostgresStoreError.transactionControlRolledBack(sql, reason: nil)
            case .failed:
                try rollBackStatement(error.step == 1 ? relations : nil)
                if error.step == 1, error.code == "0A000" || error.code == "26000", !handedRows, !preparedAgain {
                    return try underSavepoint(sql, parameters, preparedAgain: true, eachRow: eachRow)
                }
            case .idle where dryRunning:
                // The dry run's guard refused the statement's commit.
                throw PostgresStoreError.dryRunCommitRefused(sql)
            case .idle where error.step == 1:
                // The statement ended the transaction and failed doing it:
                // the server refused to commit (the commit guard) or to
                // prepare it, and rolled it back.
                throw PostgresStoreError.transactionControlRolledBack(sql, reason: error.message)
            case .idle where error.step == release:
                // The statement ended the transaction itself (the savepoint
                // went with it): a ROLLBACK, or a COMMIT that a statement
                // closing the commit guard by name let through.
                if error.completedCommandTags.count > 1, error.completedCommandTags[1] == "COMMIT" {
                    throw PostgresStoreError.transactionCommittedPastTheGuard(sql)
                }
                throw PostgresStoreError.transactionControlRolledBack(sql, reason: nil)
            default:
                break
            }
            throw TransactionControl.reported(error, sql)
        } catch {
            // eachRow's error (thrown first when the statement failed too),
            // or the connection's: the transaction goes on as above.
            sandboxBaseline = nil
            if connection.isOpen, connection.transactionStatus == .failed {
                try connection.simpleQuery("ROLLBACK TO SAVEPOINT opsh_statement; RELEASE SAVEPOINT opsh_statement")
            }
            throw error
        }
        guard connection.transactionStatus == .inTransaction else {
            _ = try? connection.simpleQuery("ROLLBACK")
            throw PostgresStoreError.transactionControlRolledBack(sql, reason: nil)
        }
        // Nothing read: the transaction has not written (or wrote no
        // counted table), so the counters are as at its start (they only
        // grow within a transaction).
        if let relations, var current = measure, !results[reading].rows.isEmpty {
            current.read(CommitTally.counts(results[reading], relations))
            measure = current
        }
        if let baseline = sandboxBaseline, sandboxCheck != nil { sandboxBaseline = PostgresSandbox.advanced(baseline, by: checked) }
        try afterStatement(sql, results[1].commandTag)
        return results[1]
    }

    /// Rolls back to the statement's savepoint; with `relations`, reads the
    /// counters in the same round trip and sets aside what it did.
    func rollBackStatement(_ relations: CommitTally.Relations?) throws {
        if let relations {
            let after = try connection.pipeline([("ROLLBACK TO SAVEPOINT opsh_statement", []),
                                                 ("RELEASE SAVEPOINT opsh_statement", []), CommitTally.step(relations)])
            measure?.rolledBack(to: CommitTally.counts(after[2], relations))
        } else {
            try connection.simpleQuery("ROLLBACK TO SAVEPOINT opsh_statement; RELEASE SAVEPOINT opsh_statement")
        }
    }

    /// Runs `body`, whose statements are a script's (the `db` module's
    /// SQL, a watch's query, `db.copy`'s table): run as written, their
    /// names looked up as the session's `search_path` says.
    func scriptStatements<T>(_ body: () throws -> T) rethrows -> T {
        let outer = runsScript
        runsScript = true
        defer { runsScript = outer }
        return try body()
    }

    /// Runs `body`, whose statements are opsh's own fixed texts (the
    /// repositories', a key's, a read-back), even inside a script's call:
    /// their names of opsh's tables are qualified (``PostgresHomeSchema``).
    func ownStatements<T>(_ body: () throws -> T) rethrows -> T {
        let outer = runsScript
        runsScript = false
        defer { runsScript = outer }
        return try body()
    }

    /// What a statement that ran inside opsh's transaction leaves to do,
    /// by its command tag: transaction control that changed nothing (a
    /// BEGIN, a SAVEPOINT released with the statement's, a ROLLBACK TO the
    /// statement's own savepoint) is refused; a `CLOSE ALL` closed the
    /// commit guard, which is declared again; under `--read-only`, a
    /// NOTIFY is refused (the transaction's rollback drops it) and a SET
    /// is noted, to be kept for the session.
    private func afterStatement(_ sql: String, _ tag: String) throws {
        if TransactionControl.isControl(tag) { throw PostgresStoreError.transactionControl(sql, server: nil) }
        if tag == "CLOSE CURSOR ALL", commitGuardDepth != nil {
            try connection.query(CommitGuard.declare)
            commitGuardDepth = depth
        }
        if options.readOnly { try noteReadOnly(sql, tag) }
    }

    // MARK: Transactions

    /// Runs `body` in a transaction (a savepoint inside one): it commits
    /// when `body` returns and rolls back when it throws.
    public func transaction<T>(_ body: () throws -> T) throws -> T {
        let outermost = depth == 0
        do {
            if outermost && countsCommits && !options.readOnly {
                let (result, changed) = try measuredTransaction(body)
                committed.add(changed)
                return result
            }
            return try plainTransaction(body)
        } catch where outermost && !connection.isOpen && !(error is PostgresStoreError) {
            throw PostgresStoreError.connectionLost(
                "the connection to \(label) was lost; the server rolled the transaction back, nothing of it was kept (\(error)); the next statement connects again")
        }
    }

    /// A transaction (a savepoint inside one) without readings of its own
    /// (a savepoint of a measured transaction keeps it measured).
    private func plainTransaction<T>(_ body: () throws -> T) throws -> T {
        let savepoint = "opsh_\(depth + 1)"
        if depth == 0 {
            try reconnectIfLost()
            try beginGuarded(options.readOnly ? "BEGIN READ ONLY" : "BEGIN")
        } else if connection.transactionStatus == .idle {
            throw dryRunning ? PostgresStoreError.dryRunEnded : PostgresStoreError.transactionEnded
        } else if var current = measure, !(dryRunning || countsFailedStatementsExactly) {
            // The readings are not kept current statement by statement:
            // read them as the savepoint begins.
            let relations = try tallyRelations()
            let results = try connection.pipeline([("SAVEPOINT \(savepoint)", []), CommitTally.step(relations)])
            current.read(CommitTally.counts(results[1], relations))
            measure = current
        } else {
            try connection.simpleQuery("SAVEPOINT \(savepoint)")
        }
        // A savepoint of a measured transaction: where the readings were
        // when it began, so that rolling it back sets aside what it did.
        let atSavepoint = depth > 0 ? measure : nil
        depth += 1
        let result: T
        do {
            result = try body()
            // Its deferred writes fail here, as the body would have.
            try flushDeferred()
        } catch {
            discardDeferred()
            depth -= 1
            if depth == 0 { endedOutermost() }
            if connection.transactionStatus != .idle {
                if depth == 0 {
                    _ = try? connection.simpleQuery("ROLLBACK")
                } else if let atSavepoint, let relations = try? tallyRelations(),
                          let after = try? connection.pipeline([("ROLLBACK TO SAVEPOINT \(savepoint)", []),
                                                                ("RELEASE SAVEPOINT \(savepoint)", []),
                                                                CommitTally.step(relations)]) {
                    var restored = atSavepoint
                    restored.rolledBack(to: CommitTally.counts(after[2], relations))
                    measure = restored
                } else {
                    _ = try? connection.simpleQuery("ROLLBACK TO SAVEPOINT \(savepoint); RELEASE SAVEPOINT \(savepoint)")
                }
                if depth > 0, connection.transactionStatus == .inTransaction { try? rolledBackSavepoint() }
            }
            throw error
        }
        depth -= 1
        if depth == 0 {
            defer { endedOutermost() }
            try commitOutermost()
        } else {
            guard connection.transactionStatus != .idle else {
                throw dryRunning ? PostgresStoreError.dryRunEnded : PostgresStoreError.transactionEnded
            }
            try connection.simpleQuery("RELEASE SAVEPOINT \(savepoint)")
            if let guardDepth = commitGuardDepth, guardDepth > depth { commitGuardDepth = depth }
        }
        return result
    }

    /// Begins opsh's outermost transaction with its ``CommitGuard``, in one
    /// round trip.
    func beginGuarded(_ begin: String) throws {
        let sandboxReading = try sandboxFirstReading()
        do {
            try connection.pipeline([(begin, []), (CommitGuard.declare, [])] + (sandboxReading.map { [$0.step] } ?? [])) { step, row in
                if step == 2 { sandboxReading?.read(try row.values()) }
            }
        } catch {
            if connection.transactionStatus != .idle { _ = try? connection.simpleQuery("ROLLBACK") }
            throw error
        }
        commitGuardDepth = 1
    }

    /// Commits opsh's outermost transaction: its ``CommitGuard`` closed and
    /// COMMIT, in one round trip (under `--read-only`: rolled back,
    /// ``rollBackReadOnly(before:)``). Refused when a statement ended the
    /// transaction already, or closed the guard by name (then rolled back).
    @discardableResult
    private func commitOutermost(before steps: [(sql: String, parameters: [PostgresValue])] = []) throws -> [PostgresResult] {
        guard connection.transactionStatus == .inTransaction else {
            if connection.transactionStatus == .failed { _ = try? connection.simpleQuery("ROLLBACK") }
            throw dryRunning ? PostgresStoreError.dryRunEnded : PostgresStoreError.transactionEnded
        }
        if options.readOnly { return try rollBackReadOnly(before: steps) }
        do {
            return try connection.pipeline(steps + [(CommitGuard.close, []), ("COMMIT", [])])
        } catch {
            if connection.transactionStatus != .idle { _ = try? connection.simpleQuery("ROLLBACK") }
            if CommitGuard.wasClosed(error) { throw PostgresStoreError.commitGuardClosed }
            throw error
        }
    }

    /// A savepoint of opsh's was rolled back (``depth`` is the level it
    /// was taken in): what was declared or noted inside it went with it.
    private func rolledBackSavepoint() throws {
        readOnlySettings.removeAll { $0.depth > depth }
        if let guardDepth = commitGuardDepth, guardDepth > depth {
            // Declared again inside it (after a CLOSE ALL): the rollback
            // dropped it.
            try connection.query(CommitGuard.declare)
            commitGuardDepth = depth
        }
    }

    /// opsh's outermost transaction is over, however it ended.
    func endedOutermost() {
        commitGuardDepth = nil
        readOnlySettings.removeAll()
        // The counters may be handed to the shared statistics now.
        sandboxBaseline = nil
    }

    /// `--sandbox` (and not `--read-only`, whose transactions keep nothing):
    /// every statement is checked (``PostgresSandbox``).
    var checksSandbox: Bool { options.sandbox && !options.readOnly }

    /// The check to run after the statement, against the counters before
    /// it (read now when the open transaction has not read them yet); nil
    /// outside the sandbox.
    func sandboxStep() throws -> (sql: String, parameters: [PostgresValue])? {
        guard checksSandbox else { return nil }
        let sandbox = try sandboxCheck()
        let baseline = try sandboxBaseline ?? sandbox.baseline(on: connection)
        sandboxBaseline = baseline
        return sandbox.step(against: baseline)
    }

    private func sandboxCheck() throws -> PostgresSandbox {
        if let sandbox { return sandbox }
        let made = try PostgresSandbox(on: connection)
        sandbox = made
        return made
    }

    /// The sandbox's first reading of a transaction, sent in the round
    /// trip that begins it (a statement outside a transaction gets one of
    /// its own: this saves it a round trip); nil outside the sandbox.
    private func sandboxFirstReading() throws -> (step: (sql: String, parameters: [PostgresValue]), read: ([PostgresValue]) -> Void)? {
        guard checksSandbox else { return nil }
        let sandbox = try sandboxCheck()
        return ((sandbox.reading, []), { [unowned self] row in self.sandboxBaseline = PostgresSandbox.baseline(from: row) })
    }

    /// An outermost transaction whose changes are measured: read from the
    /// server's counters right after BEGIN and right before COMMIT (no
    /// flush of the counters happens in between), less what rolled-back
    /// savepoints did; returns them once it committed.
    private func measuredTransaction<T>(_ body: () throws -> T) throws -> (T, TableChanges) {
        let (result, changed, _) = try measuredTransaction(body) { _ in true }
        return (result, changed)
    }

    /// ``measuredTransaction(_:)`` that asks `mayCommit`, with what the
    /// transaction changed, before it commits: false rolls it back, an
    /// error rolls it back and is thrown.
    private func measuredTransaction<T>(_ body: () throws -> T, watchesSchema: Bool = false,
                                        mayCommit: (ChangeSummary) throws -> Bool)
        throws -> (result: T, changed: TableChanges, committed: Bool) {
        precondition(depth == 0)
        try reconnectIfLost()
        let sandboxReading = try sandboxFirstReading()
        let first = try CommitTally.begin(options.readOnly ? "BEGIN READ ONLY" : "BEGIN", on: connection,
                                          relations: tallyRelations(), guardedBy: CommitGuard.declare,
                                          also: sandboxReading?.step, alsoRows: { sandboxReading?.read($0) })
        commitGuardDepth = 1
        measure = Measure(first: first)
        depth = 1
        defer {
            discardDeferred()
            depth = 0
            measure = nil
            endedOutermost()
            if connection.transactionStatus != .idle { _ = try? connection.simpleQuery("ROLLBACK") }
        }
        let schema = try watchSchema(watchesSchema)
        let result = try body()
        try flushDeferred()
        guard connection.transactionStatus == .inTransaction else {
            if connection.transactionStatus == .failed { _ = try? connection.simpleQuery("ROLLBACK") }
            throw dryRunning ? PostgresStoreError.dryRunEnded : PostgresStoreError.transactionEnded
        }
        let measured = try readMeasure()
        let difference = try schemaDifference(since: schema, pending: measured.last)
        var changed = measured.changed
        changed.add(difference.droppedRows)
        var summary = ChangeSummary()
        summary.tables = changed
        summary.schemaChanges = difference.changes
        guard try mayCommit(summary) else { return (result, changed, false) }
        // The shared statistics get this transaction's counts as it ends
        // (PostgreSQL 15 and later), so that a table it wrote and another
        // session drops is counted from them at once.
        let flush: [(sql: String, parameters: [PostgresValue])] =
            serverFlushesStatistics ? [("SELECT pg_catalog.pg_stat_force_next_flush()", [])] : []
        if isInChunk, !changed.isEmpty, let beforeChunkCommit {
            // The hook's statements (the chunk's audit row) are not counted:
            // the measure is put back, and COMMIT follows without a reading.
            let measuredAgain = measure
            beforeChunkCommit(ChunkCommit(changes: changed, connection: self) { body in
                try self.transaction {
                    _ = try self.execute("SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true)")
                    return try body()
                }
            })
            measure = measuredAgain
            _ = try commitOutermost(before: flush)
            return (result, changed, true)
        }
        // The last reading in the round trip that commits.
        let relations = try tallyRelations()
        let results = try commitOutermost(before: [CommitTally.step(relations)] + flush)
        measure?.read(CommitTally.counts(results[0], relations))
        var final = measure?.changed ?? [:]
        final.add(difference.droppedRows)
        return (result, final, true)
    }

    /// Hears commits for `watch` (``observe(_:onChange:)``): started by the first watch.
    lazy var listener = PostgresChangeListener(url: url)

    /// `--allow-schema-changes` (``DatabaseSession/allowsSchemaChanges``).
    public var allowsSchemaChanges = false
    /// A statement's command tag said it changed the schema since the
    /// outermost measured transaction began (``watchSchema(_:)``).
    var schemaChanged = false

    /// ``DatabaseSession/beforeChunkCommit``: what it writes is not counted.
    public var beforeChunkCommit: ((ChunkCommit) -> Void)?

    /// The readings of the measured transaction open now (its own
    /// ``measuredTransaction(_:)``, a dry run's): PostgreSQL's counters
    /// count what a rolled-back savepoint did (a statement that failed, a
    /// `db.transaction` that raised) as if it had stayed, so each rollback
    /// to a savepoint is read and what it undid is set aside.
    struct Measure {
        /// At BEGIN.
        var first: TableChanges
        /// After the last statement (or rollback) that was read.
        var last: TableChanges
        /// What rolled-back savepoints had changed.
        var undone: TableChanges = [:]

        init(first: TableChanges) {
            self.first = first
            last = first
        }

        /// What the transaction changed up to the last reading.
        var changed: TableChanges { last.since(first).since(undone) }

        /// A new reading. The counters only grow within a transaction, so a
        /// table the reading lacks but the last one had was dropped (the
        /// server forgets a dropped table's counters with it): it keeps its
        /// last counts, what the transaction did to it before the drop.
        mutating func read(_ counts: TableChanges) {
            last = Self.carrying(last, into: counts)
        }

        static func carrying(_ earlier: TableChanges, into counts: TableChanges) -> TableChanges {
            var merged = counts
            for (table, change) in earlier where merged[table] == nil { merged[table] = change }
            return merged
        }

        /// Rolled back to a savepoint taken when the readings were `self`
        /// (for a statement's own savepoint: the last reading): what the
        /// counters gained since then was undone.
        mutating func rolledBack(to after: TableChanges) {
            let merged = Self.carrying(last, into: after)
            undone.add(merged.since(last))
            last = merged
        }
    }

    /// Whether the server has `pg_stat_force_next_flush()` (15 and later):
    /// ``CommitTally/around(_:_:on:relations:flushes:nothingPending:eachRow:)``
    /// then reads the counters only after a statement that wrote.
    lazy var serverFlushesStatistics: Bool = {
        guard let version = connection.serverVersion, let major = Int(version.prefix { $0.isNumber }) else { return false }
        return major >= 15
    }()
    /// The connection's exchange that ended with the counters handed to
    /// the shared statistics: while it is still the last one, nothing is
    /// pending in this backend's counters.
    private var flushedAtExchange: Int?

    /// Set while a measured transaction is open.
    var measure: Measure?

    /// Outside a transaction with ``countsCommits``: the statement between
    /// two readings of the counters, in one implicit transaction (one round
    /// trip). A statement PostgreSQL runs only outside a transaction block
    /// (VACUUM, CREATE INDEX CONCURRENTLY: SQLSTATE 25001, refused before
    /// it does anything) runs alone, uncounted: it changes no rows.
    private func counted(_ sql: String, _ parameters: [PostgresValue],
                         eachRow: (PostgresDataRow) throws -> Void) throws -> PostgresResult {
        var attempts = 0
        var handedRows = false
        while true {
            attempts += 1
            do {
                let relations = try tallyRelations()
                let (result, changed) = try CommitTally.around(
                    sql, parameters, on: connection, relations: relations, flushes: serverFlushesStatistics,
                    nothingPending: flushedAtExchange == connection.exchangeCount
                ) {
                    handedRows = true
                    try eachRow($0)
                }
                if serverFlushesStatistics { flushedAtExchange = connection.exchangeCount }
                if connection.transactionStatus == .idle { committed.add(changed) }
                return result
            } catch let error as PostgresError where error.step == 1 {
                if error.code == "25001", !handedRows { return try connection.query(sql, parameters, eachRow: eachRow) }
                // Again only when no row was handed out: the caller would see them twice.
                if (error.code == "0A000" || error.code == "26000"), attempts == 1, !handedRows, connection.transactionStatus == .idle {
                    continue  // a stale statement, forgotten already: nothing ran
                }
                var reported = error
                reported.step = nil
                throw reported
            } catch var reported as PostgresError where reported.step == 2 && reported.code == "26000" {
                // The reading after the statement was dropped by it (DEALLOCATE
                // ALL, or a function that runs it): the statement's implicit
                // transaction rolled back with the reading. Once more, every
                // step parsed again in order: the reading is then prepared
                // after the statement has run, as psql's next query would be.
                if attempts == 1, !handedRows, connection.transactionStatus == .idle { continue }
                reported.step = nil
                throw reported
            } catch PostgresClientError.unsupported {
                // Refused before anything was sent (a COPY runs only as a
                // pipeline's last step): the statement alone, uncounted.
                return try connection.query(sql, parameters)
            }
        }
    }

    func tallyRelations() throws -> CommitTally.Relations {
        if let known = knownTallyRelations { return known }
        let relations = try CommitTally.relations(on: connection)
        knownTallyRelations = relations
        return relations
    }

    /// Runs `body`'s reads on one snapshot: outside a transaction in a
    /// `REPEATABLE READ READ ONLY` one (so that several statements see the
    /// same commits, as SQLite's read transaction does); inside one, in it.
    public func snapshot<T>(_ body: () throws -> T) throws -> T {
        guard depth == 0 else { return try body() }
        try reconnectIfLost()
        try connection.simpleQuery("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        depth = 1
        defer {
            depth = 0
            if connection.transactionStatus != .idle { _ = try? connection.simpleQuery("COMMIT") }
        }
        return try body()
    }

    /// A shell chunk or a `--max-changes` run (``DatabaseSession/scope``):
    /// one transaction, each statement under a savepoint of its own,
    /// measured by the server's counters (what failed statements caught
    /// with `pcall` did left out). Before it commits, the limit is checked
    /// and `gate` asked with the transaction open: it holds only the rows
    /// it touched, and the question waits at most its own timeout. Inside
    /// a dry run it is a savepoint of the dry run's transaction, rolled
    /// back with it.
    public func scope<T>(_ kind: ScopeKind, records: Bool, changeLimit: Int?, gate: CommitGate?,
                         _ body: () throws -> T) throws -> (T, ScopeOutcome) {
        let outer = (isInChunk, isInRunScope)
        isInChunk = kind == .chunk
        isInRunScope = kind == .run
        defer { (isInChunk, isInRunScope) = outer }
        var outcome = ScopeOutcome()
        let what = kind == .chunk ? "the chunk" : "the run"
        if depth > 0 {
            // A chunk of the shell's dry run (one transaction for the
            // session): a savepoint, capped as the real chunk would be.
            let countedBefore = countedInDryRun
            do {
                let result = try plainTransaction {
                    let before = try readMeasure()
                    let schema = try PostgresSchemaSnapshot(connection)
                    let result = try body()
                    let after = try readMeasure()
                    let difference = try schemaDifference(since: schema, pending: after.last, always: true)
                    outcome.summary.tables = after.changed.since(before.changed)
                    outcome.summary.tables.add(difference.droppedRows)
                    outcome.summary.tables.add(countedInDryRun.tables.since(countedBefore.tables))
                    outcome.summary.schemaChanges = difference.changes
                    if let changeLimit {
                        try TooManyChanges.check(outcome.summary, limit: changeLimit, allowSchemaChanges: allowsSchemaChanges, what: what)
                    }
                    return result
                }
                return (result, outcome)
            } catch {
                // Rolled back to its savepoint: what it counted goes too.
                countedInDryRun = countedBefore
                throw error
            }
        }
        if let changeLimit {
            // The cap holds for what the script commits through other
            // connections meanwhile (jobs.*) too.
            scopeCap = (changeLimit, what)
            writesElsewhere.limit(changeLimit, what: what) { [unowned self] in try self.readMeasure().changed }
        }
        defer {
            if changeLimit != nil {
                scopeCap = nil
                writesElsewhere.lift()
            }
        }
        let (result, changed, committed) = try measuredTransaction(body, watchesSchema: true) { summary in
            outcome.summary = summary
            if let changeLimit {
                let kept = writesElsewhere.keptUnderTheCap
                var total = summary
                total.tables.add(kept)
                try TooManyChanges.check(total, limit: changeLimit, allowSchemaChanges: allowsSchemaChanges, what: what, kept: kept)
            }
            if let gate, gate.needsAnswer(outcome.summary), !gate.ask(outcome.summary) {
                outcome.declined = true
                return false
            }
            return true
        }
        outcome.summary.tables = changed
        guard committed else { return (result, outcome) }
        outcome.committed = true
        if !outcome.summary.isEmpty { outcome.notRecorded = Self.undoRefusal }
        if countsCommits && !options.readOnly { self.committed.add(changed) }
        return (result, outcome)
    }

    /// The open measured transaction's readings, read again now.
    func readMeasure() throws -> Measure {
        guard var current = measure else { return Measure(first: [:]) }
        let relations = try tallyRelations()
        current.read(CommitTally.counts(try connection.query(CommitTally.reading, [.text(relations.oids)]), relations))
        measure = current
        return current
    }

    /// Runs `body` in one transaction that is rolled back at the end, and
    /// reports what it would have changed, table by table.
    public func dryRun<T>(_ body: () throws -> T) throws -> (T, ChangeSummary) {
        guard depth == 0 else { throw PostgresStoreError.inTransaction("a dry run") }
        try reconnectIfLost()
        statementCount += 1
        // Read-only, it has no guard of its own against PREPARE TRANSACTION.
        let first = try CommitTally.begin(options.readOnly ? "BEGIN READ ONLY" : "BEGIN", on: connection,
                                          relations: tallyRelations(), guardedBy: options.readOnly ? CommitGuard.declare : nil)
        if options.readOnly { commitGuardDepth = 1 }
        measure = Measure(first: first)
        if !options.readOnly {
            do {
                try connection.simpleQuery(Self.dryRunGuard)
            } catch let error as PostgresError {
                _ = try? connection.simpleQuery("ROLLBACK")
                measure = nil
                throw PostgresStoreError.dryRunGuard(error.message)
            }
        }
        depth = 1
        dryRunning = true
        defer {
            discardDeferred()
            depth = 0
            dryRunning = false
            measure = nil
            endedOutermost()
            if connection.transactionStatus != .idle { _ = try? connection.simpleQuery("ROLLBACK") }
        }
        defer { countedInDryRun = CountedInsteadOfChanged() }
        let schema = try watchSchema(true)
        let result = try body()
        try flushDeferred()
        let measured = try readMeasure()
        let difference = try schemaDifference(since: schema, pending: measured.last)
        var summary = ChangeSummary()
        summary.tables = measured.changed
        summary.tables.add(difference.droppedRows)
        summary.tables.add(countedInDryRun.tables)
        summary.schemaChanges = difference.changes
        return (result, summary)
    }

    public var isDryRun: Bool { dryRunning }

    /// What the dry run's operations counted instead of changing
    /// (telemetry.cleanup, as on SQLite: ``CountedInsteadOfChanged``), for
    /// its summary; forgotten as the dry run ends.
    var countedInDryRun = CountedInsteadOfChanged()

    /// What makes a dry run's transaction one the server refuses to commit,
    /// whatever the script sends (`COMMIT`, `END`, in any spelling, in a
    /// script of several statements): a deferred constraint trigger with a
    /// row to check at commit, whose function, the built-in
    /// `tsvector_update_trigger`, always fails when fired after the row
    /// (it is meant to run before). A COMMIT then fails and rolls the
    /// whole dry run back. The trigger's function is the server's own (a
    /// script cannot replace it), and while its check is pending the server
    /// refuses `ALTER TABLE … DISABLE TRIGGER`, `DROP TABLE` and
    /// `DISCARD TEMP`; `SET CONSTRAINTS ALL IMMEDIATE` runs the check at
    /// once, which fails. All of it is made inside the dry run's
    /// transaction, so its rollback leaves nothing behind. (Only a script
    /// that drops this trigger by name gets past it.) `--read-only` needs
    /// none: a read-only transaction has nothing to commit.
    static let dryRunGuard = """
        CREATE TEMPORARY TABLE opsh_dry_run (note text);
        CREATE CONSTRAINT TRIGGER opsh_dry_run AFTER INSERT ON pg_temp.opsh_dry_run
          DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
          EXECUTE FUNCTION pg_catalog.tsvector_update_trigger(note, 'pg_catalog.simple', note);
        INSERT INTO pg_temp.opsh_dry_run VALUES ('opsh --dry-run: this transaction is never committed');
        """

    /// Whether `error` is the server's `lock_timeout` running out (55P03),
    /// as the server says it or as ``execute(_:_:)`` reports it.
    public static func isLockTimeout(_ error: any Error) -> Bool {
        if case .locked? = error as? PostgresStoreError { return true }
        return (error as? PostgresError)?.code == "55P03"
    }

    /// Whether a shell chunk's transaction is open (``chunk(_:)``).
    public private(set) var isInChunk = false
    /// Whether a `--max-changes` run's transaction is open (``scope``).
    public private(set) var isInRunScope = false
    /// A shell chunk or a `--max-changes` run: one transaction of opsh's
    /// until it ends, at ``depth`` 1.
    public var isInScope: Bool { isInChunk || isInRunScope }
    /// The cap of the scope open now (`--max-changes`), for what changes the
    /// schema before it runs (``refuseSchemaChange(_:)``).
    var scopeCap: (limit: Int, what: String)?

    /// Whether the open transaction has written (the server gave it a
    /// transaction id, which it does at the first write or row lock).
    public func transactionHasWritten() throws -> Bool {
        guard depth > 0 else { return false }
        return try connection.query("SELECT pg_catalog.txid_current_if_assigned() IS NOT NULL").scalar == .bool(true)
    }

    /// Whether a shell chunk is open and has not written yet (not in a dry
    /// run): an operation that commits batch by batch runs outside it.
    public func isInUnwrittenChunk() throws -> Bool {
        guard isInChunk, depth == 1, !isDryRun else { return false }
        return try !transactionHasWritten()
    }

    /// Whether a statement's command tag says it changed the schema
    /// (a Lua migration's `ALTER TABLE … ADD COLUMN`).
    static func changesSchema(_ tag: String) -> Bool {
        tag.hasPrefix("ALTER") || tag.hasPrefix("CREATE") || tag.hasPrefix("DROP") || tag.hasPrefix("COMMENT")
    }

    // MARK: Values

    static func parameter(_ value: StoreValue) -> PostgresValue {
        switch value {
        case .null, .array, .object: .null
        case let .integer(number): .integer(number)
        case let .real(number): .double(number)
        case let .text(text): .text(text)
        case let .blob(bytes): .bytes(bytes)
        }
    }

    static func value(_ value: PostgresValue) -> StoreValue {
        switch value {
        case .null: .null
        case let .integer(number): .integer(number)
        case let .double(number): .real(number)
        case let .text(text): .text(text)
        case let .bytes(bytes): .blob(bytes)
        case let .bool(flag): .integer(flag ? 1 : 0)
        }
    }

    /// A numeric's text as a number, as SQLite computes sums and averages:
    /// an integer when written without a decimal point and within 64 bits
    /// (`sum(bigint)`), else a double (`avg`: "2.5000000000000000");
    /// `NaN` stays text.
    static func number(_ text: String) -> StoreValue {
        if let integer = Int64(text) { return .integer(integer) }
        if let double = Double(text), double.isFinite { return .real(double) }
        return .text(text)
    }

    static func convert(_ result: PostgresResult) -> Result {
        Result(columns: result.columns.map { PostgresNames.rowKey($0.name) },
               raw: result.rows,
               numericColumns: Set(result.columns.indices.filter { result.columns[$0].typeOID == PostgresType.numeric }),
               changes: result.affectedRows)
    }
}

/// What opening or using a PostgreSQL database refuses.
public enum PostgresStoreError: Error, Equatable, CustomStringConvertible, Sendable {
    case notOpsh(String, tables: Int)
    case empty(String)
    /// More than one schema on the session's path holds opsh's tables.
    case ambiguousSchema(String, schemas: [String])
    /// A schema off the path the database's or role's setting gives
    /// holds opsh's tables.
    case pathSetAway(String, path: String, elsewhere: [String])
    case newerSchema(String, unknown: [String])
    case inTransaction(String)
    case statement(String)
    case notAQuery(String)
    /// A malformed URL (a usage error): PostgresWire's message.
    case invalidURL(String)
    /// The server closed the session's connection: in a transaction, which
    /// the server rolled back; or connecting again failed.
    case connectionLost(String)
    /// Connecting took longer than `--timeout`.
    case connectTimedOut(String, seconds: Double, reason: String)
    /// Transaction control from a script, refused; it changed nothing
    /// (``TransactionControl``). `server`: what the server said, if it
    /// refused it too.
    case transactionControl(String, server: String?)
    /// Transaction control that ended opsh's transaction or broke its
    /// savepoints: rolled back whole, nothing of it committed. `reason`:
    /// the server's, when it refused to commit or prepare it.
    case transactionControlRolledBack(String, reason: String?)
    /// A statement in a transaction that transaction control ended.
    case transactionEnded
    /// A COMMIT from a script that went through, after a statement closed
    /// the ``CommitGuard`` by name.
    case transactionCommittedPastTheGuard(String)
    /// opsh's own commit found its guard closed by a statement: rolled back.
    case commitGuardClosed
    /// `--read-only`: the statement wrote what the server's read-only
    /// transaction lets through (it was given a transaction id).
    case readOnlyWrote(String)
    /// `--read-only`: a transaction whose statements wrote so.
    case readOnlyTransactionWrote
    /// `--read-only`: NOTIFY, dropped with the transaction's rollback.
    case readOnlyNotify(String)
    /// `--read-only` or `--dry-run` on a database with an extension that
    /// writes through connections of its own (dblink).
    case connectsOnItsOwn(extensions: [String], flag: String)
    /// A lock the statement waited for stayed held past the lock timeout
    /// (`--busy-timeout`), or NOWAIT found it held: SQLSTATE 55P03.
    case locked(String, server: String, busyTimeout: Double?, holders: String?)
    /// A statement tried to commit a dry run; the server refused, and
    /// rolled the dry run back whole.
    case dryRunCommitRefused(String)
    /// The dry run's transaction is gone (``dryRunCommitRefused(_:)``).
    case dryRunEnded
    /// This role may not make the dry run's guard (a temporary table).
    case dryRunGuard(String)
    /// `--sandbox`: the statement wrote the catalog or a scheme's build
    /// command; rolled back (``PostgresSandbox``). The reason, and the SQL.
    case sandboxRefused(String, sql: String)
    /// A write ``PostgresDatabase/send(_:_:origin:)`` deferred failed when
    /// it ran: where the script sent it (`file:line:`), and the server's
    /// error with its SQL. It and every write sent after it were dropped.
    case deferredWriteFailed(origin: String?, failure: String)

    public var description: String {
        switch self {
        case let .notOpsh(label, tables):
            "\(label) has \(tables) table(s) but no opsh schema (no opsh_migrations table); opsh creates its schema only in an empty database; nothing was changed"
        case let .ambiguousSchema(label, schemas):
            "\(label): opsh's tables are in \(schemas.count) schemas on the session's search_path (\(schemas.joined(separator: ", "))); the first would be used, whoever made it: name the one to use in the connection string (options=-csearch_path%3D\(schemas.last!)) or in PGOPTIONS ('-c search_path=\(schemas.last!)'); nothing was changed"
        case let .pathSetAway(label, path, elsewhere):
            "\(label): opsh's tables are also in \(elsewhere.joined(separator: ", ")), off the session's search_path (\(path)), which ALTER DATABASE or ALTER ROLE set for every session (any session of the role may, a script's too); the path's would be used: name the one to use in the connection string (options=-csearch_path%3D\(elsewhere.last!)) or in PGOPTIONS ('-c search_path=\(elsewhere.last!)'); nothing was changed"
        case let .empty(label):
            "\(label) has no opsh schema: pass --create to create it in this (empty) database; a read-only open never creates one"
        case let .newerSchema(label, unknown):
            "\(label) was migrated by a newer opsh (unknown migrations: \(unknown.joined(separator: ", "))); upgrade opsh to open it; nothing was changed"
        case let .inTransaction(what):
            "\(what) cannot run inside a transaction"
        case let .statement(message):
            message
        case let .notAQuery(sql):
            "watch observes queries only (SELECT …): \(sql)"
        case let .invalidURL(message):
            message
        case let .connectionLost(message):
            message
        case let .connectTimedOut(label, seconds, reason):
            "timed out after \(Self.seconds(seconds)) s (--timeout) connecting to \(label): \(reason)"
        case let .transactionControl(sql, server):
            "\(TransactionGuard.refusal)\(server.map { " (the server: \($0))" } ?? ""): \(sql)"
        case let .transactionControlRolledBack(sql, reason):
            "\(TransactionGuard.refusal); this statement would have ended opsh's transaction, so it was rolled back whole and nothing of it was committed\(reason.map { " (the server: \($0))" } ?? ""): \(sql)"
        case .transactionEnded:
            "opsh's transaction was rolled back when a statement tried to end it (transaction control is not run through db); nothing of it was committed, and nothing more runs in it: let db.transaction or the chunk end"
        case let .transactionCommittedPastTheGuard(sql):
            "\(TransactionGuard.refusal); this statement committed opsh's transaction, because a statement had closed the cursor \(CommitGuard.name) that keeps it from committing: what the transaction did before it is committed: \(sql)"
        case .commitGuardClosed:
            "a statement closed the cursor \(CommitGuard.name) that keeps opsh's transaction from being committed by any statement but opsh's: the transaction was rolled back, nothing of it committed"
        case let .readOnlyWrote(sql):
            "--read-only: the statement wrote to the database (the server gave its transaction an id: a large object, say, which PostgreSQL's read-only transactions let through); opsh rolled it back, nothing was kept: \(sql)"
        case .readOnlyTransactionWrote:
            "--read-only: a statement in this transaction wrote to the database (the server gave the transaction an id: a large object, say, which PostgreSQL's read-only transactions let through); opsh rolled it back, nothing was kept"
        case let .readOnlyNotify(sql):
            "--read-only: NOTIFY is not sent (a read-only transaction of PostgreSQL's would send it; opsh rolls every read-only transaction back, so nothing is): \(sql)"
        case let .connectsOnItsOwn(extensions, flag):
            "\(flag) cannot hold back what the \(extensions.joined(separator: ", ")) extension does: it is installed in this database and this role may run its functions, which write through a connection of their own (dblink_exec), outside this session's transaction, where \(flag == "--dry-run" ? "the dry run's rollback" : flag == "--sandbox" ? "the sandbox's check of each statement" : "the server's read-only transaction") does not reach; nothing was run: run as a role without EXECUTE on its functions, or without \(flag)"
        case let .locked(sql, server, busyTimeout, holders):
            "database is locked: \(busyTimeout.map { "the statement waited --busy-timeout's \(Self.seconds($0)) s (PostgreSQL's lock_timeout) for a lock" } ?? "a lock the statement needs is held")\(holders.map { " held by " + $0 } ?? "") (the server: \(server)): \(sql)"
        case let .dryRunCommitRefused(sql):
            "--dry-run: the statement tried to commit the dry run; the server refused, and rolled back everything the dry run did (nothing was committed): \(sql)"
        case .dryRunEnded:
            "--dry-run: the dry run's transaction was rolled back when a statement tried to commit it; nothing more runs in it (start again with --dry-run)"
        case let .sandboxRefused(reason, sql):
            "\(reason); the statement was rolled back: \(sql)"
        case let .deferredWriteFailed(origin, failure):
            "the write sent at \(origin ?? "an earlier call") failed: \(failure); it and the writes sent after it were not kept"
        case let .dryRunGuard(reason):
            "--dry-run on PostgreSQL makes its transaction one the server refuses to commit, with a temporary table, and this role may not create one (\(reason)): GRANT TEMPORARY ON DATABASE to it, or run without --dry-run"
        }
    }

    /// "2", "0.5".
    static func seconds(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int(value)) : String(value)
    }
}

extension ChangeSummary {
    /// What changed since `earlier` (a reading of the same counters).
    func since(_ earlier: ChangeSummary) -> ChangeSummary {
        var changed = ChangeSummary()
        for (table, counts) in tables {
            let before = earlier.tables[table] ?? TableChangeCounts()
            let delta = TableChangeCounts(inserted: counts.inserted - before.inserted,
                                          updated: counts.updated - before.updated,
                                          deleted: counts.deleted - before.deleted)
            if delta.inserted + delta.updated + delta.deleted > 0 { changed.tables[table] = delta }
        }
        return changed
    }
}
