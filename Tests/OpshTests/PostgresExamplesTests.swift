import Foundation
import Testing

/// The example scripts that use what runs on PostgreSQL, run against both
/// engines on the same rows: the same report, the same rows left, and a
/// dry run that keeps nothing.
@Suite struct PostgresExamplesTests {
    let server = try! PostgresServer.shared()
    let sandbox = try! Sandbox()

    /// The report without its timings (lock, seconds), which differ.
    static func report(_ output: String) -> String {
        output.replacingOccurrences(of: #"longest lock [0-9.]+ ms, [0-9.]+ s"#, with: "…", options: .regularExpression)
    }

    @Test func telemetryRetentionRunsUnchangedOnPostgres() throws {
        let url = try server.makeDatabase()
        let day = 86400.0, now = Date().timeIntervalSince1970
        let rows = """
            db.exec("INSERT INTO telemetry (event, created_at) VALUES ('old', ?), ('old', ?), ('older', ?), ('recent', ?), ('new', ?)",
                    \(now - 40 * day), \(now - 35 * day), \(now - 90 * day), \(now - 20 * day), \(now - 60))
            db.exec("INSERT INTO configuration (id, base_url, created_at, updated_at) VALUES ('default', 'x', 0, 0)")
            db.exec("INSERT INTO storage_config (configuration_id, telemetry_retention_days) VALUES ('default', 30)")
            """
        let example = Examples.path("telemetry-retention.lua")
        var outputs: [[String]] = []
        for engine in [["--db", url], ["--db", sandbox.database]] {
            let seeded = try sandbox.opsh(engine + ["--create", "-e", rows], database: false)
            #expect(seeded.status == 0, "\(seeded.stderr)")
            let dry = try sandbox.opsh(engine + ["--dry-run", "run", example], database: false)
            #expect(dry.status == 0, "\(dry.stderr)")
            let run = try sandbox.opsh(engine + ["run", example], database: false)
            #expect(run.status == 0, "\(run.stderr)")
            let left = try sandbox.opsh(engine + ["-e", "local t = {} for r in db.rows('SELECT event FROM telemetry ORDER BY created_at') do t[#t + 1] = r.event end print(table.concat(t, ','))"], database: false)
            outputs.append([Self.report(dry.stdout), Self.report(run.stdout), left.stdout])
        }
        #expect(outputs[0] == outputs[1])
        #expect(outputs[0][0].contains("retention 30d (storage_config 'default'): would delete 3 of 5 events"), "\(outputs[0][0])")
        #expect(outputs[0][1].contains("deleted 3 of 5 events"), "\(outputs[0][1])")
        #expect(outputs[0][2] == "recent,new\n")
    }
}
