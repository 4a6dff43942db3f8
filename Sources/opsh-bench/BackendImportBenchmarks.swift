import Foundation
import GRDB

/// Beside a live backend, a large import (issue 27, "Ahead again"): a
/// project with one build and 250,000 log lines, exported by opsh from
/// another database, imported while the backend writes one telemetry row
/// every 5 ms and a reader counts `buildLogs` every 5 ms. The
/// target: the backend's worst wait under 200 ms, the import still all or
/// nothing for every reader.
///
/// Each engine runs it once:
/// - SQLite: opsh's `import{}`, and beside it on a copy of the same
///   database the shortest any single SQLite transaction can make those
///   rows appear: `sqlite3` inserting them with one `INSERT … SELECT` per
///   table from the attached source file. SQLite has one writer at a time,
///   so that transaction's length is a floor for the backend's wait.
/// - PostgreSQL: opsh's `import{}` against a throwaway server, with the
///   backend and the reader in C over libpq (`bench/backend/pg-backend.c`).
///
/// What the reader saw is checked before any figure is printed: only the
/// count before and the count after, never a count between.
extension BackendBenchmarks {
    struct ImportRun {
        var engine: String
        var publisher: String
        var seconds: Double
        /// The longest hold of SQLite's write lock by the publishing
        /// process (nil on PostgreSQL, which has no database-wide one).
        var lockLongest: Double?
        var backend: BackendWriter.Figures
        var readerCounts: Int
    }

    struct ImportFigures {
        var logs: Int
        var documentBytes: Int64
        var runs: [ImportRun]
    }

    static let importWaitTarget = 0.2

    static func importsBesideBackend(opsh: String, live: String, environment: [String: String], executable: String,
                                     repository: String, directory: String) throws -> ImportFigures {
        // The project, made and exported by opsh from another database.
        let source = directory + "/source.sqlite"
        let document = directory + "/app.json"
        let made = try runProcess(opsh, ["--db", source, "--create", "-e", """
            projects.insert{ bundleIdentifier = "com.example.app", name = "App", gitRepositoryURL = "/srv/app" }
            local s = schemes.insert{ projectBundleIdentifier = "com.example.app", name = "Release", buildCommand = "make" }
            local b = builds.create(s.id, "1.0.0")
            db.transaction(function()
              for i = 1, \(importLogs) do
                db.exec("INSERT INTO buildLogs (id, buildId, content, createdAt) VALUES (?, ?, ?, ?)",
                        "log-" .. i, b.id, "compiling module " .. i .. " of the app", 1700000000 + i)
              end
            end)
            export.project("com.example.app", { file = "\(document)" })
            """], environment: environment, directory: directory)
        try require(made.status == 0, "making the export failed: \(made.stderr)")

        var runs: [ImportRun] = []
        // The floor, on a copy of the live database taken before opsh's import.
        let peer = directory + "/peer.sqlite"
        _ = try sqlite3(live, "VACUUM INTO '\(peer)'")
        // VACUUM INTO writes a rollback-journal file: the copy is put in WAL mode, as the live one is.
        try require(try sqlite3(peer, "PRAGMA journal_mode = WAL") == "wal", "the copy is not in WAL mode")
        let tables = ["projects", "schemes", "builds", "buildLogs", "crashLogs"]
        let publish = ".timeout 5000\nPRAGMA foreign_keys = ON;\nATTACH '\(source)' AS src;\nBEGIN IMMEDIATE;\n"
            + tables.map { "INSERT INTO main.\($0) SELECT * FROM src.\($0);\n" }.joined() + "COMMIT;\n"
        let script = directory + "/publish.sql"
        try publish.write(toFile: script, atomically: true, encoding: .utf8)
        runs.append(try importSQLite(engineName: "SQLite", publisher: "`sqlite3`: one `INSERT … SELECT` per table from the attached source file, one transaction",
                                     database: peer, event: "backend-import-sqlite3", executable: executable, directory: directory) {
            try startProcess("/bin/sh", ["-c", "exec /usr/bin/sqlite3 -bail '\(peer)' < '\(script)'"],
                             environment: ["PATH": "/usr/bin:/bin"], directory: directory)
        })
        runs.append(try importSQLite(engineName: "SQLite", publisher: "opsh: `import{ file = … }`",
                                     database: live, event: "backend-import", executable: executable, directory: directory) {
            try startProcess(opsh, ["--db", live, "-e", "import{ file = \"\(document)\" }"],
                             environment: environment, directory: directory)
        })
        if let postgres = try importPostgreSQL(opsh: opsh, document: document, environment: environment,
                                               repository: repository, directory: directory) {
            runs.append(postgres)
        }
        return ImportFigures(logs: importLogs, documentBytes: fileSize(document) ?? 0, runs: runs)
    }

    /// One publish on SQLite beside the backend writer and a reader.
    static func importSQLite(engineName: String, publisher: String, database: String, event: String, executable: String,
                             directory: String, start: () throws -> Started) throws -> ImportRun {
        let before = Int(try sqlite3(database, "SELECT count(*) FROM buildLogs")) ?? -1
        let writer = try BackendWriter(command: { [executable, "--backend-writer", database, $0, String(busyTimeout), event] },
                                       directory: directory)
        defer { writer.endIfRunning() }
        let reader = try BackendWriter(command: { [executable, "--count-logs", database, $0] }, directory: directory)
        defer { reader.endIfRunning() }
        let started = now()
        let importer = try start()
        let locks = WriteLockSampler(databasePath: database, pid: importer.process.processIdentifier)
        let result = importer.finish()
        let seconds = now() - started
        let held = locks.stop()
        let figures = try writer.stop()
        let seen = try reader.stopCounting()

        try require(result.status == 0, "\(publisher) failed (exit \(result.status)): \(result.stderr)")
        let after = Int(try sqlite3(database, "SELECT count(*) FROM buildLogs")) ?? -1
        try checkImport(publisher: publisher, before: before, after: after, seen: seen)
        let landed = Int(try sqlite3(database, "SELECT count(*) FROM telemetry WHERE event = '\(event)'")) ?? -1
        try require(landed == figures.commits, "the backend committed \(figures.commits) rows, the database holds \(landed)")
        try require(held.samples > 100, "/proc/locks was read only \(held.samples) times")
        try require(held.holds >= 1, "\(publisher) was never seen holding the write lock")
        try require(figures.commits > 0, "the backend never committed during \(publisher)")
        return ImportRun(engine: engineName, publisher: publisher, seconds: seconds, lockLongest: held.longest,
                         backend: figures, readerCounts: seen.samples)
    }

    /// opsh's import into a throwaway PostgreSQL server, beside the C
    /// backend and reader; nil when no server or no C compiler is here.
    static func importPostgreSQL(opsh: String, document: String, environment: [String: String], repository: String,
                                 directory: String) throws -> ImportRun? {
        let serverFolder = "/tmp/opsh-bimp-\(getpid())"
        let started = PostgresBenchmarks.shell(["\(repository)/scripts/pg-server", "start", serverFolder], directory: directory)
        guard started.status == 0, let url = started.stdout.split(separator: "\n").last.map(String.init),
              url.hasPrefix("postgresql://") else { return nil }
        defer { _ = PostgresBenchmarks.shell(["\(repository)/scripts/pg-server", "stop", serverFolder], directory: directory) }
        let backend = directory + "/pg-backend"
        let cc = PostgresBenchmarks.shell(["cc", "-O2", "-o", backend, repository + "/bench/backend/pg-backend.c",
                                           "-I/usr/include/postgresql", "-lpq"], directory: directory)
        guard cc.status == 0 else { return nil }
        let made = try runProcess(opsh, ["--db", url, "--create", "-e", "return 1"], environment: environment, directory: directory)
        try require(made.status == 0, "opsh could not make its schema on PostgreSQL: \(made.stderr)")
        func count(_ sql: String) throws -> Int {
            let ran = try runProcess(opsh, ["--db", url, "-e", "return db.first(\"\(sql)\").n"], environment: environment, directory: directory)
            try require(ran.status == 0, "\(sql): \(ran.stderr)")
            return Int(ran.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
        }
        let before = try count("SELECT count(*) AS n FROM buildLogs")
        let event = "backend-import-postgresql"
        let writer = try BackendWriter(command: { [backend, "write", url, $0, event] }, directory: directory)
        defer { writer.endIfRunning() }
        let reader = try BackendWriter(command: { [backend, "count", url, $0] }, directory: directory)
        defer { reader.endIfRunning() }
        let publisher = "opsh: `import{ file = … }`"
        let clock = now()
        let result = try runProcess(opsh, ["--db", url, "-e", "import{ file = \"\(document)\" }"],
                                    environment: environment, directory: directory)
        let seconds = now() - clock
        let figures = try writer.stop()
        let seen = try reader.stopCounting()
        try require(result.status == 0, "the import on PostgreSQL failed (exit \(result.status)): \(result.stderr)")
        try checkImport(publisher: publisher + " on PostgreSQL", before: before, after: try count("SELECT count(*) AS n FROM buildLogs"), seen: seen)
        let landed = try count("SELECT count(*) AS n FROM telemetry WHERE event = '\(event)'")
        try require(landed == figures.commits, "the backend committed \(figures.commits) rows on PostgreSQL, the database holds \(landed)")
        try require(figures.commits > 0, "the backend never committed during the import on PostgreSQL")
        return ImportRun(engine: "PostgreSQL", publisher: publisher, seconds: seconds, lockLongest: nil,
                         backend: figures, readerCounts: seen.samples)
    }

    /// All or nothing for the reader: it saw the count before, then the
    /// count after, and nothing between.
    static func checkImport(publisher: String, before: Int, after: Int, seen: (counts: [Int], samples: Int)) throws {
        try require(after - before == importLogs, "\(publisher) added \(after - before) log rows, not \(importLogs)")
        try require(seen.samples > 10, "the reader counted only \(seen.samples) times during \(publisher)")
        try require(seen.counts.allSatisfy { $0 == before || $0 == after },
                    "a reader saw \(seen.counts.map(String.init).joined(separator: " → ")) log rows during \(publisher): not all or nothing")
    }

    static func importRows(_ imported: ImportFigures) -> String {
        imported.runs.map { run in
            let met = run.backend.worst < importWaitTarget && run.backend.failures == 0
            let isPeer = run.publisher.hasPrefix("`sqlite3`")
            return "| \(run.engine) | \(run.publisher) | \(run.lockLongest.map(formatDuration) ?? "— (row locks)") | "
                + "\(formatDuration(run.backend.worst)) (of which the lock \(formatDuration(run.backend.worstLock))) | "
                + "\(run.backend.commits), \(run.backend.failures) failed | only before and after (\(formatCount(run.readerCounts)) counts) | "
                + (isPeer ? "the floor on SQLite | — |" : "< 200 ms | \(met ? "met" : "**not met**") |")
        }.joined(separator: "\n")
    }

    /// The reader process on SQLite: `buildLogs` counted every 5 ms
    /// until `stopFile` exists; prints "ready", then the distinct counts in
    /// the order first seen and the number of counts (as pg-backend count).
    static func runLogCounter(path: String, stopFile: String) throws {
        var configuration = Configuration()
        configuration.readonly = true
        configuration.busyMode = .timeout(5)
        let queue = try DatabaseQueue(path: path, configuration: configuration)
        var counts: [Int] = []
        var samples = 0
        var first = true
        while first || !FileManager.default.fileExists(atPath: stopFile) {
            let count = try queue.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM buildLogs") ?? -1 }
            samples += 1
            if counts.last != count { counts.append(count) }
            if first {
                FileHandle.standardOutput.write(Data("ready\n".utf8))
                first = false
            }
            usleep(5000)
        }
        print((counts.map(String.init) + [String(samples)]).joined(separator: " "))
    }
}

extension BackendBenchmarks.BackendWriter {
    /// Stops a reader (`--count-logs`, `pg-backend count`): the distinct
    /// counts it saw, in order, and how many counts it took.
    func stopCounting() throws -> (counts: [Int], samples: Int) {
        let fields = try stopFields()
        try BackendBenchmarks.require(fields.count >= 2, "the reader said \(fields)")
        return (fields.dropLast().compactMap { Int($0) }, Int(fields.last!) ?? 0)
    }
}
