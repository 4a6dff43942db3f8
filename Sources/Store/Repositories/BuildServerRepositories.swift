import Foundation
import GRDB

/// Projects: the root of the build-server aggregate.
public struct ProjectRepository: Sendable {
    public let records = RecordRepository<ProjectRecord>()
    public init() {}

    /// Deletes a project and its schemes. A project with builds is refused
    /// unless `cascade` is true, in which case its builds (and their logs
    /// and crash logs) go too.
    @discardableResult
    public func delete(_ db: Database, _ bundleIdentifier: String, cascade: Bool = false) throws -> Bool {
        let buildCount = try Int.fetchOne(db, sql: """
            SELECT count(*) FROM builds JOIN schemes ON schemes.id = builds.schemeId
            WHERE schemes.projectBundleIdentifier = ?
            """, arguments: [bundleIdentifier]) ?? 0
        if buildCount > 0 {
            guard cascade else {
                throw StoreError.refused(reason: "project \(bundleIdentifier) has \(buildCount) build(s); delete them first or pass cascade = true")
            }
            try db.execute(sql: """
                DELETE FROM builds WHERE schemeId IN
                    (SELECT id FROM schemes WHERE projectBundleIdentifier = ?)
                """, arguments: [bundleIdentifier])
        }
        return try records.delete(db, bundleIdentifier)
    }
}

/// Schemes of a project.
public struct SchemeRepository: Sendable {
    public let records = RecordRepository<SchemeRecord>()
    public init() {}

    /// Deletes a scheme; one with builds only with `cascade` (its builds,
    /// and their logs, go with it). Returns whether there was one.
    public func delete(_ db: Database, _ id: String, cascade: Bool = false) throws -> Bool {
        let builds = try Int.fetchOne(db, sql: "SELECT count(*) FROM builds WHERE schemeId = ?", arguments: [id]) ?? 0
        if builds > 0 {
            guard cascade else {
                throw StoreError.refused(reason: "scheme \(id) has \(builds) build(s); delete them first or pass cascade = true")
            }
            try db.execute(sql: "DELETE FROM builds WHERE schemeId = ?", arguments: [id])
        }
        return try records.delete(db, id)
    }

    /// A project's schemes in their order.
    public func list(_ db: Database, project bundleIdentifier: String) throws -> [SchemeRecord] {
        try records.list(db, ListRequest(filters: [ColumnFilter("projectBundleIdentifier", .equal, bundleIdentifier)],
                                         order: [ColumnOrder("order"), ColumnOrder("name")]))
    }
}

/// Builds of schemes.
public struct BuildRepository: Sendable {
    public let records = RecordRepository<BuildRecord>()
    public init() {}

    /// The number the next build of a scheme gets: one more than the
    /// highest so far (numbers are never reused, even after deletes of
    /// older builds).
    public func nextBuildNumber(_ db: Database, scheme schemeId: String) throws -> Int {
        (try Int.fetchOne(db, sql: "SELECT max(buildNumber) FROM builds WHERE schemeId = ?", arguments: [schemeId]) ?? 0) + 1
    }

    /// Inserts a queued build of `schemeId` at `version` with the next
    /// build number.
    public func create(_ db: Database, scheme schemeId: String, version: String, at date: Date = Date()) throws -> BuildRecord {
        guard try SchemeRepository().records.get(db, schemeId) != nil else {
            throw StoreError.notFound(table: "schemes", key: schemeId)
        }
        let build = BuildRecord(schemeId: schemeId, versionString: version,
                                buildNumber: try nextBuildNumber(db, scheme: schemeId), createdAt: date)
        return try records.insert(db, build)
    }

    /// A project's most recent builds, newest first.
    public func latest(_ db: Database, project bundleIdentifier: String, limit: Int) throws -> [BuildRecord] {
        try BuildRecord.fetchAll(db, sql: """
            SELECT builds.* FROM builds JOIN schemes ON schemes.id = builds.schemeId
            WHERE schemes.projectBundleIdentifier = ?
            ORDER BY builds.createdAt DESC, builds.buildNumber DESC LIMIT ?
            """, arguments: [bundleIdentifier, limit])
    }

    /// Deletes a build with its logs and crash logs; a running build is
    /// refused.
    @discardableResult
    public func delete(_ db: Database, _ id: String) throws -> Bool {
        if let build = try records.get(db, id), build.status == .running {
            throw StoreError.refused(reason: "build \(id) is running; cancel it first")
        }
        return try records.delete(db, id)
    }
}

/// Lines of build output.
public struct BuildLogRepository: Sendable {
    public let records = RecordRepository<BuildLogRecord>()
    public init() {}

    /// Appends many lines with one prepared statement: the job runner
    /// calls this once per batch of output, inside one short transaction.
    public func append(_ db: Database, _ lines: [BuildLogRecord]) throws {
        guard !lines.isEmpty else { return }
        let statement = try db.cachedStatement(sql: """
            INSERT INTO buildLogs (id, buildId, level, category, content, createdAt) VALUES (?, ?, ?, ?, ?, ?)
            """)
        for line in lines {
            try statement.execute(arguments: [
                line.id, line.buildId, line.level.rawValue, line.category, line.content,
                line.createdAt.timeIntervalSince1970,
            ])
        }
    }

    /// The last `count` lines of a build, oldest first.
    public func tail(_ db: Database, build buildId: String, count: Int, includeDebug: Bool = true) throws -> [BuildLogRecord] {
        try BuildLogRecord.fetchAll(db, sql: """
            SELECT * FROM (SELECT * FROM buildLogs WHERE buildId = ? AND (? OR level <> 'debug')
                           ORDER BY createdAt DESC, rowid DESC LIMIT ?)
            ORDER BY createdAt, rowid
            """, arguments: [buildId, includeDebug, count])
    }
}

/// Crash reports of builds.
public struct CrashLogRepository: Sendable {
    public let records = RecordRepository<CrashLogRecord>()
    public init() {}
}
