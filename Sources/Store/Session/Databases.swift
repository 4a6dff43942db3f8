import Foundation
import PostgresWire

/// The one place that chooses the engine from a `--db` value (or
/// `OPSH_DB`): a `postgresql://` or `postgres://` URL, or libpq's
/// keyword/value settings starting with a keyword libpq knows (`host=…`,
/// `dbname=…`, `service=…`), is PostgreSQL, anything else an SQLite file
/// (ARCHITECTURE.md, "The session seam"). `PG*` variables alone never
/// choose PostgreSQL: they fill in what a PostgreSQL connection leaves out.
/// Every command opens its database here: the shell and the batch modes a
/// session, `opsh runner` a build queue, `opsh runs` a reading, `opsh
/// migrate` the migrations.
public enum Databases {
    /// How a command wants its database opened.
    public struct Options: Sendable {
        /// `--db`; nil: `OPSH_DB`, else the default file.
        public var db: String?
        public var readOnly = false
        /// Make the database's schema when it has none (`--create`).
        public var create = false
        /// Make a missing SQLite file (the default location is made
        /// without being asked; a named one only with `--create`).
        public var createIfMissing = false
        public var busyTimeout: Double = 5
        /// Connect now (the shell: a database opsh cannot use is refused
        /// before the first prompt); else on first use (the batch modes
        /// start in a few milliseconds when a script never touches it).
        public var connectNow = false
        /// Refuse the first use when the database asks every run for a
        /// reason (``ReasonRequired``) and none was given.
        public var refuseWithoutReason = false
        /// The run is a dry run (`--dry-run`): a database whose extensions
        /// write through connections of their own is refused, as under
        /// `--read-only`, since neither could hold such writes back.
        public var dryRun = false
        /// `--timeout`: connecting counts against it (a server that never
        /// answers ends the run as the time limit does).
        public var connectTimeLimit: Double?
        /// `--sandbox`: PostgreSQL's session refuses every statement that
        /// writes the catalog or a scheme's build command, and a database
        /// whose extensions write through connections of their own (SQLite's
        /// sandbox is put on by its Lua session: `OpshSession`).
        public var sandbox = false

        public init(db: String?) {
            self.db = db
        }
    }

    /// The `--db` value, else `OPSH_DB` (nil when neither names one).
    public static func named(_ db: String?) -> String? {
        if let db { return db }
        guard let variable = getenv("OPSH_DB"), variable.pointee != 0 else { return nil }
        return String(cString: variable)
    }

    /// The engine a `--db` value (else `OPSH_DB`) names.
    public static func engine(of db: String?) -> DatabaseEngine {
        guard let named = named(db) else { return .sqlite }
        return PostgresURL.isConnectionString(named) ? .postgresql : .sqlite
    }

    /// Opens the session's database.
    public static func openSession(_ options: Options) throws -> any DatabaseSession {
        switch engine(of: options.db) {
        case .postgresql:
            let database = try PostgresDatabase(url: named(options.db)!, options: postgresOptions(options))
            if options.readOnly || options.dryRun || options.sandbox {
                try database.refuseExtensionsThatConnectOnTheirOwn(
                    for: options.readOnly ? "--read-only" : options.dryRun ? "--dry-run" : "--sandbox")
            }
            if options.refuseWithoutReason, try AuditTrail.requiresReason(database) { throw ReasonRequired() }
            return database
        case .sqlite:
            return SessionDatabase(store: try openStore(options))
        }
    }

    /// PostgreSQL's session options: `--busy-timeout` is the session's
    /// lock timeout, `--timeout` covers connecting.
    static func postgresOptions(_ options: Options) -> PostgresDatabase.Options {
        PostgresDatabase.Options(readOnly: options.readOnly, create: options.create,
                                 lockTimeout: options.busyTimeout, connectTimeLimit: options.connectTimeLimit,
                                 sandbox: options.sandbox)
    }

    /// How opening a database failed, for the exit status: the command
    /// line named it wrong (a malformed URL), the time limit ran out while
    /// connecting, or the database cannot be used.
    public enum OpeningFailure {
        case usage, timeout, unavailable
    }

    public static func failure(of error: any Error) -> OpeningFailure {
        if error is ReasonRequired { return .usage }
        switch error as? PostgresStoreError {
        case .invalidURL?: return .usage
        case .connectTimedOut?: return .timeout
        default: return .unavailable
        }
    }

    /// The SQLite file's store, as ``openSession(_:)`` opens it.
    static func openStore(_ options: Options) throws -> Store {
        var storeOptions = StoreOptions(readOnly: options.readOnly, busyTimeout: options.busyTimeout)
        if options.refuseWithoutReason { storeOptions.afterConnecting = ReasonRequired.check }
        storeOptions.createIfMissing = !options.readOnly && options.createIfMissing
        return options.connectNow ? try Store.open(path: options.db, options: storeOptions)
            : try Store.prepare(path: options.db, options: storeOptions)
    }

    /// The build queue `opsh runner` claims from: never created here (a
    /// runner on a database nobody made would wait for nothing), refused
    /// without migration 004_runners. On PostgreSQL a session of the
    /// queue idle inside a transaction longer than `leaseLength` is ended
    /// by the server (``PostgresBuildQueue/init(url:counted:idleInTransactionLimit:)``).
    public static func openBuildQueue(_ options: Options, leaseLength: Double) throws -> (queue: any BuildStore, close: () -> Void) {
        switch engine(of: options.db) {
        case .postgresql:
            let url = named(options.db)!
            let schema: PostgresDatabase
            do {
                schema = try PostgresDatabase(url: url, options: postgresOptions(options))
            } catch let PostgresStoreError.empty(label) {
                // opsh runner takes no --create: the schema is opsh migrate's to make.
                throw NoSchemaForRunner(database: label, exists: true)
            }
            if schema.pendingMigrations.contains("004_runners") {
                throw PostgresStoreError.statement("this database lacks migration 004_runners, which opsh runner needs (a heartbeat per build): run `opsh migrate` first")
            }
            // The queue's statements name opsh's tables unqualified: with
            // the role's path a `"$user"` schema a script made would be the
            // queue (scripts/reliability-attacks.md, 28g).
            return (try PostgresBuildQueue(url: try PostgresURL(url), idleInTransactionLimit: leaseLength,
                                           searchPath: schema.ownPath?.pinnedPath), {})
        case .sqlite:
            var storeOptions = StoreOptions(readOnly: false, busyTimeout: options.busyTimeout)
            storeOptions.createIfMissing = false
            let store: Store
            do {
                store = try Store.prepare(path: options.db, options: storeOptions)
            } catch let StoreError.missingDatabase(path) {
                throw NoSchemaForRunner(database: path, exists: false)
            }
            try store.connect()
            return (SQLiteBuildStore(store: store), { _ = try? store.checkpoint(.passive) })
        }
    }

    /// Runs `body` on the database, opened for reading only: one snapshot
    /// of an SQLite file, or PostgreSQL's read-only transaction (`opsh runs`).
    public static func read(_ options: Options, _ body: (any RepositoryConnection) throws -> Void) throws {
        switch engine(of: options.db) {
        case .postgresql:
            var reading = options
            reading.readOnly = true
            let database = try PostgresDatabase(url: named(options.db)!, options: postgresOptions(reading))
            try database.snapshot { try body(database) }
        case .sqlite:
            var storeOptions = StoreOptions(readOnly: true, busyTimeout: options.busyTimeout)
            storeOptions.createIfMissing = false
            let store = try Store.prepare(path: options.db, options: storeOptions)
            try store.read { db in try body(db) }
        }
    }

    /// Applies the built-in migrations the database lacks (`opsh migrate`),
    /// waiting for the lock like any writer; returns their names.
    public static func migrate(_ options: Options) throws -> [String] {
        switch engine(of: options.db) {
        case .postgresql:
            let database = try PostgresDatabase(url: named(options.db)!, options: postgresOptions(options))
            return database.appliedAtOpening + (try database.migrate(external: [], upTo: nil))
        case .sqlite:
            let store = try openStore(options)
            try store.connect()
            return try store.migratePending()
        }
    }
}

/// `opsh runner` on a database without opsh's schema (an SQLite file that
/// does not exist, an empty PostgreSQL database): it takes no `--create`,
/// so it names the command that makes the schema.
public struct NoSchemaForRunner: Error, CustomStringConvertible {
    public var database: String
    /// Whether the database exists (PostgreSQL's, empty) or not (a file).
    public var exists: Bool

    public var description: String {
        (exists ? "\(database) has no opsh schema" : "no database at \(database)")
            + ": opsh runner needs opsh's schema: make it with `opsh migrate --create` (with the same --db), or point --db at the backend's database"
    }
}
