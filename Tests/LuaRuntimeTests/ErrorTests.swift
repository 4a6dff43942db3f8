import Testing
@testable import LuaRuntime

/// Errors cross the bridge both ways, with positions, and never unwind
/// Swift frames.
@Suite struct ErrorTests {
    let lua = try! LuaRuntime()

    func failure(_ code: String, chunk: String = "=test") -> LuaError? {
        do {
            try lua.execute(code, chunkName: chunk)
            return nil
        } catch let error as LuaError {
            return error
        } catch {
            return nil
        }
    }

    func registerQuery() {
        lua.register(module: "db", ["query": { call in
            let sql = try call.string(1)
            let limit = try call.optionalInteger(2) ?? 10
            return call.results(.string("\(sql) \(limit)"))
        }])
    }

    @Test func syntaxErrorsSayWhere() {
        let error = failure("local x = = 1", chunk: "@script.lua")
        #expect(error?.kind == .syntax)
        #expect(error?.message == "script.lua:1: unexpected symbol near '='")
    }

    @Test func runtimeErrorsCarryLineAndTraceback() {
        let error = failure("local x = 1\nlocal function f() error('boom') end\nf()", chunk: "@job.lua")
        #expect(error?.kind == .runtime)
        #expect(error?.message == "job.lua:2: boom")
        #expect(error?.traceback?.hasPrefix("stack traceback:") == true)
        #expect(error?.traceback?.contains("job.lua:3") == true)
    }

    @Test func hostArgumentsAreCheckedAsLuaChecksThem() {
        registerQuery()
        #expect(failure("db.query({})")?.message == "test:1: bad argument #1 to 'query' (string expected, got table)")
        #expect(failure("db.query()")?.message == "test:1: bad argument #1 to 'query' (string expected, got no value)")
        #expect(failure("db.query('x', 1.5)")?.message == "test:1: bad argument #2 to 'query' (number has no integer representation)")
        #expect(failure("db.query('x', 'ten')")?.message == "test:1: bad argument #2 to 'query' (number expected, got string)")
        #expect(try! lua.execute("return db.query('select', 3)") == ["select 3"])
    }

    @Test func hostErrorsAreCatchableByPcallWithPosition() throws {
        struct Refused: Error, CustomStringConvertible { var description: String { "refused: row is locked" } }
        lua.register("fail") { _ in throw Refused() }
        let values = try lua.execute("return pcall(function() fail() end)", chunkName: "=repair")
        #expect(values == [false, "repair:1: refused: row is locked"])
    }

    @Test func callbackErrorsKeepTheirOwnPosition() throws {
        lua.register("each") { call in
            let function = try call.function(1)
            for number in 1...3 { _ = try call.call(function, [.integer(Int64(number))]) }
            return 0
        }
        let error = failure("each(function(n)\n  if n == 2 then error('bad row ' .. n) end\nend)", chunk: "@cb.lua")
        #expect(error?.message == "cb.lua:2: bad row 2")
    }

    @Test func errorObjectsThatAreNotStringsAreDescribed() {
        #expect(failure("error({code = 1})")?.message == "(error object is a table value)")
        #expect(failure("error(setmetatable({}, {__tostring = function() return 'custom' end}))")?.message == "custom")
    }

    @Test func stateStaysUsableAfterErrors() throws {
        for _ in 0..<100 { _ = failure("error('again')") }
        #expect(lua.stack.top == 0)
        #expect(try lua.execute("return 1 + 1") == [2])
    }

    @Test func incompleteChunksAreToldApart() {
        let lua = self.lua
        func compile(_ code: String) -> String {
            switch lua.compile(code, chunkName: "=stdin") {
            case .compiled: lua.stack.pop(); return "compiled"
            case .incomplete: return "incomplete"
            case .failed: return "failed"
            }
        }
        #expect(compile("function f()") == "incomplete")
        #expect(compile("x = [[long") == "incomplete")
        #expect(compile("t = {1,") == "incomplete")
        #expect(compile("for i = 1, 3 do") == "incomplete")
        #expect(compile("x = = 1") == "failed")
        #expect(compile("function f() end") == "compiled")
    }
}
