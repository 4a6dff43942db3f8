import GRDB

/// The database as one operation sees it inside
/// ``SessionDatabase/read(_:_:)`` or ``SessionDatabase/write(_:_:)``: the
/// engine's connection, in the session's transaction or a short one of
/// its own. Opaque above Store (ARCHITECTURE.md, "The engine seam"): the
/// bindings receive it and hand it back to Store's operations, and never
/// run a statement on it themselves, so a second engine changes what it
/// wraps, not its callers.
public struct StoreDatabase {
    let db: Database

    init(_ db: Database) {
        self.db = db
    }
}

extension SessionDatabase {
    /// Runs the reads of one repository call on one snapshot (``read(_:)``);
    /// SQLite's terse errors name `table`.
    public func read<T>(_ table: String, _ body: (StoreDatabase) throws -> T) throws -> T {
        try naming(table) { try read { db in try body(StoreDatabase(db)) } }
    }

    /// Runs one repository call's writes atomically (``write(_:)``: a
    /// savepoint in the open transaction, else a transaction of its own);
    /// SQLite's terse errors name `table`.
    public func write<T>(_ table: String, _ body: (StoreDatabase) throws -> T) throws -> T {
        try naming(table) { try write { db in try body(StoreDatabase(db)) } }
    }

    /// Runs one repository call whose only write is one statement
    /// (``writeOneStatement(_:)``: no savepoint); errors name `table`.
    public func writeOneStatement<T>(_ table: String, _ body: (StoreDatabase) throws -> T) throws -> T {
        try naming(table) { try writeOneStatement { db in try body(StoreDatabase(db)) } }
    }

    private func naming<T>(_ table: String, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as DatabaseError where error.resultCode != .SQLITE_INTERRUPT {
            throw StoreError.refused(reason: Self.describe(error, table: table))
        }
    }

    /// A constraint's failure as the repositories say it.
    static func describe(_ error: DatabaseError, table: String) -> String {
        let message = error.message ?? "\(error.resultCode)"
        switch error.extendedResultCode {
        case .SQLITE_CONSTRAINT_UNIQUE, .SQLITE_CONSTRAINT_PRIMARYKEY:
            return "\(table): a row with the same key exists (\(message))"
        case .SQLITE_CONSTRAINT_CHECK:
            return "invalid value for \(table): \(message)"
        case .SQLITE_CONSTRAINT_FOREIGNKEY:
            return "\(table): \(message) (a row refers to a missing row, or other rows still refer to this one)"
        default:
            return "\(table): \(message)"
        }
    }
}
