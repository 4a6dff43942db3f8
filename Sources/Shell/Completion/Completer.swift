import CLuaShim
import LuaRuntime

/// Tab completion for the shell: Lua globals and fields (after `.` and
/// `:`), query-key words inside `query("…` / `watch("…`, and table and
/// column names inside SQL strings.
///
/// Tables are walked with raw access only; nothing runs Lua code.
struct Completer {
    /// Table names and each table's columns, for SQL strings.
    var schema: () -> [String: [String]]

    /// Calls whose string argument is a query key.
    static let keyCallees: Set<String> = ["query", "watch", "key", "opsh.query", "opsh.watch"]
    static let sqlStart: Set<String> = ["select", "insert", "update", "delete", "with", "pragma", "replace",
                                        "explain", "create", "drop", "alter"]

    /// Candidates that replace `word` (readline's text before the cursor,
    /// up to the last word break), given the whole text before the cursor.
    func candidates(word: String, before: String, runtime: LuaRuntime) -> [String] {
        switch LuaSource.position(atEndOf: before) {
        case let .string(content, callee):
            if let callee, Self.keyCallees.contains(callee) {
                return relative(QueryKeyVocabulary.complete(content), content: content, word: word)
            }
            let first = content.drop(while: { $0 == " " }).prefix { $0.isLetter }.lowercased()
            guard Self.sqlStart.contains(first) else { return [] }
            return sqlCandidates(word: word, content: content)
        case .code:
            return luaCandidates(word: word, state: runtime.state)
        }
    }

    /// Completions of the whole string content, cut to what replaces `word`.
    private func relative(_ completions: [String], content: String, word: String) -> [String] {
        let base = content.dropLast(word.count)
        return completions.compactMap { completion in
            completion.hasPrefix(base) ? String(completion.dropFirst(base.count)) : nil
        }
    }

    // MARK: SQL

    private func sqlCandidates(word: String, content: String) -> [String] {
        let tables = schema()
        var prefix = word
        var qualifier = ""
        if let dot = word.lastIndex(of: ".") {
            qualifier = String(word[...dot])
            prefix = String(word[word.index(after: dot)...])
        }
        let lowered = content.lowercased()
        let mentioned = tables.keys.filter { name in
            lowered.range(of: "\\b\(name.lowercased())\\b", options: .regularExpression) != nil
        }
        var names: Set<String> = []
        if qualifier.isEmpty { names.formUnion(tables.keys) }
        // After FROM, JOIN, INTO, UPDATE, TABLE only a table fits.
        let previous = content.dropLast(word.count).split(whereSeparator: { $0 == " " || $0 == "\n" }).last?.lowercased()
        let wantsTable = ["from", "join", "into", "update", "table"].contains(previous ?? "")
        if !wantsTable {
            for table in (mentioned.isEmpty ? Array(tables.keys) : mentioned) { names.formUnion(tables[table] ?? []) }
        }
        if !qualifier.isEmpty, let columns = tables[String(qualifier.dropLast())] { names.formUnion(columns) }
        let lowerPrefix = prefix.lowercased()
        return names.filter { $0.lowercased().hasPrefix(lowerPrefix) }.sorted().map { qualifier + $0 }
    }

    // MARK: Lua

    private func luaCandidates(word: String, state: OpaquePointer) -> [String] {
        let separatorIndex = word.lastIndex { $0 == "." || $0 == ":" }
        let path: [String]
        let prefix: String
        var methodsOnly = false
        if let separatorIndex {
            path = word[..<separatorIndex].split(separator: ".", omittingEmptySubsequences: false).map(String.init)
            prefix = String(word[word.index(after: separatorIndex)...])
            methodsOnly = word[separatorIndex] == ":"
            if path.contains(where: { $0.isEmpty || $0.contains(":") }) { return [] }
        } else {
            path = []
            prefix = word
        }
        let top = lua_gettop(state)
        defer { lua_settop(state, top) }
        guard lua_checkstack(state, 10) != 0 else { return [] }
        opsh_pushglobaltable(state)
        for part in path {
            guard lua_type(state, -1) == LUA_TTABLE else { return [] }
            LuaInspection.pushString(state, part)
            lua_rawget(state, -2)
        }
        var names: Set<String> = []
        collectKeys(state, lua_gettop(state), prefix: prefix, methodsOnly: methodsOnly, into: &names)
        let base = word.dropLast(prefix.count)
        var result = names.sorted().map { String(base) + $0 }
        if path.isEmpty {
            result += ValuePrinter.keywords.filter { $0.hasPrefix(prefix) }.sorted()
        }
        return result
    }

    /// The identifier keys of the value at `index`, and of the tables its
    /// metatable's `__index` leads to (methods of strings, host objects).
    private func collectKeys(_ state: OpaquePointer, _ index: Int32, prefix: String, methodsOnly: Bool,
                             into names: inout Set<String>) {
        var current = index
        for _ in 0..<4 {
            if lua_type(state, current) == LUA_TTABLE {
                lua_pushnil(state)
                while lua_next(state, current) != 0 {
                    if lua_type(state, -2) == LUA_TSTRING,
                       let key = LuaInspection(state: state).string(-2),
                       key.hasPrefix(prefix), ValuePrinter.isIdentifier(key),
                       !methodsOnly || lua_type(state, -1) == LUA_TFUNCTION {
                        names.insert(key)
                    }
                    opsh_pop(state, 1)
                }
            }
            guard lua_getmetatable(state, current) != 0 else { return }
            LuaInspection.pushString(state, "__index")
            lua_rawget(state, -2)
            guard lua_type(state, -1) == LUA_TTABLE else { return }
            current = lua_gettop(state)
        }
    }
}
