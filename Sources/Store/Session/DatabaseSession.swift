import Foundation

/// The engine under a session.
public enum DatabaseEngine: String, Sendable, CaseIterable {
    case sqlite
    case postgresql

    /// The engine's name in messages ("SQLite", "PostgreSQL").
    public var name: String {
        switch self {
        case .sqlite: "SQLite"
        case .postgresql: "PostgreSQL"
        }
    }
}

/// A session's database, whatever the engine: the one seam every route
/// of the shell and the batch modes goes through (ARCHITECTURE.md, "The
/// session seam"). SQLite's (``SessionDatabase``) and PostgreSQL's
/// (``PostgresDatabase``) implement it; a mode, the REPL and the Lua
/// bindings above it never ask which engine they have, except to say it.
///
/// What it owns, so that each promise is kept in one place per engine:
/// transactions and savepoints, the dry run, a chunk (a transaction with
/// its count of changed rows and its question before committing), the
/// rows committed per table (the audit trail's counts), where the audit
/// row goes, the catalog (tables, columns, schema text, locks), and how
/// another thread stops what runs now.
public protocol DatabaseSession: AnyObject {
    var engine: DatabaseEngine { get }
    var dialect: SQLDialect { get }
    /// The database for messages: a file's path, or a URL without its
    /// password.
    var label: String { get }
    /// A short name for the prompt: the file's name, or the database's.
    var shortName: String { get }
    /// More to say in the shell's banner (the server's version), or nil.
    var serverDescription: String? { get }
    var isReadOnly: Bool { get }
    /// The built-in migrations the database lacks (opsh never applies
    /// them to an existing database on its own).
    var pendingMigrations: [String] { get }
    /// Whether opening created the database (`--create` on a new file or
    /// an empty database): its creation is not a use worth an audit row.
    var createdAtOpening: Bool { get }

    // MARK: Transactions

    /// Inside `db.transaction`, a dry run, or a chunk that has written.
    var isInTransaction: Bool { get }
    /// Where the open transaction comes from, for refusals.
    var openTransactionName: String { get }
    /// The open transaction migrations cannot run inside, or nil (each
    /// migration runs in a transaction of its own; PostgreSQL's inside a
    /// `--max-changes` run is a savepoint of the run's, counted).
    var transactionRefusingMigrations: String? { get }
    var isDryRun: Bool { get }

    /// Runs `body` in a transaction (a savepoint inside one): it commits
    /// when `body` returns and rolls back when it throws; past
    /// `changeLimit` rows, or after a schema change unless
    /// `allowSchemaChanges` (nil: ``allowsSchemaChanges``), it rolls back
    /// with ``TooManyChanges``.
    func transaction<T>(changeLimit: Int?, allowSchemaChanges: Bool?, _ body: () throws -> T) throws -> T
    /// `--allow-schema-changes`: a schema change is not over every limit.
    var allowsSchemaChanges: Bool { get set }
    /// Runs `body` in one transaction that is rolled back whatever happens,
    /// and says what it would have changed.
    func dryRun<T>(_ body: () throws -> T) throws -> (T, ChangeSummary)
    /// A shell chunk or a whole `--max-changes` run: one transaction, which
    /// commits when `body` returns — after `gate` said yes, when it asks —
    /// and rolls back when it throws, the gate says no, or more rows than
    /// `changeLimit` changed. `records`: keep what it committed for
    /// ``apply(_:refusal:)`` (undo), where the engine can.
    func scope<T>(_ kind: ScopeKind, records: Bool, changeLimit: Int?, gate: CommitGate?,
                  _ body: () throws -> T) throws -> (T, ScopeOutcome)
    /// Whether the shell's `--dry-run` is one transaction for the whole
    /// session (PostgreSQL: it holds only the rows it touched), rather than
    /// a chunk at a time (``replayScope(carrying:_:)``: SQLite, where an open
    /// write transaction would hold the database's one write lock).
    var dryRunSpansTheSession: Bool { get }
    /// A chunk of the shell's `--dry-run` a chunk at a time: it re-applies
    /// the changes `carried` from the earlier chunks, runs `body`, and is
    /// rolled back, keeping what the session changed so far. Past
    /// `changeLimit` rows it fails with ``TooManyChanges``, as the real
    /// chunk would.
    func replayScope<T>(carrying carried: Changeset?, changeLimit: Int?, _ body: () throws -> T)
        throws -> (result: T, carried: Changeset?, summary: ChangeSummary, notCarried: String?)
    /// What the dry run's operations counted instead of changing so far
    /// (telemetry.cleanup's rows: ``CountedInsteadOfChanged``), which no
    /// changeset carries: the replayed dry run's summary adds them.
    var rowsCountedInsteadOfChanged: TableChanges { get }
    /// The session works on a throwaway copy (the shell's `--dry-run` on a
    /// private copy of an SQLite file): `opsh.dryRun()` says true.
    func markAsDryRun()
    /// Why this engine cannot take a committed chunk back, or nil when it
    /// can (``ScopeOutcome/changeset``).
    var undoUnavailable: String? { get }
    /// Applies `changeset` (an undo) as a write of the session: all of it,
    /// or nothing and ``ChangedSince``.
    func apply(_ changeset: Changeset, refusal: String) throws -> ChangeSummary

    // MARK: The audit trail

    /// From now on, count the rows each committed transaction changes
    /// (``committedChanges``): the audit trail's counts. `exactly`: leave
    /// out what a statement that failed (and was caught) wrote before it
    /// failed, at a cost per statement where the engine has one
    /// (PostgreSQL: a reading of the server's counters; the shell pays it,
    /// `opsh run` does not).
    func startCountingCommits(exactly: Bool)
    /// Rows changed per table by what the session committed since it
    /// began counting.
    var committedChanges: TableChanges { get }
    /// Where this session's audit rows go; `busyTimeout`: how long the row
    /// of a run that changed data waits for a lock.
    func auditDestination(busyTimeout: Double) -> any AuditDestination
    /// Whether the database asks every run for a reason.
    func requiresReason() throws -> Bool
    /// Called right before a shell chunk's transaction commits, with what
    /// it changed and a way to write in that transaction: the audit trail
    /// writes the chunk's row there, so that no commit is left without its
    /// row (ARCHITECTURE.md, "Audit and lock-owner records"). It must not
    /// throw: the commit goes on.
    var beforeChunkCommit: ((ChunkCommit) -> Void)? { get set }

    // MARK: What the shell shows

    var catalog: any DatabaseCatalog { get }
    /// Why writes are refused now (the database file was replaced under
    /// opsh), or nil.
    var writeProblem: String? { get }
    /// Why the last attempt to connect failed, until one succeeded (a
    /// database opened on first use: a script's error that carries this
    /// was the database's refusal).
    var connectionFailure: String? { get }
    /// Sentences that help with an error: a missing migration, who holds
    /// the lock the statement waited for.
    func hints(for message: String) -> [String]
    /// Says, through `say`, once a statement has waited `seconds` for a
    /// lock, that it waits and who holds the lock (the shell: a write that
    /// waits is not silent until the busy timeout).
    func announceLockWaits(after seconds: TimeInterval, _ say: @escaping @Sendable (String) -> Void)
    /// Where the notes the session gives on its own go from now on (the
    /// connection lost and made again; a `db.rows` loop that keeps its
    /// snapshot): the modes' console, which `--quiet` silences. Until
    /// told, each is a line on stderr (``noteOnStandardError``).
    func sayNotes(_ say: @escaping @Sendable (String) -> Void)

    // MARK: What the Lua bindings run on

    /// How rows reach Lua: the engine's one row path.
    var rowPath: RowPath { get }
    /// Runs one call's reads on one snapshot (in the open transaction, when
    /// one is); Store's rules run on the connection; errors name `table`.
    func read<T>(table: String, _ body: (any RepositoryConnection) throws -> T) throws -> T
    /// Runs one call's writes atomically (a savepoint in the open
    /// transaction, else a transaction of its own); errors name `table`.
    func write<T>(table: String, _ body: (any RepositoryConnection) throws -> T) throws -> T
    /// Runs one call whose only write is one statement (its others read):
    /// the engine makes a statement atomic, so no savepoint or
    /// transaction of its own (each a statement, on PostgreSQL a round
    /// trip, per call); errors name `table` as ``write(table:_:)``'s.
    func writeOneStatement<T>(table: String, _ body: (any RepositoryConnection) throws -> T) throws -> T
    /// `db.copy`: rows into one table in one write, all or none, by the
    /// engine's bulk path (``CopyRequest``); the rows written.
    func copy(_ request: CopyRequest) throws -> Int
    /// Inserts telemetry events in one atomic call, by the engine's bulk path.
    func insertTelemetry(_ events: [TelemetryRepository.Event]) throws
    /// `.dump [TABLE]`: the database or one table as SQL text, on one
    /// snapshot (``SQLDump``), given to `write` piece by piece; refused
    /// with the engine's own tool where opsh does not write it.
    func dump(table: String?, _ write: (String) throws -> Void) throws
    /// An export's reads, on one snapshot of the database.
    func exportSnapshot<T>(_ body: (any RepositoryConnection) throws -> T) throws -> T
    /// Imports a document: checked first, then written in one write.
    func importDocument(_ text: String, options: Transfer.ImportOptions) throws -> Transfer.Summary

    /// The job manager's view of the database (what `opsh runner` uses too).
    func makeBuildStore() throws -> any BuildStore
    /// Where builds check out when `jobs.configure` did not say.
    var defaultWorkspaceRoot: String { get }
    /// Why `jobs.<name>` cannot run in the transaction open now (the job
    /// manager writes builds in transactions of its own, on connections
    /// that cannot see this one's rows), or nil when it can. The refusals
    /// every engine shares are ``jobsRefusal(_:writes:)``'s.
    func jobsRefusalInTransaction(_ name: String) throws -> String?

    /// The tables `sql` reads with these values (a statement that writes
    /// is refused): what `watch(sql)` observes.
    func tablesRead(by sql: String, arguments: QueryArguments) throws -> Set<String>
    /// Calls `onChange` (on another thread) after each commit that changed
    /// one of `tables`, whoever made it.
    func observe(_ tables: Set<String>, onChange: @escaping @Sendable () -> Void) throws -> StorageCancellable
    /// Ends the read snapshot a burst of reads shares (before waiting,
    /// and before reading what another connection of opsh's wrote).
    func releaseReadSnapshot()

    /// The built-in and `external` migrations and whether each is applied.
    func migrationStatus(_ external: [ExternalMigration]) throws -> [ExternalMigrations.Status]
    /// Applies the pending migrations up to `target`, each in a transaction.
    func migrate(_ external: [ExternalMigration], upTo target: String?) throws -> [String]
    /// Runs a Lua migration's body with the session's calls on the
    /// migrating connection (SQLite's migrator's; nil where the session's
    /// own connection migrates).
    func runMigration(on migrating: StoreDatabase?, _ body: () throws -> Void) throws

    /// What the engine's maintenance offers (backup, check, statistics,
    /// vacuum, checkpoint, telemetry cleanup).
    var maintenance: any SessionMaintenance { get }

    // MARK: Stopping and leaving

    /// For another thread (Ctrl-C, `--timeout`, SIGTERM): stops the
    /// statement that runs now.
    var interruptRunning: @Sendable () -> Void { get }
    /// Statements the calling thread starts stop while `*flag` (an
    /// `atomic_int`: the Lua state's interrupt) is set, so that an
    /// interrupt landing before a statement began is not lost; nil: no
    /// longer (before the flag goes away).
    func stopStatements(whenSet flag: UnsafeRawPointer?)
    /// What the session does before the process exits (SQLite: a passive
    /// checkpoint, so that a copy of the file holds what was committed).
    func close()
}

/// What a scope is: a chunk typed at the prompt, or a whole run.
public enum ScopeKind: Sendable { case chunk, run }

/// Decides, before a scope commits, whether it may (the shell's
/// confirmation): `needsAnswer` says whether to ask about these changes,
/// `ask` asks (true: commit).
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
    public init() {}
}

/// A shell chunk about to commit (``DatabaseSession/beforeChunkCommit``).
public struct ChunkCommit {
    /// What the chunk changed.
    public let changes: TableChanges
    /// The chunk's connection, inside its transaction.
    public let connection: any RepositoryConnection
    /// Runs `body` in a savepoint of the chunk's transaction (on
    /// PostgreSQL with names resolved in `pg_catalog` only).
    public let savepoint: (() throws -> AuditRowStamp) throws -> AuditRowStamp
}

/// Where an audit row goes: the engine's side of the trail.
public protocol AuditDestination {
    /// Whether the run used the database at all (a one-liner that never
    /// touched it is not recorded).
    var wasUsed: Bool { get }
    /// The trail's own connection: the row is never written on the
    /// script's.
    var trail: AuditConnection { get }
}

/// The database's tables, columns and schema text, and who holds its
/// locks: what `.tables`, `.schema`, `.locks` and the shell's completion
/// show, on either engine.
public protocol DatabaseCatalog {
    /// Tables and views, by name.
    func tables() throws -> [String]
    /// A table's columns, in order.
    func columns(of table: String) throws -> [String]
    /// The schema of one table (or of all, nil) as the engine's own tool
    /// shows it: SQLite's CREATE statements, PostgreSQL's `\d`.
    func schemaText(of table: String?) throws -> [String]
    /// Who holds locks on the database now and who waits, as sentences;
    /// empty when nobody does.
    func locks() throws -> [String]
}

extension DatabaseCatalog {
    /// Table names and their columns (completion).
    public func schema() -> [String: [String]] {
        var result: [String: [String]] = [:]
        for table in (try? tables()) ?? [] { result[table] = (try? columns(of: table)) ?? [] }
        return result
    }
}

/// A session's maintenance, whatever the engine: what `backup`, `check`,
/// `stats`, `vacuum`, `checkpoint` and `telemetry.cleanup` run. Results
/// are records (``StoreValue/object(_:)``) with each engine's fields, as
/// README documents them.
public protocol SessionMaintenance {
    /// The session maintained: its dry run, read-only and transaction.
    var maintained: any DatabaseSession { get }
    /// What `vacuum` or `checkpoint` would have done, said when a dry run
    /// skips it.
    func dryRunDetail(_ name: String) -> String
    /// Why `name` (vacuum, checkpoint, backup), which needs a connection of
    /// its own, cannot run in the transaction open now, or nil.
    func transactionRefusal(_ name: String) throws -> String?
    /// Whether `telemetry.cleanup` may run although a transaction is open
    /// (PostgreSQL: at a prompt whose chunk has not written, on a session
    /// of its own; in a `--max-changes` run, as savepoints of the run's).
    var cleanupIsAllowedInTheOpenTransaction: Bool { get }
    /// `check()`: `ok`, `problems`, and `foreignKeys` (rows).
    func check() throws -> (ok: Bool, problems: [String], foreignKeys: [[String: StoreValue]])
    /// `stats()`: the engine's figures, and a row a table (`table`, `rows`, `bytes`).
    func statistics() throws -> (fields: [(String, StoreValue)], tables: [[String: StoreValue]])
    /// `vacuum()`'s result.
    func vacuum() throws -> [(String, StoreValue)]
    /// `checkpoint(mode)`'s result.
    func checkpoint(_ mode: CheckpointMode) throws -> [(String, StoreValue)]
    /// Where `backup(path)` writes, and the kind of file it is.
    func backupTarget(for path: String) -> (path: String, kind: BackupKind)
    /// Whether `path` is the session's database (never rotated away).
    func isDatabaseFile(_ path: String) -> Bool
    /// Writes a backup at `path` (a folder gets a dated name); `progress`
    /// sees pages where the engine counts them; `runTool` runs a program
    /// (PostgreSQL's `pg_dump`) to its end.
    func backup(to path: String, overwrite: Bool, progress: @escaping (MaintenanceProgress) -> Void,
                runTool: ToolRunner) throws -> (path: String, pages: Int?)
    /// A note to say before a cleanup at the prompt (it commits per
    /// batch, outside the chunk's transaction), or nil.
    var cleanupNote: String? { get }
    /// Whether each batch commits on its own (not inside a capped run).
    var cleanupCommitsEachBatch: Bool { get }
    func telemetryRetentionDays() throws -> Int?
    func cleanTelemetry(_ cleanup: TelemetryCleanup, shouldStop: () -> Bool,
                        progress: (MaintenanceProgress) -> Void) throws -> TelemetryCleanup.Report
}

/// A session's note before a mode says where notes go
/// (``DatabaseSession/sayNotes(_:)``): `opsh: note: …` on stderr.
public let noteOnStandardError: @Sendable (String) -> Void = { note in
    FileHandle.standardError.write(Data("opsh: note: \(note)\n".utf8))
}

/// Runs a program to its end in exactly the environment given (the
/// caller decides what it inherits), or throws with what it wrote on
/// stderr: how Store's maintenance runs a tool such as `pg_dump` without a
/// process library of its own.
public typealias ToolRunner = (_ executable: String, _ arguments: [String], _ environment: [String: String]) throws -> Void

extension DatabaseSession {
    /// Why `jobs.<name>` cannot run now, or nil when it can: what writes is
    /// refused under `--read-only`, everything in a dry run (builds are
    /// written outside its transaction, so they could not be rolled back),
    /// then what the engine says of the open transaction.
    public func jobsRefusal(_ name: String, writes: Bool) throws -> String? {
        if isReadOnly, writes {
            return "jobs.\(name) is refused with --read-only: it writes builds"
        }
        if isDryRun {
            return "jobs.\(name) is refused in a dry run: builds are written outside its transaction, so they could not be rolled back"
        }
        return try jobsRefusalInTransaction(name)
    }
}

extension SessionMaintenance {
    /// Refuses `name` where it may not run now, or returns false under a
    /// dry run, where it is skipped (said on stderr with `detail`; nil:
    /// what the engine would run). A backup only reads; vacuum and a
    /// checkpoint write the database's files, so `--read-only` refuses
    /// them (SQLite's read-only file would say only "disk I/O error", and
    /// PostgreSQL allows both in a read-only transaction).
    public func mayRunOnItsOwn(_ name: String, detail: String?) throws -> Bool {
        if maintained.isDryRun {
            FileHandle.standardError.write(Data("opsh: dry run: \(name) skipped (\(detail ?? dryRunDetail(name)))\n".utf8))
            return false
        }
        if maintained.isReadOnly, name != "backup" {
            throw StoreError.refused(reason: "\(name) is refused under --read-only: it writes to the database's files")
        }
        if let refusal = try transactionRefusal(name) { throw StoreError.refused(reason: refusal) }
        return true
    }

    /// Why `telemetry.cleanup` cannot run now, or nil: it commits each
    /// batch on its own, so not inside a transaction (a dry run's counts
    /// its deletes and rolls them back).
    public func cleanupRefusal() -> String? {
        guard maintained.isInTransaction, !maintained.isDryRun, !cleanupIsAllowedInTheOpenTransaction else { return nil }
        return "telemetry.cleanup cannot run inside \(maintained.openTransactionName): it commits each batch on its own so that other writers are not blocked; call it outside the transaction"
    }
}
