import Foundation
import Testing
import LuaRuntime
import Store
@testable import Bindings

/// `watch` and `opsh.wait`: callbacks on the Lua thread, on changes only,
/// including commits of another process.
@Suite struct WatchTests {
    let test = try! TestSession()

    init() throws {
        _ = try test.sqlite3("""
            INSERT INTO projects VALUES ('com.example.app', 'app', 'App', 'git@x:app.git', 1);
            INSERT INTO schemes (id, projectBundleIdentifier, name) VALUES ('s1', 'com.example.app', 'Release');
            INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt) VALUES ('b1', 's1', '1.2.0', 1, 'running', 10);
            """)
        try test.run("seen = {}")
    }

    /// Delivers events until `condition` holds or 5 s pass.
    func deliver(until condition: String) throws -> Bool {
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline {
            try test.session.deliverEvents()
            if try test.run("return \(condition)") == [true] { return true }
            _ = test.session.events.wait(timeout: deadline.timeIntervalSinceNow, shouldStop: { false })
        }
        return false
    }

    @Test func firesOnAnInProcessWriteWithTheNewAndOldValues() throws {
        try test.run("""
            h = watch(key.build('b1'), function(new, old)
              seen[#seen + 1] = old.status .. '->' .. new.status
            end)
            db.exec("UPDATE builds SET status = 'succeeded' WHERE id = 'b1'")
            """)
        #expect(try deliver(until: "#seen == 1"))
        #expect(try test.run("return seen[1], h:value().status, h:active()") == ["running->succeeded", "succeeded", true])
    }

    @Test func firesOnAWriteByAnotherProcess() throws {
        try test.run("""
            h = watch('build.b1', function(new) seen[#seen + 1] = new.status end)
            """)
        _ = try test.sqlite3("UPDATE builds SET status = 'failed' WHERE id = 'b1'")
        #expect(try deliver(until: "#seen == 1"))
        #expect(try test.run("return seen[1]") == ["failed"])
    }

    @Test func sqlWatchesFireWithRowsAndItsParameters() throws {
        try test.run("""
            h = watch("SELECT count(*) AS n FROM builds WHERE status = ?", function(rows)
              seen[#seen + 1] = rows[1].n
            end, 'running')
            """)
        _ = try test.sqlite3("INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt) VALUES ('b2', 's1', '1.2.1', 2, 'running', 11)")
        #expect(try deliver(until: "#seen == 1"))
        #expect(try test.run("return seen[1], getmetatable(h:value()).__name") == [2, "opsh.rows"])
    }

    /// A watch fetches as `query` and `db.query` do (the same machinery, on
    /// the Lua thread), so its value is what they return, row metatables
    /// and all; and a burst of commits between two deliveries costs one
    /// fetch and one callback, with the latest value.
    @Test func aBurstOfCommitsCallsBackOnceWithTheLatestValueAsQueryReturnsIt() throws {
        try test.run("""
            fetches = 0
            h = watch("SELECT count(*) AS n FROM builds WHERE status = 'queued'", function(rows)
              seen[#seen + 1] = rows[1].n
            end)
            k = watch(key.build('b1'), function(b) seen[#seen + 1] = b.status end)
            for i = 1, 50 do
              db.exec("INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt) VALUES (?, 's1', '2', ?, 'queued', 20)", 'q' .. i, 100 + i)
            end
            db.exec("UPDATE builds SET status = 'failed' WHERE id = 'b1'")
            """)
        #expect(try deliver(until: "#seen == 2"))
        // Nothing more arrives for the burst.
        _ = test.session.events.wait(timeout: 0.3, shouldStop: { false })
        try test.session.deliverEvents()
        #expect(try test.run("table.sort(seen, function(a, b) return tostring(a) < tostring(b) end); return #seen, seen[1], seen[2]") == [2, 50, "failed"])
        let same = try test.run("""
            local rows = db.query("SELECT count(*) AS n FROM builds WHERE status = 'queued'")
            local build = query(key.build('b1'))
            return getmetatable(h:value()).__name == getmetatable(rows).__name,
              getmetatable(h:value()[1]).__name == getmetatable(rows[1]).__name,
              getmetatable(k:value()) == getmetatable(build), k:value().status == build.status
            """)
        #expect(same == [true, true, true, true])
    }

    @Test func noCallbackWhenTheValueDidNotChange() throws {
        // An SQL watch observes only the tables its statement reads; a
        // key watch re-fetches on its tables but calls back only on a
        // different value. A later write to the watched value proves the
        // events were delivered in order and nothing came before.
        try test.run("""
            a = watch("SELECT status FROM builds WHERE id = 'b1'", function(rows) seen[#seen + 1] = 'sql:' .. rows[1].status end)
            b = watch(key.build('b1'), function(b) seen[#seen + 1] = 'key:' .. b.status end)
            db.exec("INSERT INTO telemetry (event, created_at) VALUES ('open', 1)")
            db.exec("UPDATE builds SET progress = 0.5 WHERE id = 'b1'")
            db.exec("UPDATE builds SET progress = 0.5 WHERE id = 'b1'")
            """)
        #expect(try deliver(until: "#seen == 1"))
        #expect(try test.run("return seen[1]") == ["key:running"])
        try test.run("db.exec(\"UPDATE builds SET status = 'failed' WHERE id = 'b1'\")")
        #expect(try deliver(until: "#seen == 3"))
        let seen = try test.run("table.sort(seen) return seen")
        #expect(seen == [.array(["key:failed", "key:running", "sql:failed"])])
    }

    @Test func sqlWatchObservesTheTablesItReads() throws {
        let found = try test.database.inspectQuery(
            "SELECT b.id, s.name FROM builds b JOIN schemes s ON s.id = b.schemeId WHERE b.status = ?",
            arguments: .positional([.text("running")]))
        #expect(found.tables == ["builds", "schemes"])
        #expect(found.columns == ["id", "name"])
        #expect(try test.session.tablesRead(by: "SELECT * FROM builds WHERE id = ?", arguments: .positional([.text("b1")]))
                == ["builds"])
        // Through a view: the tables under it.
        _ = try test.sqlite3("CREATE VIEW running AS SELECT id FROM builds WHERE status = 'running'")
        #expect(try test.session.tablesRead(by: "SELECT * FROM running", arguments: .positional([])).contains("builds"))
    }

    @Test func aWatchStartedInsideATransactionSeesTheCommit() throws {
        try test.run("""
            db.transaction(function()
              h = watch(key.build('b1'), function(b) seen[#seen + 1] = b.status end)
              db.exec("UPDATE builds SET status = 'cancelled' WHERE id = 'b1'")
            end)
            db.exec("UPDATE builds SET status = 'failed' WHERE id = 'b1'")
            """)
        #expect(try deliver(until: "seen[#seen] == 'failed'"))
    }

    @Test func cancelledWatchesStayQuietAndLeakNothing() throws {
        let monitor = try #require(test.store.externalChanges)
        try test.run("h = watch(key.build('b1'), function(b) seen[#seen + 1] = b.status end)")
        #expect(test.session.hasSubscriptions)
        #expect(monitor.subscriberCount == 1)
        try test.run("h:cancel() h:cancel()")
        #expect(!test.session.hasSubscriptions)
        #expect(monitor.subscriberCount == 0)
        #expect(try test.run("return h:active(), tostring(h)") == [false, "watch(build.b1) cancelled"])

        // A witness on the same key proves the changes were delivered.
        try test.run("witness = watch(key.build('b1'), function(b) seen[#seen + 1] = 'witness:' .. b.status end)")
        try test.run("db.exec(\"UPDATE builds SET status = 'failed' WHERE id = 'b1'\")")
        #expect(try deliver(until: "seen[#seen] == 'witness:failed'"))
        _ = try test.sqlite3("UPDATE builds SET status = 'succeeded' WHERE id = 'b1'")
        #expect(try deliver(until: "seen[#seen] == 'witness:succeeded'"))
        #expect(try test.run("return table.concat(seen, ',')") == ["witness:failed,witness:succeeded"])
        try test.run("witness:cancel()")

        // A watch whose handle is dropped (typed at the prompt, say) lives
        // on until cancelled: the handle comes back from opsh.watches().
        try test.run("seen = {} do watch(key.build('b1'), function(b) seen[#seen + 1] = 'kept:' .. b.status end) end")
        try test.run("collectgarbage() collectgarbage()")
        #expect(test.session.hasSubscriptions)
        #expect(monitor.subscriberCount == 1)
        try test.run("db.exec(\"UPDATE builds SET status = 'failed' WHERE id = 'b1'\")")
        #expect(try deliver(until: "seen[#seen] == 'kept:failed'"))
        try test.run("for _, w in ipairs(opsh.watches()) do w:cancel() end")
        #expect(!test.session.hasSubscriptions)
        #expect(monitor.subscriberCount == 0)
    }

    @Test func callbackErrorsAreReportedAndOtherWatchesGoOn() throws {
        try test.run("""
            bad = watch(key.build('b1'), function(b) error('boom ' .. b.status) end)
            good = watch(key.build('b1'), function(b) seen[#seen + 1] = b.status end)
            db.exec("UPDATE builds SET status = 'failed' WHERE id = 'b1'")
            """)
        var errors: [LuaError] = []
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline, try test.run("return #seen") != [1] || errors.isEmpty {
            _ = test.session.events.wait(timeout: 0.5, shouldStop: { false })
            errors += try test.session.deliverEvents()
        }
        #expect(errors.map(\.message) == ["test:1: boom failed"])
        #expect(try test.run("return seen[1], bad:active()") == ["failed", true])
    }

    @Test func waitRunsCallbacksUntilNoWatchRemains() throws {
        // A script that follows a build until it finishes.
        let results = try test.run("""
            local h
            h = watch(key.build('b1'), function(b)
              seen[#seen + 1] = b.status
              if b.status ~= 'running' then h:cancel() end
            end)
            db.exec("UPDATE builds SET status = 'succeeded' WHERE id = 'b1'")
            local done, errors = opsh.wait(5)
            return done, #errors, table.concat(seen, ',')
            """)
        #expect(results == [true, 0, "succeeded"])
    }

    @Test func waitReturnsFalseAtTheTimeoutAndReportsCallbackErrors() throws {
        let results = try test.run("""
            h = watch(key.build('b1'), function(b) error('bad callback') end)
            db.exec("UPDATE builds SET status = 'failed' WHERE id = 'b1'")
            local done, errors = opsh.wait(0.5)
            return done, errors[1]
            """)
        #expect(results == [false, "test:1: bad callback"])
    }

    @Test func waitStopsWhenInterrupted() throws {
        try test.run("h = watch(key.build('b1'), function() end)")
        interruptOnArrival(test.session.runtime)
        let started = Date()
        let error = #expect(throws: LuaError.self) {
            try test.run("arrived() opsh.wait()")
        }
        #expect(error?.kind == .interrupted(.interrupted))
        #expect(Date().timeIntervalSince(started) < 5)
    }

    /// Bad arguments, with their exact messages.
    static let badInput: [(String, String)] = [
        ("watch(key.build('b1'))", "test:1: bad argument #2 to 'watch' (function expected, got no value)"),
        ("watch(nil, print)", "test:1: bad argument #1 to 'watch' (query key expected, got nil)"),
        ("watch('build.b1.nope', print)", "test:1: malformed query key 'build.b1.nope' at position 10: expected one of 'logs', 'crashLogs', found 'nope' (quote an id that holds '.', e.g. project.\"com.example.app\")"),
        ("watch(key.build('b1'), print, 1)", "test:1: bad argument #3 to 'watch' (parameters go with an SQL query, not with a query key)"),
        ("watch('SELECT * FROM nope', print)", "test:1: no such table: nope in watch(SELECT * FROM nope)"),
        ("watch('SELECT ? AS x, ? AS y', print, 1, {})", "test:1: bad argument #4 to 'watch' (SQL parameter expected (nil, boolean, number or string), got table)"),
        ("watch('SELECT ? AS x', print, {1})", "test:1: bad argument #3 to 'watch' (table of fields expected, got an array)"),
        ("watch('DELETE FROM builds', print)", "test:1: watch observes queries only (SELECT …): DELETE FROM builds"),
        ("watch('SELECT ? AS x', print)", "test:1: wrong number of statement arguments: 0 in watch(SELECT ? AS x)"),
        ("opsh.wait(-1)", "test:1: bad argument #1 to 'wait' (a number of seconds >= 0 expected)"),
        ("db.transaction(function() opsh.wait(1) end)", "test:1: opsh.wait cannot wait inside db.transaction: the database would stay locked for every other writer"),
    ]

    @Test(arguments: badInput)
    func badInputIsRefusedWithItsMessage(code: String, message: String) throws {
        #expect(test.failure(code) == message)
        #expect(!test.session.hasSubscriptions)
    }
}
