import Foundation
import Testing

/// `watch` in a script hears other processes' commits: on SQLite through
/// `PRAGMA data_version`, on PostgreSQL through LISTEN/NOTIFY on a
/// listener's connection of its own.
@Suite struct WatchAcrossProcessesTests {
    /// The next line of the child's stdout, as text.
    func nextLine(_ child: ChildProcess) -> String {
        String(decoding: readFirstLine(child.standardOutput), as: UTF8.self)
    }

    /// Another process's commits reach a watch (key and SQL), each one
    /// (the second is made after the first was heard); a watch of a
    /// statement that writes is refused. On PostgreSQL the listener waits
    /// outside any transaction.
    @Test(arguments: Engine.allCases) func aWatchHearsAnotherProcesssCommits(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
        let script = try sandbox.script("watch.lua", QueryKeyValueTests.fewRows + """

            local seen = {}
            local h
            h = watch(key.build("b1"), function(b, old)
              seen[#seen + 1] = old.status .. "->" .. b.status
              io.stdout:write("heard " .. seen[#seen] .. "\\n"); io.stdout:flush()
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
        let child = try sandbox.start(opshExecutable, ["run", "--db", db.db, script])
        #expect(nextLine(child) == "ready\n")
        if engine == .postgresql {
            // The listener waits outside any transaction (polled: under load
            // the server may report its state a moment late).
            var states: [String] = []
            let idle = try waitUntil(10) {
                let state = try db.sql("SELECT state FROM pg_stat_activity WHERE application_name = 'opsh listener'")
                states.append(state)
                return state == "idle"
            }
            #expect(idle, "\(states)")
            #expect(!states.contains { $0.contains("transaction") }, "\(states)")
        }
        try db.sql("UPDATE builds SET status = 'running' WHERE id = 'b1'")
        #expect(nextLine(child) == "heard queued->running\n")
        try db.sql("UPDATE builds SET status = 'failed' WHERE id = 'b1'")
        let result = child.finish()
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("true\t0\nwatch observes queries only (SELECT …): DELETE FROM builds"), "\(result.stdout)")
        #expect(result.stdout.hasSuffix("queued->running,running->failed\t1\n"), "\(result.stdout)")
    }

    /// PostgreSQL only (SQLite has no listener: every watch polls the
    /// file's data_version): commits made while the listener's connection
    /// is gone are not heard; after it connects again, every watch fetches
    /// again.
    @Test func aWatchFetchesAgainAfterTheListenerReconnects() throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(.postgresql)
        let script = try sandbox.script("reconnect.lua", QueryKeyValueTests.fewRows + """

            local h
            h = watch(key.build("b1"), function(b, old)
              print(old.status .. "->" .. b.status)
              h:cancel()
            end)
            io.stdout:write("ready\\n"); io.stdout:flush()
            opsh.wait(20)
            """)
        let child = try sandbox.start(opshExecutable, ["run", "--db", db.db, script])
        #expect(nextLine(child) == "ready\n")
        let before = try db.sql("SELECT pid FROM pg_stat_activity WHERE application_name = 'opsh listener'")
        // The listener's server process ends; the commit comes before it is back.
        try db.sql("""
            SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'opsh listener';
            SELECT pg_sleep(0.05);
            UPDATE builds SET status = 'cancelled' WHERE id = 'b1';
            """)
        let result = child.finish()
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.hasSuffix("queued->cancelled\n"), "\(result.stdout)")
        #expect(!before.isEmpty)
    }
}
