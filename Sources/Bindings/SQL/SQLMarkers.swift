import CLuaShim
import CSQLBridge

/// The two values a script uses to say what plain Lua cannot: `db.NULL`
/// (NULL inside a table of fields, where nil would mean "absent") and
/// `db.blob(s)` (bind a string as a BLOB even when it is valid UTF-8).
///
/// Both are recognised by identity: `db.NULL` is one table, blobs are
/// tables with one shared metatable.
struct SQLMarkers {
    let nullIdentity: UnsafeRawPointer
    let blobMetatableIdentity: UnsafeRawPointer

    /// Creates the markers in `state` and sets `db.NULL` and the blob
    /// metatable into the `db` table on top of the stack.
    static func install(in state: OpaquePointer) -> SQLMarkers {
        // db.NULL
        lua_createtable(state, 0, 0)
        lua_createtable(state, 0, 2)
        lua_pushstring(state, "opsh.NULL")
        lua_setfield(state, -2, "__name")
        luaL_loadstring(state, "return 'NULL'")
        lua_setfield(state, -2, "__tostring")
        lua_setmetatable(state, -2)
        let null = lua_topointer(state, -1)!
        lua_setfield(state, -2, "NULL")
        // The blob metatable, kept in the registry.
        lua_createtable(state, 0, 1)
        lua_pushstring(state, "opsh.blob")
        lua_setfield(state, -2, "__name")
        let blob = lua_topointer(state, -1)!
        lua_setfield(state, opsh_registryindex(), "opsh.blob")
        return SQLMarkers(nullIdentity: null, blobMetatableIdentity: blob)
    }

    func isNull(_ state: OpaquePointer, _ index: Int32) -> Bool {
        lua_topointer(state, index) == nullIdentity
    }

    func isBlob(_ state: OpaquePointer, _ index: Int32) -> Bool {
        guard lua_type(state, index) == LUA_TTABLE, lua_getmetatable(state, index) != 0 else { return false }
        defer { lua_settop(state, -2) }
        return lua_topointer(state, -1) == blobMetatableIdentity
    }

    /// db.NULL or a blob: a value, not a table of parameters.
    func isMarker(_ state: OpaquePointer, _ index: Int32) -> Bool {
        isNull(state, index) || isBlob(state, index)
    }

    /// Binds a `db.blob` value; nil when the value is not one.
    func bindBlob(_ statement: OpaquePointer, _ position: Int32, state: OpaquePointer, index: Int32) -> Int32? {
        guard isBlob(state, index) else { return nil }
        lua_rawgeti(state, index, 1)
        defer { lua_settop(state, -2) }
        var length = 0
        guard let bytes = opsh_tostring(state, -1, &length) else { return opsh_sqlite_bind_null(statement, position) }
        return opsh_sqlite_bind_blob_copy(statement, position, bytes, Int32(length))
    }
}
