import Foundation
import GRDB
import Testing
@testable import Store

/// 2024-05-01 00:00 UTC.
let analyticsMay1: Double = 1_714_521_600

/// Two models, three sessions, four generations over three days, their
/// daily usage statistics, and builds of two schemes.
func seedAnalytics(_ db: Database) throws {
    try db.execute(sql: """
        INSERT INTO model_metadata (id, name, format, framework, created_at, updated_at) VALUES
            ('m1', 'Llama', 'gguf', 'llama.cpp', 0, 0), ('m2', 'Phi', 'onnx', 'onnxruntime', 0, 0);
        INSERT INTO generation_sessions (id, model_id, created_at, updated_at) VALUES
            ('s1', 'm1', 0, 0), ('s2', 'm1', 0, 0), ('s3', 'm2', 0, 0);
        INSERT INTO generations (id, session_id, sequence_number, prompt_tokens, completion_tokens, latency_ms, cost, created_at) VALUES
            ('g1', 's1', 1, 10, 20, 100, 0.5, \(analyticsMay1 + 3600)),
            ('g2', 's1', 2, 5, 15, 300, 0.25, \(analyticsMay1 + 86400 + 60)),
            ('g3', 's2', 1, 100, 0, 200, 1.0, \(analyticsMay1 + 7200)),
            ('g4', 's3', 1, 1, 1, 50, 0.125, \(analyticsMay1 + 2 * 86400));
        INSERT INTO model_usage_stats (model_id, day, generation_count, total_tokens, total_cost, total_latency_ms, error_count) VALUES
            ('m1', '2024-05-01', 2, 130, 1.5, 300, 0),
            ('m1', '2024-05-02', 2, 20, 0.25, 500, 1),
            ('m2', '2024-05-03', 1, 2, 0.125, 50, 1);
        INSERT INTO projects VALUES ('com.example.app', 'App', 'App', '/srv/app', 0);
        INSERT INTO schemes (id, projectBundleIdentifier, name) VALUES ('sA', 'com.example.app', 'App'), ('sB', 'com.example.app', 'Tests');
        INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt, startDate, endDate) VALUES
            ('b1', 'sA', '1.0.0', 1, 'succeeded', 1000, 100, 160),
            ('b2', 'sA', '1.0.0', 2, 'failed', 2000, 200, 230),
            ('b3', 'sA', '1.1.0', 3, 'succeeded', 3000, 300, 390),
            ('b4', 'sA', '1.1.0', 4, 'cancelled', 4000, 400, 410),
            ('b5', 'sA', '1.2.0', 5, 'running', 5000, 500, NULL),
            ('b6', 'sB', '1.0.0', 1, 'queued', 6000, NULL, NULL);
        """)
}

/// A row from name/value pairs, in order.
func analyticsRow(_ fields: KeyValuePairs<String, StoreValue>) -> StoreValue {
    .object(fields.map { StoreValue.Field($0.key, $0.value) })
}

@Suite struct AnalyticsTests {
    let directory = TemporaryDirectory()
    let store: Store

    init() throws {
        store = try makeStore(in: directory)
        try store.client.write { db in try seedAnalytics(db) }
    }

    @Test func perModel() throws {
        let report = try store.analytics { db in try Analytics.models(db) }
        #expect(report.columns == ["model", "name", "sessions", "generations", "prompt_tokens", "completion_tokens",
                                   "tokens", "cost", "avg_latency_ms", "max_latency_ms"])
        #expect(report.rows == [
            analyticsRow(["model": .text("m1"), "name": .text("Llama"), "sessions": .integer(2), "generations": .integer(3),
                 "prompt_tokens": .integer(115), "completion_tokens": .integer(35), "tokens": .integer(150),
                 "cost": .real(1.75), "avg_latency_ms": .real(200), "max_latency_ms": .real(300)]),
            analyticsRow(["model": .text("m2"), "name": .text("Phi"), "sessions": .integer(1), "generations": .integer(1),
                 "prompt_tokens": .integer(1), "completion_tokens": .integer(1), "tokens": .integer(2),
                 "cost": .real(0.125), "avg_latency_ms": .real(50), "max_latency_ms": .real(50)]),
        ])
    }

    @Test func perModelInAPeriod() throws {
        // [May 1, May 2): g1 and g3 only.
        let report = try store.analytics { db in try Analytics.models(db, period: .init(since: analyticsMay1, until: analyticsMay1 + 86400)) }
        #expect(report.rows.count == 1)
        #expect(report.rows[0]["sessions"] == .integer(2))
        #expect(report.rows[0]["tokens"] == .integer(130))
        #expect(report.rows[0]["cost"] == .real(1.5))
        #expect(report.rows[0]["avg_latency_ms"] == .real(150))
        let later = try store.analytics { db in try Analytics.models(db, period: .init(since: analyticsMay1 + 86400)) }
        #expect(later.rows.map { $0["model"] } == [.text("m1"), .text("m2")])
        #expect(later.rows.map { $0["tokens"] } == [.integer(20), .integer(2)])
        let none = try store.analytics { db in try Analytics.models(db, period: .init(since: analyticsMay1 + 10 * 86400)) }
        #expect(none.rows.isEmpty)
        #expect(none.columns.first == "model")
    }

    @Test func perDay() throws {
        let report = try store.analytics { db in try Analytics.daily(db) }
        #expect(report.columns == ["day", "generations", "tokens", "cost", "avg_latency_ms"])
        #expect(report.rows == [
            analyticsRow(["day": .text("2024-05-01"), "generations": .integer(2), "tokens": .integer(130), "cost": .real(1.5), "avg_latency_ms": .real(150)]),
            analyticsRow(["day": .text("2024-05-02"), "generations": .integer(1), "tokens": .integer(20), "cost": .real(0.25), "avg_latency_ms": .real(300)]),
            analyticsRow(["day": .text("2024-05-03"), "generations": .integer(1), "tokens": .integer(2), "cost": .real(0.125), "avg_latency_ms": .real(50)]),
        ])
        let phi = try store.analytics { db in try Analytics.daily(db, model: "m2") }
        #expect(phi.rows.map { $0["day"] } == [.text("2024-05-03")])
        let llamaLater = try store.analytics { db in try Analytics.daily(db, model: "m1", period: .init(since: analyticsMay1 + 86400)) }
        #expect(llamaLater.rows.map { $0["day"] } == [.text("2024-05-02")])
    }

    @Test func usageStatistics() throws {
        let report = try store.analytics { db in try Analytics.usage(db) }
        #expect(report.columns == ["model", "name", "days", "generations", "tokens", "cost", "avg_latency_ms", "errors", "error_rate"])
        #expect(report.rows == [
            analyticsRow(["model": .text("m1"), "name": .text("Llama"), "days": .integer(2), "generations": .integer(4),
                 "tokens": .integer(150), "cost": .real(1.75), "avg_latency_ms": .real(200), "errors": .integer(1),
                 "error_rate": .real(25)]),
            analyticsRow(["model": .text("m2"), "name": .text("Phi"), "days": .integer(1), "generations": .integer(1),
                 "tokens": .integer(2), "cost": .real(0.125), "avg_latency_ms": .real(50), "errors": .integer(1),
                 "error_rate": .real(100)]),
        ])
        let since = try store.analytics { db in try Analytics.usage(db, model: "m1", period: .init(since: analyticsMay1 + 86400)) }
        #expect(since.rows == [
            analyticsRow(["model": .text("m1"), "name": .text("Llama"), "days": .integer(1), "generations": .integer(2),
                 "tokens": .integer(20), "cost": .real(0.25), "avg_latency_ms": .real(250), "errors": .integer(1),
                 "error_rate": .real(50)]),
        ])
    }

    @Test func buildsPerScheme() throws {
        let report = try store.analytics { db in try Analytics.builds(db) }
        #expect(report.columns == ["scheme", "project", "name", "builds", "succeeded", "failed", "cancelled",
                                   "success_rate", "avg_duration_s", "max_duration_s"])
        #expect(report.rows == [
            analyticsRow(["scheme": .text("sA"), "project": .text("com.example.app"), "name": .text("App"), "builds": .integer(5),
                 "succeeded": .integer(2), "failed": .integer(1), "cancelled": .integer(1),
                 "success_rate": .real(66.67), "avg_duration_s": .real(60), "max_duration_s": .real(90)]),
            analyticsRow(["scheme": .text("sB"), "project": .text("com.example.app"), "name": .text("Tests"), "builds": .integer(1),
                 "succeeded": .integer(0), "failed": .integer(0), "cancelled": .integer(0),
                 "success_rate": .null, "avg_duration_s": .null, "max_duration_s": .null]),
        ])
        let since = try store.analytics { db in try Analytics.builds(db, period: .init(since: 2500, until: 5500)) }
        #expect(since.rows.count == 1)
        #expect(since.rows[0]["builds"] == .integer(3))
        #expect(since.rows[0]["success_rate"] == .real(100))
        #expect(since.rows[0]["avg_duration_s"] == .real(90))
    }
}
