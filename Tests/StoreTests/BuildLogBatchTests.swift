import Foundation
import Testing
@testable import Store

/// A runner's batch of log lines (``BuildStore/appendLog(build:_:progress:fence:)``;
/// on PostgreSQL one pipeline, one round trip): it lands whole under the
/// run's fence, a line sent again lands once, and once the build was taken
/// back nothing of a batch lands and the refusal says who holds the build.
@Suite struct BuildLogBatchTests {
    /// The build store of `engine` over a new database with opsh's schema,
    /// a project, a scheme and build `b1`, running under runner `a`'s
    /// first attempt.
    func running(_ engine: Engine, in folder: TemporaryDirectory) throws -> (TestDatabase, any BuildStore) {
        let database = try TestDatabase.empty(engine, in: folder.path)
        let store: any BuildStore
        switch engine {
        case .sqlite:
            try FileManager.default.createDirectory(atPath: folder.path + "/data", withIntermediateDirectories: true)
            store = SQLiteBuildStore(store: try Store.open(path: database.db))
        case .postgresql:
            _ = try PostgresDatabase(url: database.db, options: .init(create: true))
            store = try PostgresBuildQueue(url: database.db)
        }
        try database.sql("""
            INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt) VALUES ('p', 'P', 'P', '/p', 1);
            INSERT INTO schemes (id, projectBundleIdentifier, name, "order", buildCommand, platforms) VALUES ('s', 'p', 'S', 0, 'true', '[]');
            INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt, progress, runnerId, runnerHost, runnerPid, attempts)
            VALUES ('b1', 's', '1.0', 1, 'running', 1, 0, 'a', 'ci-1', 11, 1);
            """)
        return (database, store)
    }

    static func lines(_ tag: String, _ count: Int) -> [NewBuildLogLine] {
        (0..<count).map { NewBuildLogLine(id: "\(tag)-\(String(format: "%05d", $0))", level: .info, category: "build",
                                          content: "\(tag) line \($0)", createdAt: 1000 + Double($0)) }
    }

    @Test(arguments: Engine.allCases)
    func aBatchLandsUnderItsFenceAndNothingOfItOnceTheBuildWasTakenBack(_ engine: Engine) throws {
        let folder = TemporaryDirectory()
        let (database, store) = try running(engine, in: folder)
        let fence = BuildFence(runnerId: "a", attempt: 1)
        // 700 lines: more than one chunk (512 + 128 + 32 + 16 + 8 + 4).
        try store.appendLog(build: "b1", Self.lines("first", 700), progress: 0.25, fence: fence)
        #expect(try database.count("buildLogs") == 700)
        #expect(try database.sql("SELECT progress FROM builds WHERE id = 'b1'") == "0.25")
        // Sent again (its commit's answer lost): each line lands once.
        try store.appendLog(build: "b1", Self.lines("first", 700) + Self.lines("again", 3), progress: nil, fence: fence)
        #expect(try database.count("buildLogs") == 703)

        // Taken back and claimed again by runner b (attempt 2), with the
        // take-back's line in the log: the old fence's batch is refused,
        // saying who holds the build, and nothing of it lands.
        try database.sql("""
            UPDATE builds SET runnerId = 'b', runnerHost = 'ci-2', runnerPid = 22, attempts = 2 WHERE id = 'b1';
            INSERT INTO buildLogs (id, buildId, level, category, content, createdAt)
            VALUES ('t1', 'b1', 'warning', 'runner', 'requeued by runner pid 22 on ci-2', 5000);
            """)
        #expect {
            try store.appendLog(build: "b1", Self.lines("late", 600), progress: 0.9, fence: fence)
        } throws: { error in
            let said = "\(error)"
            return error is BuildLeaseLost
                && said.contains("build b1 is no longer this run's (attempt 1): runner pid 22 on ci-2 holds it now (running, attempt 2)")
                && said.contains("requeued by runner pid 22 on ci-2")
        }
        #expect(try database.count("buildLogs", where: "content LIKE 'late%'") == 0)
        #expect(try database.sql("SELECT progress FROM builds WHERE id = 'b1'") == "0.25")
        // Control: the same batch under the new holder's fence lands.
        try store.appendLog(build: "b1", Self.lines("late", 600), progress: 0.9, fence: BuildFence(runnerId: "b", attempt: 2))
        #expect(try database.count("buildLogs", where: "content LIKE 'late%'") == 600)
        #expect(try database.sql("SELECT progress FROM builds WHERE id = 'b1'") == "0.9")
    }

    /// Lines written in the same instant keep the order they were sent in
    /// (SQLite orders a build's lines by createdAt, then rowid), also across
    /// the multi-row INSERTs a batch is cut into; the ids here sort the
    /// other way. SQLite only: PostgreSQL orders by the id's sequence.
    @Test func linesOfOneInstantKeepTheirOrderOnSQLite() throws {
        let folder = TemporaryDirectory()
        let (database, store) = try running(.sqlite, in: folder)
        let lines = (0..<150).map { NewBuildLogLine(id: "z-\(String(format: "%05d", 1000 - $0))", level: .info, category: "build",
                                                    content: "line \($0)", createdAt: 1000) }
        try store.appendLog(build: "b1", lines, progress: nil, fence: BuildFence(runnerId: "a", attempt: 1))
        #expect(try database.sql("SELECT group_concat(content, '|') FROM (SELECT content FROM buildLogs ORDER BY createdAt, rowid)")
                == lines.map(\.content).joined(separator: "|"))
    }

    /// PostgreSQL's text cannot hold NUL (SQLite keeps it): the line lands
    /// with U+FFFD in its place.
    @Test func aNULInALineLandsAsAReplacementCharacterOnPostgreSQL() throws {
        let folder = TemporaryDirectory()
        let (database, store) = try running(.postgresql, in: folder)
        let line = NewBuildLogLine(id: "n1", level: .info, category: "build", content: "a\u{0}b", createdAt: 1)
        try store.appendLog(build: "b1", [line], progress: nil, fence: BuildFence(runnerId: "a", attempt: 1))
        #expect(try database.sql("SELECT content = 'a' || chr(65533) || 'b' FROM buildLogs WHERE id = 'n1'") == "t")
    }
}
