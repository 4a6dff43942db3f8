import Foundation
import GRDB
import GRDBSQLite

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

    private init(path: String?, options: StoreOptions, writer: any DatabaseWriter) {
        self.path = path
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
        if verdict == .missing {
            if options.readOnly || !options.createIfMissing {
                throw StoreError.missingDatabase(path: resolved)
            }
            try createParentDirectory(of: resolved)
        }
        var migrated = false
        if verdict == .database {
            // Refuse a newer schema before anything writes (a read-write
            // pool would switch the journal to WAL).
            migrated = try checkMigrationsReadOnly(path: resolved, options: options)
        }

        let pool: DatabasePool
        do {
            pool = try DatabasePool(path: resolved, configuration: configuration(options, label: "opsh"))
        } catch let error as DatabaseError {
            throw translateOpenError(error, path: resolved)
        }
        let store = Store(path: resolved, options: options, writer: pool)
        if !options.readOnly && !migrated {
            try store.migrate()
        }
        return store
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
        try StoreMigrations.makeMigrator().migrate(writer)
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
    /// Returns whether every built-in migration is applied already.
    ///
    /// SQLite's C API, not a GRDB queue: this runs at every start of opsh,
    /// and a plain connection opens in a fraction of the time.
    private static func checkMigrationsReadOnly(path: String, options: StoreOptions) throws -> Bool {
        var handle: OpaquePointer?
        defer { sqlite3_close_v2(handle) }
        let opened = sqlite3_open_v2(path, &handle, SQLITE_OPEN_READONLY, nil)
        guard opened == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(opened))
            throw translateOpenError(DatabaseError(resultCode: ResultCode(rawValue: opened), message: message), path: path)
        }
        sqlite3_busy_timeout(handle, Int32(min(options.busyTimeout * 1000, Double(Int32.max))))
        func strings(_ sql: String) throws -> [String] {
            var statement: OpaquePointer?
            defer { sqlite3_finalize(statement) }
            var code = sqlite3_prepare_v2(handle, sql, -1, &statement, nil)
            var result: [String] = []
            if code == SQLITE_OK {
                code = sqlite3_step(statement)
                while code == SQLITE_ROW {
                    result.append(sqlite3_column_text(statement, 0).map { String(cString: $0) } ?? "")
                    code = sqlite3_step(statement)
                }
            }
            guard code == SQLITE_OK || code == SQLITE_DONE else {
                let error = DatabaseError(resultCode: ResultCode(rawValue: sqlite3_errcode(handle)),
                                          message: String(cString: sqlite3_errmsg(handle)), sql: sql)
                throw translateOpenError(error, path: path)
            }
            return result
        }
        // Reading the schema detects a damaged first page.
        _ = try strings("SELECT count(*) FROM sqlite_master")
        let hasMigrations = try !strings("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'grdb_migrations'").isEmpty
        let applied = hasMigrations ? try strings("SELECT identifier FROM grdb_migrations ORDER BY rowid") : []
        let known = Set(StoreMigrations.builtInIdentifiers)
        let unknown = applied.filter { !known.contains($0) && !isLuaMigration($0) }
        if !unknown.isEmpty {
            throw StoreError.newerSchema(path: path, unknownMigrations: unknown)
        }
        let pending = StoreMigrations.builtInIdentifiers.filter { !applied.contains($0) }
        if options.readOnly && !pending.isEmpty && !applied.isEmpty {
            throw StoreError.needsMigration(path: path, pending: pending)
        }
        return pending.isEmpty
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
        default:
            return .cannotOpen(path: path, detail: error.message ?? "\(error.resultCode)")
        }
    }
}
