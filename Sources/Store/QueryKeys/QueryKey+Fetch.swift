import GRDB

extension QueryKey {
    /// Fetches the key's current value: a row (an object) or `.null` for
    /// single-row keys, an array of ids or rows for list keys, an object
    /// for the aggregates. Runs the key's plan in SQLite's dialect
    /// (``plan(dialect:)``).
    public func fetch(_ db: Database) throws -> StoreValue {
        try plan(dialect: .sqlite).fetch(db)
    }
}
