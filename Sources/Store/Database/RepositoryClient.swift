import Foundation

/// The storage witness over the engine seam: the four operations of the
/// seed-002 design (read, write, the file, table observation) as a value
/// of closures, with the body of a read or a write receiving any
/// ``RepositoryConnection`` rather than one engine's type.
///
/// So the rules written once over ``RepositoryConnection`` (``RecordTable``,
/// the repositories' cascades and build numbers, the configuration's merge,
/// ``Analytics``, ``Transfer``, query keys) and ``QueryObservation`` run
/// on whichever implementation the client holds:
///
/// - ``grdb(_:)``, SQLite through GRDB: the store's own client, always
///   built;
/// - `sqliteNIO(path:externalChangePollInterval:)`, SQLite through
///   vapor/sqlite-nio, compiled only with the package trait `SQLiteNIO`
///   (`swift build --traits SQLiteNIO`; ARCHITECTURE.md, "The second
///   SQLite engine").
///
/// ```swift
/// let client = RepositoryClient.grdb(store)
/// let build = try client.write { db in
///     try store.builds.create(db, scheme: scheme, version: "1.0")
/// }
/// ```
///
/// Reads and writes are synchronous, as ``StorageClient``'s: opsh's callers
/// are a Lua thread and job threads.
public struct RepositoryClient: Sendable {
    /// Runs `body` in a read-only transaction (a stable snapshot).
    public var performRead: @Sendable (_ body: (any RepositoryConnection) throws -> Void) throws -> Void
    /// Runs `body` in a write transaction, committed when it returns and
    /// rolled back when it throws.
    public var performWrite: @Sendable (_ body: (any RepositoryConnection) throws -> Void) throws -> Void
    /// The database file, or nil for an in-memory database.
    public var path: @Sendable () -> String?
    /// Calls `onChange` after each commit that may have changed one of
    /// `tables` (any table when empty), other processes' commits included.
    /// Calls may be spurious: callers re-fetch and compare.
    public var observeTables: @Sendable (
        _ tables: Set<String>, _ onChange: @escaping @Sendable () -> Void
    ) throws -> StorageCancellable

    public init(
        performRead: @escaping @Sendable (_ body: (any RepositoryConnection) throws -> Void) throws -> Void,
        performWrite: @escaping @Sendable (_ body: (any RepositoryConnection) throws -> Void) throws -> Void,
        path: @escaping @Sendable () -> String?,
        observeTables: @escaping @Sendable (
            _ tables: Set<String>, _ onChange: @escaping @Sendable () -> Void
        ) throws -> StorageCancellable
    ) {
        self.performRead = performRead
        self.performWrite = performWrite
        self.path = path
        self.observeTables = observeTables
    }

    /// Runs `body` in a read-only transaction and returns its result.
    public func read<T>(_ body: (any RepositoryConnection) throws -> T) throws -> T {
        var result: T?
        try performRead { db in result = try body(db) }
        return result!
    }

    /// Runs `body` in a write transaction and returns its result.
    public func write<T>(_ body: (any RepositoryConnection) throws -> T) throws -> T {
        var result: T?
        try performWrite { db in result = try body(db) }
        return result!
    }
}

extension RepositoryClient {
    /// SQLite through GRDB: the store's ``Store/client``, each body given
    /// the transaction's ``StoreDatabase``.
    public static func grdb(_ store: Store) -> RepositoryClient {
        let client = store.client
        return RepositoryClient(
            performRead: { body in try client.performRead { db in try body(StoreDatabase(db)) } },
            performWrite: { body in try client.performWrite { db in try body(StoreDatabase(db)) } },
            path: client.path,
            observeTables: client.observeTables)
    }
}

extension RepositoryConnection {
    /// Runs a query key's statement: `.row` gives the row or `.null`,
    /// `.rows` an array of rows, `.ids` an array of the first column's
    /// values (what ``QueryStatement`` means on every engine).
    public func fetch(_ statement: QueryStatement) throws -> StoreValue {
        let result = try fetch(statement.sql, statement.values)
        func object(_ row: [StoreValue]) -> StoreValue {
            .object(zip(result.columns, row).map { StoreValue.Field($0, $1) })
        }
        switch statement.shape {
        case .row: return result.rows.first.map(object) ?? .null
        case .rows: return .array(result.rows.map(object))
        case .ids: return .array(result.rows.map { $0.first ?? .null })
        }
    }
}

extension QueryKey {
    /// The key's value, read through any engine's connection.
    public func fetch(_ connection: some RepositoryConnection) throws -> StoreValue {
        try plan().fetch(running: { try connection.fetch($0) })
    }
}
