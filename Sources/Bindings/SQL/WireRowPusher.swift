import CLuaShim
import CSQLBridge
import LuaRuntime
import Store

/// A server's rows made into Lua tables in C (`opsh_pg.c`) from each
/// DataRow's bytes as Store lends them (``RowSource/wire(_:_:)``)
/// (``PostgresDatabase/execute(_:_:eachRow:)``): no ``PostgresValue``,
/// ``StoreValue`` or Swift `String` per value. The values are the ones
/// ``PostgresDatabase/value(_:)`` gives (`opsh_pg.h` says how; a test
/// compares the two paths value by value); the rows have the shapes
/// ``StoreValuePusher`` gives them (the same metatables).
final class WireRowPusher {
    private let rowShapes: RowShapes

    /// The layout last prepared, held so that its identity cannot be
    /// reused by another while it is compared against.
    private var layout: WireLayout?
    private(set) var names: [String] = []
    private(set) var kinds: [UInt8] = []
    /// Per column: a declared time column (``WireLayout/dates``).
    private var dates: [Bool] = []
    private var shapeKey = ""

    init(rowShapes: RowShapes) {
        self.rowShapes = rowShapes
    }

    /// Takes `layout`'s names and kinds (once per layout: a prepared
    /// statement keeps its layout).
    func prepare(_ layout: WireLayout) {
        guard layout !== self.layout else { return }
        self.layout = layout
        names = layout.names
        kinds = layout.kinds
        dates = layout.dates
        shapeKey = Self.shapeKey(names, dates: dates)
    }

    /// The key ``StoreValuePusher`` keeps these columns' shape under, so
    /// that both give rows the same metatables; the time columns' places
    /// after it when there are any (`createdAt AS latest` and `42 AS latest`
    /// share names, not a shape).
    private static func shapeKey(_ names: [String], dates: [Bool] = []) -> String {
        RowShapes.valueKey(names, dates: dates)
    }

    /// Pushes the shape of the prepared layout's rows (names, row
    /// metatable, rows metatable) and returns the index of the names.
    func pushShape(state: OpaquePointer) -> Int32 {
        rowShapes.push(columns: names, dates: dates, key: shapeKey, state: state)
    }

    /// Pushes the shape of rows with these columns (a result without rows).
    func pushShape(columns: [String], state: OpaquePointer) -> Int32 {
        rowShapes.push(columns: columns, key: Self.shapeKey(columns), state: state)
    }

    /// Pushes `body` (a row of the prepared layout) as a row table.
    func pushRow(_ body: UnsafeRawBufferPointer, names: Int32, state: OpaquePointer) throws {
        let pushed = kinds.withUnsafeBufferPointer { kinds in
            opsh_pg_push_row(state, body.baseAddress?.assumingMemoryBound(to: UInt8.self), body.count,
                             kinds.baseAddress, Int32(kinds.count), names, names + 1)
        }
        guard pushed != 0 else { throw LuaCallError.message("a row the db module cannot read") }
    }

    /// Pushes the first column of `body` (a row of the prepared layout),
    /// nil for NULL or a row without columns.
    func pushFirstColumn(_ body: UnsafeRawBufferPointer, state: OpaquePointer) {
        guard let kind = kinds.first,
              opsh_pg_push_column(state, body.baseAddress?.assumingMemoryBound(to: UInt8.self), body.count, kind, 0) != 0
        else { return lua_pushnil(state) }
    }

    /// A statement's rows kept as received, in a row store on the stack
    /// (`opsh_pg_rows`): runs `execute` with a row handler that copies each
    /// row into it, then sets the store's kinds. Returns the store's stack
    /// index and the names' index of the shape pushed above it.
    func collect(state: OpaquePointer,
                 _ execute: ((RowSource) throws -> Void) throws -> StatementOutcome) throws -> (store: Int32, names: Int32) {
        _ = lua_checkstack(state, 8)
        let store = opsh_pg_rows_new(state)!
        let storeIndex = lua_gettop(state)
        var layout: WireLayout? = nil
        var count = 0
        let result = try execute { row in
            guard case let .wire(body, rowLayout) = row else { return }
            if layout == nil { layout = rowLayout }
            guard opsh_pg_rows_append(store, body.baseAddress, body.count) != 0 else {
                throw LuaCallError.message("not enough memory")
            }
            // The kept bytes count against the memory limit as they arrive.
            count += 1
            try RowsMemoryLimit.check(state, base: storeIndex - 1, rows: count)
        }
        let names: Int32
        if let layout {
            prepare(layout)
            let set = kinds.withUnsafeBufferPointer { opsh_pg_rows_set_kinds(store, $0.baseAddress, Int32($0.count)) }
            guard set != 0 else { throw LuaCallError.message("not enough memory") }
            names = pushShape(state: state)
        } else {
            names = pushShape(columns: result.columns, state: state)
        }
        return (storeIndex, names)
    }
}

/// Moves the value on top of the stack to `index` (Lua's lua_replace, a
/// macro Swift cannot call).
func luaReplace(_ state: OpaquePointer, _ index: Int32) {
    lua_copy(state, -1, index)
    opsh_pop(state, 1)
}
