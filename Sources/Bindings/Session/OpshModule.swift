import CLuaShim
import LuaRuntime

/// `opsh.*` about the run itself (the event functions `opsh.wait` and
/// `opsh.watches` come with `watch`).
public enum OpshModule {
    static func install(in session: OpshSession) {
        let database = session.database
        session.runtime.register(module: "opsh", [
            // Scripts say "would delete" rather than "deleted" under
            // `opsh run --dry-run`, and skip work that cannot be rolled back.
            "dryRun": { call in call.results(.boolean(database.isDryRun)) },
        ])
        // The shell replaces it with the real one (its chunks keep changesets).
        let refusal = { () -> LuaCallError in
            if let why = database.undoUnavailable { return LuaCallError.message(why) }
            return LuaCallError.message("undo() takes back chunks typed at the interactive shell's prompt; a script's changes cannot be undone: try it with --dry-run first, and cap it with --max-changes")
        }
        installUndo(in: session.runtime, undo: { _ in throw refusal() }, list: { _ in throw refusal() })
    }

    /// `undo(n)` and `undo.list()`: a table that is called as a function
    /// (the `undo(n)` operators type) and holds `list` (what `.undo` shows).
    public static func installUndo(in runtime: LuaRuntime, undo: @escaping LuaHostFunction, list: @escaping LuaHostFunction) {
        runtime.register(module: "undo", ["list": list])
        let state = runtime.state
        lua_getglobal(state, "undo")
        lua_createtable(state, 0, 2)
        // The table is argument 1 of __call: taken off, so undo(n)'s n is
        // its argument 1 and an error names the operator's line.
        runtime.pushFunction("undo", { call in
            lua_rotate(call.state, 1, -1)
            opsh_pop(call.state, 1)
            return try undo(call)
        })
        runtime.stack.setField("__call", at: -2)
        runtime.stack.push("opsh.undo")
        runtime.stack.setField("__name", at: -2)
        lua_setmetatable(state, -2)
        opsh_pop(state, 1)
    }
}
