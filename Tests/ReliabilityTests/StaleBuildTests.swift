import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `examples/` of this checkout.
let examplesFolder: String = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("examples").path

extension Scratch {
    /// A git repository with one commit tagged 1.0.0 and the project
    /// `com.example.app` on it; returns the repository's path.
    func projectWithRepository() throws -> String {
        let repository = root + "/repo"
        let made = try run("/bin/sh", ["-c", """
            set -e
            git init -q -b main "$0" && cd "$0"
            echo 1.0.0 > version.txt && git add version.txt
            git -c user.name=Test -c user.email=test@example.com commit -q -m 1.0.0 && git tag 1.0.0
            """, repository])
        #expect(made.status == 0, "git: \(made.stderr)")
        let project = try opsh(["-e", "projects.insert{ bundleIdentifier = 'com.example.app', name = 'App', gitRepositoryURL = \(luaString(repository)) }"])
        #expect(project.status == 0, "\(project.stderr)")
        return repository
    }

    /// Polls `sql` through sqlite3 until it prints `expected` (or `timeout` passes).
    func waitUntil(_ sql: String, is expected: String, timeout: Double = 20) throws -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            let result = try run("/usr/bin/sqlite3", [database, sql])
            if result.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == expected { return true }
            usleep(50_000)
        }
        return false
    }
}

/// The opsh that runs a build is SIGKILLed mid-build: the build stays
/// `running` with a runner that no longer exists, `jobs.stale()` finds it,
/// and `examples/mark-stale-builds.lua` marks it failed with a log line.
@Suite struct StaleBuildTests {
    @Test func aBuildWhoseRunnerWasKilledIsFoundStaleAndRepaired() throws {
        let scratch = try Scratch()
        _ = try scratch.projectWithRepository()
        let pidFile = scratch.root + "/build.pid"
        let script = try scratch.script("build.lua", """
            local s = schemes.insert{ projectBundleIdentifier = "com.example.app", name = "Slow",
                                      buildCommand = "echo $$ > \(pidFile); echo started; exec sleep 60" }
            local b = jobs.start{ scheme = s.id, version = "1.0.0" }
            io.stdout:write(b.id, "\\n") io.stdout:flush()
            jobs.wait(b, 120)
            """)
        let runner = try scratch.spawn(opshExecutable, scratch.withDatabase(["run", "--no-lock", script]))
        let firstLine = readFirstLine(runner.standardOutput)
        let id = String(decoding: firstLine, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        // The build's own process, left behind by the kill: ended at the end.
        defer {
            if let text = try? String(contentsOfFile: pidFile, encoding: .utf8), let pid = pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines)) {
                kill(-pid, SIGKILL)
                kill(pid, SIGKILL)
            }
        }
        #expect(!id.isEmpty)
        let started = try scratch.waitUntil("SELECT count(*) FROM buildLogs WHERE buildId = '\(id)' AND content = 'started'", is: "1")
        #expect(started, "the build never logged 'started'")
        kill(runner.pid, SIGKILL)
        let killed = scratch.finish(runner, stdoutPrefix: firstLine)
        #expect(killed.status == 128 + SIGKILL)

        // Left running, with the dead opsh as its runner.
        #expect(try scratch.sqlite("SELECT status, runnerPid FROM builds WHERE id = '\(id)'") == "running|\(runner.pid)")

        let stale = try scratch.opsh(["-e", "for _, b in ipairs(jobs.stale()) do print(b.id) end"])
        #expect(stale.status == 0, "\(stale.stderr)")
        let staleFound = stale.stdout.split(separator: "\n").filter { !$0.isEmpty }
        #expect(staleFound == [Substring(id)], "jobs.stale() gave \(stale.stdout)")

        let repair = try scratch.opsh(["run", "--no-lock", examplesFolder + "/mark-stale-builds.lua"])
        #expect(repair.status == 0, "exit \(repair.status): \(repair.stderr)")
        #expect(repair.stdout.contains("marked failed: build \(id)") && repair.stdout.contains("1 stale build(s) marked failed"), "\(repair.stdout)")
        #expect(try scratch.sqlite("SELECT status, endDate IS NOT NULL FROM builds WHERE id = '\(id)'") == "failed|1")
        let reason = try scratch.sqlite("SELECT content FROM buildLogs WHERE buildId = '\(id)' AND level = 'error' AND content LIKE 'marked failed as stale%'")
        #expect(reason.contains("found by mark-stale-builds.lua") && reason.contains("runner pid \(runner.pid)") && reason.contains("is gone"), "\(reason)")
        #expect(try scratch.sqlite("PRAGMA integrity_check") == "ok")

        let again = try scratch.opsh(["run", "--no-lock", examplesFolder + "/mark-stale-builds.lua"])
        #expect(again.status == 0 && again.stdout.contains("0 stale build(s) marked failed"), "\(again.stdout) \(again.stderr)")
        let secondRun = again.stdout.split(separator: "\n").last { $0.contains("stale build(s) marked failed") }.map(String.init) ?? "?"
        reportFigure("build runner SIGKILLed mid-build: jobs.stale() found \(staleFound.count) (the killed one: \(staleFound == [Substring(id)])), mark-stale-builds.lua exit \(repair.status) marked it failed with its reason; a second run said \"\(secondRun)\"")
    }
}
