import CLuaShim
import LuaRuntime

/// What the prompt shows of a build row a jobs call returned (issue 26,
/// "Jobs at the prompt"): one line, not the 20-line record that pushes a
/// log off the screen. Scripts get the row as it was; the line rides in the
/// row's metatable (field ``field``, beside `columns`), which the shell's
/// printer reads in `.mode table` and `line` at the prompt only.
public enum PromptSummary {
    /// The metatable field holding the line; "" shows nothing (the line was
    /// printed already).
    public static let field = "shown"

    /// Gives the row on top of the stack a metatable of its own: the
    /// rows' shared one's fields plus the line `text` makes from the row's
    /// `buildNumber`.
    static func attach(to state: OpaquePointer, _ text: (Int64) -> String) {
        let row = lua_gettop(state)
        guard lua_type(state, row) == LUA_TTABLE, lua_checkstack(state, 6) != 0 else { return }
        lua_pushstring(state, "buildNumber")
        lua_rawget(state, row)
        let number = lua_isinteger(state, -1) != 0 ? opsh_tointeger(state, -1, nil) : 0
        opsh_pop(state, 1)
        lua_createtable(state, 0, 6)
        let copy = lua_gettop(state)
        if lua_getmetatable(state, row) != 0 {
            let shared = lua_gettop(state)
            lua_pushnil(state)
            while lua_next(state, shared) != 0 {
                lua_pushvalue(state, -2)
                lua_rotate(state, -2, 1)
                lua_rawset(state, copy)
            }
            opsh_pop(state, 1)
        }
        LuaStack(state).push(text(number))
        lua_setfield(state, copy, field)
        lua_setmetatable(state, row)
    }
}
