import Foundation
import Testing

/// A large import beside a live backend (issue 17, section 5): the
/// document is read and checked before the write transaction, which then
/// only writes, so the backend's writers are not stalled past their busy
/// timeout.
@Suite struct ImportBesideBackendTests {
    @Test func aBackendWriterKeepsWritingDuringALargeImport() throws {
        let scratch = try Scratch()
        let logs = longRun ? 250_000 : 20_000
        let document = try KillTests.document(scratch, logs: logs)
        #expect(try scratch.opsh(["-e", "return 1"]).status == 0)
        let importer = try scratch.spawn(opshExecutable, scratch.withDatabase(["-e", "import{ file = \(luaString(document)) }"]))
        // The backend: one insert at a time, each with a 5 s busy timeout
        // (SQLite's and opsh's default), timed from outside.
        var worst = 0.0, writes = 0, failures = 0
        var ended = false
        while !ended {
            let started = Date()
            let insert = try scratch.run("/usr/bin/sqlite3", ["-cmd", ".timeout 5000", scratch.database,
                                                              "INSERT INTO telemetry (event, created_at) VALUES ('backend', \(writes))"])
            let seconds = Date().timeIntervalSince(started)
            if insert.status == 0 { writes += 1 } else { failures += 1 }
            worst = max(worst, seconds)
            ended = kill(importer.pid, 0) != 0 || (try? String(contentsOfFile: "/proc/\(importer.pid)/stat", encoding: .utf8))?.contains(") Z ") == true
        }
        let result = importer.finish()
        #expect(result.status == 0, "\(result.stderr)")
        #expect(failures == 0, "\(failures) backend writes failed during the import")
        #expect(try scratch.sqlite("SELECT count(*) FROM buildLogs") == String(logs))
        #expect(try scratch.sqlite("SELECT count(*) FROM telemetry WHERE event = 'backend'") == String(writes))
        reportFigure("import of a \(logs)-log project beside a backend writer (5 s busy timeout): \(writes) backend writes, \(failures) failed, worst wait \(String(format: "%.0f", worst * 1000)) ms (each write includes starting sqlite3)")
    }
}
