import CLuaShim
import LuaRuntime

/// Decides what the lines typed so far are, as `lua.c` does: an
/// expression (`1+1` runs as `return 1+1`; `=x` too), a statement, a
/// chunk that needs more lines, or a syntax error; and, as sqlite3 and
/// psql read it, SQL. As `lua.c` does, the function a chunk compiled to is
/// kept and run: a chunk is not compiled again to run it.
struct ChunkAssembler {
    /// A chunk ready to run: its text and the function it compiled to.
    struct Compiled {
        let code: String
        let function: LuaReference
        /// The top-level locals the code declares for the prompt (its
        /// `local`s made assignments, ``TopLevelLocals``); nil when it runs
        /// as typed.
        let locals: TopLevelLocals?
    }

    enum Verdict {
        /// Run this function.
        case run(Compiled)
        /// Run these SQL statements (``SQLStatementSplitter``).
        case sql([String])
        /// Read another line (continuation prompt).
        case incomplete
        case failed(LuaError)
    }

    /// The words that start SQL typed at the prompt, in any case. Transaction
    /// control is among them so that the session refuses it with its reason
    /// (ARCHITECTURE.md, decision 5), not Lua with a syntax error.
    static let sqlKeywords: Set<String> = [
        "SELECT", "WITH", "INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "DROP", "ALTER", "PRAGMA",
        "EXPLAIN", "VALUES", "BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE",
    ]

    let runtime: LuaRuntime
    let chunkName: String
    /// Whether a name is a local kept at the prompt (``PromptLocals``):
    /// Lua, as a global is.
    var isPromptLocal: (String) -> Bool = { _ in false }
    /// Whether top-level locals become the prompt's (``PromptLocals``).
    var keepsLocals = false

    func assess(_ text: String) -> Verdict {
        if let keyword = Self.leadingWord(of: text), Self.sqlKeywords.contains(keyword.uppercased()) {
            // Lua first where the word means something in Lua (`select('#', …)`,
            // `values = {}`); SQL where Lua cannot run it.
            if Self.noGlobal(named: keyword, in: runtime), !isPromptLocal(keyword), !Self.isAssignment(text, after: keyword) {
                return sql(text)
            }
            switch assessLua(text) {
            case .failed: return sql(text)
            case let verdict: return verdict
            }
        }
        return assessLua(text)
    }

    private func sql(_ text: String) -> Verdict {
        let split = SQLStatementSplitter(text)
        return split.isComplete ? .sql(split.statements) : .incomplete
    }

    private func assessLua(_ text: String) -> Verdict {
        var text = text
        if text.hasPrefix("=") { text = "return " + text.dropFirst() }
        let asExpression = "return " + text + ";"
        if case .compiled = runtime.compile(asExpression, chunkName: chunkName) {
            return .run(Compiled(code: asExpression, function: keepFunction(), locals: nil))
        }
        // With its top-level locals made the prompt's; what that rewrite
        // makes must compile, else the chunk runs as typed.
        if keepsLocals {
            let locals = TopLevelLocals(text)
            if !locals.declared.isEmpty || !locals.keptLocal.isEmpty,
               case .compiled = runtime.compile(locals.code, chunkName: chunkName) {
                return .run(Compiled(code: locals.code, function: keepFunction(), locals: locals))
            }
        }
        switch runtime.compile(text, chunkName: chunkName) {
        case .compiled:
            return .run(Compiled(code: text, function: keepFunction(), locals: nil))
        case .incomplete:
            return .incomplete
        case let .failed(error):
            return .failed(error)
        }
    }

    /// The compiled function on top of the stack, popped and kept.
    private func keepFunction() -> LuaReference {
        defer { runtime.stack.pop() }
        return runtime.stack.reference(at: -1)
    }

    /// The first word of `text` (letters, digits and `_`), or nil.
    static func leadingWord(of text: String) -> String? {
        let rest = text.drop { $0.isWhitespace }
        let word = rest.prefix { $0.isLetter || $0.isNumber || $0 == "_" }
        return word.isEmpty ? nil : String(word)
    }

    /// Whether `text` assigns to the word it starts with (`values = …`,
    /// `update, n = …`): Lua, whatever the word.
    static func isAssignment(_ text: String, after word: String) -> Bool {
        let rest = text.drop { $0.isWhitespace }.dropFirst(word.count).drop { $0.isWhitespace }
        return rest.hasPrefix(",") || (rest.hasPrefix("=") && !rest.hasPrefix("=="))
    }

    /// Whether no global is called `name` (read raw: no metamethod runs).
    static func noGlobal(named name: String, in runtime: LuaRuntime) -> Bool {
        let state = runtime.state
        lua_rawgeti(state, opsh_registryindex(), lua_Integer(LUA_RIDX_GLOBALS))
        lua_pushstring(state, name)
        let type = lua_rawget(state, -2)
        opsh_pop(state, 2)
        return type == LUA_TNIL
    }
}
