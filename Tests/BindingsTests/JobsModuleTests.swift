import Foundation
import Testing
import LuaRuntime
import Store
@testable import Bindings

/// The `jobs` module on real builds (git checkouts, /bin/sh commands).
@Suite struct JobsModuleTests {
    let fixture = try! JobsFixture()

    init() throws {
        try fixture.scheme("ok", "echo hello; echo '+ traced'; echo 'warning: careful'; echo bye")
        // Runs until a test cancels it: a test that checks it is still running must not race its end on a busy machine.
        try fixture.scheme("sleeper", "echo started; sleep 600")
        try fixture.scheme("fails", "echo 'error: it broke'; exit 3")
        try fixture.scheme("empty", "")
    }

    @Test func createStartAndWaitGiveBuildRows() throws {
        let results = try fixture.run("""
            local q = jobs.create{ scheme = 'ok', version = '1.0.0' }
            local second = jobs.create{ scheme = 'ok', version = 'feature' }
            local started = jobs.start(q.id)
            local final = jobs.wait(started)            -- a row is an id too
            local other = jobs.wait(jobs.start(second), 10)
            return getmetatable(q).__name, q.status, q.buildNumber, second.buildNumber, q.startDate == nil,
                   final.status, final.exitCode, final.startDate <= final.endDate, #final.commitHash,
                   other.status, jobs.get(q.id).status
            """)
        #expect(results == ["opsh.row", "queued", 1, 2, true, "succeeded", 0, true, 40, "succeeded", "succeeded"])
    }

    @Test func aFailingBuildEndsFailedWithItsExitCode() throws {
        let results = try fixture.run("""
            local final = jobs.wait(jobs.start{ scheme = 'fails', version = '1.0.0' }, 10)
            local errors = {}
            for _, line in ipairs(jobs.logs(final.id)) do
              if line.level == 'error' then errors[#errors + 1] = line.content end
            end
            return final.status, final.exitCode, errors[1], #jobs.crashLogs(final.id)
            """)
        #expect(results == ["failed", 3, "error: it broke", 0])
    }

    @Test func logsTailDebugAndCursors() throws {
        let results = try fixture.run("""
            local b = jobs.wait(jobs.start{ scheme = 'ok', version = '1.0.0' }, 10)
            local function contents(rows)
              local t = {}
              for i, r in ipairs(rows) do t[i] = r.content end
              return table.concat(t, '|')
            end
            local all = jobs.logs(b.id, { debug = true, tail = 1000 })
            local visible = jobs.logs(b.id)
            local hello
            for _, r in ipairs(all) do if r.content == 'hello' then hello = r end end
            return getmetatable(visible).__name,
                   #all - #visible,                                -- the '$ /bin/sh', containment and '+ traced' lines
                   contents(jobs.logs(b.id, { tail = 2 })):match('^bye|build succeeded') ~= nil,
                   contents(jobs.logs(b.id, { after = hello.cursor, limit = 2 })),
                   hello.level, hello.category, hello.buildId == b.id, type(hello.createdAt)
            """)
        #expect(results == ["opsh.rows", 3, true, "warning: careful|bye", "info", "build", true, "number"])
    }

    @Test func followingAnEndedBuildPrintsItsLogOrItsTailAndReturns() throws {
        let results = try fixture.run("""
            local b = jobs.wait(jobs.start{ scheme = 'ok', version = '1.0.0' }, 10)
            local function follow(options)
              local lines = {}
              options.print = function(text) lines[#lines + 1] = text end
              local final = jobs.follow(b.id, options)
              return final.status, lines
            end
            local status, all = follow{}
            local _, traced = follow{ debug = true }
            local _, tail = follow{ tail = 2 }
            return status, all[1]:match('^checking out') ~= nil, #traced - #all, #tail,
                   tail[1], tail[3]:match('^build .* #1 [(]1.0.0[)] succeeded, exit code 0, [%d.]+ s, 2 lines shown$') ~= nil
            """)
        #expect(Array(results.prefix(5)) == ["succeeded", true, 3, 3, "bye"])
        #expect(results.last == true)
    }

    @Test func listFiltersByStatusSchemeAndProjectNewestFirst() throws {
        let results = try fixture.run("""
            local a = jobs.wait(jobs.start{ scheme = 'ok', version = '1.0.0' }, 10)
            local b = jobs.wait(jobs.start{ scheme = 'fails', version = '1.0.0' }, 10)
            local c = jobs.create{ scheme = 'ok', version = '1.0.0' }
            local function ids(rows)
              local t = {}
              for i, r in ipairs(rows) do t[i] = r.id == a.id and 'a' or r.id == b.id and 'b' or r.id == c.id and 'c' or '?' end
              return table.concat(t)
            end
            return ids(jobs.list()), ids(jobs.list{ status = 'failed' }), ids(jobs.list{ scheme = 'ok' }),
                   ids(jobs.list{ scheme = 'ok', status = 'queued' }), ids(jobs.list{ limit = 1 }),
                   ids(jobs.list{ project = 'com.example.app', limit = 2 }), #jobs.list{ project = 'nope' },
                   getmetatable(jobs.list{ project = 'nope' }).__name
            """)
        #expect(results == ["cba", "b", "ca", "c", "c", "cb", 0, "opsh.rows"])
    }

    @Test func cancelDeleteAndTheirRefusals() throws {
        try fixture.run("b = jobs.start{ scheme = 'sleeper', version = '1.0.0' }")
        #expect(try fixture.eventually("(jobs.logs(b.id, { tail = 1 })[1] or {}).content == 'started'"))
        let id = try #require(fixture.run("return b.id").first?.stringValue)
        #expect(fixture.test.failure("jobs.delete(b.id)") == "test:1: build \(id) is running; cancel it first")
        let cancelled = try fixture.run("""
            local asked = jobs.cancel(b.id)
            local final = jobs.wait(b.id, 10)
            return asked, final.status, jobs.cancel(b.id), db.value('SELECT count(*) > 0 FROM buildLogs WHERE buildId = ?', b.id)
            """)
        #expect(cancelled == [true, "cancelled", false, 1])
        // The workspace is next to the database file until the build is deleted.
        let workspace = fixture.test.folder.appendingPathComponent("workspaces/\(id)").path
        #expect(FileManager.default.fileExists(atPath: workspace + "/version.txt"))
        let deleted = try fixture.run("""
            return jobs.delete(b.id), db.value('SELECT count(*) FROM buildLogs WHERE buildId = ?', b.id)
            """)
        #expect(deleted == [true, 0])
        #expect(fixture.test.failure("jobs.get(b.id)") == "test:1: no build with id \(id)")
        #expect(!FileManager.default.fileExists(atPath: workspace))

        // A queued build is cancelled at once.
        #expect(try fixture.run("local q = jobs.create{ scheme = 'ok', version = '1.0.0' } jobs.cancel(q) return jobs.get(q).status")
            == ["cancelled"])
    }

    @Test func waitIsInterruptibleAndLeavesTheBuildRunning() throws {
        try fixture.run("b = jobs.start{ scheme = 'sleeper', version = '1.0.0' }")
        // jobs.start hands the build to the manager's thread, which marks it
        // running; on a busy machine the interrupt could otherwise come first.
        #expect(try fixture.eventually("(jobs.logs(b.id, { tail = 1 })[1] or {}).content == 'started'"))
        interruptOnArrival(fixture.test.session.runtime)
        let started = Date()
        let error = #expect(throws: LuaError.self) { try fixture.run("arrived() jobs.wait(b.id)") }
        #expect(error?.kind == .interrupted(.interrupted))
        #expect(Date().timeIntervalSince(started) < 5)
        #expect(try fixture.run("return jobs.get(b.id).status") == ["running"])

        // So is a blocking follow.
        interruptOnArrival(fixture.test.session.runtime)
        let followError = #expect(throws: LuaError.self) { try fixture.run("arrived() jobs.follow(b.id, { print = function() end })") }
        #expect(followError?.kind == .interrupted(.interrupted))
        #expect(try fixture.run("jobs.cancel(b.id) return jobs.wait(b.id, 10).status") == ["cancelled"])
    }

    @Test func waitTimesOut() throws {
        let id = try #require(fixture.run("b = jobs.start{ scheme = 'sleeper', version = '1.0.0' } return b.id").first?.stringValue)
        let started = Date()
        #expect(fixture.test.failure("jobs.wait(b.id, 0.3)") == "test:1: build \(id) did not finish within 0.3 s")
        #expect(Date().timeIntervalSince(started) < 3)
        try fixture.run("jobs.cancel(b.id) jobs.wait(b.id, 10)")
    }

    @Test func whatMakesTheJobManagerWriteIsRefusedInsideATransaction() throws {
        let id = try #require(fixture.run("q = jobs.create{ scheme = 'ok', version = '1.0.0' } return q.id").first?.stringValue)
        let reason = "cannot run inside db.transaction: the job manager writes builds in transactions of its own; call it before or after the transaction"
        for (call, name) in [("jobs.create{ scheme = 'ok', version = '1.0.0' }", "create"), ("jobs.start(q.id)", "start"),
                             ("jobs.start{ scheme = 'ok', version = '1.0.0' }", "start"), ("jobs.cancel(q.id)", "cancel"),
                             ("jobs.delete(q.id)", "delete"), ("jobs.wait(q.id)", "wait"), ("jobs.follow(q.id)", "follow"),
                             ("jobs.stale()", "stale"), ("jobs.markStale(q.id, 'x')", "markStale")] {
            let message = fixture.test.failure("db.transaction(function() \(call) end)")
            #expect(message == "test:1: jobs.\(name) \(reason)", "\(call)")
        }
        // Reads work there and see the transaction's own writes.
        let read = try fixture.run("""
            return db.transaction(function()
              db.exec("UPDATE builds SET versionString = 'tx' WHERE id = ?", q.id)
              return jobs.get(q.id).versionString, jobs.list()[1].versionString, #jobs.logs(q.id)
            end)
            """)
        #expect(read == ["tx", "tx", 0])
        // Nothing was started or created by the refused calls.
        #expect(try fixture.run("return #jobs.list(), jobs.get(q.id).status") == [1, "queued"])
        _ = id

        // A dry run cannot roll builds back either.
        let dry = fixture.test.session.database
        let error = #expect(throws: LuaError.self) {
            _ = try dry.dryRun { try fixture.run("jobs.start(q.id)") }
        }
        #expect(error?.message == "test:1: jobs.start is refused in a dry run: builds are written outside its transaction, so they could not be rolled back")
    }

    @Test func staleBuildsAreFoundAndMarkedFailed() throws {
        // A build left running by a process that is gone.
        // A process that has ended: its pid names nobody now.
        let gone = try ChildProcess.start("/bin/true", [], environment: [:])
        _ = gone.finish()
        var name = [CChar](repeating: 0, count: 256)
        gethostname(&name, 255)
        let host = String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        try fixture.run("""
            local host, pid = ...
            db.exec([[INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt, startDate,
                                          runnerHost, runnerPid, runnerStartedAt)
                      VALUES ('lost', 'ok', '1.0.0', 1, 'running', 10, 10, ?, ?, 5)]], host, pid)
            db.exec([[INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt)
                      VALUES ('norunner', 'ok', '1.0.0', 2, 'running', 11)]])
            """, [.string(host), .integer(Int64(gone.pid))])
        let results = try fixture.run("""
            local stale = jobs.stale()
            local marked = jobs.markStale(stale[1], 'opsh was killed')
            local last = jobs.logs('lost', { tail = 1 })[1]
            return #stale, stale[1].id, marked.status, last.level, last.content:match('^marked failed as stale: opsh was killed') ~= nil,
                   #jobs.stale()
            """)
        #expect(results == [1, "lost", "failed", "error", true, 0])
        #expect(fixture.test.failure("jobs.markStale('lost', 'again')") == "test:1: build lost is failed, not running")
    }

    @Test func endingTheSessionCancelsItsBuilds() throws {
        var other: OpshSession? = try OpshSession(store: fixture.test.store)
        let id = try #require(try other?.runtime.execute("""
            jobs.configure{ grace = 0.3 }
            return jobs.start{ scheme = 'sleeper', version = '1.0.0' }.id
            """, chunkName: "=other").first?.stringValue)
        #expect(try fixture.eventually("jobs.get('\(id)').status == 'running'"))
        let started = Date()
        other = nil
        #expect(Date().timeIntervalSince(started) < 5)
        #expect(try fixture.run("return jobs.get('\(id)').status") == ["cancelled"])
    }

    @Test func configureComesFirst() throws {
        let folder = fixture.test.folder.appendingPathComponent("elsewhere").path
        let id = try #require(fixture.run("""
            jobs.configure{ workspaces = ..., concurrency = 1 }
            return jobs.wait(jobs.start{ scheme = 'ok', version = '1.0.0' }, 10).id
            """, [.string(folder)]).first?.stringValue)
        #expect(FileManager.default.fileExists(atPath: "\(folder)/\(id)/version.txt"))
        #expect(fixture.test.failure("jobs.configure{ concurrency = 1 }")
            == "test:1: jobs.configure must come before the session's first build: its job manager exists already")
    }

    /// Bad input, with the exact messages.
    @Test func badInputIsRefusedClearly() throws {
        try fixture.run("q = jobs.create{ scheme = 'ok', version = '1.0.0' }")
        let cases: [(String, String)] = [
            ("jobs.create('ok')", "bad argument #1 to 'create' (table expected, got string)"),
            ("jobs.create{ scheme = 'ok' }", "bad argument #1 to 'create' (field 'version' must be a tag, branch or commit name, got nil)"),
            ("jobs.create{ version = '1.0.0' }", "bad argument #1 to 'create' (field 'scheme' must be a scheme id, got nil)"),
            ("jobs.create{ scheme = 'ok', version = '1.0.0', tag = 'x' }", "bad argument #1 to 'create' (unknown field 'tag' (fields: scheme, version))"),
            ("jobs.create{ scheme = 'nope', version = '1.0.0' }", "no scheme with id nope"),
            ("jobs.create{ scheme = 'empty', version = '1.0.0' }", "scheme 'empty' (empty) has no build command; set schemes.buildCommand first"),
            ("jobs.create{ scheme = 'ok', version = '--force' }", "invalid version '--force': expected a tag, branch or commit name"),
            ("jobs.start()", "bad argument #1 to 'start' (build id, build row or {scheme=, version=} expected, got no value)"),
            ("jobs.start('nope')", "no build with id nope"),
            ("jobs.start(42)", "bad argument #1 to 'start' (build id, build row or {scheme=, version=} expected, got number)"),
            ("jobs.wait()", "bad argument #1 to 'wait' (build id or build row expected, got no value)"),
            ("jobs.wait(q.id, -1)", "bad argument #2 to 'wait' (a number of seconds >= 0 expected)"),
            ("jobs.wait(q.id)", "build \(try id()) is queued but was not started; start it first"),
            ("jobs.wait('nope')", "no build with id nope"),
            ("jobs.wait({ status = 'x' })", "bad argument #1 to 'wait' (build id or build row expected, got a table without an id)"),
            ("jobs.follow(q.id)", "build \(try id()) is queued but was not started; start it first"),
            ("jobs.follow('nope')", "no build with id nope"),
            ("jobs.follow(q.id, { background = 1 })", "bad argument #2 to 'follow' (option 'background' must be a boolean, got number)"),
            ("jobs.follow(q.id, { print = 'x' })", "bad argument #2 to 'follow' (option 'print' must be a function, got string)"),
            ("jobs.follow(q.id, { color = true })", "bad argument #2 to 'follow' (unknown option 'color' (options: background, debug, tail, print))"),
            ("jobs.cancel('nope')", "no build with id nope"),
            ("jobs.delete('nope')", "no build with id nope"),
            ("jobs.logs('nope')", "no build with id nope"),
            ("jobs.logs(q.id, { tail = -1 })", "bad argument #2 to 'logs' (option 'tail' must be an integer >= 0, got -1)"),
            ("jobs.logs(q.id, { tail = 1.5 })", "bad argument #2 to 'logs' (option 'tail' must be an integer >= 0, got 1.5)"),
            ("jobs.logs(q.id, { tail = 1, after = 2 })", "bad argument #2 to 'logs' (give either tail, or after and limit)"),
            ("jobs.logs(q.id, 5)", "bad argument #2 to 'logs' (table expected, got number)"),
            ("jobs.list{ status = 'done' }", "bad argument #1 to 'list' (option 'status' must be one of queued, running, succeeded, failed, cancelled, got 'done')"),
            ("jobs.list{ scheme = 1 }", "bad argument #1 to 'list' (option 'scheme' must be a string, got number)"),
            ("jobs.list{ limit = 'all' }", "bad argument #1 to 'list' (option 'limit' must be an integer >= 0, got string)"),
            ("jobs.markStale(q.id)", "bad argument #2 to 'markStale' (string expected, got no value)"),
            ("jobs.markStale(q.id, 'x')", "build \(try id()) is queued, not running"),
            ("jobs.crashLogs('nope')", "no build with id nope"),
            ("jobs.configure()", "bad argument #1 to 'configure' (table expected, got no value)"),
            ("jobs.configure{ concurrency = 0 }", "bad argument #1 to 'configure' (option 'concurrency' must be an integer >= 1, got 0)"),
            ("jobs.configure{ grace = 'long' }", "bad argument #1 to 'configure' (option 'grace' must be a number of seconds >= 0, got string)"),
        ]
        for (code, message) in cases {
            #expect(fixture.test.failure(code) == "test:1: " + message, "\(code)")
        }
    }

    private func id() throws -> String {
        try #require(fixture.run("return q.id").first?.stringValue)
    }
}
