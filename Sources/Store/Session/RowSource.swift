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

    init(names: [String], kinds: [UInt8]) {
        self.names = names
        self.kinds = kinds
    }

}
