import LuaRuntime
import Store

/// What a statement's result becomes in Lua.
enum ResultShape {
    /// An array of rows.
    case rows
    /// The first row, or nil.
    case first
    /// The first column of the first row, or nil.
    case value
    /// Changes count (and, on SQLite, the last insert rowid).
    case changes
    /// The first column of every row, as an array (a key's id list).
    case column
}

/// The session's one row path into Lua (ARCHITECTURE.md, "The row path"):
/// the `db` module's statement functions, and the runs of Store's own SQL
/// (the repositories, query keys, `jobs.*` reads), each row made once,
/// in C, from what the engine holds (``RowSource``). One implementation per
/// row path Store offers (``RowPath``): ``SQLiteRows`` steps SQLite
/// statements with a cache and a C fast path; ``WireRows`` reads a
/// server's DataRows.
protocol RowRunner: AnyObject {
    /// Installs `db.query`, `db.first`, `db.value`, `db.exec` and `db.rows`
    /// into the `db` table (on the stack top).
    func installStatementFunctions(in runtime: LuaRuntime)
    /// Runs Store's `sql` with `arguments` and pushes what `shape` says.
    /// The call's own arguments must have been read: the stack is replaced.
    func run(_ sql: String, _ arguments: [StoreValue], shape: ResultShape, call: LuaCall) throws -> Int32
    /// A table's columns, read by `load` again only after the schema changed.
    func spec(_ table: String, load: () throws -> TableSpec) throws -> TableSpec
    /// `--sandbox`: no ATTACH, and the sandbox's guard on every connection.
    func confine()
    /// `--memory-limit`: the engine makes no value longer than `bytes`.
    func limitValueLength(to bytes: Int)
    /// A batch run's returned rows straight from the statement
    /// (``ReturnedRows``); nil: as the printer writes them.
    func writeReturnedRows(as format: ReturnedRowsFormat?)
}

extension RowRunner {
    /// A row path that does not write them itself: the printer does.
    func writeReturnedRows(as format: ReturnedRowsFormat?) {}
}

extension QueryStatement.Shape {
    /// The row path's result shape for a Store statement's.
    var resultShape: ResultShape {
        switch self {
        case .row: .first
        case .rows: .rows
        case .ids: .column
        }
    }
}
