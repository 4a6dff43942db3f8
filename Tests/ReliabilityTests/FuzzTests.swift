import Foundation
import LuaRuntime
import Store
import Synchronization
import Testing

/// Seeded fuzzing of the query-key parser and the Lua ⇄ Swift value bridge
/// (libFuzzer needs `-sanitize=fuzzer`, which `swift test` does not build
/// with; a seeded generator runs in the suite instead). A crash kills the
/// test process, so "no crash" is "the test finished".
///
/// Each target runs for `OPSH_FUZZ_SECONDS` (default 1.5 s);
/// `OPSH_RELIABILITY_SEED` changes the seed.
@Suite struct FuzzTests {
    static var seconds: Double {
        ProcessInfo.processInfo.environment["OPSH_FUZZ_SECONDS"].flatMap(Double.init) ?? 1.5
    }

    // MARK: Query keys

    /// Characters ids are drawn from: the key syntax's own, quotes, spaces,
    /// controls, NUL, non-ASCII.
    static let idAlphabet: [Character] = Array("abcXYZ019_-.,\"'[]{}() \t\n\u{0}\\/:;#é✓🚀\u{301}") + ["\r\n"]

    static func randomID(_ random: inout SeededGenerator) -> String {
        switch Int.random(in: 0..<6, using: &random) {
        case 0: return ["com.example.app", "1.2.0", "a\"b", "", "default", "8F3A-77", "x y"].randomElement(using: &random)!
        case 1: return String(Int.random(in: -5...Int.max, using: &random))
        default:
            let count = Int.random(in: 1...12, using: &random)
            return String((0..<count).map { _ in idAlphabet.randomElement(using: &random)! })
        }
    }

    static func randomKey(_ random: inout SeededGenerator) -> QueryKey {
        let id = randomID(&random)
        switch Int.random(in: 0..<22, using: &random) {
        case 0: return .allProjectIds
        case 1: return .projectVersionStrings
        case 2: return .project(id)
        case 3: return .projectDetail(id)
        case 4: return .projectSchemeIds(id)
        case 5: return .projectBuildVersionStrings(id)
        // The grammar's range for N is 1…1,000,000 (larger is refused with that message).
        case 6: return .projectLatestBuilds(id, limit: [1, 5, 1_000_000, Int.random(in: 1...1_000_000, using: &random)].randomElement(using: &random)!)
        case 7: return .scheme(id)
        case 8:
            let ids = (0..<Int.random(in: 1...4, using: &random)).map { _ in randomID(&random) }
            return .schemeBuildIds(ids, version: Bool.random(using: &random) ? randomID(&random) : nil)
        case 9: return .build(id)
        case 10: return .buildLogIds(id, includeDebug: Bool.random(using: &random),
                                     category: Bool.random(using: &random) ? randomID(&random) : nil)
        case 11: return .buildCrashLogIds(id)
        case 12: return .buildLog(id)
        case 13: return .crashLog(id)
        case 14: return .allModelIds
        case 15: return .model(id)
        case 16: return .modelUsage(id)
        case 17: return .session(id)
        case 18: return .sessionGenerations(id)
        case 19: return .telemetryCounts
        case 20: return .configuration(id)
        default: return .configuration("default")
        }
    }

    /// Pieces a mutation inserts.
    static let fragments = [".", "..", "\"", "\"\"", ",", "limit", "limit0", "limit-1", "limit99999999999999999999", "ids", "debug",
                            "category", "builds", "all", "project", "schemes", "[", "]", " ", "\u{0}", "é", "🚀", "\u{301}", "\\"]

    static func mutate(_ text: String, _ random: inout SeededGenerator) -> String {
        var characters = Array(text)
        for _ in 0..<Int.random(in: 1...4, using: &random) {
            let position = characters.isEmpty ? 0 : Int.random(in: 0...characters.count, using: &random)
            switch Int.random(in: 0..<5, using: &random) {
            case 0 where position < characters.count: characters.remove(at: position)
            case 1: characters.insert(contentsOf: fragments.randomElement(using: &random)!, at: position)
            case 2 where position < characters.count: characters[position] = idAlphabet.randomElement(using: &random)!
            case 3: characters = Array(characters.prefix(position))
            default:
                let other = Array(QueryKeyPrinter.print(randomKey(&random)))
                characters.insert(contentsOf: other.prefix(Int.random(in: 0...other.count, using: &random)), at: position)
            }
        }
        return String(characters)
    }

    @Test func queryKeysRoundTripAndBadKeysNeverCrash() throws {
        let seed = reliabilitySeed(0xF0221)
        var random = SeededGenerator(seed: seed)
        let deadline = Date().addingTimeInterval(Self.seconds)
        var generated = 0, mutated = 0, mutatedParsed = 0, failures: [String] = []
        while Date() < deadline {
            for _ in 0..<200 {
                let key = Self.randomKey(&random)
                let text = QueryKeyPrinter.print(key)
                generated += 1
                do {
                    let parsed = try QueryKeyParser.parse(text)
                    if parsed != key { failures.append("\(key) printed as \(text) parses as \(parsed)") }
                } catch {
                    failures.append("\(key) printed as \(text) does not parse: \(error)")
                }
                let bad = Self.mutate(text, &random)
                mutated += 1
                if let parsed = try? QueryKeyParser.parse(bad) {
                    mutatedParsed += 1
                    let again = QueryKeyPrinter.print(parsed)
                    if (try? QueryKeyParser.parse(again)) != parsed {
                        failures.append("\(bad) parses as \(parsed), printed \(again), which does not parse back")
                    }
                }
            }
        }
        for failure in Set(failures).sorted().prefix(20) { Issue.record("\(failure.debugDescription)") }
        reportFigure("fuzz query keys: \(generated) generated keys round-tripped, \(mutated) mutated keys tried (\(mutatedParsed) of them valid keys, which round-tripped), \(Set(failures).count) failures, \(Self.seconds) s, seed \(seed)")
    }

    // MARK: Lua values

    /// A random value in the bridge's canonical shape (what reading a Lua
    /// value back produces): arrays non-empty without nils, tables not 1…n,
    /// bytes only when not UTF-8, float keys not integral, no NaN.
    static func randomValue(_ random: inout SeededGenerator, depth: Int) -> LuaValue {
        switch Int.random(in: 0..<(depth > 0 ? 9 : 7), using: &random) {
        case 0: return .boolean(Bool.random(using: &random))
        case 1: return .integer([Int64.max, Int64.min, 0, -1, Int64.random(in: .min ... .max, using: &random)].randomElement(using: &random)!)
        case 2:
            let number = [Double.infinity, -.infinity, 0.1, -0.0, 1e308, Double.leastNonzeroMagnitude, 2.0, Double.random(in: -1e12...1e12, using: &random)]
                .randomElement(using: &random)!
            return .number(number)
        case 3, 4: return .string(randomID(&random))
        case 5:
            var bytes = (0..<Int.random(in: 0...20, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            bytes.append(0xff)  // never valid UTF-8
            return .bytes(bytes)
        case 6: return .string(String(repeating: "x", count: Int.random(in: 0...70_000, using: &random)))
        case 7:
            return .array((0..<Int.random(in: 1...6, using: &random)).map { _ in randomValue(&random, depth: depth - 1) })
        default:
            var fields: [LuaValue: LuaValue] = [:]
            fields[.string("k" + randomID(&random))] = randomValue(&random, depth: depth - 1)  // never 1…n
            for _ in 0..<Int.random(in: 0...5, using: &random) {
                let key: LuaValue
                switch Int.random(in: 0..<4, using: &random) {
                case 0: key = .integer(Int64.random(in: -3...1_000_000, using: &random))
                case 1: key = .boolean(Bool.random(using: &random))
                case 2: key = .number(Double(Int.random(in: -100...100, using: &random)) + 0.5)
                default: key = .string(randomID(&random))
                }
                fields[key] = randomValue(&random, depth: depth - 1)
            }
            return .table(fields)
        }
    }

    @Test func luaValuesRoundTripExactly() throws {
        let seed = reliabilitySeed(0xF0222)
        var random = SeededGenerator(seed: seed)
        let lua = try LuaRuntime()
        lua.register("identity") { call in
            call.stack.push(try call.value(1))
            return 1
        }
        let deadline = Date().addingTimeInterval(Self.seconds)
        var executions = 0, failures: [String] = []
        while Date() < deadline {
            for _ in 0..<50 {
                let value = Self.randomValue(&random, depth: 4)
                executions += 1
                // Swift → Lua → Swift through a host function, and through Lua's own copy (`...`).
                lua.setGlobal("input", value)
                let viaHost = try lua.execute("return identity(input)").first ?? .nil
                let viaLua = try lua.execute("local v = ... return v", arguments: [value]).first ?? .nil
                if viaHost != value || viaLua != value {
                    failures.append("\(String(describing: value).prefix(300)) came back as \(String(describing: viaHost).prefix(300))")
                }
            }
        }
        for failure in failures.prefix(10) { Issue.record("\(failure)") }
        reportFigure("fuzz Lua values: \(executions) random nested values round-tripped both ways, \(failures.count) mismatches, \(Self.seconds) s, seed \(seed)")
    }

    // MARK: Lua source

    static let tokens = [
        "local", "x", "y", "t", "=", "==", "~=", "{", "}", "(", ")", "[", "]", "[[", "]]", ",", ";", ".", "..", "...", ":", "::",
        "+", "-", "*", "/", "//", "%", "^", "#", "&", "|", "~", "<<", ">>", "<", "<=", "and", "or", "not",
        "function", "end", "return", "if", "then", "else", "elseif", "do", "for", "in", "nil", "true", "false", "break",
        "1", "0", "-1", "0x7fffffffffffffff", "1e309", "0/0", "3.5", "'s'", "\"\\xff\\0\"", "'\\u{10FFFF}'", "'\\z  '", "--",
        "print", "pcall", "error", "select", "setmetatable", "getmetatable", "rawset", "tostring", "tonumber", "next", "pairs",
        "ipairs", "type", "assert", "load", "string.rep", "string.format", "string.char", "string.byte", "table.concat",
        "table.insert", "table.unpack", "table.sort", "coroutine.wrap", "coroutine.yield", "coroutine.create", "math.huge",
        "math.mininteger", "utf8.char", "utf8.len", "collectgarbage", "identity", "<const>", "<close>", "__index", "__gc",
        "__eq", "__lt", "__call", "__tostring", "__close",
    ]

    /// Whole statements that are valid Lua and hostile to the bridge.
    static let statements = [
        "local t = {} t.self = t return t",
        "local t = {} for i = 1, 200 do t = {t} end return t",
        "return identity(setmetatable({}, {__index = function() error('boom') end}))",
        "return identity(coroutine.create(print))",
        "return string.rep('x', 1 << 20)",
        "return identity({[0/0 ~= 0/0] = 1, [1.5] = 2, [math.mininteger] = 3})",
        "return setmetatable({}, {__gc = function() error('in gc') end})",
        "return select('#', table.unpack({}, 1, 100))",
        "return pcall(error, setmetatable({}, {__tostring = function() error('x') end}))",
        "error(setmetatable({}, {__tostring = function() return 42 end}))",
        "error()", "error(nil)", "error({})", "error(1.5)", "error('\\xff')",
        "return coroutine.wrap(function() coroutine.yield(identity) end)()",
        "local function f() return f() end return f()",
        "while true do end",
        "local s = 'x' while true do s = s .. s end",
        "return load('return ...', 'c', 't')(1, nil, 3)",
        "return string.format('%q', 1/0), string.format('%99d', 1)",
        "return table.concat({1, 2, {}}, ',')",
        "local x <close> = setmetatable({}, {__close = function() error('close') end}) error('body')",
    ]

    static func snippet(_ random: inout SeededGenerator) -> String {
        switch Int.random(in: 0..<4, using: &random) {
        case 0: return statements.randomElement(using: &random)!
        case 1:
            return (0..<Int.random(in: 1...16, using: &random)).map { _ in tokens.randomElement(using: &random)! }.joined(separator: " ")
        case 2:
            // A valid statement with a random cut or insertion.
            var text = Array(statements.randomElement(using: &random)!)
            let position = Int.random(in: 0...text.count, using: &random)
            if Bool.random(using: &random) { text = Array(text.prefix(position)) } else {
                text.insert(contentsOf: " " + tokens.randomElement(using: &random)! + " ", at: position)
            }
            return String(text)
        default:
            return "return identity(" + (0..<Int.random(in: 1...8, using: &random)).map { _ in tokens.randomElement(using: &random)! }
                .joined(separator: " ") + ")"
        }
    }

    @Test func randomLuaSourceNeverCrashes() throws {
        let seed = reliabilitySeed(0xF0223)
        var random = SeededGenerator(seed: seed)
        let lua = try LuaRuntime(options: .init(memoryLimit: 64 << 20))
        lua.register("identity") { call in
            call.stack.push(try call.value(1))
            return 1
        }
        // A watchdog: a snippet running longer than 50 ms is interrupted.
        let current = Mutex<(generation: Int, started: Double)>((0, 0))
        let stop = Atomic<Bool>(false)
        let box = UncheckedBox(lua)
        let watchdog = Thread {
            var interrupted = -1
            while !stop.load(ordering: .relaxed) {
                usleep(10_000)
                let (generation, started) = current.withLock { $0 }
                if generation != interrupted && started > 0 && Date().timeIntervalSince1970 - started > 0.05 {
                    if box.value.interrupt(.timeout) { interrupted = generation }
                }
            }
        }
        watchdog.start()
        defer { stop.store(true, ordering: .relaxed) }

        let deadline = Date().addingTimeInterval(Self.seconds)
        var executions = 0, errors = 0, interrupts = 0
        while Date() < deadline {
            let code = Self.snippet(&random)
            current.withLock { $0 = ($0.generation + 1, Date().timeIntervalSince1970) }
            do {
                _ = try lua.execute(code, chunkName: "=fuzz")
            } catch let error as LuaError {
                errors += 1
                if case .interrupted = error.kind { interrupts += 1 }
            }
            current.withLock { $0.started = 0 }
            executions += 1
        }
        // The state still works afterwards.
        #expect(try lua.execute("return 1 + 1") == [2])
        reportFigure("fuzz Lua source: \(executions) random snippets executed (\(errors) raised errors, \(interrupts) stopped by the watchdog), \(Self.seconds) s, seed \(seed)")
    }
}

final class UncheckedBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
