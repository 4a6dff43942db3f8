import Foundation

/// One row of a result as its engine holds it, lent for the length of a
/// call: the one row path of both engines (ARCHITECTURE.md, "The row
/// path"). A sink makes what it needs of it — a Lua table, in C, or
/// ``StoreValue``s — without a value in between.
public enum RowSource {
    /// An SQLite statement (`sqlite3_stmt *`) stepped onto the row.
    case sqlite(OpaquePointer)
    /// A PostgreSQL DataRow's body, in place in the connection's receive
    /// buffer, and how its columns read.
    case wire(UnsafeRawBufferPointer, WireLayout)
}

/// The columns of a PostgreSQL result: their names as rows are keyed
/// (``PostgresNames``), and how each column's bytes read
/// (`opsh_wire_kind.h`: its type, and whether it came in text or binary).
/// One per row description: a prepared statement keeps its layout, so a
/// sink may cache what it derives by the layout's identity.
public final class WireLayout {
    public let names: [String]
    /// An `opsh_pg_kind` per column.
    public let kinds: [UInt8]
    /// Per column: whether the schema declares it as seconds since 1970
    /// (``DeclaredTimeColumns``), so the shell shows it as a date.
    public let dates: [Bool]

    init(names: [String], kinds: [UInt8], dates: [Bool]) {
        self.names = names
        self.kinds = kinds
        self.dates = dates
    }

}

/// A statement's values as a script gives them: by position (`?`, `?2`),
/// or one table that gives `:name`s by name and `?`s by position.
public enum SQLArguments: Sendable {
    case positional([StoreValue])
    case table(positional: [StoreValue], named: [String: StoreValue])
}

/// What a statement run through a ``RowPath`` returned, besides its rows.
public struct StatementOutcome: Sendable {
    /// Column names, keyed as rows are.
    public var columns: [String]
    /// Rows inserted, updated or deleted (nil for other statements).
    public var changes: Int?

    public init(columns: [String], changes: Int?) {
        self.columns = columns
        self.changes = changes
    }
}

/// A server's statements, their rows lent one at a time as
/// ``RowSource/wire(_:_:)`` (PostgreSQL's session).
public protocol WireStatements: AnyObject {
    /// Runs one statement with the session's rules; each row to `rows`, in place.
    func run(_ sql: String, _ arguments: SQLArguments, rows: (RowSource) throws -> Void) throws -> StatementOutcome
    /// Runs one of Store's own statements (a fixed text: a repository's
    /// read-back, a key's) as ``run(_:_:rows:)`` does, naming opsh's tables
    /// in their schema, where a script's statement is run as written
    /// (PostgreSQL's `PostgresHomeSchema`).
    func runOwn(_ sql: String, _ arguments: SQLArguments, rows: (RowSource) throws -> Void) throws -> StatementOutcome
    /// Runs a script of several statements given without values, all or
    /// nothing; the rows the last one changed.
    func runScript(_ sql: String) throws -> Int
    /// Runs one write whose result the caller does not need: inside a
    /// transaction the server's session may send it without waiting
    /// (PostgresDatabase+Pipeline), its failure raised later, naming
    /// `origin` (where the script sent it).
    func send(_ sql: String, _ arguments: SQLArguments, origin: String?) throws
}

/// How a session's rows reach the `db` module, the repositories and the
/// query keys: the one row path of its engine (ARCHITECTURE.md, "The row
/// path").
public enum RowPath {
    /// SQLite's statements, stepped on the session's connections (the
    /// route its C fast path reads, ``SessionDatabase/route``): the Lua
    /// side keeps a statement cache and steps them itself.
    case sqlite(SessionDatabase)
    /// A server's statements, rows lent as ``RowSource/wire(_:_:)``.
    case wire(any WireStatements)
}
