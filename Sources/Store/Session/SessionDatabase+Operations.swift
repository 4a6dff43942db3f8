import Foundation
import GRDB
import GRDBSQLite

// The core's operations for callers above the engine seam (the Lua
// bindings): each takes the session's database and runs its reads and
// writes where the session runs them (its open transaction, else a
// snapshot or a transaction of its own), so that no GRDB type crosses
// the seam (ARCHITECTURE.md, "The engine seam").

extension SessionDatabase {
    /// Runs a read that needs no snapshot (``unsafeRead(_:)``), handing
    /// `body` the opaque database; errors name `what`.
    public func unsafeRead<T>(_ what: String, _ body: (StoreDatabase) throws -> T) throws -> T {
        do {
            return try unsafeRead { db in try body(StoreDatabase(db)) }
        } catch let error as DatabaseError where error.resultCode != .SQLITE_INTERRUPT {
            throw StoreError.refused(reason: Self.describe(error, table: what))
        }
    }

    /// Runs `body` with the Lua thread's database calls on `database`, a
    /// connection a migration holds in its transaction (``run(on:_:)``),
    /// then forgets the schema it cached: the Lua code's SQL ran past GRDB.
    public func run<T>(on database: StoreDatabase, _ body: () throws -> T) throws -> T {
        let result = try run(on: database.db, body)
        database.db.clearSchemaCache()
        return result
    }
}

extension Transfer {
    /// Imports a document into the session's database: read and checked
    /// first without the write lock, then written in one short write (row
    /// by row while a dry run or a shell chunk counts changes).
    public static func importDocument(_ text: String, into database: SessionDatabase,
                                      options: ImportOptions) throws -> Summary {
        let prepared = try database.read { db in try prepareImport(db, text) }
        let counted = database.isCountingChanges
        return try database.write { db in try apply(StoreDatabase(db), prepared, options: options, rowByRowObservers: counted) }
    }
}

extension TelemetryCleanup {
    public static func retentionDays(_ database: StoreDatabase) throws -> Int? {
        try retentionDays(database.db)
    }

    /// Runs the cleanup on the session's database: its batches as the
    /// session's writes, each committed on its own (at the prompt, outside
    /// the chunk's transaction: ``SessionDatabase/writeOnItsOwn(_:)``),
    /// checkpoints between them on the store's writer outside any
    /// transaction.
    public func run(on database: SessionDatabase, shouldStop: () -> Bool,
                    progress: (MaintenanceProgress) -> Void) throws -> Report {
        try run(read: { body in try database.read(body) },
                write: { body in try database.writeOnItsOwn(body) },
                unlocked: { body in try database.store.writer.writeWithoutTransaction(body) },
                shouldStop: shouldStop, progress: progress)
    }
}

extension ExternalMigrations {
    /// Applies the pending migrations up to `target` on the session's
    /// store, each in a transaction of its own.
    public static func migrate(_ database: SessionDatabase, external: [ExternalMigration],
                               upTo target: String?) throws -> [String] {
        // Migrations change the schema: over a cap unless allowed.
        let pending = try database.store.writer.read { db in try plan(StoreDatabase(db), external: external, upTo: target) }
        if !pending.isEmpty { try database.refuseSchemaChange("migrate.up applies \(pending.joined(separator: ", "))") }
        return try migrate(try database.store.writer, external: external, upTo: target)
    }
}

/// A limit every connection of a session carries (SQLite's
/// `sqlite3_limit`): the engine, not a look at the SQL, refuses past it.
public enum ConnectionLimit: Sendable {
    /// The longest string or BLOB a statement may make, in bytes: under a
    /// memory limit, `randomblob(100000000)` is refused before it costs
    /// 100 MB ("string or blob too big").
    case valueLength(Int)
    /// How many databases a connection may ATTACH (0 under `--sandbox`:
    /// no ATTACH, no `VACUUM INTO`, which attaches).
    case attachedDatabases(Int)
    /// The most a connection's page cache holds, in bytes, and with it a
    /// sort's memory before it spills to a temporary file (SQLite sizes
    /// the sorter's by the cache): under a memory limit, what SQLite holds
    /// while it works is a share of the limit. SQLite's own heap limit
    /// cannot do it: it needs the memory statistics opsh turns off
    /// (ARCHITECTURE.md, "Measured facts").
    case pageCache(Int)

    fileprivate func apply(to connection: OpaquePointer?) {
        switch self {
        case let .valueLength(bytes): _ = sqlite3_limit(connection, SQLITE_LIMIT_LENGTH, Int32(clamping: bytes))
        case let .attachedDatabases(count): _ = sqlite3_limit(connection, SQLITE_LIMIT_ATTACHED, Int32(clamping: count))
        case let .pageCache(bytes): _ = sqlite3_exec(connection, "PRAGMA cache_size = -\(max(bytes >> 10, 1))", nil, nil, nil)
        }
    }

    /// The read connection sets its page cache at its first use (the
    /// pragma reads the schema): it takes the limit to apply then.
    fileprivate func apply(to reader: ReadConnection) {
        if case let .pageCache(bytes) = self {
            reader.limitPageCache(toKiB: max(bytes >> 10, 1))
        } else {
            reader.lending { apply(to: $0) }
        }
    }
}

extension SessionDatabase {
    /// Sets `limit` on every connection the session reads or writes
    /// through: `readConnection`, the store's writer (now or when it
    /// opens), and the session's own writer for scopes (now and when it
    /// opens).
    public func limitEveryConnection(_ limit: ConnectionLimit, readConnection: ReadConnection?) {
        readConnection.map(limit.apply(to:))
        store.whenConnected { writer in
            try? writer.writeWithoutTransaction { db in limit.apply(to: db.sqliteConnection) }
        }
        addConnectionSetting { db in limit.apply(to: db.sqliteConnection) }
    }
}
