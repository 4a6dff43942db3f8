import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `jobs.*` and `git.*` through the real opsh (README, "Builds"), one body
/// per engine: real git repositories and real builds (``RunnerSandbox``),
/// each script's output against one expected text.
@Suite struct JobsScriptTests {
    /// Runs `code` (with the scheme id made by `command` in `...`) on a
    /// new database of `engine`; its output lines.
    func run(_ engine: Engine, command: String, _ code: String) throws -> [String] {
        let fixture = try RunnerSandbox(engine)
        let scheme = try fixture.scheme("Lines", command)
        return try fixture.lua(code, [scheme])
    }

    @Test(arguments: Engine.allCases) func startWaitLogsGetAndList(_ engine: Engine) throws {
        let output = try run(engine, command: "i=1; while [ $i -le 12 ]; do echo line $i; i=$((i+1)); done; echo 'warning: slow disk'", """
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
        #expect(output == Self.startWaitLogsGetAndListOutput, "\(output.joined(separator: "\n"))")
    }

    static let startWaitLogsGetAndListOutput = [
        "succeeded\t0\t1\t1.0.0\t1.0\tinteger",
        "tail\tinfo line 11,info line 12,warning warning: slow disk\t4",
        "paged\t" + (1...12).map { "info line \($0)" }.joined(separator: ",") + ",warning warning: slow disk\ttrue",
        "after tail\tinfo line 10,info line 11",
        "no debug\ttrue",
        "true\tsucceeded\t0",
        "1\ttrue\t0",
        "false\tno build with id nope",
        "false\tno build with id nope",
        "0",
    ]

    @Test(arguments: Engine.allCases) func cancelAndCrashLogs(_ engine: Engine) throws {
        let output = try run(engine, command: "echo started; while true; do sleep 0.05; done", """
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
        #expect(output == Self.cancelAndCrashLogsOutput, "\(output.joined(separator: "\n"))")
    }

    static let cancelAndCrashLogsOutput = ["true", "cancelled\tfalse\tcancelled", "true\ttrue", "false"]

    /// `jobs.follow` prints each line as it is written: the build waits for
    /// a file that the follower's printer makes on seeing the first line.
    @Test(arguments: Engine.allCases) func followPrintsLinesAsTheyArrive(_ engine: Engine) throws {
        let fixture = try RunnerSandbox(engine)
        let go = fixture.root + "/go"
        let scheme = try fixture.scheme("Gated", "echo first; while [ ! -f '\(go)' ]; do sleep 0.02; done; echo second")
        let printed = try fixture.lua("""
            local scheme, go = ...
            local b = jobs.start{ scheme = scheme, version = '1.0.0' }
            local function plain(text)
              return (text:gsub(b.id:gsub('%p', '%%%0'), 'ID'):gsub('in [%d.]+ s', 'in N s'):gsub(', [%d.]+ s, ', ', N s, '):gsub('%d+ lines shown', 'K lines shown'))
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
        #expect(printed == ["first|second|build ID #1 (1.0.0) succeeded, exit code 0, N s, K lines shown\tsucceeded",
                            "build succeeded (exit code 0) in N s|build ID #1 (1.0.0) succeeded, exit code 0, N s, 1 line shown"], "\(printed)")
    }

    /// `jobs.enqueue` queues for the runners: an `opsh runner` process
    /// takes it, and another opsh waits for it and reads its log.
    @Test(arguments: Engine.allCases) func anEnqueuedBuildIsRunByARunnerProcess(_ engine: Engine) throws {
        let fixture = try RunnerSandbox(engine)
        let scheme = try fixture.scheme("Queued", "echo \"ran $OPSH_BUILD_ID\"")
        let id = try #require(try fixture.lua("local b = jobs.enqueue{ scheme = ..., version = '1.0.0' } print(b.id) print(b.status)",
                                               [scheme]).first)
        #expect(try fixture.sql("SELECT status, \(RunnerSandbox.isNull("runnerId")) FROM builds WHERE id = '\(id)'") == "queued|1")
        // Queued and held by nobody: nobody may ever start it, so waiting is refused.
        let refused = try fixture.sandbox.opsh(["-e", "jobs.wait('\(id)', 1)"], on: fixture.database)
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

    /// jobs.start inside a transaction, jobs.enqueue in a dry run or with
    /// --read-only are refused saying why (reads are not); git needs
    /// nothing of the database; --sandbox has no jobs.
    @Test(arguments: Engine.allCases) func refusalsInTransactionsDryRunsAndReadOnlyAndGit(_ engine: Engine) throws {
        let fixture = try RunnerSandbox(engine)
        let scheme = try fixture.scheme("Refused", "true")
        func opsh(_ options: [String], _ code: String) throws -> Sandbox.Result {
            try fixture.sandbox.opsh(options + ["-e", code], on: fixture.database)
        }
        let inside = try opsh([], "db.transaction(function() jobs.start{ scheme = '\(scheme)', version = '1.0.0' } end)")
        #expect(inside.status == 1 && inside.stderr.contains("jobs.start cannot run inside db.transaction"), "\(inside.stderr)")
        let dry = try opsh(["--dry-run"], "jobs.enqueue{ scheme = '\(scheme)', version = '1.0.0' }")
        #expect(dry.status == 1 && dry.stderr.contains("jobs.enqueue is refused in a dry run"), "\(dry.stderr)")
        let readOnly = try opsh(["--read-only"], "jobs.enqueue{ scheme = '\(scheme)', version = '1.0.0' }")
        #expect(readOnly.status == 1 && readOnly.stderr.contains("jobs.enqueue is refused with --read-only: it writes builds"), "\(readOnly.stderr)")
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
