import Foundation
import Testing
import LuaRuntime
import Store
@testable import Bindings

/// Runs a shell script (test set-up only: git repositories) and returns its
/// trimmed output.
@discardableResult
func jobsTestShell(_ script: String) throws -> String {
    try sh(script)
}

/// A session on a new database, a git repository next to it, and the
/// project `com.example.app` on that repository.
///
/// The repository's tags: `1.0.0`, `v1.1.0` (annotated), `latest` (not a
/// version, on the same commit), `2.0.0-beta.1`; branches `main` (current)
/// and `feature`. `version.txt` holds the version at each commit.
final class JobsFixture {
    let test = try! TestSession()
    let repository: String

    init() throws {
        repository = test.folder.appendingPathComponent("repo").path
        try jobsTestShell("""
            set -e
            git init -q -b main '\(repository)'
            cd '\(repository)'
            commit() { echo "$1" > version.txt; git add version.txt; git commit -q -m "version $1"; }
            commit 1.0.0;        git tag 1.0.0
            commit 1.1.0;        git tag -a v1.1.0 -m "release 1.1.0"; git tag latest
            commit 2.0.0-beta.1; git tag 2.0.0-beta.1
            git checkout -q -b feature; commit feature; git checkout -q main
            """)
        try test.run("""
            repo = ...
            jobs.configure{ grace = 0.3 }
            db.exec("INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt) VALUES (?, 'App', 'App', ?, 1)",
                    'com.example.app', repo)
            """, [.string(repository)])
    }

    /// Adds a scheme of the project.
    func scheme(_ id: String, _ command: String) throws {
        try test.run("""
            local id, command = ...
            db.exec("INSERT INTO schemes (id, projectBundleIdentifier, name, buildCommand) VALUES (?, 'com.example.app', ?, ?)",
                    id, id, command)
            """, [.string(id), .string(command)])
    }

    @discardableResult
    func run(_ code: String, _ arguments: [LuaValue] = []) throws -> [LuaValue] {
        try test.run(code, arguments)
    }

    /// Polls a Lua condition until it holds or `timeout` passes.
    func eventually(_ condition: String, timeout: TimeInterval = 10) throws -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if try test.run("return \(condition)") == [true] { return true }
            usleep(20_000)
        }
        return false
    }
}

/// The issue's "done when", through the Lua API as an operator types it:
/// register a project on a git repository, add a scheme, list its
/// versions, start a build of a tag, follow its log, cancel another, and
/// find both in `query(key.project(id).latestBuilds(5))`.
@Suite struct BuildFlowTests {
    let fixture = try! JobsFixture()

    @Test func anOperatorBuildsATagFollowsItCancelsAnotherAndFindsBoth() throws {
        try fixture.scheme("release", """
            echo "building $OPSH_BUILD_VERSION"; cat version.txt
            echo "[1/2] compile"; echo "warning: slow disk"; echo "[2/2] link"
            """)
        try fixture.scheme("slow", "echo started; sleep 600; echo never")

        // The versions to choose from.
        let listed = try fixture.run("""
            local versions, skipped = git.versions(repo)
            local tags = {}
            for i, v in ipairs(versions) do tags[i] = v.tag end
            return table.concat(tags, ' '), table.concat(skipped, ' '), versions[#versions - 1].tag
            """)
        #expect(listed == ["1.0.0 v1.1.0 2.0.0-beta.1", "latest", "v1.1.0"])

        // A build of the newest release, followed to its end.
        let followed = try fixture.run("""
            lines = {}
            local b = jobs.start{ scheme = 'release', version = 'v1.1.0' }
            local final = jobs.follow(b.id, { print = function(text) lines[#lines + 1] = text end })
            released = final.id
            return b.status, final.status, final.exitCode, final.progress, table.concat(lines, '\\n')
            """)
        #expect(followed.count == 5)
        #expect(followed[0] == "queued" || followed[0] == "running")
        #expect(Array(followed[1...3]) == ["succeeded", 0, 1.0])
        let log = followed[4].stringValue ?? ""
        for expected in ["building v1.1.0", "\n1.1.0\n", "[1/2] compile", "warning: slow disk", "[2/2] link",
                         "build succeeded (exit code 0)"] {
            #expect(log.contains(expected), "missing \(expected) in\n\(log)")
        }
        #expect(log.range(of: #"\(v1\.1\.0\) succeeded, exit code 0, [0-9.]+ s, [0-9]+ lines shown$"#, options: .regularExpression) != nil, "\(log)")
        #expect(!log.contains("$ /bin/sh -c"), "debug lines are not followed unless asked")

        // Another build, cancelled while it sleeps.
        try fixture.run("slow = jobs.start{ scheme = 'slow', version = '1.0.0' }")
        #expect(try fixture.eventually("(jobs.logs(slow.id, { tail = 1 })[1] or {}).content == 'started'"))
        let cancelled = try fixture.run("""
            local asked = jobs.cancel(slow)
            local final = jobs.wait(slow, 10)
            return asked, final.status, jobs.cancel(slow)
            """)
        #expect(cancelled == [true, "cancelled", false])

        // Both, newest first, where the operator looks.
        let latest = try fixture.run("""
            local builds = query(key.project('com.example.app').latestBuilds(5))
            local seen = {}
            for i, b in ipairs(builds) do seen[i] = b.schemeId .. ':' .. b.versionString .. ':' .. b.status end
            local rows = db.query("SELECT status FROM builds ORDER BY createdAt")
            return table.concat(seen, ' '), #rows, rows[1].status, rows[2].status, builds[2].id == released
            """)
        #expect(latest == ["slow:1.0.0:cancelled release:v1.1.0:succeeded", 2, "succeeded", "cancelled", true])
    }

    @Test func aBackgroundFollowPrintsThroughTheEventQueueWhileTheScriptGoesOn() throws {
        try fixture.scheme("steps", "echo one; sleep 0.2; echo two; sleep 0.2; echo three")
        let results = try fixture.run("""
            lines = {}
            print = function(text) lines[#lines + 1] = text end   -- the default printer is the global print
            local b = jobs.start{ scheme = 'steps', version = '1.0.0' }
            local h = jobs.follow(b.id, { background = true })
            local during = h:active()
            local returnedAt = #lines            -- nothing printed before events are delivered
            local done = opsh.wait(10)           -- delivers until the follow (the only subscription) ends
            return during, returnedAt, done, h:active(), tostring(h):match('ended$') ~= nil, table.concat(lines, ',')
            """)
        #expect(Array(results[0...4]) == [true, 0, true, false, true])
        let printed = results[5].stringValue ?? ""
        #expect(printed.contains("one,two,three,build succeeded (exit code 0)"), "\(printed)")
        #expect(printed.range(of: #"succeeded, exit code 0, [0-9.]+ s, [0-9]+ lines shown$"#, options: .regularExpression) != nil, "\(printed)")
        #expect(!fixture.test.session.hasSubscriptions)
    }

    @Test func aWatchOnTheBuildKeySeesItsStatusChangeWhileItRuns() throws {
        try fixture.scheme("short", "echo hi; sleep 0.3")
        let results = try fixture.run("""
            statuses = {}
            local b = jobs.create{ scheme = 'short', version = '1.0.0' }
            local h
            local logs, linesWhileRunning = nil, 0
            h = watch(key.build(b.id), function(build)
              statuses[#statuses + 1] = build.status
              if build.status ~= 'queued' and build.status ~= 'running' then h:cancel() logs:cancel() end
            end)
            logs = watch(key.build(b.id).logs.ids, function(ids)
              if jobs.get(b.id).status == 'running' then linesWhileRunning = #ids end
            end)
            jobs.start(b.id)
            local done = opsh.wait(10)
            local sawRunning = false
            for _, status in ipairs(statuses) do sawRunning = sawRunning or status == 'running' end
            return done, sawRunning, statuses[#statuses], linesWhileRunning > 0
            """)
        // The first change may be `queued` with its runner recorded:
        // jobs.start holds the build before it runs (README, "Build runners").
        #expect(results == [true, true, "succeeded", true])
    }

    @Test func aStoppedBackgroundFollowPrintsNothingMore() throws {
        try fixture.scheme("chatty", "i=0; while [ $i -lt 50 ]; do echo line $i; i=$((i+1)); sleep 0.02; done")
        let results = try fixture.run("""
            lines = {}
            local b = jobs.start{ scheme = 'chatty', version = '1.0.0' }
            h = jobs.follow(b.id, { background = true, print = function(t) lines[#lines + 1] = t end })
            opsh.wait(0.3)
            h:cancel()
            local stoppedAt = #lines
            jobs.wait(b.id, 10)
            opsh.wait(0.2)
            return stoppedAt > 0, #lines == stoppedAt, h:active()
            """)
        #expect(results == [true, true, false])
    }
}
