import Foundation
import Testing
@testable import LuaRuntime

/// Interrupts, memory limits and the sandbox.
@Suite struct LimitTests {
    /// Interrupts `lua` from another thread as soon as a chunk runs
    /// (``LuaRuntime/interruptWhenRunning(_:patience:)`` polls for one).
    func interruptOnceRunning(_ lua: LuaRuntime, _ reason: LuaInterruptReason) {
        let box = UncheckedBox(lua)
        // A thread of its own, not Dispatch: tests run on Dispatch's
        // workers, and two spinning Lua loops on a 2-core machine would
        // leave none free to interrupt them.
        Thread {
            box.value.interruptWhenRunning(reason, patience: 60)
        }.start()
    }

    @Test func endlessLoopIsInterruptedFromAnotherThread() throws {
        let lua = try LuaRuntime()
        interruptOnceRunning(lua, .interrupted)
        #expect {
            try lua.execute("while true do end")
        } throws: { ($0 as? LuaError)?.kind == .interrupted(.interrupted) }
        #expect(try lua.execute("return 'still here'") == ["still here"])
    }

    @Test func pcallCannotSwallowAnInterrupt() throws {
        let lua = try LuaRuntime()
        interruptOnceRunning(lua, .timeout)
        #expect {
            try lua.execute("""
                while true do
                  pcall(function() while true do end end)
                  xpcall(function() while true do end end, function(e) return e end)
                end
                """)
        } throws: { ($0 as? LuaError)?.kind == .interrupted(.timeout) }
        // The interrupt is over: the next chunk runs normally.
        #expect(try lua.execute("local n = 0 for i = 1, 1000 do n = n + i end return n") == [500500])
    }

    @Test func hostFunctionsSeeTheInterruptAndGiveUp() throws {
        let lua = try LuaRuntime()
        let waiting = Arrival()
        lua.register("waitForever") { call in
            waiting.arrive()
            while call.host.interruptRequested == nil { usleep(1000) }
            throw LuaCallError.message("wait interrupted")
        }
        // Interrupted once the host function waits.
        let box = UncheckedBox(lua)
        Thread {
            waiting.wait()
            box.value.interruptWhenRunning(.interrupted, patience: 60)
        }.start()
        #expect { try lua.execute("pcall(waitForever) while true do end") } throws: {
            ($0 as? LuaError)?.kind == .interrupted(.interrupted)
        }
    }

    @Test func interruptHandlersRun() throws {
        let lua = try LuaRuntime()
        let seen = UncheckedBox([LuaInterruptReason]())
        let lock = NSLock()
        lua.onInterrupt { reason in lock.withLock { seen.value.append(reason) } }
        #expect(lua.interrupt(.interrupted) == false)  // nothing runs: ignored
        interruptOnceRunning(lua, .terminated)
        _ = try? lua.execute("while true do end")
        // The handler runs on the interrupting thread, which may still be
        // inside it when the Lua thread has already stopped.
        let deadline = Date().addingTimeInterval(5)
        while lock.withLock({ seen.value.isEmpty }) && Date() < deadline { usleep(1000) }
        #expect(lock.withLock { seen.value } == [.terminated])
    }

    @Test func memoryLimitStopsAGreedyScript() throws {
        let lua = try LuaRuntime(options: .init(memoryLimit: 8 << 20))
        #expect {
            try lua.execute("local t = {} for i = 1, 1e8 do t[i] = ('x'):rep(100) .. i end")
        } throws: { ($0 as? LuaError)?.kind == .memory }
        #expect(lua.memoryUsed < 9 << 20)
        // After collection the state works again.
        try lua.execute("collectgarbage()")
        #expect(try lua.execute("return #('y'):rep(1000)") == [1000])
    }

    /// Short-lived garbage (a row table per iteration of a `db.rows` loop)
    /// is collected by minor collections (opsh_newstate): the mode a
    /// script switches away from is "generational". Under a limit, a loop
    /// making far more garbage than the limit still runs to its end.
    @Test func theCollectorIsGenerational() throws {
        let lua = try LuaRuntime(options: .init(memoryLimit: 4 << 20))
        #expect(try lua.execute("return collectgarbage('incremental')") == ["generational"])
        try lua.execute("collectgarbage('generational')")
        #expect(try lua.execute("""
            local sum = 0
            for i = 1, 200000 do local row = {qty = i, name = 'name' .. i} sum = sum + row.qty end
            return sum
            """) == [20_000_100_000])
        #expect(lua.memoryUsed < 4 << 20)
    }

    @Test func memoryErrorsInsideHostFunctionsNeverUnwindSwift() throws {
        let lua = try LuaRuntime(options: .init(memoryLimit: 4 << 20))
        lua.register("bigString") { call in
            call.stack.push(String(repeating: "z", count: 6 << 20))  // over the limit, in Swift
            return 1
        }
        // The push succeeds (Swift frames are never unwound); Lua's next
        // allocation fails instead, cleanly.
        #expect { try lua.execute("local s = bigString() local t = {} for i = 1, 1e6 do t[i] = {} end") } throws: {
            ($0 as? LuaError)?.kind == .memory
        }
    }

    @Test func deepRecursionIsAnErrorNotACrash() throws {
        let lua = try LuaRuntime()
        #expect { try lua.execute("local function f(n) return 1 + f(n + 1) end return f(1)") } throws: {
            ($0 as? LuaError)?.message.contains("stack overflow") == true
        }
    }

    @Test func sandboxHasNoWayOut() throws {
        let lua = try LuaRuntime(options: .init(sandbox: true))
        let escapes = [
            "return io.open('/etc/passwd')",
            "return os.execute('true')",
            "return io.popen('id')",
            "return require('os')",
            "return package.loadlib('libc.so.6', 'system')",
            "return debug.getregistry()",
            "return dofile('/etc/passwd')",
            "return loadfile('/etc/passwd')",
            "return string.dump(print)",
            "return ('x').dump(function() end)",
            "return os.getenv('HOME')",
            "return os.remove('/tmp/x')",
            "return load(string.char(27) .. 'LuaT')()",
        ]
        for code in escapes {
            #expect(throws: LuaError.self, "escaped: \(code)") { try lua.execute(code) }
        }
        #expect(try lua.execute("return load('return 1 + 1')()") == [2])
        #expect(try lua.execute("return type(os.time()), type(os.clock())") == ["number", "number"])
    }

    @Test func requireFindsModulesNextToTheScript() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("opsh-lua-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder.appendingPathComponent("lua/ops"), withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        try "return { answer = 42 }".write(to: folder.appendingPathComponent("lua/helpers.lua"), atomically: true, encoding: .utf8)
        try "return { name = 'ops' }".write(to: folder.appendingPathComponent("lua/ops/init.lua"), atomically: true, encoding: .utf8)
        try "#!/usr/bin/env opsh\nreturn require('helpers').answer, require('ops').name, ...".write(
            to: folder.appendingPathComponent("main.lua"), atomically: true, encoding: .utf8)
        let lua = try LuaRuntime()
        lua.prependModulePath(folder.appendingPathComponent("lua").path)
        #expect(try lua.executeFile(folder.appendingPathComponent("main.lua").path, arguments: ["x"]) == [42, "ops", "x"])
        #expect { try lua.executeFile("/nonexistent/x.lua") } throws: {
            ($0 as? LuaError)?.message == "cannot open /nonexistent/x.lua: No such file or directory"
        }
    }

    @Test func hostObjectsHaveMethodsAndAreCollected() throws {
        final class Counter { var count = 0; nonisolated(unsafe) static var alive = 0
            init() { Counter.alive += 1 }; deinit { Counter.alive -= 1 } }
        let lua = try LuaRuntime()
        lua.register("counter") { call in
            call.host.pushObject(Counter(), type: "opsh.Counter", methods: [
                "add": { call in
                    let counter = try call.object(1, as: Counter.self, typeName: "opsh.Counter")
                    counter.count += Int(try call.integer(2))
                    return call.results(.integer(Int64(counter.count)))
                },
            ], on: call.state)
            return 1
        }
        #expect(try lua.execute("local c = counter() c:add(2) return c:add(3), tostring(c):match('^opsh.Counter')") == [5, "opsh.Counter"])
        try lua.execute("collectgarbage() collectgarbage()")
        #expect(Counter.alive == 0)
        #expect { try lua.execute("local c = counter() c.add({}, 1)", chunkName: "=t") } throws: {
            ($0 as? LuaError)?.message == "t:1: bad argument #1 to 'add' (opsh.Counter expected, got table)"
        }
    }
}

final class UncheckedBox<T>: @unchecked Sendable {
    var value: T
    init(_ value: T) { self.value = value }
}
