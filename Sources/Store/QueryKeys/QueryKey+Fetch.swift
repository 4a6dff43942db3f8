import GRDB

extension QueryKey {
    /// Fetches the key's current value: a row (an object) or `.null` for
    /// single-row keys, an array of ids or rows for list keys, an object
    /// for the aggregates. Runs the key's plan in SQLite's dialect
    /// (``plan(dialect:)``).
    public func fetch(_ db: Database) throws -> StoreValue {
        try plan(dialect: .sqlite).fetch(db)
    }

    /// The key's value, read through any engine's connection, in its dialect.
    public func fetch(_ connection: some RepositoryConnection) throws -> StoreValue {
        try plan(dialect: connection.dialect).fetch(running: { try connection.fetch($0) })
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

extension Store {
    /// A query key's value for a Swift caller, read by the cheapest route
    /// that keeps it one snapshot: a key of one statement runs as that
    /// statement alone (a single statement is atomic in SQLite: no
    /// BEGIN/COMMIT around it, as a lookup outside a transaction is), a key
    /// of several statements in one read transaction.
    public func value(of key: QueryKey) throws -> StoreValue {
        let plan = try key.plan(dialect: .sqlite)
        if case .statement(let statement) = plan {
            if let reader = try keyReader() { return try reader.fetch(statement) }
            return try writer.unsafeRead { db in try statement.fetch(db) }
        }
        return try client.read { db in try plan.fetch(db) }
    }
}
