import CLuaShim
import LuaRuntime
import Store

/// Query keys in Lua: the `key` builder and `query(key)`.
///
/// ```lua
/// local k = key.project("com.example.app").latestBuilds(3)
/// print(k)                     --> project."com.example.app".latestBuilds.limit3
/// for _, b in ipairs(query(k)) do print(b.id, b.status) end
/// query('project."com.example.app".detail')        -- textual keys too
/// key.parse(tostring(k)) == k                      --> true
/// ```
///
/// The builder mirrors the textual vocabulary: words are fields, ids are
/// arguments (`key.schemes{a, b}.builds.ids("1.2.0")`,
/// `key.build(id).logs{ debug = true, category = "build" }` or
/// `key.build(id).logs.ids.debug`). Key objects are `opsh.key` userdata;
/// `tostring` gives the canonical text, `==` compares keys.
enum KeyModule {
    static let typeName = "opsh.key"

    /// `query(key)`; the `key` builder is ``installBuilder(runtime:)``,
    /// which the session installs on first use (building the grammar's
    /// nodes costs more than a short script).
    static func install(in session: OpshSession) {
        let plans = QueryPlanRunner(rows: session.rows, rowShapes: session.rowShapes)
        let dialect = session.database.dialect
        let idStatements = IdKeyStatements(dialect: dialect)
        session.runtime.register("query") { call in
            // A key of a root word and an id: its root's one statement,
            // made once, with the id (no node, no plan per call).
            if let (root, id) = IdKeys.rootAndID(call, at: 1), let statement = idStatements.statement(root: root) {
                return try plans.run(statement, values: [.text(id)], call: call)
            }
            // Every key runs on the db module's machinery (cached, stepped
            // in C, rows built once into Lua tables); the aggregates as
            // several statements assembled in Lua.
            return try plans.push(try queryKey(call, 1).plan(dialect: dialect), call: call)
        }
    }

    /// The `key` builder and `key.parse`: no database, the same on every engine.
    static func installBuilder(runtime: LuaRuntime) {
        let push = pushNode
        // Each first word of the grammar: a function when an id follows it
        // (`key.project(id)`), a key object otherwise (`key.projects`, `key.config`).
        var functions: [String: LuaHostFunction] = [:]
        var objects: [(String, KeyNode)] = []
        for word in QueryKeyGrammar.rootWords {
            guard let node = KeyNode.root(word) else { continue }
            if let root = IdKeys.root(word) {
                // A key of the word and one id: no Swift object (IdKeys).
                functions[word] = { call in IdKeys.push(root: root, id: try id(call, 1), call) }
            } else if node.key == nil, case let .value(slot)? = node.call, slot.prefix == nil {
                functions[word] = { call in
                    let value: QueryKeyGrammar.Arguments.Value = slot.kind == .idList
                        ? .texts(try idList(call, item: slot.what)) : .text(try id(call, 1))
                    return push(node.called(with: value), call)
                }
            } else {
                objects.append((word, node))
            }
        }
        functions["parse"] = { call in
            let text = try call.string(1)
            do {
                let key = try QueryKey(parsing: text)
                return push(KeyNode.parsed(key), call)
            } catch let error as QueryKeyError {
                throw LuaCallError.message(error.description)
            }
        }
        runtime.register(module: "key", functions)
        // The key objects (the first push creates the metatable of every key
        // object of this state), and a metatable that names what `key` has
        // when a script asks for something else.
        let stack = runtime.stack
        stack.pushGlobal("key")
        // The keys of a root word and an id: the same body, its common case in C.
        for (root, (word, _)) in IdKeys.roots.enumerated() {
            guard let body = functions[word] else { continue }
            runtime.pushFunction(word, body, fastPath: IdKeys.fastPush, data: UnsafeMutableRawPointer(bitPattern: root + 1))
            stack.setField(word, at: -2)
        }
        let metamethods = keyMetamethods()
        for (name, node) in objects {
            runtime.pushObject(node, type: typeName, methods: [:], metamethods: metamethods)
            stack.setField(name, at: -2)
        }
        IdKeys.installMetatable(runtime: runtime, metamethods: metamethods)
        let names = (QueryKeyGrammar.rootWords + ["parse"]).joined(separator: ", ")
        lua_createtable(runtime.state, 0, 1)
        runtime.pushFunction("key", { call in
            let name = call.stack.string(at: 2) ?? call.stack.typeName(at: 2)
            throw LuaCallError.message("no '\(name)' in key (key has: \(names))")
        })
        stack.setField("__index", at: -2)
        lua_setmetatable(runtime.state, -2)
        stack.pop()
    }

    // MARK: Arguments

    /// The key at argument `index`: a key object or a textual key.
    static func queryKey(_ call: LuaCall, _ index: Int32) throws -> QueryKey {
        switch call.type(index) {
        case .string:
            let text = call.stack.string(at: index) ?? ""
            do {
                return try QueryKey(parsing: text)
            } catch let error as QueryKeyError {
                throw LuaCallError.message(error.description)
            }
        case .userdata:
            return try complete(try KeyModule.node(call, index))
        default:
            throw call.typeError(index, expected: "query key")
        }
    }

    static func complete(_ node: KeyNode) throws -> QueryKey {
        guard let key = node.key else {
            throw LuaCallError.message("incomplete query key '\(node.text)': add \(node.continuation)")
        }
        return key
    }

    /// An id: a string, or a number written as one.
    static func id(_ call: LuaCall, _ index: Int32, as position: Int32? = nil, function: String? = nil) throws -> String {
        let type = call.type(index)
        guard type == .string || type == .number else {
            let got = index > call.argumentCount ? "no value" : call.stack.typeName(at: index)
            throw LuaCallError.badArgument(position ?? index, function: function ?? call.name,
                                           detail: "string expected, got \(got)")
        }
        return try call.string(index)
    }

    /// A list of ids: `schemes{a, b}` or `schemes(a, b)`; `item` names one.
    static func idList(_ call: LuaCall, item: String) throws -> [String] {
        var ids: [String] = []
        if call.type(1) == .table {
            let elements: [LuaValue]
            switch try call.value(1) {
            case let .array(values): elements = values
            case .table(let fields) where fields.isEmpty: elements = []
            default: throw call.argumentError(1, "an array of \(item)s expected")
            }
            for (offset, element) in elements.enumerated() {
                switch element {
                case let .string(text): ids.append(text)
                case let .integer(number): ids.append(String(number))
                default:
                    throw call.argumentError(1, "\(item) #\(offset + 1) is a \(element.typeName), not a string")
                }
            }
        } else {
            for index in stride(from: Int32(1), through: call.argumentCount, by: 1) {
                ids.append(try id(call, index))
            }
        }
        if ids.isEmpty { throw call.argumentError(1, "at least one \(item) expected") }
        return ids
    }

    // MARK: Key objects

    /// The node of the key object at `index`: one holding its ``KeyNode``,
    /// or one of a root word and an id (``IdKeys``).
    static func node(_ call: LuaCall, _ index: Int32) throws -> KeyNode {
        if let node = IdKeys.node(call, at: index) { return node }
        return try call.object(index, as: KeyNode.self, typeName: typeName)
    }

    /// Pushes a key object. Its metatable exists: `install` created it.
    static func pushNode(_ node: KeyNode, _ call: LuaCall) -> Int32 {
        call.host.pushObject(node, type: typeName, methods: [:], on: call.state)
        return 1
    }

    private static func keyMetamethods() -> [String: LuaHostFunction] {
        var metamethods: [String: LuaHostFunction] = [:]
        let push = pushNode
        metamethods["__index"] = { call in
            let node = try KeyModule.node(call, 1)
            guard call.type(2) == .string, let name = call.stack.string(at: 2) else {
                throw LuaCallError.message("key \(node.text) has no \(call.stack.typeName(at: 2)) fields")
            }
            guard let next = node.field(name) else {
                let names = node.fieldNames
                if names.isEmpty {
                    let what = node.key == nil ? "add \(node.continuation)" : "it is a complete key"
                    throw LuaCallError.message("no '\(name)' after key \(node.text) (\(what))")
                }
                throw LuaCallError.message("no '\(name)' after key \(node.text) (expected \(names.map { "'\($0)'" }.joined(separator: ", ")))")
            }
            return push(next, call)
        }
        metamethods["__call"] = { call in
            let node = try KeyModule.node(call, 1)
            return push(try called(node, call), call)
        }
        metamethods["__tostring"] = { call in
            let node = try KeyModule.node(call, 1)
            if let key = node.key { return call.results(.string(key.description)) }
            return call.results(.string("<incomplete key \(node.text): add \(node.continuation)>"))
        }
        metamethods["__eq"] = { call in
            let left = try KeyModule.node(call, 1)
            let right = try KeyModule.node(call, 2)
            if let a = left.key, let b = right.key { return call.results(.boolean(a == b)) }
            return call.results(.boolean(left.key == nil && right.key == nil && left.text == right.text))
        }
        metamethods["__concat"] = { call in
            var text = ""
            for index in Int32(1)...2 {
                switch call.type(index) {
                case .string, .number: text += try call.string(index)
                case .userdata:
                    let node = try KeyModule.node(call, index)
                    text += try complete(node).description
                default:
                    throw LuaCallError.message("attempt to concatenate a \(call.stack.typeName(at: index)) value")
                }
            }
            return call.results(.string(text))
        }
        return metamethods
    }

    /// The node a call of `node` gives (`latestBuilds(3)`, `ids("1.2.0")`…).
    /// Argument 1 is the node itself: user arguments start at 2, and
    /// messages count them from 1.
    private static func called(_ node: KeyNode, _ call: LuaCall) throws -> KeyNode {
        let name = String(node.text.split(separator: ".").last ?? "key")
        func bad(_ detail: String) -> LuaCallError {
            .badArgument(1, function: name, detail: detail)
        }
        switch node.call {
        case let .value(slot)?:
            switch slot.kind {
            case .number(let range):
                guard call.type(2) == .number else {
                    throw bad("number expected, got \(call.argumentCount < 2 ? "no value" : call.stack.typeName(at: 2))")
                }
                guard let number = try? call.integer(2), range.contains(Int(number)) else {
                    throw bad("\(slot.what) expected")
                }
                return node.called(with: .number(Int(number)))
            case .idList:
                throw LuaCallError.message("key \(node.text) takes its ids where it starts")
            case .id, .text:
                return node.called(with: .text(try id(call, 2, as: 1, function: name)))
            }
        case let .options(word, options)?:
            guard call.type(2) == .table || call.isNoneOrNil(2) else {
                throw bad("table expected, got \(call.stack.typeName(at: 2))")
            }
            let given = call.isNoneOrNil(2) ? [:] : try call.table(2)
            var flags: Set<String> = []
            var parameters: [String: String] = [:]
            for (field, value) in given.sorted(by: { $0.key < $1.key }) {
                switch (options.first { $0.name == field }, value) {
                case let (.flag?, .boolean(flag)): if flag { flags.insert(field) }
                case (.flag?, _): throw bad("'\(field)' must be a boolean, got \(value.typeName)")
                case let (.parameter?, .string(text)): parameters[field] = text
                case (.parameter?, _): throw bad("'\(field)' must be a string, got \(value.typeName)")
                case (nil, _):
                    throw bad("unknown field '\(field)' (expected \(options.map(\.name).joined(separator: ", ")))")
                }
            }
            guard let next = node.called(then: word, flags: flags, parameters: parameters) else {
                throw bad("these fields do not go together")
            }
            return next
        case nil:
            let what = node.key == nil ? "add \(node.continuation)" : "remove the parentheses"
            throw LuaCallError.message("key \(node.text) cannot be called (\(what))")
        }
    }
}
