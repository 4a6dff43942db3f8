import Testing
@testable import LuaRuntime

/// Values cross the bridge both ways without losing anything.
@Suite struct ValueBridgeTests {
    let lua = try! LuaRuntime()

    /// A Swift identity function, so values go Swift → Lua → Swift.
    func roundTrip(_ value: LuaValue) throws -> LuaValue {
        lua.register("identity") { call in
            call.stack.push(try call.value(1))
            return 1
        }
        lua.setGlobal("input", value)
        return try lua.execute("return identity(input)").first ?? .nil
    }

    @Test func integersStayExact() throws {
        for number in [Int64.max, Int64.min, 0, -1, 9_007_199_254_740_993] {
            #expect(try roundTrip(.integer(number)) == .integer(number))
        }
        #expect(try lua.execute("return math.maxinteger, math.mininteger") == [.integer(.max), .integer(.min)])
        #expect(try lua.execute("return 2^53") == [.number(9_007_199_254_740_992)])
    }

    @Test func floatsKeepNaNAndInfinities() throws {
        let values = try lua.execute("return 0/0, 1/0, -1/0, 0.1")
        guard case let .number(nan) = values[0] else { Issue.record("not a float"); return }
        #expect(nan.isNaN)
        #expect(values[1] == .number(.infinity))
        #expect(values[2] == .number(-.infinity))
        #expect(try roundTrip(.number(0.1)) == .number(0.1))
        #expect(try lua.execute("return math.type(...)", arguments: [.number(3)]) == ["float"])
    }

    @Test func stringsAreBytes() throws {
        let withNul: [UInt8] = [0x61, 0x00, 0x62]
        #expect(try roundTrip(.bytes(withNul)) == .string("a\u{0}b"))
        #expect(try lua.execute("return #...", arguments: [.string("a\u{0}b")]) == [.integer(3)])
        let invalidUTF8: [UInt8] = [0xff, 0xfe, 0x00, 0x80]
        #expect(try roundTrip(.bytes(invalidUTF8)) == .bytes(invalidUTF8))
        #expect(try lua.execute("return '\\xff\\0'") == [.bytes([0xff, 0])])
        #expect(try roundTrip("héllo ✓") == "héllo ✓")
    }

    /// `LuaCall.string`, the reader of keys, names and SQL text: every
    /// byte, a NUL included; a string that is not UTF-8 is refused naming
    /// the byte (it used to become U+FFFD: other text).
    @Test func aStringArgumentIsReadWholeOrRefused() throws {
        lua.register("text") { call in call.results(.string(try call.string(1))) }
        #expect(try lua.execute("return #text('com.ex.app\\0x')") == [.integer(12)])
        #expect(try lua.execute("return text('a\\0b') == 'a\\0b'") == [.boolean(true)])
        #expect(try lua.execute("return text('café')") == ["café"])
        #expect(throws: LuaError.self) { try lua.execute("return text('caf\\xe9')", chunkName: "=test") }
        do {
            _ = try lua.execute("return text('caf\\xe9 ok')", chunkName: "=test")
        } catch let error as LuaError {
            #expect(error.message == "test:1: bad argument #1 to 'text' (string is not valid UTF-8 (byte 4: 0xE9))")
        }
    }

    @Test func tablesNestAndKeepShape() throws {
        let nested: LuaValue = ["name": "app", "tags": ["a", "b"], "meta": ["depth": ["x": 1]], "empty": [:]]
        #expect(try roundTrip(nested) == nested)
        #expect(try lua.execute("return {10, 20, 30}") == [[10, 20, 30]])
        #expect(try lua.execute("return {10, nil, 30}") == [.table([1: 10, 3: 30])])
        #expect(try lua.execute("return {[1.0] = 'one'}") == [["one"]])
    }

    @Test func selfReferencingTableIsAnErrorNotAHang() throws {
        lua.register("identity") { call in
            call.stack.push(try call.value(1))
            return 1
        }
        #expect(throws: LuaError.self) { try lua.execute("local t = {} t.self = t return identity(t)") }
        #expect {
            try lua.execute("local t = {a = {}} t.a.back = t return identity(t)", chunkName: "=cycle")
        } throws: {
            ($0 as? LuaError)?.message == "cycle:1: bad argument #1 to 'identity' (table refers to itself (a cycle cannot be converted))"
        }
        // A table seen twice, but not inside itself, is fine.
        #expect(try lua.execute("local s = {1} return identity({s, s})") == [[[1], [1]]])
    }

    @Test func functionsComeBackAsReferences() throws {
        let values = try lua.execute("return print")
        guard case let .reference(reference) = values.first else { Issue.record("no reference"); return }
        #expect(reference.typeName == "function")
    }
}
