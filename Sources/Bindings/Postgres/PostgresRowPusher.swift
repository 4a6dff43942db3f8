import CLuaShim
import CSQLBridge
import LuaRuntime
import PostgresWire
import Store

/// The `db` module's rows over PostgreSQL, made in C (`opsh_pg.c`) from
/// each DataRow's bytes as PostgresWire hands them out
/// (``PostgresDatabase/execute(_:_:eachRow:)``): no ``PostgresValue``,
/// ``StoreValue`` or Swift `String` per value. The values are the ones
/// ``PostgresDatabase/value(_:)`` gives (`opsh_pg.h` says how; a test
/// compares the two paths value by value); the rows have the shapes
/// ``StoreValuePusher`` gives them (the same metatables).
final class PostgresRowPusher {
    private let rowShapes: RowShapes

    /// The layout last prepared, held so that its identity cannot be
    /// reused by another while it is compared against.
    private var layout: PostgresRowLayout?
    private(set) var names: [String] = []
    private(set) var kinds: [UInt8] = []
    private var shapeKey = ""

    init(rowShapes: RowShapes) {
        self.rowShapes = rowShapes
    }

    /// How `opsh_pg_push_value` reads a column of this type in this format.
    static func kind(type: UInt32, binary: Bool) -> UInt8 {
        let kind: opsh_pg_kind
        if binary {
            switch type {
            case PostgresType.int2: kind = OPSH_PG_BINARY_INT2
            case PostgresType.int4: kind = OPSH_PG_BINARY_INT4
            case PostgresType.oid: kind = OPSH_PG_BINARY_OID
            case PostgresType.int8: kind = OPSH_PG_BINARY_INT8
            case PostgresType.float4: kind = OPSH_PG_BINARY_FLOAT4
            case PostgresType.float8: kind = OPSH_PG_BINARY_FLOAT8
            case PostgresType.bool: kind = OPSH_PG_BINARY_BOOL
            case PostgresType.bytea: kind = OPSH_PG_BINARY_BYTEA
            default: kind = OPSH_PG_TEXT
            }
        } else {
            switch type {
            case PostgresType.int2, PostgresType.int4, PostgresType.int8, PostgresType.oid: kind = OPSH_PG_TEXT_INTEGER
            case PostgresType.float4: kind = OPSH_PG_TEXT_FLOAT4
            case PostgresType.float8: kind = OPSH_PG_TEXT_FLOAT8
            case PostgresType.bool: kind = OPSH_PG_TEXT_BOOL
            case PostgresType.bytea: kind = OPSH_PG_TEXT_BYTEA
            case PostgresType.numeric: kind = OPSH_PG_TEXT_NUMERIC
            default: kind = OPSH_PG_TEXT
            }
        }
        return UInt8(kind.rawValue)
    }

    /// Works out `layout`'s names and kinds (once per layout: a prepared
    /// statement keeps its layout).
    func prepare(_ layout: PostgresRowLayout) {
        guard layout !== self.layout else { return }
        self.layout = layout
        names = PostgresDatabase.rowKeys(layout)
        kinds = zip(layout.columns, layout.binary).map { Self.kind(type: $0.typeOID, binary: $1) }
        shapeKey = Self.shapeKey(names)
    }

    /// The key ``StoreValuePusher`` keeps these columns' shape under, so
    /// that both give rows the same metatables.
    private static func shapeKey(_ names: [String]) -> String {
        "opsh.value:" + names.joined(separator: "\u{1F}")
    }

    /// Pushes the shape of the prepared layout's rows (names, row
    /// metatable, rows metatable) and returns the index of the names.
    func pushShape(state: OpaquePointer) -> Int32 {
        rowShapes.push(columns: names, key: shapeKey, state: state)
    }

    /// Pushes the shape of rows with these columns (a result without rows).
    func pushShape(columns: [String], state: OpaquePointer) -> Int32 {
        rowShapes.push(columns: columns, key: Self.shapeKey(columns), state: state)
    }

    /// Pushes `row` (of the prepared layout) as a row table.
    func pushRow(_ row: PostgresDataRow, names: Int32, state: OpaquePointer) throws {
        let pushed = kinds.withUnsafeBufferPointer { kinds in
            opsh_pg_push_row(state, row.body.baseAddress?.assumingMemoryBound(to: UInt8.self), row.body.count,
                             kinds.baseAddress, Int32(kinds.count), names, names + 1)
        }
        guard pushed != 0 else { throw PostgresClientError.protocolViolation("a row the db module cannot read") }
    }

    /// Pushes the first column of `row` (of the prepared layout), nil for
    /// NULL or a row without columns.
    func pushFirstColumn(_ row: PostgresDataRow, state: OpaquePointer) {
        guard let kind = kinds.first,
              opsh_pg_push_column(state, row.body.baseAddress?.assumingMemoryBound(to: UInt8.self), row.body.count, kind, 0) != 0
        else { return lua_pushnil(state) }
    }

    /// A statement's rows kept as received, in a row store on the stack
    /// (`opsh_pg_rows`): runs `execute` with a row handler that copies each
    /// row into it, then sets the store's kinds. Returns the store's stack
    /// index and the names' index of the shape pushed above it.
    func collect(state: OpaquePointer,
                 _ execute: ((PostgresDataRow) throws -> Void) throws -> PostgresDatabase.Result) throws -> (store: Int32, names: Int32) {
        _ = lua_checkstack(state, 8)
        let store = opsh_pg_rows_new(state)!
        let storeIndex = lua_gettop(state)
        var layout: PostgresRowLayout? = nil
        var count = 0
        let result = try execute { row in
            if layout == nil { layout = row.layout }
            guard opsh_pg_rows_append(store, row.body.baseAddress, row.body.count) != 0 else {
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
