import CLuaShim
import CSQLBridge
import Foundation
import LuaRuntime
@testable import PostgresWire
@testable import Store
import Testing
@testable import Bindings

/// A PostgreSQL session on a new database of the test process's server,
/// with `reference(sql, ...)`: the statement's rows the Swift way
/// (``PostgresDatabase/execute(_:_:)``'s ``StoreValue``s, pushed by
/// ``StoreValuePusher`` as the repositories push theirs), to hold the
/// `db` module's rows made in C against.
final class PostgresTestSession {
    let url: String
    let database: PostgresDatabase
    let session: OpshSession

    init(readOnly: Bool = false) throws {
        url = try PostgresServer.shared().makeDatabase()
        if readOnly { _ = try PostgresDatabase(url: url, options: .init(create: true)) }
        database = try PostgresDatabase(url: url, options: .init(readOnly: readOnly, create: !readOnly))
        session = try OpshSession(database: database)
        let database = database
        let markers = session.markers
        let rowShapes = session.rowShapes
        session.runtime.register("reference") { call in
            let result = try database.execute(try call.string(1), try WireRows.arguments(call, from: 2, markers: markers))
            StoreValuePusher(rowShapes: rowShapes, state: call.state).pushRows(columns: result.columns, rows: result.rows)
            return 1
        }
        try run(Self.lua)
    }

    @discardableResult
    func run(_ code: String, _ arguments: [LuaValue] = []) throws -> [LuaValue] {
        try session.runtime.execute(code, chunkName: "=test", arguments: arguments)
    }

    /// `same(a, b, path)` raises where two values differ (type, math.type,
    /// value, -0.0, a row's columns and metatable; NaN equals NaN);
    /// `check(label, sql, ...)` holds db.query, db.rows, db.first and
    /// db.value against `reference`; `checkText` does it for each one's
    /// first run inside a transaction (results in text), both ways round.
    static let lua = #"""
        function same(a, b, path)
          if type(a) ~= type(b) then error(path .. ": " .. type(a) .. " vs " .. type(b), 0) end
          if type(a) == "number" then
            if math.type(a) ~= math.type(b) then error(path .. ": " .. math.type(a) .. " vs " .. math.type(b), 0) end
            if a ~= a and b ~= b then return end
            if a ~= b or (a == 0 and 1 / a ~= 1 / b) then error(string.format("%s: %.17g vs %.17g", path, a, b), 0) end
          elseif type(a) == "table" then
            if getmetatable(a) ~= getmetatable(b) then error(path .. ": not the same metatable", 0) end
            for k, v in pairs(a) do same(v, rawget(b, k), path .. "." .. tostring(k)) end
            for k in pairs(b) do if rawget(a, k) == nil then error(path .. "." .. tostring(k) .. ": missing", 0) end end
          elseif a ~= b then
            error(path .. ": " .. string.format("%q", a) .. " vs " .. string.format("%q", b), 0)
          end
        end
        local unknown = {}
        -- db.value's value: the first column's (unknown from rows keyed by
        -- name when a later column has its name).
        local function firstValue(rows)
          local columns = getmetatable(rows).columns
          if rows[1] == nil or columns[1] == nil then return nil end
          for i = 2, #columns do if columns[i] == columns[1] then return unknown end end
          return rawget(rows[1], columns[1])
        end
        local function eachWay(label, ref, query, ...)
          same(query.query(...), ref, label .. " query")
          local i = 0
          for row in query.rows(...) do i = i + 1; same(row, ref[i], label .. " rows[" .. i .. "]") end
          if i ~= #ref then error(label .. ": db.rows gave " .. i .. " rows of " .. #ref, 0) end
          same(query.first(...), ref[1], label .. " first")
          local value = firstValue(ref)
          if value ~= unknown then same(query.value(...), value, label .. " value") end
        end
        function check(label, sql, ...)
          local ref = reference(sql, ...)
          eachWay(label, ref, db, sql, ...)
          return #ref
        end
        local fresh = 0
        local function freshly(sql) fresh = fresh + 1; return "/* fresh " .. fresh .. " */ " .. sql end
        function checkText(label, sql, ...)
          local args = table.pack(...)
          db.transaction(function()
            -- Each db.* call on a statement text of its own: its first run,
            -- whose results come in text…
            local function fresh(name) return function(s, ...) return db[name](freshly(s), ...) end end
            eachWay(label .. " (text)", reference(sql, table.unpack(args, 1, args.n)),
                    { query = fresh("query"), rows = fresh("rows"), first = fresh("first"), value = fresh("value") },
                    sql, table.unpack(args, 1, args.n))
            -- …and the reference's first run in text, db.*'s after it binary.
            local s = freshly(sql)
            eachWay(label .. " (reference in text)", reference(s, table.unpack(args, 1, args.n)), db, s, table.unpack(args, 1, args.n))
          end)
        end
        """#
}

@Suite struct PostgresRowsTests {
    /// Every type the `db` module reads, at its edges, NULL of several
    /// types, empty strings and bytes, multibyte UTF-8.
    static let everyType = #"""
        SELECT 1::int2 AS i2, (-32768)::int2 AS i2min, 2147483647::int4 AS i4, (-2147483648)::int4 AS i4min,
          9223372036854775807::int8 AS i8max, (-9223372036854775807 - 1)::int8 AS i8min, 0::int8 AS zero, 4294967295::oid AS o,
          1.5::float4 AS f4, 0.1::float4 AS f4b, 'NaN'::float4 AS f4nan, '-Infinity'::float4 AS f4inf,
          3.4028235e38::float4 AS f4max, 1e-45::float4 AS f4tiny, '-0'::float4 AS f4negzero,
          0.1::float8 AS f8, '-0'::float8 AS f8negzero, 'Infinity'::float8 AS f8inf, '-Infinity'::float8 AS f8neginf,
          'NaN'::float8 AS f8nan, 1.7976931348623157e308::float8 AS f8max, 5e-324::float8 AS f8tiny,
          9007199254740993::float8 AS f8big, 1e22::float8 AS f8e22,
          ''::text AS empty, 'héllo wörld ✓ 𝄞 日本語 🚀' AS utf8, 'x'::varchar(3) AS vc, 'ab'::char(4) AS ch,
          'nm'::name AS nm, 'q'::"char" AS c1, 'keyed back' AS bundleIdentifier,
          '\x00ff41'::bytea AS b, ''::bytea AS bempty, true AS t, false AS f,
          NULL::int8 AS n8, NULL::text AS ntext, NULL::bytea AS nbytes, NULL::bool AS nbool, NULL::numeric AS nnum,
          NULL::float8 AS nfloat, NULL AS nunknown,
          10::numeric AS ni, (-10)::numeric AS nneg, 1.50::numeric AS nd, 'NaN'::numeric AS nnan,
          'Infinity'::numeric AS ninf, '-Infinity'::numeric AS nneginf, 12345678901234567890123::numeric AS nbig,
          (-9223372036854775808)::numeric AS nmin, 9223372036854775807::numeric AS nmax, 9223372036854775808::numeric AS nover,
          1e-400::numeric AS ntiny, 10::numeric ^ 400 AS nhuge, 0.000::numeric AS nzero, (-0.5)::numeric AS nhalf,
          '2024-01-02'::date AS d, '2024-01-02 03:04:05.5+00'::timestamptz AS ts, '{"a": [1, "é"]}'::json AS j,
          '{"a": 1}'::jsonb AS jb, ARRAY[1, NULL, 3] AS arr, '1 day 02:00'::interval AS iv,
          '00000000-0000-0000-0000-000000000001'::uuid AS u, point(1, 2) AS pt, B'101' AS bits, 'x'::unknown AS unk
        """#

    @Test func everyTypeAsTheSwiftPathGivesIt() throws {
        let test = try PostgresTestSession()
        try test.run("""
            check("every type", ...)
            checkText("every type", ...)
            -- The values themselves, spelled out.
            local row = db.first(...)
            assert(row.i8max == math.maxinteger and row.i8min == math.mininteger and math.type(row.zero) == "integer")
            assert(row.o == 4294967295 and row.i2min == -32768 and row.i4min == -2147483648)
            assert(row.f4b == 0.10000000149011612 and row.f8 == 0.1 and 1 / row.f8negzero == -math.huge)
            assert(row.f8nan ~= row.f8nan and row.f8inf == math.huge and row.f8tiny == 5e-324)
            assert(row.empty == "" and row.utf8 == "héllo wörld ✓ 𝄞 日本語 🚀" and row.ch == "ab  ")
            assert(row.bundleIdentifier == "keyed back")
            assert(row.b == "\\0\\255A" and row.bempty == "" and row.t == 1 and row.f == 0)
            assert(row.n8 == nil and row.ntext == nil and row.nbytes == nil and row.nbool == nil and row.nnum == nil)
            assert(row.ni == 10 and math.type(row.ni) == "integer" and row.nd == 1.5 and row.nnan == "NaN")
            assert(row.ninf == "Infinity" and row.nmin == math.mininteger and math.type(row.nover) == "float")
            assert(row.ntiny == 0 and math.type(row.ntiny) == "float" and row.nhuge:sub(1, 5) == "10000")
            assert(row.nhalf == -0.5 and row.d == "2024-01-02" and row.arr == "{1,NULL,3}" and row.unk == "x")
            """, [.string(Self.everyType)])
    }

    /// Results with no rows, no columns, repeated names, NULLs between values.
    @Test func shapesOfResults() throws {
        let test = try PostgresTestSession()
        #expect(try test.run("return db.value('SELECT 1 AS a, 2 AS a')") == [.integer(1)])
        for sql in [
            "SELECT 1 AS a, 'x' AS b WHERE false",
            "SELECT FROM generate_series(1, 3)",
            "SELECT 1 AS a, 2 AS a, 'third' AS a",
            "SELECT g, CASE WHEN g % 2 = 0 THEN NULL ELSE 'v' || g END AS s, NULLIF(g % 3, 0) AS m FROM generate_series(1, 30) g",
            "SELECT NULL AS only",
        ] {
            try test.run("check(..., ...); checkText(..., ...)", [.string(sql)])
        }
        // An empty result is an empty array of rows with its columns.
        let shown = try test.run("""
            local rows = db.query("SELECT 1 AS a, 'x' AS b WHERE false")
            return #rows, table.concat(getmetatable(rows).columns, ","), db.first("SELECT 1 WHERE false"), db.value("SELECT 1 WHERE false")
            """)
        #expect(shown == [.integer(0), .string("a,b"), .nil, .nil])
    }

    /// Random values of each type, bound as parameters and read back, in a
    /// table and as parameters echoed.
    @Test func randomValuesAsTheSwiftPathGivesThem() throws {
        let test = try PostgresTestSession()
        try test.run("db.exec('CREATE TABLE rnd (id bigint PRIMARY KEY, i bigint, f double precision, r real, t text, b bytea, n numeric, flag boolean, s smallint)')")
        var generator = SeededGenerator(seed: 20261125)
        func text() -> String {
            let ranges: [ClosedRange<UInt32>] = [0x20...0x7E, 0xA0...0x7FF, 0x800...0xD7FF, 0xE000...0xFFFD, 0x10000...0x10FFFF]
            var scalars = String.UnicodeScalarView()
            for _ in 0..<Int.random(in: 0...40, using: &generator) {
                let range = ranges.randomElement(using: &generator)!
                scalars.append(Unicode.Scalar(UInt32.random(in: range, using: &generator))!)
            }
            return String(scalars)
        }
        func numeric() -> String {
            switch Int.random(in: 0..<4, using: &generator) {
            case 0: return String(Int64.random(in: .min ... .max, using: &generator))
            case 1: return String(Int64.random(in: -1000...1000, using: &generator)) + "." + String(UInt32.random(in: 0...99999, using: &generator))
            case 2: return (Bool.random(using: &generator) ? "-" : "") + String((0..<Int.random(in: 19...40, using: &generator)).map { _ in "0123456789".randomElement(using: &generator)! })
            default: return ["9223372036854775807", "-9223372036854775808", "9223372036854775808", "-9223372036854775809", "0", "0.0", "NaN"].randomElement(using: &generator)!
            }
        }
        for id in 1...600 {
            let double = Double(bitPattern: generator.next())
            let values: [StoreValue] = [
                .integer(Int64(id)),
                Int.random(in: 0..<10, using: &generator) == 0 ? .null : .integer(Int64(bitPattern: generator.next())),
                double.isNaN ? .real(.nan) : .real(double),
                .real(Double(Float(bitPattern: UInt32(truncatingIfNeeded: generator.next())))),
                Int.random(in: 0..<10, using: &generator) == 0 ? .null : .text(text()),
                .blob((0..<Int.random(in: 0...30, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }),
                .text(numeric()),
                .integer(Int64.random(in: 0...1, using: &generator)),
                .integer(Int64.random(in: -32768...32767, using: &generator)),
            ]
            _ = try test.database.execute(
                "INSERT INTO rnd VALUES (?, ?, ?, ?, ?, ?, CAST(? AS numeric), CAST(? AS int) = 1, ?)", .positional(values))
        }
        let count = try test.run("return check('random', 'SELECT * FROM rnd ORDER BY id')")
        #expect(count == [.integer(600)])
        try test.run("checkText('random', 'SELECT * FROM rnd ORDER BY id')")
        // Parameters echoed: what the script binds comes back the same.
        try test.run("""
            for _, v in ipairs({ math.maxinteger, math.mininteger, 0, -1, 0.1, -0.0, 1e308, 5e-324, "", "é✓🚀" }) do
              check("echo " .. tostring(v), "SELECT ? AS v", v)
              checkText("echo " .. tostring(v), "SELECT ? AS v", v)
            end
            """)
    }

    /// Rows larger than the connection's receive buffer, and many rows
    /// across its refills, through db.rows and db.query.
    @Test func largeResults() throws {
        let test = try PostgresTestSession()
        let result = try test.run("""
            check("wide", "SELECT g, repeat(chr(64 + g), 70000 + g * 1000) AS s FROM generate_series(1, 20) g")
            local n, sum, long = 0, 0, 0
            for row in db.rows("SELECT g, 'name' || g AS name, g * 0.5 AS value, repeat('é', (g % 200)::int) AS pad FROM generate_series(1::bigint, 200000) g") do
              n = n + 1; sum = sum + row.value; long = long + utf8.len(row.pad)
              assert(row.name == "name" .. row.g)
            end
            local all = db.query("SELECT g, repeat('w', 100000) AS s FROM generate_series(1, 30) g")
            return n, sum, long, #all, #all[30].s
            """)
        let long = (1...200_000).reduce(0) { $0 + $1 % 200 }
        #expect(result == [.integer(200_000), .number(200_000 * 200_001 / 4), .integer(Int64(long)), .integer(30), .integer(100_000)])
    }

    /// A statement failing after some rows (a division by zero in row
    /// 1,000): the same error as before, no rows, and the connection (and
    /// the transaction around it) goes on.
    @Test func failureMidStreamKeepsTheSession() throws {
        let test = try PostgresTestSession()
        try test.run("db.exec('CREATE TABLE kept (id bigint)')")
        let sql = "SELECT g, 1 / (1000 - g) AS q FROM generate_series(1, 2000) g"
        let messages = try test.run("""
            local sql = ...
            local seen = 0
            local a = select(2, pcall(function() for row in db.rows(sql) do seen = seen + 1 end end))
            local b = select(2, pcall(db.query, sql))
            local c = select(2, pcall(db.first, sql))
            local d = select(2, pcall(db.value, sql))
            assert(db.value("SELECT 7") == 7)
            -- In a transaction: the failed statement is undone, the rest commits.
            local e
            db.transaction(function()
              db.exec("INSERT INTO kept VALUES (1)")
              e = select(2, pcall(db.query, sql))
              local f = select(2, pcall(function() for row in db.rows(sql) do seen = seen + 1 end end))
              assert(f == "(db):3: " .. e, f)
              db.exec("INSERT INTO kept VALUES (2)")
            end)
            return a, b, c, d, e, seen, db.value("SELECT count(*) FROM kept")
            """, [.string(sql)])
        let error = "ERROR 22012: division by zero (in: \(sql))"
        #expect(messages == [.string("(db):3: " + error), .string(error), .string(error), .string(error),
                             .string(error), .integer(0), .integer(2)])
    }

    /// A Lua error raised in a db.rows loop's body, breaking out of one,
    /// and a loop inside another: the connection and the transaction go on.
    @Test func errorsAndBreaksInsideLoops() throws {
        let test = try PostgresTestSession()
        let result = try test.run("""
            db.exec("CREATE TABLE t (id bigint, name text)")
            db.exec("INSERT INTO t SELECT g, 'n' || g FROM generate_series(1, 5000) g")
            local ok, message = pcall(function()
              for row in db.rows("SELECT * FROM t ORDER BY id") do
                if row.id == 1000 then error("stop at " .. row.name, 0) end
              end
            end)
            assert(not ok and message == "stop at n1000", message)
            for row in db.rows("SELECT * FROM t ORDER BY id") do if row.id == 3 then break end end
            -- A loop inside a loop: the outer result was read whole.
            local nested = 0
            for outer in db.rows("SELECT id FROM t WHERE id <= 3") do
              for inner in db.rows("SELECT id FROM t WHERE id <= ?", outer.id) do nested = nested + 1 end
            end
            local inside
            db.transaction(function()
              local ok2, message2 = pcall(function()
                for row in db.rows("SELECT * FROM t") do db.exec("UPDATE t SET name = 'x' WHERE id = ?", row.id); error({}) end
              end)
              assert(not ok2 and type(message2) == "table")
              inside = db.value("SELECT count(*) FROM t WHERE name = 'x'")
            end)
            return nested, inside, db.value("SELECT count(*) FROM t"), db.inTransaction()
            """)
        #expect(result == [.integer(6), .integer(1), .integer(5000), .boolean(false)])
    }

    /// --read-only: each statement in a read-only transaction of its own
    /// (a pipeline): the same rows, text on their first run.
    @Test func readOnlySessionGivesTheSameRows() throws {
        let test = try PostgresTestSession(readOnly: true)
        try test.run("check('read-only', ...); check('read-only again', ...)", [.string(Self.everyType)])
        try test.run("""
            local q = "/* new */ " .. ...
            local text = db.query(q)
            same(text, reference(q), "read-only text")
            """, [.string(Self.everyType)])
    }

    /// Text the server would not send (it sends UTF-8, short of an
    /// SQL_ASCII database) and numbers' text at their edges: the C path
    /// reads them as the Swift path does.
    @Test func cDecodingEdgesMatchSwift() throws {
        let runtime = try LuaRuntime()
        let state = runtime.state
        /// What C pushed, as a StoreValue.
        func pushed(_ bytes: [UInt8], _ kind: opsh_pg_kind) -> StoreValue {
            bytes.withUnsafeBufferPointer { opsh_pg_push_value(state, $0.baseAddress, $0.count, UInt8(kind.rawValue)) }
            defer { opsh_pop(state, 1) }
            switch lua_type(state, -1) {
            case LUA_TNUMBER:
                return lua_isinteger(state, -1) != 0 ? .integer(opsh_tointeger(state, -1, nil)) : .real(opsh_tonumber(state, -1, nil))
            case LUA_TSTRING:
                return .blob(runtime.stack.bytes(at: -1) ?? [])
            default:
                return .null
            }
        }
        /// What the Swift path makes of the same bytes, strings as bytes.
        func swift(_ bytes: [UInt8], type: UInt32) throws -> StoreValue {
            let value = try bytes.withUnsafeBytes { try PostgresValue.decode($0, type: type, binary: false) }
            var store = PostgresDatabase.value(value)
            if case let .text(text) = value, type == PostgresType.numeric { store = PostgresDatabase.number(text) }
            switch store {
            case let .text(text): return .blob(Array(text.utf8))
            default: return store
            }
        }
        func same(_ a: StoreValue, _ b: StoreValue) -> Bool {
            if case let .real(x) = a, case let .real(y) = b {
                return x.bitPattern == y.bitPattern || (x.isNaN && y.isNaN)
            }
            return a == b
        }
        let kinds: [(opsh_pg_kind, UInt32)] = [
            (OPSH_PG_TEXT, PostgresType.text), (OPSH_PG_TEXT_INTEGER, PostgresType.int8), (OPSH_PG_TEXT_FLOAT4, PostgresType.float4),
            (OPSH_PG_TEXT_FLOAT8, PostgresType.float8), (OPSH_PG_TEXT_BOOL, PostgresType.bool), (OPSH_PG_TEXT_BYTEA, PostgresType.bytea),
            (OPSH_PG_TEXT_NUMERIC, PostgresType.numeric),
        ]
        let texts = [
            "", "0", "-0", "+1", "+", "-", "12", "9223372036854775807", "-9223372036854775808", "9223372036854775808",
            "-9223372036854775809", "00012", "1.5", "1.", ".5", "-.5", "1e5", "1E-5", "1e400", "-1e400", "1e-400", "4.9e-324",
            "3.4028235e38", "3.5e38", "1e-46", " 1", "1 ", "0x10", "nan", "NaN", "inf", "Infinity", "-Infinity", "infinity",
            "snan", "-SNaN", "snan(1)", "nan(1)", "-nan", "0x1p3", "1e", "t", "f", "true", "\\x", "\\x00ff", "\\xABcd", "\\x0", "\\xzz", "x00", "é", "1_000", "١٢",
            String(repeating: "9", count: 400), "0." + String(repeating: "0", count: 399) + "1", String(repeating: "1", count: 200) + ".5",
        ]
        for text in texts {
            for (kind, type) in kinds {
                let bytes = Array(text.utf8)
                let (c, s) = (pushed(bytes, kind), try swift(bytes, type: type))
                #expect(same(c, s), "\(text) as \(type): C \(c), Swift \(s)")
            }
        }
        // Ill-formed UTF-8, in every kind that falls back to text: each
        // maximal ill-formed part becomes one U+FFFD, as in Swift.
        var generator = SeededGenerator(seed: 42)
        let interesting: [UInt8] = [0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1,
                                    0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFF]
        for round in 0..<5000 {
            let bytes = (0..<Int.random(in: 0...10, using: &generator)).map { _ in
                Bool.random(using: &generator) ? interesting.randomElement(using: &generator)! : UInt8.random(in: 0...255, using: &generator)
            }
            let (kind, type) = kinds[round % kinds.count]
            let (c, s) = (pushed(bytes, kind), try swift(bytes, type: type))
            #expect(same(c, s), "\(bytes) as \(type): C \(c), Swift \(s)")
        }
    }
}
