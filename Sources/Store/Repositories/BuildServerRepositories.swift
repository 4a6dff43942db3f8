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
    func delete(_ db: Database, _ bundleIdentifier: String, cascade: Bool = false) throws -> Bool {
        try delete(StoreDatabase(db), bundleIdentifier, cascade: cascade)
    }

    /// ``delete(_:_:cascade:)-(Database,_,_)`` on either engine: the cascade's order
    /// (builds, then the project, whose schemes go by ON DELETE CASCADE).
    @discardableResult
    public func delete(_ database: some RepositoryConnection, _ bundleIdentifier: String, cascade: Bool = false) throws -> Bool {
        let buildCount = try database.integer("""
            SELECT count(*) FROM builds JOIN schemes ON schemes.id = builds.schemeId
            WHERE schemes.projectBundleIdentifier = ?
            """, [.text(bundleIdentifier)]) ?? 0
        if buildCount > 0 {
            guard cascade else {
                throw StoreError.refused(reason: "project \(bundleIdentifier) has \(buildCount) build(s); delete them first or pass cascade = true")
            }
            try database.execute("""
                DELETE FROM builds WHERE schemeId IN
                    (SELECT id FROM schemes WHERE projectBundleIdentifier = ?)
                """, [.text(bundleIdentifier)])
        }
        return try records.delete(database, .text(bundleIdentifier))
    }
}

/// Schemes of a project.
public struct SchemeRepository: Sendable {
    public let records = RecordRepository<SchemeRecord>()
    public init() {}

    /// Deletes a scheme; one with builds only with `cascade` (its builds,
    /// and their logs, go with it). Returns whether there was one.
    func delete(_ db: Database, _ id: String, cascade: Bool = false) throws -> Bool {
        try delete(StoreDatabase(db), id, cascade: cascade)
    }

    public func delete(_ database: some RepositoryConnection, _ id: String, cascade: Bool = false) throws -> Bool {
        try records.delete(database, id, children: ("builds", "schemeId", "build"), owner: "scheme", cascade: cascade)
    }

    /// A project's schemes in their order.
    func list(_ db: Database, project bundleIdentifier: String) throws -> [SchemeRecord] {
        try records.list(db, Self.listRequest(project: bundleIdentifier))
    }

    /// Which rows ``list(_:project:)`` returns (for callers that run the
    /// request on their own engine).
    public static func listRequest(project bundleIdentifier: String) -> ListRequest {
        ListRequest(filters: [ColumnFilter("projectBundleIdentifier", .equal, bundleIdentifier)],
                    order: [ColumnOrder("order"), ColumnOrder("name")])
    }
}

/// Builds of schemes.
public struct BuildRepository: Sendable {
    public let records = RecordRepository<BuildRecord>()
    public init() {}

    /// The number the next build of a scheme gets: one more than the
    /// highest so far (numbers are never reused, even after deletes of
    /// older builds).
    func nextBuildNumber(_ db: Database, scheme schemeId: String) throws -> Int {
        try nextBuildNumber(StoreDatabase(db), scheme: schemeId)
    }

    public func nextBuildNumber(_ database: some RepositoryConnection, scheme schemeId: String) throws -> Int {
        Int(try database.integer("SELECT max(buildNumber) FROM builds WHERE schemeId = ?", [.text(schemeId)]) ?? 0) + 1
    }

    /// Inserts a queued build of `schemeId` at `version` with the next
    /// build number.
    func create(_ db: Database, scheme schemeId: String, version: String, at date: Date = Date()) throws -> BuildRecord {
        try records.require(db, try create(StoreDatabase(db), scheme: schemeId, version: version, at: date))
    }

    /// ``create(_:scheme:version:at:)-(Database,_,_,_)`` on either engine: the new build's id.
    public func create(_ database: some RepositoryConnection, scheme schemeId: String, version: String,
                       at date: Date = Date()) throws -> String {
        guard try database.exists("SELECT 1 FROM schemes WHERE id = ?", [.text(schemeId)]) else {
            throw StoreError.notFound(table: "schemes", key: schemeId)
        }
        let id = makeIdentifier()
        let fields: [String: StoreValue] = [
            "id": .text(id), "schemeId": .text(schemeId), "versionString": .text(version),
            "buildNumber": .integer(Int64(try nextBuildNumber(database, scheme: schemeId))),
            "status": .text(BuildStatus.queued.rawValue), "createdAt": .real(date.timeIntervalSince1970), "progress": .real(0),
        ]
        try records.insertColumns(database, fields, columns: Array(fields.keys))
        return id
    }

    /// A project's most recent builds, newest first.
    func latest(_ db: Database, project bundleIdentifier: String, limit: Int) throws -> [BuildRecord] {
        let (sql, arguments) = Self.latestSQL(project: bundleIdentifier, limit: limit)
        return try BuildRecord.fetchAll(db, sql: sql, arguments: StatementArguments(arguments.map(\.databaseValue)))
    }

    /// ``latest(_:project:limit:)``'s statement, the same on both engines.
    public static func latestSQL(project bundleIdentifier: String, limit: Int) -> (sql: String, arguments: [StoreValue]) {
        ("""
            SELECT builds.* FROM builds JOIN schemes ON schemes.id = builds.schemeId
            WHERE schemes.projectBundleIdentifier = ?
            ORDER BY builds.createdAt DESC, builds.buildNumber DESC LIMIT ?
            """, [.text(bundleIdentifier), .integer(Int64(limit))])
    }

    /// Deletes a build with its logs and crash logs; a running build is
    /// refused.
    @discardableResult
    func delete(_ db: Database, _ id: String) throws -> Bool {
        try delete(StoreDatabase(db), id)
    }

    @discardableResult
    public func delete(_ database: some RepositoryConnection, _ id: String) throws -> Bool {
        if try database.value("SELECT status FROM builds WHERE id = ?", [.text(id)]) == .text(BuildStatus.running.rawValue) {
            throw StoreError.refused(reason: "build \(id) is running; cancel it first")
        }
        return try records.delete(database, .text(id))
    }
}

/// Lines of build output.
public struct BuildLogRepository: Sendable {
    public let records = RecordRepository<BuildLogRecord>()
    public init() {}

    /// Appends many lines with one prepared statement: the job runner
    /// calls this once per batch of output, inside one short transaction.
    func append(_ db: Database, _ lines: [BuildLogRecord]) throws {
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
    func tail(_ db: Database, build buildId: String, count: Int, includeDebug: Bool = true) throws -> [BuildLogRecord] {
        let (sql, arguments) = Self.tailSQL(.sqlite, build: buildId, count: count, includeDebug: includeDebug)
        return try BuildLogRecord.fetchAll(db, sql: sql, arguments: StatementArguments(arguments.map(\.databaseValue)))
    }

    /// ``tail(_:build:count:includeDebug:)``'s statement in `dialect`:
    /// lines written at the same time keep the order they were written in.
    public static func tailSQL(_ dialect: SQLDialect, build buildId: String, count: Int,
                               includeDebug: Bool) -> (sql: String, arguments: [StoreValue]) {
        let order = dialect.insertionOrder
        return ("""
            SELECT * FROM buildLogs WHERE \(order) IN
                (SELECT \(order) FROM buildLogs WHERE buildId = ? AND (? = 1 OR level <> 'debug')
                 ORDER BY createdAt DESC, \(order) DESC LIMIT ?)
            ORDER BY createdAt, \(order)
            """, [.text(buildId), .integer(includeDebug ? 1 : 0), .integer(Int64(count))])
    }
}

/// Crash reports of builds.
public struct CrashLogRepository: Sendable {
    public let records = RecordRepository<CrashLogRecord>()
    public init() {}
}
