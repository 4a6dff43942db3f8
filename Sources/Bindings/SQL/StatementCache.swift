import CLuaShim
import CSQLBridge
import Foundation
import LuaRuntime
import Store

/// Prepared statements per connection, found by the Lua string holding
/// the SQL.
///
/// A script calls `db.exec(sql, …)` with the same string object again and
/// again (a literal in a loop), so the string's address is the key: no
/// Swift String is made and nothing is hashed but a pointer. The bytes are
/// compared too, since a collected string's address can be reused. Each
/// entry also keeps its rows' shape (column names and metatables).
///
/// The entries are C structs (`opsh_sql_entry`) so that the `db` module's
/// C fast path finds the statements used lately through the route.
final class StatementCache {
    final class Entry {
        let c: UnsafeMutablePointer<opsh_sql_entry>
        private let route: UnsafeMutablePointer<opsh_sql_route>
        /// What it does to the schema (the C path leaves such statements
        /// to Swift, which counts a dropped table's rows).
        let effects: StatementEffects
        /// The read connection, whose lock the finalize takes (the
        /// statement may be on it); kept alive until then.
        private let reader: ReadConnection?

        init(_ c: UnsafeMutablePointer<opsh_sql_entry>, route: UnsafeMutablePointer<opsh_sql_route>,
             effects: StatementEffects, reader: ReadConnection?) {
            self.c = c
            self.route = route
            self.effects = effects
            self.reader = reader
            // One that may change the schema once prepared again goes to
            // Swift too, which classifies it again before it runs.
            c.pointee.changes_schema = effects.changesSchema || effects.mayChangeSchema ? 1 : 0
        }

        var statement: OpaquePointer { c.pointee.statement }
        var isReadonly: Bool { c.pointee.readonly != 0 }
        /// Registry slot of the row shape, and the column count it is for.
        var shapeSlot: Int32 {
            get { c.pointee.shape_ref }
            set { c.pointee.shape_ref = newValue }
        }
        var shapeColumns: Int32 {
            get { c.pointee.shape_columns }
            set { c.pointee.shape_columns = newValue }
        }
        /// The statement's re-prepare count when the shape was made.
        var shapeReprepares: Int32 {
            get { c.pointee.shape_reprepares }
            set { c.pointee.shape_reprepares = newValue }
        }

        var sql: String { String(cString: c.pointee.bytes) }

        deinit {
            opsh_sql_forget(route, c)
            if let reader {
                reader.lending { _ in opsh_sql_entry_free(c) }
            } else {
                opsh_sql_entry_free(c)
            }
        }
    }

    private struct Key: Hashable {
        let connection: OpaquePointer
        let address: UnsafeRawPointer
    }

    /// Beyond this many statements the cache starts over: a script that
    /// builds SQL by concatenation must not grow it without end.
    private let capacity = 512
    /// What the C fast path reads (the session's route, the recent
    /// statements); owned here, so it outlives every entry.
    let route: UnsafeMutablePointer<opsh_sql_route>
    private var entries: [Key: Entry] = [:]
    /// Row-shape registry slots of dropped entries, for the Lua thread to
    /// free.
    private(set) var releasedShapeSlots: [Int32] = []

    /// The read connection (NOMUTEX): its statements are prepared under
    /// its lock by the caller and finalized under it by their entry.
    private let reader: ReadConnection?

    init(session: UnsafeMutablePointer<opsh_session_route>, reader: ReadConnection?) {
        route = opsh_sql_route_new()
        route.pointee.session = session
        self.reader = reader
    }

    deinit {
        entries.removeAll()
        opsh_sql_route_free(route)
    }

    /// The statement for the string at `index` on `connection`, prepared
    /// on first use.
    func statement(for state: OpaquePointer, at index: Int32, on connection: OpaquePointer) throws -> Entry {
        var length = 0
        guard let pointer = opsh_tostring(state, index, &length) else {
            throw LuaCallError.message("SQL text expected")
        }
        let key = Key(connection: connection, address: UnsafeRawPointer(pointer))
        if let entry = entries[key], opsh_sql_entry_matches(entry.c, connection, pointer, length) != 0 {
            opsh_sql_remember(route, entry.c)
            return entry
        }
        let bytes = UnsafeRawBufferPointer(start: pointer, count: length)
        // Checked once, at prepare: a NUL byte or bytes that are not UTF-8
        // would make it other SQL.
        try SQLTextReader.check(bytes)
        let sql = String(decoding: bytes, as: UTF8.self)
        let (statement, effects) = try ReadConnection.prepareChecked(sql, on: connection)
        guard let c = opsh_sql_entry_new(connection, pointer, length, statement) else {
            opsh_sqlite_finalize(statement)
            throw LuaCallError.message("out of memory")
        }
        if entries.count >= capacity { removeAll() }
        if let old = entries[key], old.shapeSlot >= 0 { releasedShapeSlots.append(old.shapeSlot) }
        let entry = Entry(c, route: route, effects: effects, reader: reader)
        entries[key] = entry
        opsh_sql_remember(route, c)
        return entry
    }

    private func removeAll() {
        releasedShapeSlots += entries.values.map(\.shapeSlot).filter { $0 >= 0 }
        entries.removeAll()
    }

    /// Frees the registry slots of dropped row shapes.
    func releaseShapes(in state: OpaquePointer) {
        for slot in releasedShapeSlots { opsh_unref(state, slot) }
        releasedShapeSlots.removeAll()
    }
}
