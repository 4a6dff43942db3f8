import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `jobs.*` and `git.*` in a PostgreSQL session (README, "On PostgreSQL"):
/// the same Lua scripts print the same on SQLite and on a real server,
/// with real git repositories and real builds (``RunnerSandbox``).
@Suite struct PostgresJobsTests {
    /// Runs `code` (with the scheme id made by `command` in `...`) on an
    /// SQLite sandbox and a PostgreSQL one; both outputs.
    func onBothEngines(command: String, _ code: String) throws -> [[String]] {
        try [false, true].map { postgres in
            let fixture = try RunnerSandbox(postgres: postgres)
            let scheme = try fixture.scheme("Lines", command)
            return try fixture.lua(code, [scheme])
        }
    }

    @Test func startWaitLogsGetAndListPrintTheSameOnBothEngines() throws {
        let outputs = try onBothEngines(command: "i=1; while [ $i -le 12 ]; do echo line $i; i=$((i+1)); done; echo 'warning: slow disk'", """
            local b = jobs.start{ scheme = ..., version = '1.0.0' }
            local done = jobs.wait(b, 60)
            print(done.status, done.exitCode, done.buildNumber, done.versionString, done.progress, math.type(done.exitCode))
            local function contents(rows)
              local t = {}
              for _, row in ipairs(rows) do if row.content:match('^line') or row.level == 'warning' then t[#t + 1] = row.level .. ' ' .. row.content end end
              return table.concat(t, ',')
            end
            print('tail', contents(jobs.logs(b.id, { tail = 4 })), #jobs.logs(b.id, { tail = 4 }))
            -- Every line once, in order, by pages of 5 after the last cursor.
            local after, pages, seen = 0, 0, {}
            repeat
              local page = jobs.logs(b.id, { after = after, limit = 5 })
              for _, row in ipairs(page) do
                assert(math.type(row.cursor) == 'integer' and row.cursor > after, 'cursor ' .. tostring(row.cursor))
                seen[#seen + 1] = row
              end
              if #page > 0 then after = page[#page].cursor end
              pages = pages + 1
            until #page == 0
            print('paged', contents(seen), #seen == #jobs.logs(b.id, { tail = 1000 }))
            -- A cursor from the tail continues where it is.
            local tail = jobs.logs(b.id, { tail = 6 })
            print('after tail', contents(jobs.logs(b.id, { after = tail[1].cursor, limit = 2 })))
            print('no debug', #jobs.logs(b.id, { tail = 1000, debug = false }) <= #jobs.logs(b.id, { tail = 1000 }))
            local got = jobs.get(b.id)
            print(got.id == b.id, got.status, #jobs.crashLogs(b.id))
            local listed = jobs.list{ status = 'succeeded', scheme = ..., project = 'com.example.app', limit = 5 }
            print(#listed, listed[1].id == b.id, #jobs.list{ status = 'failed' })
            print(pcall(jobs.get, 'nope'))
            print(pcall(jobs.logs, 'nope'))
            print(#jobs.stale())
            """)
        #expect(outputs[0] == outputs[1], "SQLite:\n\(outputs[0].joined(separator: "\n"))\nPostgreSQL:\n\(outputs[1].joined(separator: "\n"))")
        #expect(outputs[1].first?.hasPrefix("succeeded\t0\t1\t1.0.0\t") == true && outputs[1].first?.hasSuffix("\tinteger") == true, "\(outputs[1])")
        #expect(outputs[1].contains("tail\tinfo line 11,info line 12,warning warning: slow disk\t4"), "\(outputs[1])")
        #expect(outputs[1].contains("paged\t" + (1...12).map { "info line \($0)" }.joined(separator: ",") + ",warning warning: slow disk\ttrue"),
                "\(outputs[1])")
        #expect(outputs[1].contains("after tail\tinfo line 10,info line 11"), "\(outputs[1])")
    }

    @Test func cancelAndCrashLogsOnBothEngines() throws {
        let outputs = try onBothEngines(command: "echo started; while true; do sleep 0.05; done", """
            jobs.configure{ grace = 1 }
            local b = jobs.start{ scheme = ..., version = '1.0.0' }
            local deadline = os.time() + 20
            while #jobs.logs(b.id, { tail = 100 }) == 0 or not jobs.logs(b.id, { tail = 1 })[1].content:match('started') do
              assert(os.time() < deadline, 'never started')
              os.execute('sleep 0.05')
            end
            print(jobs.cancel(b.id))
            local done = jobs.wait(b.id, 30)
            print(done.status, jobs.cancel(b.id), jobs.get(b.id).status)
            print(pcall(jobs.delete, b.id))
            print((pcall(jobs.get, b.id)))
            """)
        #expect(outputs[0] == outputs[1], "SQLite:\n\(outputs[0].joined(separator: "\n"))\nPostgreSQL:\n\(outputs[1].joined(separator: "\n"))")
        #expect(outputs[1].prefix(2) == ["true", "cancelled\tfalse\tcancelled"], "\(outputs[1])")
    }

    /// `jobs.follow` prints each line as it is written: the build waits for
    /// a file that the follower's printer makes on seeing the first line.
    @Test func followPrintsLinesAsTheyArrive() throws {
        var outputs: [[String]] = []
        for postgres in [false, true] {
            let fixture = try RunnerSandbox(postgres: postgres)
            let go = fixture.root + "/go"
            let scheme = try fixture.scheme("Gated", "echo first; while [ ! -f '\(go)' ]; do sleep 0.02; done; echo second")
            let printed = try fixture.lua("""
                local scheme, go = ...
                local b = jobs.start{ scheme = scheme, version = '1.0.0' }
                local function plain(text)
                  return (text:gsub(b.id:gsub('%p', '%%%0'), 'ID'):gsub('in [%d.]+ s', 'in N s'))
                end
                local seen = {}
                local done = jobs.follow(b.id, { print = function(text)
                  if text == 'first' or text == 'second' or text:match('^build .* succeeded') then
                    seen[#seen + 1] = plain(text)
                  end
                  if text == 'first' then io.open(go, 'w'):close() end
                end })
                print(table.concat(seen, '|'), done.status)
                -- A finished build: its whole log, then the end, at once; tail = 1 only the last line.
                local tail = {}
                jobs.follow(b, { tail = 1, print = function(text) tail[#tail + 1] = plain(text) end })
                print(table.concat(tail, '|'))
                """, [scheme, go])
            outputs.append(printed)
        }
        #expect(outputs[0] == outputs[1], "\(outputs)")
        #expect(outputs[1].first == "first|second|build ID #1 (1.0.0) succeeded, exit code 0\tsucceeded", "\(outputs[1])")
        #expect(outputs[1].count == 2 && outputs[1][1] == "build succeeded (exit code 0) in N s|build ID #1 (1.0.0) succeeded, exit code 0", "\(outputs[1])")
    }

    /// `jobs.enqueue` on PostgreSQL queues for the runners: an `opsh
    /// runner` process takes it, and another opsh waits for it and reads
    /// its log.
    @Test func anEnqueuedBuildIsRunByARunnerProcess() throws {
        let fixture = try RunnerSandbox(postgres: true)
        let scheme = try fixture.scheme("Queued", "echo \"ran $OPSH_BUILD_ID\"")
        let id = try #require(try fixture.lua("local b = jobs.enqueue{ scheme = ..., version = '1.0.0' } print(b.id) print(b.status)",
                                               [scheme]).first)
        #expect(try fixture.sql("SELECT status, runnerId IS NULL FROM builds WHERE id = '\(id)'") == "queued|t")
        // Queued and held by nobody: nobody may ever start it, so waiting is refused (as on SQLite).
        let refused = try fixture.sandbox.opsh(["--db", fixture.database, "-e", "jobs.wait('\(id)', 1)"], database: false)
        #expect(refused.status != 0 && refused.stderr.contains("queued"), "\(refused.stderr)")
        let runner = try fixture.startRunner(["--heartbeat", "0.5"])
        let output = try fixture.lua("""
            local id = ...
            local deadline = os.time() + 30
            while jobs.get(id).status == 'queued' do assert(os.time() < deadline, 'never claimed') os.execute('sleep 0.05') end
            local done = jobs.wait(id, 30)
            local lines = {}
            for _, row in ipairs(jobs.logs(id, { tail = 100 })) do if row.content:match('^ran ') then lines[#lines + 1] = row.content end end
            print(done.status, done.runnerPid, table.concat(lines, ','))
            """, [id])
        kill(runner.pid, SIGTERM)
        let result = runner.finish()
        #expect(result.status == 0, "\(result.stderr)")
        #expect(output == ["succeeded\t\(runner.pid)\tran \(id)"], "\(output) \(result.stderr)")
    }

    @Test func refusalsInTransactionsDryRunsAndReadOnlyAndGit() throws {
        let fixture = try RunnerSandbox(postgres: true)
        let scheme = try fixture.scheme("Refused", "true")
        func opsh(_ options: [String], _ code: String) throws -> Sandbox.Result {
            try fixture.sandbox.opsh(["--db", fixture.database] + options + ["-e", code], database: false)
        }
        let inside = try opsh([], "db.transaction(function() jobs.start{ scheme = '\(scheme)', version = '1.0.0' } end)")
        #expect(inside.status == 1 && inside.stderr.contains("jobs.start cannot run inside db.transaction"), "\(inside.stderr)")
        let dry = try opsh(["--dry-run"], "jobs.enqueue{ scheme = '\(scheme)', version = '1.0.0' }")
        #expect(dry.status == 1 && dry.stderr.contains("jobs.enqueue is refused in a dry run"), "\(dry.stderr)")
        let readOnly = try opsh(["--read-only"], "jobs.enqueue{ scheme = '\(scheme)', version = '1.0.0' }")
        #expect(readOnly.status == 1 && readOnly.stderr.contains("jobs.enqueue is refused with --read-only"), "\(readOnly.stderr)")
        #expect(try fixture.sql("SELECT count(*) FROM builds") == "0")
        // Reads are not refused there.
        let reads = try opsh(["--read-only"], "return #jobs.list{}, #jobs.stale()")
        #expect(reads.status == 0 && reads.stdout == "0\t0\n", "\(reads.stderr)")
        // git needs nothing of the database.
        let repository = try fixture.sql("SELECT gitRepositoryURL FROM projects")
        let git = try opsh([], "local v, skipped = git.versions(...) return v[1].tag, #skipped, git.branches(...)[1].name".replacingOccurrences(of: "...", with: "'\(repository)'"))
        #expect(git.status == 0 && git.stdout == "1.0.0\t0\tmain\n", "\(git.stderr)")
        let sandboxed = try opsh(["--sandbox"], "return pcall(jobs.list)")
        #expect(sandboxed.stdout.contains("jobs.list is not available in --sandbox"), "\(sandboxed.stdout) \(sandboxed.stderr)")
    }
}

/// The build examples on PostgreSQL.
@Suite struct PostgresBuildExamplesTests {
    @Test func buildNewTagsRunsUnchangedOnPostgres() throws {
        let server = try PostgresServer.shared()
        let sandbox = try Sandbox()
        let url = try server.makeDatabase()
        let repository = try sandbox.gitRepository(tags: ["v1.0.0", "v1.1.0", "not-a-version", "2.0.0-rc.1"])
        let created = try sandbox.opsh(["--db", url, "--create", "-e", "return 1"], database: false)
        #expect(created.status == 0, "\(created.stderr)")
        _ = try server.sql("""
            INSERT INTO projects VALUES ('com.example.app', 'app', 'App', '\(repository)', 0),
              ('com.example.lost', 'lost', 'Lost', '\(sandbox.root)/no-such-repository', 0),
              ('com.example.bare', 'bare', 'Bare', '\(repository)', 0);
            INSERT INTO schemes (id, projectBundleIdentifier, name, buildCommand) VALUES
              ('app', 'com.example.app', 'App', 'echo building'), ('tests', 'com.example.app', 'Tests', 'echo testing'),
              ('lost', 'com.example.lost', 'App', 'echo building');
            INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt) VALUES
              ('old', 'app', '1.0.0', 1, 'failed', 0);
            """, url: url)
        func example(_ arguments: [String], dryRun: Bool = false) throws -> Sandbox.Result {
            try sandbox.spawn(opshExecutable, ["run", "--db", url] + (dryRun ? ["--dry-run"] : [])
                              + [Examples.path("build-new-tags.lua")] + arguments)
        }
        let dry = try example(["com.example.app"], dryRun: true)
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout.contains("would queue: com.example.app App v1.1.0"), "\(dry.stdout)")
        #expect(dry.stdout.contains("build-new-tags: 5 build(s) would be queued for 1 project(s)"), "\(dry.stdout)")
        #expect(try server.sql("SELECT count(*) FROM builds", url: url) == "1")

        let run = try example([])
        #expect(run.status == 4, "\(run.stderr)")
        #expect(run.stderr.contains("com.example.lost: cannot read the tags"), "\(run.stderr)")
        #expect(run.stdout.contains("build-new-tags: 5 build(s) queued for 3 project(s), 1 without schemes, 1 unreadable"), "\(run.stdout)")
        #expect(try server.sql("""
            SELECT string_agg(schemeId || ' ' || versionString || ' ' || status, ', ' ORDER BY schemeId, buildNumber) FROM builds
            """, url: url) == "app 1.0.0 failed, app v1.1.0 queued, app 2.0.0-rc.1 queued, tests v1.0.0 queued, tests v1.1.0 queued, tests 2.0.0-rc.1 queued")
        let again = try example(["com.example.app"])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(again.stdout.contains("build-new-tags: 0 build(s) queued for 1 project(s)"), "\(again.stdout)")
        #expect(try example(["com.example.nope"]).status == 2)
    }

    @Test func markStaleBuildsRunsOnPostgres() throws {
        let server = try PostgresServer.shared()
        let sandbox = try Sandbox()
        let url = try server.makeDatabase()
        let created = try sandbox.opsh(["--db", url, "--create", "-e", "return 1"], database: false)
        #expect(created.status == 0, "\(created.stderr)")
        let ended = try sandbox.spawn("/bin/sh", ["-c", "echo $$"])
        let deadPid = Int(ended.stdout.trimmingCharacters(in: .whitespacesAndNewlines))!
        let host = hostName(), now = Date().timeIntervalSince1970
        _ = try server.sql("""
            INSERT INTO projects VALUES ('com.example.app', 'app', 'App', '/srv/app', 0);
            INSERT INTO schemes (id, projectBundleIdentifier, name) VALUES ('s1', 'com.example.app', 'App');
            INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt, startDate, runnerHost, runnerPid, runnerStartedAt) VALUES
              ('dead', 's1', '1.0.0', 1, 'running', \(now - 600), \(now - 600), '\(host)', \(deadPid), \(now - 600)),
              ('alive', 's1', '1.1.0', 2, 'running', \(now - 600), \(now - 600), '\(host)', \(getpid()), \(currentProcessStartTime())),
              ('remote', 's1', '1.2.0', 3, 'running', \(now - 600), \(now - 600), 'another-host', 1, 1),
              ('done', 's1', '1.3.0', 4, 'succeeded', \(now - 600), \(now - 600), '\(host)', \(deadPid), \(now - 600));
            """, url: url)
        func example(_ arguments: [String] = [], dryRun: Bool = false) throws -> Sandbox.Result {
            try sandbox.spawn(opshExecutable, ["run", "--db", url] + (dryRun ? ["--dry-run"] : [])
                              + [Examples.path("mark-stale-builds.lua")] + arguments)
        }
        let dry = try example(dryRun: true)
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout.contains("would mark failed: build dead (com.example.app App #1, version 1.0.0"), "\(dry.stdout)")
        #expect(dry.stdout.contains("1 stale build(s) would be marked failed"), "\(dry.stdout)")
        #expect(try server.sql("SELECT status FROM builds WHERE id = 'dead'", url: url) == "running")

        let run = try example()
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("marked failed: build dead"), "\(run.stdout)")
        #expect(!run.stdout.contains("build alive") && !run.stdout.contains("build remote"), "\(run.stdout)")
        #expect(try server.sql("SELECT string_agg(id || '=' || status, ',' ORDER BY buildNumber) FROM builds", url: url)
                == "dead=failed,alive=running,remote=running,done=succeeded")
        #expect(try server.sql("SELECT level || ': ' || content FROM buildLogs WHERE buildId = 'dead'", url: url)
                == "error: marked failed as stale: found by mark-stale-builds.lua (runner pid \(deadPid) on \(host) is gone)")
        let again = try example()
        #expect(again.status == 0)
        #expect(again.stdout.contains("0 stale build(s) marked failed"), "\(again.stdout)")
    }
}
