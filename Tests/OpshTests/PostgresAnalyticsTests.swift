import Foundation
import Testing

/// `analytics.*` gives the same rows, with the same types, on both engines.
@Suite struct PostgresAnalyticsTests {
    let server = try! PostgresServer.shared()
    let sandbox = try! Sandbox()

    @Test func theAggregationsAreTheSameOnBothEngines() throws {
        let url = try server.makeDatabase()
        let may1 = 1714521600.0  // 2024-05-01 00:00 UTC
        let script = try sandbox.script("analytics.lua", """
            local may1 = \(may1)
            db.exec("INSERT INTO model_metadata (id, name, format, framework, created_at, updated_at) VALUES ('m1', 'Llama', 'gguf', 'llama.cpp', 0, 0), ('m2', 'Phi', 'gguf', 'llama.cpp', 0, 0)")
            db.exec("INSERT INTO generation_sessions (id, model_id, created_at, updated_at) VALUES ('s1', 'm1', 0, 0), ('s2', 'm1', 0, 0), ('s3', 'm2', 0, 0)")
            local n = 0
            for _, g in ipairs{ {"s1", 0, 10, 20, 0.001, 100}, {"s1", 3600, 5, 5, 0.0025, 300}, {"s2", 86400 + 60, 7, 8, 0.004, 250},
                                {"s3", 2 * 86400, 100, 1, 0.1, 1000} } do
              n = n + 1
              db.exec("INSERT INTO generations (id, session_id, sequence_number, prompt_tokens, completion_tokens, cost, latency_ms, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                      "g" .. n, g[1], n, g[3], g[4], g[5], g[6], may1 + g[2])
            end
            db.exec("INSERT INTO model_usage_stats (model_id, day, generation_count, total_tokens, total_cost, total_latency_ms, error_count) VALUES ('m1', '2024-05-01', 3, 40, 0.0035, 400, 1), ('m1', '2024-05-02', 1, 15, 0.004, 250, 0), ('m2', '2024-05-03', 2, 101, 0.1, 1000, 2)")
            db.exec("INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt) VALUES ('p', 'P', 'P', '/p', 0)")
            db.exec("INSERT INTO schemes (id, projectBundleIdentifier, name) VALUES ('sa', 'p', 'App'), ('sb', 'p', 'Beta')")
            for i, b in ipairs{ {"sa", "succeeded", 10}, {"sa", "failed", 30}, {"sa", "cancelled", nil}, {"sb", "succeeded", 5} } do
              db.exec("INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt, startDate, endDate) VALUES (?, ?, '1', ?, ?, ?, ?, ?)",
                      "b" .. i, b[1], i, b[2], may1 + i, b[3] and may1 or nil, b[3] and may1 + b[3] or nil)
            end
            local function show(name, report)
              for _, row in ipairs(report) do
                local parts = {}
                for _, column in ipairs(getmetatable(row).columns) do
                  local v = row[column]
                  parts[#parts + 1] = column .. "=" .. tostring(v) .. (math.type(v) and ":" .. math.type(v) or "")
                end
                print(name, table.concat(parts, " "))
              end
            end
            show("models", analytics.models{})
            show("models-day", analytics.models{ since = may1, ["until"] = may1 + 86400 })
            show("daily", analytics.daily{})
            show("daily-m2", analytics.daily{ model = "m2" })
            show("usage", analytics.usage{})
            show("usage-since", analytics.usage{ since = "2024-05-02" })
            show("builds", analytics.builds{})
            """)
        let onPostgres = try sandbox.opsh(["--db", url, "--create", "run", script], database: false)
        #expect(onPostgres.status == 0, "\(onPostgres.stderr)")
        let onSQLite = try sandbox.opsh(["run", script])
        #expect(onSQLite.status == 0, "\(onSQLite.stderr)")
        #expect(onPostgres.stdout == onSQLite.stdout)
        #expect(onSQLite.stdout.contains("daily\tday=2024-05-01 generations=2:integer tokens=40:integer cost=0.0035:float"), "\(onSQLite.stdout)")
        #expect(onSQLite.stdout.contains("builds\tscheme=sa project=p name=App builds=3:integer succeeded=1:integer failed=1:integer cancelled=1:integer success_rate=50.0:float"), "\(onSQLite.stdout)")
        #expect(onSQLite.stdout.split(separator: "\n").count == 13, "\(onSQLite.stdout)")
    }
}
