import CLuaShim
import LuaRuntime

/// The global `help`.
///
/// ```lua
/// help()                 -- every module and function: signature and one line
/// help(db.query)         -- one function, found by identity
/// help("db.query")       -- or by name
/// help(builds)           -- one module (or help("builds"))
/// help{ markdown = true }  -- every entry as Markdown; markdown = "db": one module's
/// ```
///
/// The text goes through the global `print` of the moment, so it lands
/// wherever the script's output goes. Only functions that exist in this
/// session are listed (the descriptions are data: ``HelpEntries``). The
/// Markdown form lists every entry, present or not: `scripts/docs` writes
/// `docs/lua-api.md` from it, so the page and `help()` have one source.
enum HelpModule {
    static func install(in session: OpshSession) {
        install(runtime: session.runtime)
    }

    static func install(runtime: LuaRuntime) {
        runtime.register("help") { call in
            let text = try describe(call)
            call.stack.pushGlobal("print")
            let print = call.stack.reference(at: -1)
            call.stack.pop()
            _ = try call.call(print, [.string(text)])
            return 0
        }
    }

    /// Whether `module.name` exists in the state now (raw lookups).
    static func exists(_ entry: HelpEntry, state: OpaquePointer) -> Bool {
        let top = lua_gettop(state)
        defer { lua_settop(state, top) }
        opsh_pushglobaltable(state)
        if !entry.module.isEmpty {
            LuaStack(state).push(entry.module)
            guard lua_rawget(state, -2) == LUA_TTABLE else { return false }
        }
        LuaStack(state).push(entry.name)
        return lua_rawget(state, -2) != LUA_TNIL
    }

    /// Pushes the value of an entry (or nil) and says whether it is the
    /// value at `index`.
    static func isValue(of entry: HelpEntry, at index: Int32, state: OpaquePointer) -> Bool {
        let top = lua_gettop(state)
        defer { lua_settop(state, top) }
        opsh_pushglobaltable(state)
        if !entry.module.isEmpty {
            LuaStack(state).push(entry.module)
            guard lua_rawget(state, -2) == LUA_TTABLE else { return false }
        }
        LuaStack(state).push(entry.name)
        lua_rawget(state, -2)
        return lua_type(state, -1) != LUA_TNIL && lua_rawequal(state, -1, index) != 0
    }

    static func isModule(_ module: String, at index: Int32, state: OpaquePointer) -> Bool {
        let top = lua_gettop(state)
        defer { lua_settop(state, top) }
        guard lua_getglobal(state, module) == LUA_TTABLE else { return false }
        return lua_rawequal(state, -1, index) != 0
    }

    static func describe(_ call: LuaCall) throws -> String {
        let state = call.state
        if lua_type(state, 1) == LUA_TTABLE, let markdown = try markdownRequest(call) { return markdown }
        // What `help` lists must be there (the batch modes install most
        // modules on first use).
        try call.host.installLazyModules()
        let present = HelpEntries.all.filter { exists($0, state: state) }
        if call.isNoneOrNil(1) { return overview(present, state: state) }
        let index = lua_absindex(state, 1)
        switch lua_type(state, index) {
        case LUA_TSTRING:
            let name = try call.string(1)
            if let entry = present.first(where: { $0.qualifiedName == name }) { return detail(entry) }
            if HelpEntries.modules.contains(where: { $0.name == name && !name.isEmpty }) {
                return moduleText(name, present)
            }
            throw LuaCallError.message("help: nothing is called '\(name)' (help() lists everything)")
        case LUA_TTABLE:
            if let entry = present.first(where: { isValue(of: $0, at: index, state: state) }) { return detail(entry) }
            if let module = HelpEntries.modules.first(where: { !$0.name.isEmpty && isModule($0.name, at: index, state: state) }) {
                return moduleText(module.name, present)
            }
            throw LuaCallError.message("help: no description of this table (help() lists everything)")
        case LUA_TFUNCTION:
            if let entry = present.first(where: { isValue(of: $0, at: index, state: state) }) { return detail(entry) }
            throw LuaCallError.message("help: no description of this function (help() lists everything; Lua's own functions are in the Lua manual)")
        default:
            throw call.typeError(1, expected: "function, module or name")
        }
    }

    /// `help{ markdown = true }` (every module) or `help{ markdown = "db" }`
    /// (one; "" for the globals): the entries as Markdown, or nil when the
    /// table asks for something else.
    static func markdownRequest(_ call: LuaCall) throws -> String? {
        let state = call.state
        let top = lua_gettop(state)
        defer { lua_settop(state, top) }
        LuaStack(state).push("markdown")
        switch lua_rawget(state, 1) {
        case LUA_TNIL:
            return nil
        case LUA_TBOOLEAN where lua_toboolean(state, -1) != 0:
            return HelpEntries.modules.map { markdown(module: $0.name, heading: true) }.joined(separator: "\n\n")
        case LUA_TSTRING:
            let module = LuaStack(state).string(at: -1) ?? ""
            guard HelpEntries.modules.contains(where: { $0.name == module }) else {
                throw LuaCallError.message("help: no module is called '\(module)' (help() lists them; \"\" is the globals)")
            }
            return markdown(module: module, heading: false)
        default:
            throw LuaCallError.message("help: markdown must be true or a module's name (\"\" for the globals), got \(LuaStack(state).typeName(at: -1))")
        }
    }

    /// One module's entries as a Markdown list (`- \`signature\`: summary`),
    /// under a heading with its summary when asked.
    static func markdown(module: String, heading: Bool) -> String {
        var lines: [String] = []
        if heading {
            let summary = HelpEntries.modules.first { $0.name == module }?.summary ?? ""
            lines += [module.isEmpty ? "### Global functions" : "### `\(module)`: \(summary)", ""]
        }
        for entry in HelpEntries.all where entry.module == module {
            lines.append("- `\(entry.signature)`: \(entry.summary)")
        }
        return lines.joined(separator: "\n")
    }

    static func detail(_ entry: HelpEntry) -> String {
        "\(entry.signature)\n  \(entry.summary)"
    }

    static func moduleText(_ module: String, _ present: [HelpEntry]) -> String {
        let entries = present.filter { $0.module == module }
        let summary = HelpEntries.modules.first { $0.name == module }?.summary ?? ""
        var lines = ["\(module.isEmpty ? "globals" : module) — \(summary)"]
        let width = min(entries.map { $0.signature.count }.max() ?? 0, 48)
        for entry in entries {
            let padding = String(repeating: " ", count: max(width - entry.signature.count, 0))
            lines.append("  \(entry.signature)\(padding)  \(entry.summary)")
        }
        return lines.joined(separator: "\n")
    }

    static func overview(_ present: [HelpEntry], state: OpaquePointer) -> String {
        var sections: [String] = []
        for module in HelpEntries.modules where present.contains(where: { $0.module == module.name }) {
            sections.append(moduleText(module.name, present))
        }
        sections.append("help(fn) or help(\"module.name\") describes one function; dates are numbers (seconds since 1970 UTC); NULL is an absent field, written as db.NULL.")
        return sections.joined(separator: "\n\n")
    }
}
