import CLuaShim
import LuaRuntime
import Store

/// The key objects of one root word and its id (`key.build(id)`,
/// `key.project(id)`): Lua values that hold no Swift object.
///
/// Any other key object holds a ``KeyNode``, which its finaliser (`__gc`)
/// releases; in a loop that makes a key per row (`query(key.build(id))`)
/// Lua's collector running those finalisers was most of the key's own
/// cost beside `db.first` (issue 27; BENCHMARKS.md, "The domain layer
/// against hand-written SQL"). A key of a root word and an id is a
/// userdata without a finaliser: the root's position in ``roots``, and the
/// id as its user value; Lua frees both. Whatever a script does with it
/// (`query`, a field, a call, `tostring`, `==`, `..`) works on the
/// ``KeyNode`` it stands for, made when asked (``node(_:at:)``): the same
/// node, the same messages, as the builder's other keys.
enum IdKeys {
    /// The registry name of their metatable; `__name` says "opsh.key", as
    /// for every key object.
    static let metatableName = "opsh.key.id"

    /// The root words a call with one id follows (`build`, `project`…), as
    /// the builder's functions (``KeyModule/installBuilder(runtime:)``).
    static let roots: [(word: String, node: KeyNode)] = QueryKeyGrammar.rootWords.compactMap { word in
        guard let node = KeyNode.root(word), node.key == nil, case let .value(slot)? = node.call,
              slot.prefix == nil, slot.kind != .idList else { return nil }
        return (word, node)
    }

    /// The position of `word` in ``roots``, if a call with one id follows it.
    static func root(_ word: String) -> Int? {
        roots.firstIndex { $0.word == word }
    }

    /// Makes this state's metatable of these keys: `metamethods`, those of
    /// every key object, and no `__gc`.
    static func installMetatable(runtime: LuaRuntime, metamethods: [String: LuaHostFunction]) {
        let state = runtime.state
        guard luaL_newmetatable(state, metatableName) != 0 else {
            opsh_pop(state, 1)
            return
        }
        for (name, body) in metamethods {
            runtime.pushFunction(name, body, on: state)
            lua_setfield(state, -2, name)
        }
        lua_pushstring(state, KeyModule.typeName)
        lua_setfield(state, -2, "__name")
        opsh_pop(state, 1)
    }

    /// Pushes the key of root `root` and the id given as argument 1 of
    /// `call` (`text`, as ``KeyModule/id(_:_:as:function:)`` read it).
    static func push(root: Int, id text: String, _ call: LuaCall) -> Int32 {
        let state = call.state
        let box = lua_newuserdatauv(state, MemoryLayout<Int32>.size, 1)!
        box.storeBytes(of: Int32(root), as: Int32.self)
        // The id as Lua has it (no string made again), a number as text.
        if lua_type(state, 1) == LUA_TSTRING {
            lua_pushvalue(state, 1)
        } else {
            LuaStack(state).push(text)
        }
        lua_setiuservalue(state, -2, 1)
        lua_getfield(state, opsh_registryindex(), metatableName)
        lua_setmetatable(state, -2)
        return 1
    }

    /// `key.<root>(id)` for an id of ASCII text, without Swift's host call
    /// (Lua's C call to a C function): the key made as ``push(root:id:_:)``
    /// makes it; `data` is the root's position plus one. Anything else
    /// (a number, text to check as UTF-8, no id) is declined to the
    /// function's Swift body, which reads it and names what is wrong.
    static let fastPush: opsh_fast_path = { state, data in
        guard let state, lua_type(state, 1) == LUA_TSTRING else { return OPSH_DECLINE }
        var length = 0
        guard let bytes = lua_tolstring(state, 1, &length) else { return OPSH_DECLINE }
        for offset in 0..<length where UInt8(bitPattern: bytes[offset]) >= 0x80 { return OPSH_DECLINE }
        let box = lua_newuserdatauv(state, MemoryLayout<Int32>.size, 1)!
        box.storeBytes(of: Int32(Int(bitPattern: data) - 1), as: Int32.self)
        lua_pushvalue(state, 1)
        lua_setiuservalue(state, -2, 1)
        lua_getfield(state, opsh_registryindex(), metatableName)
        lua_setmetatable(state, -2)
        return 1
    }

    /// The node the key at `index` stands for, nil when it is not one of these.
    static func node(_ call: LuaCall, at index: Int32) -> KeyNode? {
        guard let (root, id) = rootAndID(call, at: index) else { return nil }
        return roots[root].node.called(with: .text(id))
    }

    /// The root (its position in ``roots``) and the id of the key at
    /// `index`, nil when it is not one of these.
    static func rootAndID(_ call: LuaCall, at index: Int32) -> (root: Int, id: String)? {
        let state = call.state
        guard let box = luaL_testudata(state, index, metatableName) else { return nil }
        let root = Int(box.load(as: Int32.self))
        lua_getiuservalue(state, index, 1)
        defer { opsh_pop(state, 1) }
        guard roots.indices.contains(root), let id = LuaStack(state).string(at: -1) else { return nil }
        return (root, id)
    }
}

/// The statement of each root's keys in one session's dialect, where a key
/// of that root and an id is one statement whose only value is the id
/// (`build.{id}`: `SELECT * FROM builds WHERE id = ?`): made once from the
/// key's own plan (``QueryKey/plan(dialect:)``), so that `query` runs what
/// the plan runs without making a node and a plan per call. A root whose
/// statement depends on the id, or has other values, has none: its keys
/// take the plan's route.
final class IdKeyStatements {
    let dialect: SQLDialect
    private var made: [QueryStatement?]?

    init(dialect: SQLDialect) {
        self.dialect = dialect
    }

    func statement(root: Int) -> QueryStatement? {
        if made == nil { made = IdKeys.roots.indices.map(make) }
        return made![root]
    }

    private func make(_ root: Int) -> QueryStatement? {
        func statement(_ id: String) -> QueryStatement? {
            guard let key = IdKeys.roots[root].node.called(with: .text(id)).key,
                  case let .statement(statement)? = try? key.plan(dialect: dialect) else { return nil }
            return statement
        }
        // Two ids: the same text and shape, each its own id as the one value.
        guard let first = statement("a"), let second = statement("b"), first.sql == second.sql,
              first.shape == second.shape, first.values == [.text("a")], second.values == [.text("b")] else { return nil }
        return first
    }
}
