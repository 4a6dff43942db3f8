import CLuaShim

extension LuaRuntime {
    /// Creates the global tables `names` now, empty (or keeps one that a
    /// module installed before made, if it has no metatable), and fills them the
    /// first time Lua reads a field that is not there, sets a field or
    /// iterates one of them with `pairs`: `install` then runs once, for
    /// the whole group (it must fill the tables through
    /// ``register(module:_:)``, which finds them by their global names).
    ///
    /// Installing a module can cost more than a short script does (Swift
    /// instantiates its generic types and looks up their protocol
    /// conformances at run time): `opsh -e` pays only for the modules the
    /// code uses. An error thrown by `install` is raised in the Lua code
    /// that touched the module, and the next touch tries again.
    public func registerLazily(modules names: [String], install: @escaping () throws -> Void) {
        let group = LazyModuleGroup(install: install)
        lua_createtable(state, 0, 3)
        pushFunction("(module loader)", { call in
            try group.load(in: call.stack)
            lua_settop(call.state, 2)
            _ = lua_gettable(call.state, 1)
            return 1
        })
        stack.setField("__index", at: -2)
        pushFunction("(module loader)", { call in
            try group.load(in: call.stack)
            lua_settop(call.state, 3)
            lua_settable(call.state, 1)
            return 0
        })
        stack.setField("__newindex", at: -2)
        pushFunction("(module loader)", { call in
            try group.load(in: call.stack)
            _ = lua_getglobal(call.state, "next")
            lua_pushvalue(call.state, 1)
            lua_pushnil(call.state)
            return 3
        })
        stack.setField("__pairs", at: -2)
        group.metatable = stack.reference(at: -1)
        for name in names {
            // A table another module already started (`telemetry.cleanup`
            // before the repository's functions) is kept and made lazy.
            let base = lua_gettop(state)
            let reusable = lua_getglobal(state, name) == LUA_TTABLE && lua_getmetatable(state, -1) == 0
            if !reusable {
                lua_settop(state, base)
                lua_createtable(state, 0, 0)
            }
            lua_pushvalue(state, -2)
            lua_setmetatable(state, -2)
            group.placeholders.append(stack.reference(at: -1))
            lua_setglobal(state, name)
        }
        stack.pop()
        lazyModuleGroups.append(group)
    }

    /// Installs every module still waiting for its first use (for what
    /// lists them all, such as `help()`).
    public func installLazyModules() throws {
        let groups = lazyModuleGroups
        lazyModuleGroups = []
        for group in groups { try group.load(in: stack) }
    }
}

/// Modules installed together on first use (see
/// ``LuaRuntime/registerLazily(modules:install:)``).
final class LazyModuleGroup {
    let install: () throws -> Void
    var placeholders: [LuaReference] = []
    var metatable: LuaReference?
    private var installed = false

    init(install: @escaping () throws -> Void) {
        self.install = install
    }

    func load(in stack: LuaStack) throws {
        guard !installed else { return }
        // The metatables go first: install's own use of the tables must
        // not come back here.
        setMetatable(nil, in: stack)
        do {
            try install()
        } catch {
            // Lazy again, so that the next touch tries again.
            setMetatable(metatable, in: stack)
            throw error
        }
        installed = true
        placeholders = []
        metatable = nil
    }

    private func setMetatable(_ metatable: LuaReference?, in stack: LuaStack) {
        for placeholder in placeholders {
            stack.push(.reference(placeholder))
            if let metatable { stack.push(.reference(metatable)) } else { stack.pushNil() }
            lua_setmetatable(stack.state, -2)
            stack.pop()
        }
    }
}
