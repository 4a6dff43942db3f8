import Foundation

/// The storage witness (``StorageWitness``) over the engine seam: the
/// body of a read or a write receives any ``RepositoryConnection`` rather
/// than one engine's type.
///
/// So the rules written once over ``RepositoryConnection`` (``RecordTable``,
/// the repositories' cascades and build numbers, the configuration's merge,
/// ``Analytics``, ``Transfer``, query keys) and ``QueryObservation`` run
/// on whichever implementation the client holds:
///
/// - ``StorageWitness/grdb(_:)``, SQLite through GRDB: the store's own
///   client, always built;
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
public typealias RepositoryClient = StorageWitness<any RepositoryConnection>

extension StorageWitness where Connection == any RepositoryConnection {
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
    /// The key's value, read through any engine's connection, in its dialect.
    public func fetch(_ connection: some RepositoryConnection) throws -> StoreValue {
        try plan(dialect: connection.dialect).fetch(running: { try connection.fetch($0) })
    }
}
