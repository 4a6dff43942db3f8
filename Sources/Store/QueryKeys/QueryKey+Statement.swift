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
    /// The key as one statement in `dialect`, so that a caller with a
    /// statement cache of its own (the Lua bindings' fast path) runs exactly
    /// what ``fetch(_:)`` runs; nil for the keys that combine several
    /// (`.detail`, `projects.versionStrings`, `telemetry.counts`, `config`).
    ///
    /// The engines differ in what orders rows: text is ordered by its bytes
    /// on both (SQLite's BINARY; `COLLATE "C"` on PostgreSQL, whatever the
    /// server's locale), NULLs first, and lines of one instant in the order
    /// they were written (``SQLDialect/insertionOrder``), so a key has one
    /// value on either engine.
    public func statement(dialect: SQLDialect) throws -> QueryStatement? {
        func row(_ sql: String, _ arguments: [DatabaseValue]) -> QueryStatement { .init(sql: sql, arguments: arguments, shape: .row) }
        func rows(_ sql: String, _ arguments: [DatabaseValue]) -> QueryStatement { .init(sql: sql, arguments: arguments, shape: .rows) }
        func ids(_ sql: String, _ arguments: [DatabaseValue] = []) -> QueryStatement { .init(sql: sql, arguments: arguments, shape: .ids) }
        let order = KeyOrder(dialect: dialect)
        switch self {
        case .allProjectIds:
            return ids("SELECT bundleIdentifier FROM projects ORDER BY \(order.text("bundleIdentifier"))")
        case .projectVersionStrings, .projectDetail, .telemetryCounts, .configuration:
            return nil
        case .project(let id):
            return row("SELECT * FROM projects WHERE bundleIdentifier = ?", [id.databaseValue])
        case .projectSchemeIds(let id):
            return ids("SELECT id FROM schemes WHERE projectBundleIdentifier = ? ORDER BY \(order.schemes)", [id.databaseValue])
        case .projectBuildVersionStrings(let id):
            // GROUP BY, not DISTINCT: PostgreSQL orders a DISTINCT only by
            // what it selects, and the collation is an expression of its own.
            return ids("""
                SELECT b.versionString FROM builds b JOIN schemes s ON b.schemeId = s.id
                WHERE s.projectBundleIdentifier = ? GROUP BY b.versionString ORDER BY \(order.text("b.versionString", descending: true))
                """, [id.databaseValue])
        case let .projectLatestBuilds(id, limit):
            // A key made with the enum case directly can carry any Int; one
            // that does not print as a parseable key is refused here too.
            if let error = limitError { throw error }
            return rows("""
                SELECT b.* FROM builds b JOIN schemes s ON s.id = b.schemeId
                WHERE s.projectBundleIdentifier = ? ORDER BY \(order.newestBuilds("b.")) LIMIT ?
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
            return ids(sql + " ORDER BY \(order.newestBuilds(""))", arguments)
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
            return ids(sql + " ORDER BY \(order.number("createdAt")), \(dialect.insertionOrder)", arguments)
        case .buildCrashLogIds(let id):
            // Crashes of one instant by their identifier: a tie has one order on both engines.
            return ids("""
                SELECT incidentIdentifier FROM crashLogs WHERE buildId = ?
                ORDER BY \(order.number("createdAt", descending: true)), \(order.text("incidentIdentifier"))
                """, [id.databaseValue])
        case .buildLog(let id):
            return row("SELECT * FROM buildLogs WHERE id = ?", [id.databaseValue])
        case .crashLog(let id):
            return row("SELECT * FROM crashLogs WHERE incidentIdentifier = ?", [id.databaseValue])
        case .allModelIds:
            return ids("SELECT id FROM model_metadata ORDER BY \(order.text("id"))")
        case .model(let id):
            return row("SELECT * FROM model_metadata WHERE id = ?", [id.databaseValue])
        case .modelUsage(let id):
            return rows("SELECT * FROM model_usage_stats WHERE model_id = ? ORDER BY \(order.text("day"))", [id.databaseValue])
        case .session(let id):
            return row("SELECT * FROM generation_sessions WHERE id = ?", [id.databaseValue])
        case .sessionGenerations(let id):
            return rows("SELECT * FROM generations WHERE session_id = ? ORDER BY \(order.number("sequence_number"))", [id.databaseValue])
        }
    }
}

/// The ORDER BY terms of query keys in one dialect (their columns are
/// written as SQL, qualified where the statement joins).
struct KeyOrder {
    let dialect: SQLDialect

    func text(_ expression: String, descending: Bool = false) -> String {
        dialect.orderTerm(expression: expression, descending: descending, isText: true)
    }

    func number(_ expression: String, descending: Bool = false) -> String {
        dialect.orderTerm(expression: expression, descending: descending, isText: false)
    }

    /// A project's schemes: by their order, then name.
    var schemes: String { number("\"order\"") + ", " + text("name") }

    /// Builds newest first (`prefix` is the table's alias and a dot, or nothing).
    func newestBuilds(_ prefix: String) -> String {
        number(prefix + "createdAt", descending: true) + ", " + number(prefix + "buildNumber", descending: true)
    }
}
