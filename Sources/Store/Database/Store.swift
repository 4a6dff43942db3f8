import Foundation
import GRDB

/// opsh's storage core: one database file, migrated, observed, maintained.
///
/// Open it with ``Store/open(path:options:)``. Everything else in the core
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
    public let writer: any DatabaseWriter

    /// The file opened (device, inode), to tell when the path names another.
    private let openedFile: FileIdentity?

    private init(path: String?, options: StoreOptions, writer: any DatabaseWriter) {
        self.path = path
        self.openedFile = path.flatMap(FileIdentity.init(path:))
        self.options = options
        self.writer = writer
        self.externalChanges = path.map {
            ExternalChangeMonitor(path: $0, interval: options.externalChangePollInterval)
        }
        self.client = .grdb(writer, externalChanges: externalChanges, path: path)
    }

    /// Opens (and on first use creates and migrates) the database.
    ///
    /// - parameter path: an explicit path; nil resolves `$OPSH_DB`, then the
    ///   XDG data home (see ``DatabaseLocation``).
    /// - throws: ``StoreError`` when the file is not a database, is damaged,
    ///   comes from a newer opsh, or cannot be opened. The file is not
    ///   modified in those cases.
    public static func open(path: String? = nil, options: StoreOptions = StoreOptions()) throws -> Store {
        let resolved = DatabaseLocation.resolve(explicitPath: path)
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
        }
        if verdict == .database {
            // Refuse a newer schema before anything writes (a read-write
            // pool would switch the journal to WAL).
            try checkMigrationsReadOnly(path: resolved, openName: openName, options: options)
        }

        let pool: DatabasePool
        do {
            pool = try DatabasePool(path: openName, configuration: configuration(options, label: "opsh"))
        } catch let error as DatabaseError {
            throw translateOpenError(error, path: resolved)
        }
        let store = Store(path: resolved, options: options, writer: pool)
        if !options.readOnly {
            try store.migrate()
        }
        return store
    }

    /// When the database file was deleted, or replaced by another (renamed
    /// over it, a backup restored with `mv`) after opening: a sentence
    /// saying so; nil while the path still names the file opened.
    ///
    /// SQLite goes on using the file it opened, so what this store writes
    /// then lands in a file that nobody will open again: callers refuse to
    /// go on (the shell) or report it (a script).
    public var replacedFileProblem: String? {
        guard let path, let openedFile else { return nil }
        let now = FileIdentity(path: path)
        if now == openedFile { return nil }
        return "the database file \(path) was \(now == nil ? "deleted" : "replaced by another file") after opsh opened it; "
            + "opsh still has the old file open, and what it writes there is lost"
    }

    /// A private in-memory database, migrated: for tests of code that does
    /// not care about files.
    public static func inMemory() throws -> Store {
        var configuration = Configuration()
        configuration.foreignKeysEnabled = true
        let queue = try DatabaseQueue(configuration: configuration)
        let store = Store(path: nil, options: StoreOptions(), writer: queue)
        try store.migrate()
        return store
    }

    /// Applies the built-in migrations not applied yet.
    public func migrate() throws {
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
    /// transaction rolls back. Safe from any thread.
    public func interrupt() {
        writer.interrupt()
    }

    // MARK: - Opening

    static func configuration(_ options: StoreOptions, label: String) -> Configuration {
        var configuration = Configuration()
        configuration.label = label
        configuration.readonly = options.readOnly
        configuration.foreignKeysEnabled = true
        configuration.busyMode = .timeout(options.busyTimeout)
        return configuration
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
    private static func checkMigrationsReadOnly(path: String, openName: String, options: StoreOptions) throws {
        var configuration = configuration(options, label: "opsh.inspect")
        configuration.readonly = true
        do {
            let queue = try DatabaseQueue(path: openName, configuration: configuration)
            try queue.read { db in
                // Reading the schema detects a damaged first page.
                _ = try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master")
                let known = Set(StoreMigrations.builtInIdentifiers)
                let applied = try db.tableExists("grdb_migrations")
                    ? try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations ORDER BY rowid")
                    : []
                let unknown = applied.filter { !known.contains($0) && !isLuaMigration($0) }
                if !unknown.isEmpty {
                    throw StoreError.newerSchema(path: path, unknownMigrations: unknown)
                }
                if options.readOnly {
                    let pending = StoreMigrations.builtInIdentifiers.filter { !applied.contains($0) }
                    if !pending.isEmpty && !applied.isEmpty {
                        throw StoreError.needsMigration(path: path, pending: pending)
                    }
                }
            }
            try queue.close()
        } catch let error as DatabaseError {
            throw translateOpenError(error, path: path)
        }
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
