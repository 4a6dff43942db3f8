import GRDB

/// A read that is one SQL statement — a query key's, or one of the
/// reads `jobs.*` makes (``BuildJobStatements``): what it selects, with
/// which values, and how its rows make the value. Store owns the SQL; a
/// caller with a statement cache of its own (the Lua bindings' fast path)
/// runs exactly this.
public struct QueryStatement: Sendable, Equatable {
    public enum Shape: Sendable {
        /// The first row, or nothing (`build.{id}`).
        case row
        /// Every row (`project.{id}.latestBuilds.limitN`).
        case rows
        /// The first column of every row (`projects.all.ids`).
        case ids
    }
    public let sql: String
    /// The arguments as callers above the engine seam bind them (the Lua
    /// fast path pushes them as they are).
    public let values: [StoreValue]
    public let shape: Shape

    public init(sql: String, arguments: [DatabaseValue], shape: Shape) {
        self.sql = sql
        self.values = arguments.map(StoreValue.init)
        self.shape = shape
    }

    /// The arguments as GRDB binds them (Store's own fetch).
    var arguments: [DatabaseValue] { values.map(\.databaseValue) }
}

extension QueryKey {
    /// The key as one statement, so that a caller with a statement cache of
    /// its own (the Lua bindings' fast path) runs exactly what ``fetch(_:)``
    /// runs; nil for the keys that combine several (`.detail`,
    /// `projects.versionStrings`, `telemetry.counts`, `config`).
    public func statement() throws -> QueryStatement? {
        func row(_ sql: String, _ arguments: [DatabaseValue]) -> QueryStatement { .init(sql: sql, arguments: arguments, shape: .row) }
        func rows(_ sql: String, _ arguments: [DatabaseValue]) -> QueryStatement { .init(sql: sql, arguments: arguments, shape: .rows) }
        func ids(_ sql: String, _ arguments: [DatabaseValue] = []) -> QueryStatement { .init(sql: sql, arguments: arguments, shape: .ids) }
        switch self {
        case .allProjectIds:
            return ids("SELECT bundleIdentifier FROM projects ORDER BY bundleIdentifier")
        case .projectVersionStrings, .projectDetail, .telemetryCounts, .configuration:
            return nil
        case .project(let id):
            return row("SELECT * FROM projects WHERE bundleIdentifier = ?", [id.databaseValue])
        case .projectSchemeIds(let id):
            return ids("SELECT id FROM schemes WHERE projectBundleIdentifier = ? ORDER BY \"order\", name", [id.databaseValue])
        case .projectBuildVersionStrings(let id):
            return ids("""
                SELECT DISTINCT b.versionString FROM builds b JOIN schemes s ON b.schemeId = s.id
                WHERE s.projectBundleIdentifier = ? ORDER BY b.versionString DESC
                """, [id.databaseValue])
        case let .projectLatestBuilds(id, limit):
            // A key made with the enum case directly can carry any Int; one
            // that does not print as a parseable key is refused here too.
            if let error = limitError { throw error }
            return rows("""
                SELECT b.* FROM builds b JOIN schemes s ON s.id = b.schemeId
                WHERE s.projectBundleIdentifier = ? ORDER BY b.createdAt DESC, b.buildNumber DESC LIMIT ?
                """, [id.databaseValue, limit.databaseValue])
        case .scheme(let id):
            return row("SELECT * FROM schemes WHERE id = ?", [id.databaseValue])
        case let .schemeBuildIds(schemeIds, version):
            let placeholders = Array(repeating: "?", count: max(schemeIds.count, 1)).joined(separator: ",")
            var arguments = schemeIds.isEmpty ? [DatabaseValue.null] : schemeIds.map(\.databaseValue)
            var sql = "SELECT id FROM builds WHERE schemeId IN (\(placeholders))"
            if let version {
                sql += " AND versionString = ?"
                arguments.append(version.databaseValue)
            }
            return ids(sql + " ORDER BY createdAt DESC, buildNumber DESC", arguments)
        case .build(let id):
            return row("SELECT * FROM builds WHERE id = ?", [id.databaseValue])
        case let .buildLogIds(id, includeDebug, category):
            var sql = "SELECT id FROM buildLogs WHERE buildId = ?"
            var arguments = [id.databaseValue]
            if !includeDebug { sql += " AND level <> 'debug'" }
            if let category {
                sql += " AND category = ?"
                arguments.append(category.databaseValue)
            }
            return ids(sql + " ORDER BY createdAt, rowid", arguments)
        case .buildCrashLogIds(let id):
            return ids("SELECT incidentIdentifier FROM crashLogs WHERE buildId = ? ORDER BY createdAt DESC", [id.databaseValue])
        case .buildLog(let id):
            return row("SELECT * FROM buildLogs WHERE id = ?", [id.databaseValue])
        case .crashLog(let id):
            return row("SELECT * FROM crashLogs WHERE incidentIdentifier = ?", [id.databaseValue])
        case .allModelIds:
            return ids("SELECT id FROM model_metadata ORDER BY id")
        case .model(let id):
            return row("SELECT * FROM model_metadata WHERE id = ?", [id.databaseValue])
        case .modelUsage(let id):
            return rows("SELECT * FROM model_usage_stats WHERE model_id = ? ORDER BY day", [id.databaseValue])
        case .session(let id):
            return row("SELECT * FROM generation_sessions WHERE id = ?", [id.databaseValue])
        case .sessionGenerations(let id):
            return rows("SELECT * FROM generations WHERE session_id = ? ORDER BY sequence_number", [id.databaseValue])
        }
    }
}
