import Foundation
import GRDB
import GRDBSQLite

/// How the repositories' SQL is spelled for one engine. The statements
/// themselves are written once (``ListRequest``, ``RecordRepository``,
/// the repositories); what differs between SQLite and PostgreSQL is
/// asked of this, in this one place.
public enum SQLDialect: Sendable, Equatable {
    case sqlite
    case postgresql

    /// An identifier, quoted. On PostgreSQL opsh's schema was written
    /// unquoted, so its names were folded to lower case
    /// (`bundleidentifier`): a quoted name must be the folded one
    /// (``PostgresNames``). SQLite's names are case-insensitive, quoted or
    /// not, so it keeps the schema's spelling (messages quote it).
    public func quote(_ name: String) -> String {
        switch self {
        case .sqlite: quoteIdentifier(name)
        case .postgresql: quoteIdentifier(name.lowercased())
        }
    }

    /// `SELECT * FROM table WHERE keyColumn = ?`: a row as `get` reads it.
    public func rowByKey(table: String, keyColumn: String) -> String {
        "SELECT * FROM \(quote(table)) WHERE \(quote(keyColumn)) = ?"
    }

    /// A WHERE term that is never true (an empty IN list).
    var never: String {
        switch self {
        case .sqlite: "0"
        case .postgresql: "false"
        }
    }

    /// `LIKE` as SQLite means it: case-insensitive for ASCII.
    var like: String {
        switch self {
        case .sqlite: "LIKE"
        case .postgresql: "ILIKE"
        }
    }

    /// An ORDER BY term that sorts as SQLite sorts: NULL before every
    /// value, text by its bytes (SQLite's BINARY collation, whatever the
    /// server's locale).
    func orderTerm(_ column: String, descending: Bool, isText: Bool) -> String {
        orderTerm(expression: quote(column), descending: descending, isText: isText)
    }

    /// ``orderTerm(_:descending:isText:)`` of an expression written as SQL
    /// already (`b.versionString`, a query key's qualified column).
    func orderTerm(expression: String, descending: Bool, isText: Bool) -> String {
        switch self {
        case .sqlite:
            return expression + (descending ? " DESC" : "")
        case .postgresql:
            return expression + (isText ? " COLLATE \"C\"" : "") + (descending ? " DESC NULLS LAST" : " NULLS FIRST")
        }
    }

    /// An OFFSET without a LIMIT.
    var noLimit: String {
        switch self {
        case .sqlite: " LIMIT -1"
        case .postgresql: ""
        }
    }

    /// What orders rows that are otherwise equal in the order they were
    /// written: SQLite's rowid; PostgreSQL's `ctid`, the row's place in
    /// the table, which follows insertion in a table that is appended to
    /// (build logs) and is not a promise past that.
    var insertionOrder: String {
        switch self {
        case .sqlite: "rowid"
        case .postgresql: "ctid"
        }
    }
}

/// What the repositories' rules need of a database engine: a few ways to
/// run a statement, a table's columns, and the engine's own JSON check.
/// ``StoreDatabase`` (SQLite through GRDB, the session's transaction) and
/// ``PostgresDatabase`` satisfy it; ``RecordTable``, ``RecordRepository``
/// and the repositories' rules (cascades, build numbers, a session's
/// totals, a model's usage) are written once over it.
///
/// Statements are SQLite-style (`?` placeholders) in the connection's
/// ``dialect``; rows are keyed by the schema's spelling.
public protocol RepositoryConnection {
    var dialect: SQLDialect { get }
    /// The rows of a query, with their column names.
    func fetch(_ sql: String, _ arguments: [StoreValue]) throws -> (columns: [String], rows: [[StoreValue]])
    /// Runs a statement that writes; returns the rows it changed.
    @discardableResult
    func execute(_ sql: String, _ arguments: [StoreValue]) throws -> Int
    /// Runs an INSERT; returns the integer key the database gave the row
    /// (SQLite's rowid; PostgreSQL's identity column, named `keyColumn`).
    func insert(_ sql: String, _ arguments: [StoreValue], keyColumn: String) throws -> Int64?
    /// The table's columns as the schema has them now.
    func tableSpec(_ table: String, primaryKey: String, jsonColumns: [String], booleans: Set<String>) throws -> TableSpec
    /// Whether the engine accepts `text` as JSON (what its CHECK would say).
    func isValidJSON(_ text: String) throws -> Bool
    /// Whether `error` is the engine refusing a statement for a constraint
    /// (a CHECK, a foreign key, NOT NULL, a unique key), by its code.
    func isConstraintFailure(_ error: any Error) -> Bool
}

extension RepositoryConnection {
    /// The first column of the first row, or nil.
    public func value(_ sql: String, _ arguments: [StoreValue] = []) throws -> StoreValue? {
        try fetch(sql, arguments).rows.first?.first
    }

    func integer(_ sql: String, _ arguments: [StoreValue] = []) throws -> Int64? {
        switch try value(sql, arguments) {
        case let .integer(number)?: number
        case let .real(number)?: Int64(number)
        default: nil
        }
    }

    func exists(_ sql: String, _ arguments: [StoreValue]) throws -> Bool {
        try integer("SELECT EXISTS (\(sql))", arguments) == 1
    }
}

// MARK: SQLite

extension StoreDatabase: RepositoryConnection {
    public var dialect: SQLDialect { .sqlite }

    /// Text is bound and read with its length (``ExactBinding``): GRDB's
    /// own would end it at a NUL byte.
    public func fetch(_ sql: String, _ arguments: [StoreValue]) throws -> (columns: [String], rows: [[StoreValue]]) {
        let statement = try db.cachedStatement(sql: sql)
        try statement.bindExactly(arguments.map(\.databaseValue))
        let handle = statement.sqliteStatement
        let columnCount = sqlite3_column_count(handle)
        var rows: [[StoreValue]] = []
        let cursor = try Row.fetchCursor(statement)
        while try cursor.next() != nil {
            rows.append((0..<columnCount).map { ExactBinding.value(handle, $0) })
        }
        return (statement.columnNames, rows)
    }

    public func execute(_ sql: String, _ arguments: [StoreValue]) throws -> Int {
        let statement = try db.cachedStatement(sql: sql)
        try statement.bindExactly(arguments.map(\.databaseValue))
        try statement.execute()
        return db.changesCount
    }

    public func insert(_ sql: String, _ arguments: [StoreValue], keyColumn: String) throws -> Int64? {
        _ = try execute(sql, arguments)
        return db.lastInsertedRowID
    }

    /// Read from SQLite, not from GRDB's schema cache: a script's DDL
    /// (`db.exec('ALTER TABLE …')` in `db.transaction`) runs on the
    /// connection outside GRDB, which then still had the table's old
    /// columns, and the next repository write refused the new one. The
    /// callers read a table's spec again only after the schema changed
    /// (``TableSpec``'s callers cache it by schema version), so the cache
    /// gained nothing.
    public func tableSpec(_ table: String, primaryKey: String, jsonColumns: [String], booleans: Set<String>) throws -> TableSpec {
        db.clearSchemaCache()
        return try TableSpec.load(db, table: table, primaryKey: primaryKey, jsonColumns: jsonColumns, booleans: booleans)
    }

    public func isValidJSON(_ text: String) throws -> Bool {
        try JSONText.isValid(text, in: db)
    }

    /// SQLITE_CONSTRAINT and its extended codes.
    public func isConstraintFailure(_ error: any Error) -> Bool {
        (error as? DatabaseError)?.resultCode == .SQLITE_CONSTRAINT
    }
}

/// Any engine's connection behind one type, for callers that hold a
/// session's connection without knowing its engine (the Lua bindings'
/// repositories over ``DatabaseSession``): forwards to it.
public struct AnyRepositoryConnection: RepositoryConnection {
    public let base: any RepositoryConnection

    public init(_ base: any RepositoryConnection) {
        self.base = base
    }

    public var dialect: SQLDialect { base.dialect }

    public func fetch(_ sql: String, _ arguments: [StoreValue]) throws -> (columns: [String], rows: [[StoreValue]]) {
        try base.fetch(sql, arguments)
    }

    public func execute(_ sql: String, _ arguments: [StoreValue]) throws -> Int {
        try base.execute(sql, arguments)
    }

    public func insert(_ sql: String, _ arguments: [StoreValue], keyColumn: String) throws -> Int64? {
        try base.insert(sql, arguments, keyColumn: keyColumn)
    }

    public func tableSpec(_ table: String, primaryKey: String, jsonColumns: [String], booleans: Set<String>) throws -> TableSpec {
        try base.tableSpec(table, primaryKey: primaryKey, jsonColumns: jsonColumns, booleans: booleans)
    }

    public func isValidJSON(_ text: String) throws -> Bool {
        try base.isValidJSON(text)
    }

    public func isConstraintFailure(_ error: any Error) -> Bool {
        base.isConstraintFailure(error)
    }
}
