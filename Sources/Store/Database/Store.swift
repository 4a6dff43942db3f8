import CSQLiteStore
import Foundation
import PostgresWire
import GRDB
import Synchronization

/// opsh's storage core: one database file, migrated, observed, maintained.
///
/// Open it with ``Store/open(path:options:)``, or with
/// ``Store/prepare(path:options:)`` to connect on first use (the batch
/// modes: a script that never touches the database starts without a
/// connection). Everything else in the core
/// reaches the database through ``client`` (the seed-002 seam); the
/// repositories (``Store/projects`` …) are namespaces of operations that
/// take a `Database`, GRDB-style, so they compose inside one transaction.
public final class Store: Sendable {
    /// The database file, or nil in memory.
    public let path: String?
    public let options: StoreOptions
    /// The seam every caller goes through.
    public let client: StorageClient
    /// Polls for commits of other processes; nil in memory.
    public let externalChanges: ExternalChangeMonitor?
    /// The GRDB writer: a `DatabasePool` for a file, a `DatabaseQueue` in
    /// memory. Maintenance (backup, vacuum) needs it directly.
    ///
    /// A store from ``Store/prepare(path:options:)`` connects on the first
    /// call: it checks the applied migrations, opens the pool and migrates
    /// (see ``connect()``), and throws what that throws.
    public var writer: any DatabaseWriter {
        get throws { try connection.writer() }
    }

    /// How every connection of this store waits for locks (the busy
    /// timeout, and when a wait is abandoned).
    public let lockWait: LockWait

    private let connection: LazyConnection
    private let pendingBox: PendingMigrations

    /// Rows committed per table on the writer since the store connected
    /// (the audit trail's counts): a transaction observer installed
    /// before anything else uses the writer.
    public let committedChanges = ChangeTally()

    /// Query keys read from Swift (``value(of:)``), made at the first read.
    private let keyReaderSlot = Mutex<KeyReader?>(nil)

    /// The key reader, made at first use; nil in memory (no second
    /// connection sees an in-memory database).
    func keyReader() throws -> KeyReader? {
        guard let path else { return nil }
        return try keyReaderSlot.withLock { slot in
            if let slot { return slot }
            let made = try KeyReader(store: self, path: path)
            slot = made
            return made
        }
    }

    /// Built-in migrations this existing database has not applied, found
    /// when the store connected: they are not applied implicitly (that
    /// takes the write lock); `opsh migrate` or `migrate.up()` applies them.
    public var pendingMigrations: [String] { pendingBox.get() }

    /// After a failed statement: when this database lacks migrations and
    /// the error is about a table or column that is not there, the
    /// migrations are why (opsh does not apply them on its own).
    public func missingMigrationHint(for message: String) -> String? {
        guard message.contains("no such table") || message.contains("no such column") || message.contains("has no column named"),
              !pendingMigrations.isEmpty else { return nil }
        return "this needs migrations the database lacks (\(pendingMigrations.joined(separator: ", "))): run `opsh migrate` first"
    }

    /// Applies the pending built-in migrations (`opsh migrate`): takes the
    /// write lock like any writer. Returns what was applied.
    @discardableResult
    public func migratePending() throws -> [String] {
        let before = pendingMigrations
        try Self.migrate(try writer)
        pendingBox.set([])
        return before
    }

    private init(path: String?, options: StoreOptions, lockWait: LockWait, connection: LazyConnection,
                 pending: PendingMigrations = PendingMigrations()) {
        self.pendingBox = pending
        self.path = path
        self.options = options
        self.lockWait = lockWait
        self.connection = connection
        self.externalChanges = path.map {
            ExternalChangeMonitor(path: $0, interval: options.externalChangePollInterval)
        }
        self.client = .grdb({ try connection.writer() }, externalChanges: externalChanges, path: path)
        if !options.readOnly {
            let tally = committedChanges
            connection.whenConnected { writer in tally.install(on: writer) }
        }
    }

    /// Opens (and on first use creates and migrates) the database.
    ///
    /// - parameter path: an explicit path; nil resolves `$OPSH_DB`, then the
    ///   XDG data home (see ``DatabaseLocation``).
    /// - throws: ``StoreError`` when the file is not a database, is damaged,
    ///   comes from a newer opsh, or cannot be opened. The file is not
    ///   modified in those cases.
    public static func open(path: String? = nil, options: StoreOptions = StoreOptions()) throws -> Store {
        let store = try prepare(path: path, options: options)
        try store.connect()
        return store
    }

    /// Checks what can be checked without SQLite (the file is a database
    /// whose size matches its header, or can be created; its file system
    /// can take writes) and returns a store that connects on first use.
    ///
    /// `opsh -e` and scripts that never touch the database start without
    /// opening a connection, parsing the schema or setting up WAL: most of
    /// opsh's start-up time before this. A missing file is created and
    /// migrated here, as ``open(path:options:)`` does.
    ///
    /// - throws: ``StoreError``, as ``open(path:options:)``, except for what
    ///   only SQLite can tell (a newer schema, damage past the header, a
    ///   lock held past the busy timeout): ``writer``, ``client`` and
    ///   ``connect()`` throw those.
    public static func prepare(path: String? = nil, options: StoreOptions = StoreOptions()) throws -> Store {
        let resolved = DatabaseLocation.resolve(explicitPath: path)
        // A PostgreSQL URL (or keyword/value settings) is not a file name:
        // never an SQLite file made under that name (every command takes
        // such a connection to its PostgreSQL engine before it gets here).
        // Named without its password.
        if resolved.contains("postgresql://") || resolved.contains("postgres://") || PostgresURL.isConnectionString(resolved) {
            let label = (try? PostgresURL(resolved).description) ?? "a PostgreSQL connection"
            throw StoreError.cannotOpen(path: label, detail: "this is a PostgreSQL database, not an SQLite file; nothing was made under that name")
        }
        let verdict = try DatabaseFileInspector.inspect(path: resolved)
        // Refused here rather than at the first write, with the reason.
        let readOnlyFileSystem = ReadOnlyFileSystem.holds(resolved)
        if readOnlyFileSystem && !options.readOnly {
            throw StoreError.cannotOpen(path: resolved, detail: "it is on a read-only file system, so nothing can be written to it; --read-only opens it for reading")
        }
        let openName = readOnlyFileSystem ? ReadOnlyFileSystem.readingName(for: resolved) : resolved
        if verdict == .missing {
            if options.readOnly || !options.createIfMissing {
                throw StoreError.missingDatabase(path: resolved)
            }
            try createParentDirectory(of: resolved)
            try createOwnerOnlyFile(resolved)
        }
        let lockWait = LockWait(timeout: options.busyTimeout)
        let pending = PendingMigrations()
        let connection = LazyConnection {
            // Only a database opsh makes (a new file, or one without any
            // table) is migrated here. An existing one is never migrated
            // implicitly: migrating takes the write lock, and opening must
            // not wait for the backend's writers (ARCHITECTURE.md,
            // decision 8); its pending migrations are reported instead
            // and applied by `opsh migrate` or `migrate.up()`.
            var migratesNow = verdict != .database
            if verdict == .database {
                // Refuse a newer schema before anything writes (a read-write
                // pool would switch the journal to WAL).
                let found = try checkMigrationsReadOnly(path: resolved, openName: openName, options: options, lockWait: lockWait)
                migratesNow = found.isEmpty
                pending.set(found.isEmpty ? [] : StoreMigrations.builtInIdentifiers.filter { !found.applied.contains($0) })
            }
            if !migratesNow {
                let writer = try openWithoutWaiting(openName, path: resolved, options: options, lockWait: lockWait)
                try options.afterConnecting?(writer)
                return LazyConnection.Opened(writer: writer, file: FileIdentity(path: resolved))
            }
            let pool = try openPool(openName, path: resolved, options: options, lockWait: lockWait)
            if !options.readOnly {
                try migrate(pool)
            }
            try options.afterConnecting?(pool)
            return LazyConnection.Opened(writer: pool, file: FileIdentity(path: resolved))
        }
        let store = Store(path: resolved, options: options, lockWait: lockWait, connection: connection, pending: pending)
        // A new file is made a database now: the caller asked for one.
        if verdict != .database {
            try store.connect()
            store.createdAtOpening = true
        }
        return store
    }

    /// Connects now if not yet connected: the migration check, the pool,
    /// the migrations. Does nothing once connected.
    public func connect() throws {
        _ = try connection.writer()
    }

    /// A second writer connection to the same file, configured as the
    /// store's (read-only, foreign keys, lock waits) and opened without a
    /// set-up write: the Lua session holds it for a whole shell chunk,
    /// which must keep nothing else of this process (a build's log writer,
    /// maintenance) waiting; SQLite's write lock is taken only from the
    /// chunk's first write (ARCHITECTURE.md, "Connections, by role").
    public func openSecondWriter() throws -> DatabaseQueue {
        guard let path else {
            throw StoreError.cannotOpen(path: ":memory:", detail: "an in-memory database has no second connection")
        }
        try connect()
        let openName = ReadOnlyFileSystem.holds(path) ? ReadOnlyFileSystem.readingName(for: path) : path
        do {
            let queue = try DatabaseQueue(path: openName, configuration: Self.configuration(options, lockWait: lockWait))
            // The audit's counts see what commits on it too.
            if !options.readOnly { committedChanges.install(on: queue) }
            return queue
        } catch let error as DatabaseError {
            throw Self.translateOpenError(error, path: path)
        }
    }

    /// The name SQLite opens the file by for reading: the path, or on a
    /// read-only file system an `immutable=1` URI (open it with
    /// SQLITE_OPEN_URI); nil in memory.
    public var readingName: String? {
        guard let path else { return nil }
        return ReadOnlyFileSystem.holds(path) ? ReadOnlyFileSystem.readingName(for: path) : path
    }

    /// Whether opening made the database (a new file, or one without any
    /// table): making it is not a use worth an audit row.
    public private(set) nonisolated(unsafe) var createdAtOpening = false

    /// Whether the store has connected (see ``prepare(path:options:)``).
    public var isConnected: Bool { connection.isConnected }

    /// Why the last attempt to connect failed (the message of the error
    /// thrown), until one succeeds: a script's error that carries it was
    /// caused by the database, not by the script.
    public var connectionFailure: String? { connection.lastFailure }

    /// Runs `body` with the writer once the store is connected: now if it
    /// is, else right after it connects (a setting every connection of this
    /// process must carry, such as a limit).
    public func whenConnected(_ body: @escaping @Sendable (any DatabaseWriter) -> Void) {
        connection.whenConnected(body)
    }

    /// When the database file was deleted, or replaced by another (renamed
    /// over it, a backup restored with `mv`) after opening: a sentence
    /// saying so; nil while the path still names the file opened.
    ///
    /// SQLite goes on using the file it opened, so what this store writes
    /// then lands in a file that nobody will open again: callers refuse to
    /// go on (the shell) or report it (a script).
    public var replacedFileProblem: String? {
        // Nothing was written before the store connected.
        guard let path, let openedFile = connection.openedFile else { return nil }
        let now = FileIdentity(path: path)
        if now == openedFile { return nil }
        return "the database file \(path) was \(now == nil ? "deleted" : "replaced by another file") after opsh opened it; "
            + "opsh still has the old file open, and what it writes there is lost"
    }

    /// The file SQLite opened, once connected.
    var openedFileIdentity: FileIdentity? { connection.openedFile }

    /// A private in-memory database, migrated: for tests of code that does
    /// not care about files.
    public static func inMemory() throws -> Store {
        var configuration = Configuration()
        configuration.foreignKeysEnabled = true
        let queue = try DatabaseQueue(configuration: configuration)
        try migrate(queue)
        return Store(path: nil, options: StoreOptions(), lockWait: LockWait(timeout: 0), connection: LazyConnection { .init(writer: queue, file: nil) })
    }

    /// Applies the built-in migrations not applied yet.
    public func migrate() throws {
        try Self.migrate(writer)
    }

    private static func migrate(_ writer: any DatabaseWriter) throws {
        let migrator = StoreMigrations.makeMigrator()
        // GRDB decides what to apply before each migration's transaction: two
        // opsh processes opening a new database at once (cron jobs starting
        // together) both chose migration 1, and the second failed with "table
        // projects already exists" (exit 3). When the applied set grew while
        // an attempt failed, another process did that work: look again.
        for _ in 0..<100 {
            let before = try writer.read { try migrator.appliedIdentifiers($0) }
            do {
                try migrator.migrate(writer)
                return
            } catch {
                let after = try writer.read { try migrator.appliedIdentifiers($0) }
                guard after.isStrictSuperset(of: before) else { throw error }
            }
        }
        try migrator.migrate(writer)
    }

    /// Interrupts the statements running on every connection, as
    /// `sqlite3_interrupt`: they fail with SQLITE_INTERRUPT and their
    /// transaction rolls back. Safe from any thread; does nothing before
    /// the store connects.
    public func interrupt() {
        connection.ifConnected { $0.interrupt() }
    }

    // MARK: - Opening

    static func configuration(_ options: StoreOptions, lockWait: LockWait) -> Configuration {
        var configuration = Configuration()
        configuration.label = "opsh"
        configuration.readonly = options.readOnly
        configuration.foreignKeysEnabled = true
        configuration.busyMode = .callback { tries in lockWait.retry(afterTries: tries) }
        configuration.prepareDatabase { db in opsh_stop_statements_on(db.sqliteConnection) }
        return configuration
    }

    /// The pool, set up for WAL. Switching a new file to WAL takes an
    /// exclusive lock, and SQLite answers "database is locked" at once,
    /// without waiting, when that could deadlock with another connection
    /// doing the same (cron jobs opening a new database together): such a
    /// refusal is retried until the busy timeout has passed, as a lock wait.
    private static func openPool(_ openName: String, path: String, options: StoreOptions,
                                 lockWait: LockWait) throws -> DatabasePool {
        let deadline = Date().addingTimeInterval(options.busyTimeout)
        while true {
            do {
                return try DatabasePool(path: openName, configuration: configuration(options, lockWait: lockWait))
            } catch let error as DatabaseError {
                if error.resultCode == .SQLITE_BUSY && Date() < deadline && !lockWait.isAbandoned {
                    usleep(UInt32.random(in: 5_000...25_000))
                    continue
                }
                throw translateOpenError(error, path: path)
            }
        }
    }

    /// Opens an existing database without waiting for another process's
    /// write lock. A `DatabasePool` sets itself up with writes: the journal
    /// switched to WAL, and a throw-away table when the `-wal` file is
    /// missing or empty (as it is while the backend's first transaction
    /// after a checkpoint is still open). Those may take the lock only if
    /// it is free at once. When another process holds it, opsh opens one
    /// connection to the file as it is, without a set-up write: reads run
    /// at once, and the first write waits for the busy timeout like any
    /// writer's (README, "How opsh behaves beside a live backend").
    private static func openWithoutWaiting(_ openName: String, path: String, options: StoreOptions,
                                           lockWait: LockWait) throws -> any DatabaseWriter {
        if options.readOnly {
            // A read-only pool writes nothing at set-up.
            return try openPool(openName, path: path, options: options, lockWait: lockWait)
        }
        let settingUp = Mutex(true)
        var setUpConfiguration = configuration(options, lockWait: lockWait)
        setUpConfiguration.busyMode = .callback { tries in
            settingUp.withLock { $0 } ? false : lockWait.retry(afterTries: tries)
        }
        do {
            let pool = try DatabasePool(path: openName, configuration: setUpConfiguration)
            settingUp.withLock { $0 = false }
            return pool
        } catch let error as DatabaseError where error.resultCode == .SQLITE_BUSY {
            do {
                // No journal set-up: DatabaseQueue leaves the journal mode as it is.
                return try DatabaseQueue(path: openName, configuration: configuration(options, lockWait: lockWait))
            } catch let error as DatabaseError {
                throw translateOpenError(error, path: path)
            }
        } catch let error as DatabaseError {
            throw translateOpenError(error, path: path)
        }
    }

    /// The database holds the API key: made 0600 before SQLite writes a
    /// byte (SQLite gives its -wal and -shm the main file's mode).
    private static func createOwnerOnlyFile(_ path: String) throws {
        let descriptor = Glibc.open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
        if descriptor < 0 {
            if errno == EEXIST { return }
            throw StoreError.cannotOpen(path: path, detail: String(cString: strerror(errno)))
        }
        fchmod(descriptor, 0o600)  // whatever the umask
        close(descriptor)
    }

    private static func createParentDirectory(of path: String) throws {
        let directory = (path as NSString).deletingLastPathComponent
        guard !directory.isEmpty else { return }
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw StoreError.cannotOpen(path: path, detail: "cannot create the folder \(directory): \(error.localizedDescription)")
        }
    }

    /// Reads the schema and the applied migrations through a read-only
    /// connection: a damaged or newer database is refused untouched.
    private static func checkMigrationsReadOnly(path: String, openName: String, options: StoreOptions,
                                                lockWait: LockWait) throws -> (applied: [String], isEmpty: Bool) {
        let found: (applied: [String], isEmpty: Bool)
        do {
            found = try MigrationCheck.inspect(openName: openName, lockWait: lockWait)
        } catch let error as DatabaseError {
            throw translateOpenError(error, path: path)
        }
        let known = Set(StoreMigrations.builtInIdentifiers)
        let unknown = found.applied.filter { !known.contains($0) && !isLuaMigration($0) }
        if !unknown.isEmpty {
            throw StoreError.newerSchema(path: path, unknownMigrations: unknown)
        }
        return found
    }

    /// Migrations written in Lua carry a `lua:` prefix, so a database that
    /// has them is not mistaken for one from a newer opsh.
    static func isLuaMigration(_ identifier: String) -> Bool {
        identifier.hasPrefix("lua:")
    }

    private static func translateOpenError(_ error: DatabaseError, path: String) -> StoreError {
        switch error.resultCode {
        case .SQLITE_NOTADB:
            return .notADatabase(path: path)
        case .SQLITE_CORRUPT:
            return .corrupt(path: path, detail: error.message ?? "database disk image is malformed")
        case .SQLITE_CANTOPEN, .SQLITE_READONLY:
            // SQLite says "unable to open database file" or "attempt to write
            // a readonly database" also when the file is fine but its -wal or
            // -shm companion cannot be opened: say which.
            return .cannotOpen(path: path, detail: (error.message ?? "\(error.resultCode)") + walProblem(path))
        default:
            return .cannotOpen(path: path, detail: error.message ?? "\(error.resultCode)")
        }
    }

    /// Why the write-ahead log files next to `path` cannot be used, if that
    /// can be told from outside SQLite; "" otherwise.
    static func walProblem(_ path: String) -> String {
        for suffix in ["-wal", "-shm"] {
            var status = stat()
            guard lstat(path + suffix, &status) == 0 else { continue }
            if (status.st_mode & S_IFMT) != S_IFREG {
                return " (\(path + suffix), where SQLite keeps the write-ahead log, is not a regular file)"
            }
            if access(path + suffix, R_OK | W_OK) != 0 {
                return " (\(path + suffix), SQLite's write-ahead log, cannot be written: \(String(cString: strerror(errno))))"
            }
        }
        let folder = (path as NSString).deletingLastPathComponent
        if access(folder.isEmpty ? "." : folder, W_OK) != 0 {
            return " (SQLite cannot create its write-ahead log in \(folder): \(String(cString: strerror(errno))))"
        }
        return ""
    }
}

/// A file's device and inode.
struct FileIdentity: Equatable, Sendable {
    var device: UInt64
    var inode: UInt64

    init?(path: String) {
        var status = stat()
        guard stat(path, &status) == 0 else { return nil }
        device = UInt64(status.st_dev)
        inode = UInt64(status.st_ino)
    }
}

/// The built-in migrations an existing database lacks, found on connecting.
final class PendingMigrations: Sendable {
    private let identifiers = Mutex<[String]>([])
    func get() -> [String] { identifiers.withLock { $0 } }
    func set(_ value: [String]) { identifiers.withLock { $0 = value } }
}
