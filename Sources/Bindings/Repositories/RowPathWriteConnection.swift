import LuaRuntime
import Store

/// The session's connection for one repository write (``RecordTable``'s
/// one-statement insert and update) whose INSERT or UPDATE goes through
/// the row path's C write where it has one (SQLite's, in an open
/// transaction: ``RepositoryStatements/write(_:_:state:)``), else through
/// Store as before. Everything else, and the session's rules around the
/// write (``DatabaseSession/writeOneStatement(table:_:)``: the pending
/// write, the counts put back on failure), stays Store's.
///
/// A statement C ran and SQLite refused was undone whole (SQLite's
/// statement journal): Store runs it again, so that the refusal comes in
/// the repositories' words (the JSON column named, the constraint
/// described) from the engine's own error, not from its text. Not after
/// Ctrl-C, a timeout or SIGTERM: SQLite forgets an interrupt once no
/// statement runs, and the write would run whole; the interrupt's own
/// error stands. Nor when the refused statement kept rows (a trigger's
/// `RAISE(FAIL)`): run again, it would write them twice; SQLite's error
/// stands.
struct RowPathWriteConnection: RepositoryConnection {
    let base: any RepositoryConnection
    let statements: RepositoryStatements
    let call: LuaCall

    var dialect: SQLDialect { base.dialect }

    func fetch(_ sql: String, _ arguments: [StoreValue]) throws -> (columns: [String], rows: [[StoreValue]]) {
        try base.fetch(sql, arguments)
    }

    func execute(_ sql: String, _ arguments: [StoreValue]) throws -> Int {
        switch statements.write(sql, arguments, state: call.state) {
        case let .done(changes, _): return changes
        case let .failed(message, kept) where kept || call.host.interruptRequested != nil: throw LuaCallError.message(message)
        case .failed, .declined: return try base.execute(sql, arguments)
        }
    }

    func insert(_ sql: String, _ arguments: [StoreValue], keyColumn: String) throws -> Int64? {
        switch statements.write(sql, arguments, state: call.state) {
        case let .done(_, rowid): return rowid
        case let .failed(message, kept) where kept || call.host.interruptRequested != nil: throw LuaCallError.message(message)
        case .failed, .declined: return try base.insert(sql, arguments, keyColumn: keyColumn)
        }
    }

    func tableSpec(_ table: String, primaryKey: String, jsonColumns: [String], booleans: Set<String>) throws -> TableSpec {
        try base.tableSpec(table, primaryKey: primaryKey, jsonColumns: jsonColumns, booleans: booleans)
    }

    func isValidJSON(_ text: String) throws -> Bool {
        try base.isValidJSON(text)
    }

    func isConstraintFailure(_ error: any Error) -> Bool {
        base.isConstraintFailure(error)
    }
}
