import Foundation
import Testing

/// `analytics.*` gives the same rows, with the same types, on both engines:
/// one script, one expected report.
@Suite struct AnalyticsReportTests {
    @Test(arguments: Engine.allCases) func theAggregationsAreTheSameOnBothEngines(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
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
        let run = try sandbox.opsh(["run", script], on: db)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == """
            models\tmodel=m2 name=Phi sessions=1:integer generations=1:integer prompt_tokens=100:integer completion_tokens=1:integer tokens=101:integer cost=0.1:float avg_latency_ms=1000.0:float max_latency_ms=1000.0:float
            models\tmodel=m1 name=Llama sessions=2:integer generations=3:integer prompt_tokens=22:integer completion_tokens=33:integer tokens=55:integer cost=0.0075:float avg_latency_ms=216.67:float max_latency_ms=300.0:float
            models-day\tmodel=m1 name=Llama sessions=1:integer generations=2:integer prompt_tokens=15:integer completion_tokens=25:integer tokens=40:integer cost=0.0035:float avg_latency_ms=200.0:float max_latency_ms=300.0:float
            daily\tday=2024-05-01 generations=2:integer tokens=40:integer cost=0.0035:float avg_latency_ms=200.0:float
            daily\tday=2024-05-02 generations=1:integer tokens=15:integer cost=0.004:float avg_latency_ms=250.0:float
            daily\tday=2024-05-03 generations=1:integer tokens=101:integer cost=0.1:float avg_latency_ms=1000.0:float
            daily-m2\tday=2024-05-03 generations=1:integer tokens=101:integer cost=0.1:float avg_latency_ms=1000.0:float
            usage\tmodel=m1 name=Llama days=2:integer generations=4:integer tokens=55:integer cost=0.0075:float avg_latency_ms=162.5:float errors=1:integer error_rate=25.0:float
            usage\tmodel=m2 name=Phi days=1:integer generations=2:integer tokens=101:integer cost=0.1:float avg_latency_ms=500.0:float errors=2:integer error_rate=100.0:float
            usage-since\tmodel=m2 name=Phi days=1:integer generations=2:integer tokens=101:integer cost=0.1:float avg_latency_ms=500.0:float errors=2:integer error_rate=100.0:float
            usage-since\tmodel=m1 name=Llama days=1:integer generations=1:integer tokens=15:integer cost=0.004:float avg_latency_ms=250.0:float errors=0:integer error_rate=0.0:float
            builds\tscheme=sa project=p name=App builds=3:integer succeeded=1:integer failed=1:integer cancelled=1:integer success_rate=50.0:float avg_duration_s=20.0:float max_duration_s=30.0:float
            builds\tscheme=sb project=p name=Beta builds=1:integer succeeded=1:integer failed=0:integer cancelled=0:integer success_rate=100.0:float avg_duration_s=5.0:float max_duration_s=5.0:float

            """, "\(run.stdout)")
    }
}
