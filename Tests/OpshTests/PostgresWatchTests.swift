import Foundation
import Testing

/// Query keys and `watch` on a real PostgreSQL server: the same keys as
/// on SQLite, and other processes' commits heard through LISTEN/NOTIFY.
@Suite struct PostgresWatchTests {
    let server = try! PostgresServer.shared()
    let sandbox = try! Sandbox()

    static let rows = """
        db.exec("INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt) VALUES ('a', 'App', 'App', '/r', 1)")
        db.exec("INSERT INTO schemes (id, projectBundleIdentifier, name, \\"order\\") VALUES ('s1', 'a', 'Release', 0)")
        db.exec("INSERT INTO builds (id, schemeId, versionString, buildNumber, createdAt) VALUES ('b1', 's1', '1.0', 1, 2)")
        db.exec("INSERT INTO builds (id, schemeId, versionString, buildNumber, createdAt) VALUES ('b2', 's1', '1.1', 2, 3)")
        db.exec("INSERT INTO telemetry (event, created_at) VALUES ('start', 1), ('start', 2), ('stop', 3)")
        """

    /// The same keys print the same on both engines.
    @Test func queryKeysGiveTheSameValuesOnBothEngines() throws {
        let url = try server.makeDatabase()
        let script = try sandbox.script("keys.lua", Self.rows + """

            print(query(key.build("b1")).status, query(key.project("a")).displayName)
            print(table.concat(query(key.projects.all.ids), ","), table.concat(query(key.project("a").schemes.ids), ","))
            local latest = query(key.project("a").latestBuilds(5))
            print(#latest, latest[1].id, latest[1].buildNumber)
            local detail = query(key.project("a").detail)
            print(detail.project.name, table.concat(detail.schemeIds, ","), table.concat(detail.recentBuildIds, ","))
            print(table.concat(query(key.projects.versionStrings).a, ","))
            local counts = query(key.telemetry.counts)
            print(counts.start, counts.stop)
            print(query(key.build("nope")) == nil, query('build."b2"').versionString)
            """)
        let onPostgres = try sandbox.opsh(["--db", url, "--create", "run", script], database: false)
        #expect(onPostgres.status == 0, "\(onPostgres.stderr)")
        let onSQLite = try sandbox.opsh(["run", script])
        #expect(onSQLite.status == 0, "\(onSQLite.stderr)")
        #expect(onPostgres.stdout == onSQLite.stdout)
        #expect(onPostgres.stdout == """
            queued\tApp
            a\ts1
            2\tb2\t2
            App\ts1\tb2,b1
            1.0,1.1
            2\t1
            true\t1.1

            """)
    }

    /// Another process's commits reach a watch (key and SQL), through a
    /// listener that is never inside a transaction; a watch of a
    /// statement that writes is refused by the server's plan.
    @Test func aWatchHearsAnotherProcesssCommits() throws {
        let url = try server.makeDatabase()
        let script = try sandbox.script("watch.lua", Self.rows + """

            local seen = {}
            local h
            h = watch(key.build("b1"), function(b, old)
              seen[#seen + 1] = old.status .. "->" .. b.status
              if b.status == "failed" then h:cancel() end
            end)
            local counted = {}
            local w
            w = watch("SELECT count(*) AS n FROM builds WHERE status = ?", function(rows)
              counted[#counted + 1] = rows[1].n
              w:cancel()
            end, "failed")
            local refused = select(2, pcall(watch, "DELETE FROM builds", function() end))
            io.stdout:write("ready\\n"); io.stdout:flush()
            local done, failures = opsh.wait(20)
            print(done, #failures)
            print(refused)
            print(table.concat(seen, ","), table.concat(counted, ","))
            """)
        let child = try sandbox.start(opshExecutable, ["--db", url, "--create", "run", script])
        // The listener is up once the script says ready.
        let ready = readFirstLine(child.standardOutput)
        #expect(String(decoding: ready, as: UTF8.self) == "ready\n")
        // The listener waits outside any transaction (polled: under load the
        // server may report its state a moment late).
        var states: [String] = []
        let idle = try waitUntil(10) {
            let state = try server.sql("SELECT state FROM pg_stat_activity WHERE application_name = 'opsh listener'", url: url)
            states.append(state)
            return state == "idle"
        }
        #expect(idle, "\(states)")
        #expect(!states.contains { $0.contains("transaction") }, "\(states)")
        try server.sql("UPDATE builds SET status = 'running' WHERE id = 'b1'", url: url)
        usleep(300_000)
        try server.sql("UPDATE builds SET status = 'failed' WHERE id = 'b1'", url: url)
        let result = sandbox.finish(child)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("true\t0\nwatch observes queries only (SELECT …): DELETE FROM builds"), "\(result.stdout)")
        #expect(result.stdout.hasSuffix("queued->running,running->failed\t1\n"), "\(result.stdout)")
    }

    /// Commits made while the listener's connection is gone are not heard;
    /// after it connects again, every watch fetches again.
    @Test func aWatchFetchesAgainAfterTheListenerReconnects() throws {
        let url = try server.makeDatabase()
        let script = try sandbox.script("reconnect.lua", Self.rows + """

            local h
            h = watch(key.build("b1"), function(b, old)
              print(old.status .. "->" .. b.status)
              h:cancel()
            end)
            io.stdout:write("ready\\n"); io.stdout:flush()
            opsh.wait(20)
            """)
        let child = try sandbox.start(opshExecutable, ["--db", url, "--create", "run", script])
        let ready = readFirstLine(child.standardOutput)
        #expect(String(decoding: ready, as: UTF8.self) == "ready\n")
        let before = try server.sql("SELECT pid FROM pg_stat_activity WHERE application_name = 'opsh listener'", url: url)
        // The listener's server process ends; the commit comes before it is back.
        try server.sql("""
            SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'opsh listener';
            SELECT pg_sleep(0.05);
            UPDATE builds SET status = 'cancelled' WHERE id = 'b1';
            """, url: url)
        let result = sandbox.finish(child)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.hasSuffix("queued->cancelled\n"), "\(result.stdout)")
        #expect(!before.isEmpty)
    }
}
