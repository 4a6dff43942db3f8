import Foundation
import Git
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// SIGKILL at seeded random moments of an import and of a checkpoint
/// (issue 13; the backup's is in `BackupSafetyTests`): no partial
/// transaction survives, nothing committed is lost.
@Suite struct KillTests {
    static var stops: Int { longRun ? 100 : 5 }

    /// A document with a project, a scheme, a build and `logs` build logs,
    /// exported from a database of its own.
    static func document(_ scratch: Scratch, logs: Int) throws -> String {
        let source = scratch.root + "/source.sqlite"
        let path = scratch.root + "/app.json"
        let made = try scratch.run(opshExecutable, ["--db", source, "--create", "-e", """
            projects.insert{ bundleIdentifier = "com.example.app", name = "App", gitRepositoryURL = "/srv/app" }
            local s = schemes.insert{ projectBundleIdentifier = "com.example.app", name = "Release", buildCommand = "make" }
            local b = builds.create(s.id, "1.0.0")
            db.transaction(function()
              for i = 1, \(logs) do
                db.exec("INSERT INTO buildLogs (id, buildId, content, createdAt) VALUES (?, ?, ?, ?)", "log-" .. i, b.id, "line " .. i, i)
              end
            end)
            export.project("com.example.app", { file = \(luaString(path)) })
            """])
        #expect(made.status == 0, "\(made.stderr)")
        return path
    }

    @Test func aKilledImportKeepsAllOfItsRowsOrNone() throws {
        let scratch = try Scratch()
        let logs = 4_000  // about 0.7 s to import in a debug build
        let document = try Self.document(scratch, logs: logs)
        #expect(try scratch.opsh(["-e", "return 1"]).status == 0)
        var generator = SeededGenerator(seed: reliabilitySeed(2024))
        var whole = 0, none = 0, partial = 0
        for _ in 0..<Self.stops {
            let child = try scratch.spawn(opshExecutable, scratch.withDatabase(["-e", "import{ file = \(luaString(document)) }"]))
            usleep(UInt32.random(in: 50_000...900_000, using: &generator))
            kill(child.pid, SIGKILL)
            _ = collect(child)
            let counts = try scratch.sqlite("SELECT (SELECT count(*) FROM projects) || ' ' || (SELECT count(*) FROM schemes) || ' ' || (SELECT count(*) FROM builds) || ' ' || (SELECT count(*) FROM buildLogs)")
            try scratch.integrityCheck()
            if counts == "1 1 1 \(logs)" {
                whole += 1
                _ = try scratch.sqlite("DELETE FROM buildLogs; DELETE FROM builds; DELETE FROM schemes; DELETE FROM projects;")
            } else if counts == "0 0 0 0" {
                none += 1
            } else {
                partial += 1
                Issue.record("a killed import left part of its rows: \(counts)")
                _ = try scratch.sqlite("DELETE FROM buildLogs; DELETE FROM builds; DELETE FROM schemes; DELETE FROM projects;")
            }
        }
        #expect(partial == 0)
        reportFigure("import of a \(logs)-log project SIGKILLed at random moments: \(Self.stops) stops, \(whole) left every row, \(none) left none, \(partial) partial")
    }

    @Test func aKilledCheckpointLosesNothingCommitted() throws {
        let scratch = try Scratch()
        #expect(try scratch.opsh(["-e", "return 1"]).status == 0)
        var generator = SeededGenerator(seed: reliabilitySeed(2025))
        var committed = 0, truncated = 0
        for stop in 0..<Self.stops {
            // 200,000 rows in a WAL that is not checkpointed on commit, then
            // a TRUNCATE checkpoint, killed at a random moment.
            let script = try scratch.script("fill-\(stop).lua", """
                db.exec("PRAGMA wal_autocheckpoint = 0")
                db.transaction(function()
                  for i = 1, 200000 do db.exec("INSERT INTO telemetry (event, created_at) VALUES ('k\(stop)', ?)", i) end
                end)
                io.stdout:write("committed\\n") io.stdout:flush()
                checkpoint("truncate")
                io.stdout:write("checkpointed\\n") io.stdout:flush()
                """)
            let child = try scratch.spawn(opshExecutable, scratch.withDatabase(["run", "--no-lock", script]))
            let first = readFirstLine(child.standardOutput)
            guard String(decoding: first, as: UTF8.self).hasPrefix("committed") else {
                Issue.record("stop \(stop): the fill did not commit: \(String(decoding: first, as: UTF8.self))")
                kill(child.pid, SIGKILL)
                _ = collect(child)
                continue
            }
            usleep(UInt32.random(in: 0...5_000, using: &generator))
            kill(child.pid, SIGKILL)
            let result = collect(child, stdoutPrefix: first)
            committed += 1
            if result.stdout.contains("checkpointed") { truncated += 1 }
            try scratch.integrityCheck()
            #expect(try scratch.sqlite("SELECT count(*) FROM telemetry WHERE event = 'k\(stop)'") == "200000", "stop \(stop)")
        }
        let rows = try scratch.sqlite("SELECT count(*) FROM telemetry")
        #expect(rows == String(committed * 200000))
        reportFigure("checkpoint(\"truncate\") SIGKILLed at random moments after a 200,000-row commit: \(Self.stops) stops (\(truncated) finished first), \(rows) of \(committed * 200000) committed rows present")
    }
}
