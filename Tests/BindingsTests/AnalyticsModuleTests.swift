import Foundation
import LuaRuntime
import Testing
@testable import Bindings

/// `analytics.*`, `chart` and `sparkline` from Lua.
@Suite struct AnalyticsModuleTests {
    /// 2024-05-01 00:00 UTC.
    static let may1 = 1_714_521_600

    /// Two models, three sessions, four generations over three days, usage
    /// statistics, and builds of two schemes (as in StoreTests/AnalyticsTests).
    func seeded() throws -> TestSession {
        let test = try TestSession()
        let day = 86400
        try test.run("""
            db.exec([[
            INSERT INTO model_metadata (id, name, format, framework, created_at, updated_at) VALUES
                ('m1', 'Llama', 'gguf', 'llama.cpp', 0, 0), ('m2', 'Phi', 'onnx', 'onnxruntime', 0, 0);
            INSERT INTO generation_sessions (id, model_id, created_at, updated_at) VALUES
                ('s1', 'm1', 0, 0), ('s2', 'm1', 0, 0), ('s3', 'm2', 0, 0);
            INSERT INTO generations (id, session_id, sequence_number, prompt_tokens, completion_tokens, latency_ms, cost, created_at) VALUES
                ('g1', 's1', 1, 10, 20, 100, 0.5, \(Self.may1 + 3600)),
                ('g2', 's1', 2, 5, 15, 300, 0.25, \(Self.may1 + day + 60)),
                ('g3', 's2', 1, 100, 0, 200, 1.0, \(Self.may1 + 7200)),
                ('g4', 's3', 1, 1, 1, 50, 0.125, \(Self.may1 + 2 * day));
            INSERT INTO model_usage_stats (model_id, day, generation_count, total_tokens, total_cost, total_latency_ms, error_count) VALUES
                ('m1', '2024-05-01', 2, 130, 1.5, 300, 0), ('m1', '2024-05-02', 2, 20, 0.25, 500, 1),
                ('m2', '2024-05-03', 1, 2, 0.125, 50, 1);
            INSERT INTO projects VALUES ('com.example.app', 'App', 'App', '/srv/app', 0);
            INSERT INTO schemes (id, projectBundleIdentifier, name) VALUES ('sA', 'com.example.app', 'App'), ('sB', 'com.example.app', 'Tests');
            INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt, startDate, endDate) VALUES
                ('b1', 'sA', '1.0.0', 1, 'succeeded', 1000, 100, 160), ('b2', 'sA', '1.0.0', 2, 'failed', 2000, 200, 230),
                ('b3', 'sA', '1.1.0', 3, 'succeeded', 3000, 300, 390), ('b4', 'sA', '1.1.0', 4, 'cancelled', 4000, 400, 410),
                ('b5', 'sA', '1.2.0', 5, 'running', 5000, 500, NULL), ('b6', 'sB', '1.0.0', 1, 'queued', 6000, NULL, NULL);
            ]])
            """)
        return test
    }

    @Test func modelsAsRows() throws {
        let test = try seeded()
        let results = try test.run("""
            local r = analytics.models{}
            return #r, r[1].model, r[1].tokens, r[1].cost, r[1].avg_latency_ms, r[2].model, r[2].tokens,
                   getmetatable(r).__name, table.concat(getmetatable(r).columns, ",")
            """)
        #expect(results == [2, "m1", 150, 1.75, 200.0, "m2", 2, "opsh.rows",
                            "model,name,sessions,generations,prompt_tokens,completion_tokens,tokens,cost,avg_latency_ms,max_latency_ms"])
    }

    @Test func periodsAsDaysDatesAndDurations() throws {
        let test = try seeded()
        // [May 1, May 2) as a day and as numbers.
        #expect(try test.run("local r = analytics.models{ since = '2024-05-01', ['until'] = '2024-05-02' } return #r, r[1].tokens")
                == [1, 130])
        #expect(try test.run("local r = analytics.models{ since = \(Self.may1 + 86400) } return #r, r[1].tokens, r[2].tokens")
                == [2, 20, 2])
        // All of it is more than a week old.
        #expect(try test.run("return #analytics.models{ since = '7d' }, #analytics.daily{ since = '1w' }") == [0, 0])
        // No rows still carry their columns, for printing.
        #expect(try test.run("return table.concat(getmetatable(analytics.daily{ since = '7d' }).columns, ',')")
                == ["day,generations,tokens,cost,avg_latency_ms"])
    }

    @Test func dailyUsageAndBuilds() throws {
        let test = try seeded()
        #expect(try test.run("""
            local d = analytics.daily{}
            local p = analytics.daily{ model = 'm2' }
            return #d, d[1].day, d[1].tokens, d[3].day, #p, p[1].day, p[1].cost
            """) == [3, "2024-05-01", 130, "2024-05-03", 1, "2024-05-03", 0.125])
        #expect(try test.run("""
            local u = analytics.usage{ since = '2024-05-02' }
            return u[1].model, u[1].generations, u[1].avg_latency_ms, u[1].error_rate, u[2].error_rate
            """) == ["m1", 2, 250.0, 50.0, 100.0])
        #expect(try test.run("""
            local b = analytics.builds{}
            return b[1].name, b[1].builds, b[1].success_rate, b[1].avg_duration_s, b[2].name, b[2].success_rate
            """) == ["App", 5, 66.67, 60.0, "Tests", nil])
    }

    @Test func badOptions() throws {
        let test = try seeded()
        #expect(test.failure("analytics.models{ sinse = '7d' }") == "test:1: bad argument #1 to 'models' (unknown option 'sinse' (options: since, until))")
        #expect(test.failure("analytics.daily{ since = 'last week' }") == "test:1: bad argument #1 to 'daily' (since: 'last week' is neither a day (\"2024-05-01\") nor a duration (\"7d\", \"12h\"))")
        #expect(test.failure("analytics.builds{ since = true }") == "test:1: bad argument #1 to 'builds' (since: a date (seconds since 1970, \"2024-05-01\") or a duration (\"7d\") expected, got boolean)")
    }

    /// Labels are padded by the shell's width table: an emoji takes two
    /// columns, a combining mark none.
    @Test func chartLabelsWithEmojiAndMarksLineUp() throws {
        let test = try TestSession()
        let chart = try test.run("return chart({ {m = '🚀', v = 2}, {m = 'e\\u{301}x', v = 1}, {m = 'abc', v = 2} }, 'm', 'v', { width = 2 })")
        #expect(chart == [.string("🚀  ██ 2\ne\u{301}x  █  1\nabc ██ 2")])
    }

    @Test func chartDrawsBars() throws {
        let test = try TestSession()
        let chart = try test.run("""
            return chart({ {m = "a", v = 10}, {m = "bb", v = 5}, {m = "c", v = 3}, {m = "d", v = 0},
                           {m = "e", v = -2}, {m = "f", v = 0/0}, {m = "g", v = 2.5}, {m = "h"} }, "m", "v", { width = 4 })
            """)
        #expect(chart == [.string("""
            a  ████ 10
            bb ██   5
            c  █▎   3
            d       0
            e       -2
            f       nan
            g  █    2.5
            h       -
            """)])
        #expect(try test.run("return chart({}, 'm', 'v')") == ["(no rows)"])
        #expect(try test.run("return chart({ {m = 'x', v = 0} }, 'm', 'v', { width = 3 })") == ["x     0"])
        // Default width 40; rows from a query.
        #expect(try test.run("""
            db.exec("CREATE TABLE t (k TEXT, n INTEGER)")
            db.exec("INSERT INTO t VALUES ('one', 1), ('two', 2)")
            return chart(db.query("SELECT k, n FROM t ORDER BY n"), "k", "n")
            """) == [.string("one " + String(repeating: "█", count: 20) + String(repeating: " ", count: 20) + " 1\n"
                             + "two " + String(repeating: "█", count: 40) + " 2")])
    }

    @Test func chartErrors() throws {
        let test = try TestSession()
        #expect(test.failure("chart({ {m = 'a', v = 1} }, 'm', 'vv')") == "test:1: bad argument #3 to 'chart' (no column 'vv' in the rows)")
        #expect(test.failure("chart({ {m = 'a', v = 'x'} }, 'm', 'v')") == "test:1: bad argument #3 to 'chart' ('v' of row 1 is a string, not a number)")
        #expect(test.failure("chart({ {m = 'a', v = 1} }, 'm', 'v', { width = 0 })") == "test:1: bad argument #4 to 'chart' (width: a whole number from 1 to 1000 expected, got 0)")
        #expect(test.failure("chart('rows', 'm', 'v')") == "test:1: bad argument #1 to 'chart' (table of rows expected, got string)")
        #expect(test.failure("chart({ 1, 2 }, 'm', 'v')") == "test:1: bad argument #1 to 'chart' (row 1 is a number, not a table of columns)")
    }

    @Test func sparklines() throws {
        let test = try TestSession()
        #expect(try test.run("return sparkline{ 1, 2, 3, 4, 5, 6, 7, 8 }") == ["▁▂▃▄▅▆▇█"])
        #expect(try test.run("return sparkline{ 0, 0/0, 10, 5 }") == ["▁ █▅"])
        #expect(try test.run("return sparkline{ -4, -4 }, sparkline{}, sparkline{ 3 }") == ["▁▁", "", "▁"])
        #expect(try test.run("return sparkline({ {v = 1}, {v = 3}, {} }, 'v')") == ["▁█ "])
        #expect(test.failure("sparkline{ 1, 'x' }") == "test:1: bad argument #1 to 'sparkline' (element 2 is a string, not a number)")
    }
}
