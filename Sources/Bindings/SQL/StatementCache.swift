import CLuaShim
import Foundation
import GRDBSQLite
import LuaRuntime

/// Prepared statements per connection, found by the Lua string holding
/// the SQL.
///
/// A script calls `db.exec(sql, …)` with the same string object again and
/// again (a literal in a loop), so the string's address is the key: no
/// Swift String is made and nothing is hashed but a pointer. The bytes are
/// compared too, since a collected string's address can be reused. Each
/// entry also keeps its rows' shape (column names and metatables).
final class StatementCache {
    final class Entry {
        let bytes: [UInt8]
        let statement: OpaquePointer
        let isReadonly: Bool
        /// Registry slot of the row shape, and the column count it is for.
        var shapeSlot: Int32 = -1
        var shapeColumns: Int32 = -1

        init(bytes: [UInt8], statement: OpaquePointer) {
            self.bytes = bytes
            self.statement = statement
            self.isReadonly = sqlite3_stmt_readonly(statement) != 0
        }

        var sql: String { String(decoding: bytes, as: UTF8.self) }

        func matches(_ pointer: UnsafePointer<CChar>, _ length: Int) -> Bool {
            bytes.count == length && (length == 0 || bytes.withUnsafeBytes { memcmp($0.baseAddress!, pointer, length) == 0 })
        }

        deinit { sqlite3_finalize(statement) }
    }

    private struct Key: Hashable {
        let connection: OpaquePointer
        let address: UnsafeRawPointer
    }

    /// Beyond this many statements the cache starts over: a script that
    /// builds SQL by concatenation must not grow it without end.
    private let capacity = 512
    private var entries: [Key: Entry] = [:]
    private var last: (key: Key, entry: Entry)?
    /// Row-shape registry slots of dropped entries, for the Lua thread to
    /// free.
    private(set) var releasedShapeSlots: [Int32] = []

    /// The statement for the string at `index` on `connection`, prepared
    /// on first use.
    func statement(for state: OpaquePointer, at index: Int32, on connection: OpaquePointer) throws -> Entry {
        var length = 0
        guard let pointer = opsh_tostring(state, index, &length) else {
            throw LuaCallError.message("SQL text expected")
        }
        let key = Key(connection: connection, address: UnsafeRawPointer(pointer))
        // A loop runs the same statement again and again: try it first.
        if let last, last.key == key, last.entry.matches(pointer, length) { return last.entry }
        if let entry = entries[key], entry.matches(pointer, length) {
            last = (key, entry)
            return entry
        }
        let bytes = Array(UnsafeRawBufferPointer(start: pointer, count: length))
        let statement = try ReadConnection.prepare(String(decoding: bytes, as: UTF8.self), on: connection)
        if entries.count >= capacity { removeAll() }
        if let old = entries[key], old.shapeSlot >= 0 { releasedShapeSlots.append(old.shapeSlot) }
        let entry = Entry(bytes: bytes, statement: statement)
        entries[key] = entry
        last = (key, entry)
        return entry
    }

    private func removeAll() {
        last = nil
        releasedShapeSlots += entries.values.map(\.shapeSlot).filter { $0 >= 0 }
        entries.removeAll()
    }

    /// Frees the registry slots of dropped row shapes.
    func releaseShapes(in state: OpaquePointer) {
        for slot in releasedShapeSlots { opsh_unref(state, slot) }
        releasedShapeSlots.removeAll()
    }
}
