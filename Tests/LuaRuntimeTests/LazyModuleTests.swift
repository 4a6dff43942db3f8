import Testing
@testable import LuaRuntime

/// Modules installed on first use look, from Lua, like modules installed
/// at start.
@Suite struct LazyModuleTests {
    let lua = try! LuaRuntime()

    /// Registers `a` and `b` lazily; returns how often install ran.
    func registerGroup(failFirst: Bool = false) -> () -> Int {
        final class Counter { var installs = 0; var attempts = 0 }
        let counter = Counter()
        lua.registerLazily(modules: ["a", "b"]) { [lua] in
            counter.attempts += 1
            if failFirst && counter.attempts == 1 { throw LuaCallError.message("cannot install a and b") }
            counter.installs += 1
            lua.register(module: "a", ["one": { call in call.results(.integer(1)) }])
            lua.register(module: "b", ["two": { call in call.results(.integer(2)) }])
        }
        return { counter.installs }
    }

    @Test func installsOnceOnFirstUseOfAnyModuleOfTheGroup() throws {
        let installs = registerGroup()
        #expect(try lua.execute("return type(a), type(b)") == ["table", "table"])
        #expect(installs() == 0)
        #expect(try lua.execute("local b = b; return a.one(), b.two()") == [.integer(1), .integer(2)])
        #expect(installs() == 1)
        #expect(try lua.execute("return a.one() + b.two(), getmetatable(a), a.missing") == [.integer(3), .nil, .nil])
        #expect(installs() == 1)
    }

    @Test func pairsAndAssignmentSeeTheInstalledFunctions() throws {
        _ = registerGroup()
        #expect(try lua.execute("local n = {} for k in pairs(b) do n[#n + 1] = k end return table.concat(n, ',')") == ["two"])
        _ = try lua.execute("a.extra = 5")
        #expect(try lua.execute("return a.extra, type(a.one)") == [.integer(5), "function"])

        let lua2 = try LuaRuntime()
        lua2.registerLazily(modules: ["c"]) { lua2.register(module: "c", ["f": { call in call.results(.integer(7)) }]) }
        _ = try lua2.execute("c.mine = 1")
        #expect(try lua2.execute("return c.mine, c.f()") == [.integer(1), .integer(7)])
    }

    @Test func aTableStartedByAnotherModuleIsKept() throws {
        lua.register(module: "t", ["cleanup": { call in call.results("cleaned") }])
        lua.registerLazily(modules: ["t"]) { [lua] in
            lua.register(module: "t", ["insert": { call in call.results("inserted") }])
        }
        #expect(try lua.execute("return t.cleanup(), t.insert()") == ["cleaned", "inserted"])
    }

    @Test func anInstallErrorIsRaisedWhereTheModuleIsTouchedAndRetried() throws {
        let installs = registerGroup(failFirst: true)
        #expect(throws: LuaError.self) { try lua.execute("return a.one()") }
        let message = try lua.execute("local ok, e = pcall(function() return a.one() end) return ok, e")
        #expect(message == [true, .integer(1)])
        #expect(installs() == 1)
    }

    @Test func installLazyModulesInstallsWhatWasNotUsed() throws {
        let installs = registerGroup()
        try lua.installLazyModules()
        #expect(installs() == 1)
        #expect(try lua.execute("return rawget(a, 'one') ~= nil, getmetatable(b)") == [true, .nil])
    }
}
