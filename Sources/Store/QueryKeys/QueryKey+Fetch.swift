import GRDB

extension QueryKey {
    /// Fetches the key's current value: a row (an object) or `.null` for
    /// single-row keys, an array of ids or rows for list keys.
    public func fetch(_ db: Database) throws -> StoreValue {
        switch self {
        case .allProjectIds:
            return try ids(db, "SELECT bundleIdentifier FROM projects ORDER BY bundleIdentifier")
        case .projectVersionStrings:
            let rows = try Row.fetchAll(db, sql: """
                SELECT p.bundleIdentifier, b.versionString
                FROM projects p
                JOIN schemes s ON p.bundleIdentifier = s.projectBundleIdentifier
                JOIN builds b ON s.id = b.schemeId
                GROUP BY p.bundleIdentifier, b.versionString
                ORDER BY p.bundleIdentifier, b.versionString
                """)
            var fields: [StoreValue.Field] = []
            for row in rows {
                let project: String = row[0]
                let version = StoreValue.text(row[1])
                if let last = fields.indices.last, fields[last].name == project, case .array(var versions) = fields[last].value {
                    versions.append(version)
                    fields[last].value = .array(versions)
                } else {
                    fields.append(.init(project, .array([version])))
                }
            }
            return .object(fields)
        case .project(let id):
            return try one(db, "SELECT * FROM projects WHERE bundleIdentifier = ?", [id])
        case .projectDetail(let id):
            let project = try one(db, "SELECT * FROM projects WHERE bundleIdentifier = ?", [id])
            if project == .null { return .null }
            return .object([
                .init("project", project),
                .init("schemeIds", try ids(db, """
                    SELECT id FROM schemes WHERE projectBundleIdentifier = ? ORDER BY "order", name
                    """, [id])),
                .init("recentBuildIds", try ids(db, """
                    SELECT b.id FROM builds b JOIN schemes s ON s.id = b.schemeId
                    WHERE s.projectBundleIdentifier = ? ORDER BY b.createdAt DESC, b.buildNumber DESC LIMIT 10
                    """, [id])),
            ])
        case .projectSchemeIds(let id):
            return try ids(db, "SELECT id FROM schemes WHERE projectBundleIdentifier = ? ORDER BY \"order\", name", [id])
        case .projectBuildVersionStrings(let id):
            return try ids(db, """
                SELECT DISTINCT b.versionString FROM builds b JOIN schemes s ON b.schemeId = s.id
                WHERE s.projectBundleIdentifier = ? ORDER BY b.versionString DESC
                """, [id])
        case let .projectLatestBuilds(id, limit):
            // A key made with the enum case directly can carry any Int; one
            // that does not print as a parseable key is refused here too.
            if let error = limitError { throw error }
            return try many(db, """
                SELECT b.* FROM builds b JOIN schemes s ON s.id = b.schemeId
                WHERE s.projectBundleIdentifier = ? ORDER BY b.createdAt DESC, b.buildNumber DESC LIMIT ?
                """, [id, limit])
        case .scheme(let id):
            return try one(db, "SELECT * FROM schemes WHERE id = ?", [id])
        case let .schemeBuildIds(schemeIds, version):
            let placeholders = Array(repeating: "?", count: max(schemeIds.count, 1)).joined(separator: ",")
            var arguments = StatementArguments(schemeIds.isEmpty ? [nil] as [String?] : schemeIds)
            var sql = "SELECT id FROM builds WHERE schemeId IN (\(placeholders))"
            if let version {
                sql += " AND versionString = ?"
                _ = arguments.append(contentsOf: [version])
            }
            return try ids(db, sql + " ORDER BY createdAt DESC, buildNumber DESC", arguments)
        case .build(let id):
            return try one(db, "SELECT * FROM builds WHERE id = ?", [id])
        case let .buildLogIds(id, includeDebug, category):
            var sql = "SELECT id FROM buildLogs WHERE buildId = ?"
            var arguments: StatementArguments = [id]
            if !includeDebug { sql += " AND level <> 'debug'" }
            if let category {
                sql += " AND category = ?"
                _ = arguments.append(contentsOf: [category])
            }
            return try ids(db, sql + " ORDER BY createdAt, rowid", arguments)
        case .buildCrashLogIds(let id):
            return try ids(db, "SELECT incidentIdentifier FROM crashLogs WHERE buildId = ? ORDER BY createdAt DESC", [id])
        case .buildLog(let id):
            return try one(db, "SELECT * FROM buildLogs WHERE id = ?", [id])
        case .crashLog(let id):
            return try one(db, "SELECT * FROM crashLogs WHERE incidentIdentifier = ?", [id])
        case .allModelIds:
            return try ids(db, "SELECT id FROM model_metadata ORDER BY id")
        case .model(let id):
            return try one(db, "SELECT * FROM model_metadata WHERE id = ?", [id])
        case .modelUsage(let id):
            return try many(db, "SELECT * FROM model_usage_stats WHERE model_id = ? ORDER BY day", [id])
        case .session(let id):
            return try one(db, "SELECT * FROM generation_sessions WHERE id = ?", [id])
        case .sessionGenerations(let id):
            return try many(db, "SELECT * FROM generations WHERE session_id = ? ORDER BY sequence_number", [id])
        case .telemetryCounts:
            let rows = try Row.fetchAll(db, sql: "SELECT event, count(*) FROM telemetry GROUP BY event ORDER BY event")
            return .object(rows.map { .init($0[0], .integer($0[1])) })
        case .configuration(let id):
            let configuration = try one(db, "SELECT * FROM configuration WHERE id = ?", [id])
            guard case .object(var fields) = configuration else { return .null }
            fields.append(.init("analytics", try one(db, "SELECT * FROM analytics_config WHERE configuration_id = ?", [id])))
            fields.append(.init("storage", try one(db, "SELECT * FROM storage_config WHERE configuration_id = ?", [id])))
            fields.append(.init("routing_policies", try many(
                db, "SELECT * FROM routing_policies WHERE configuration_id = ? ORDER BY priority DESC, name", [id])))
            return .object(fields)
        }
    }

    private func one(_ db: Database, _ sql: String, _ arguments: StatementArguments) throws -> StoreValue {
        try Row.fetchOne(db.cachedStatement(sql: sql), arguments: arguments).map(StoreValue.init) ?? .null
    }

    private func many(_ db: Database, _ sql: String, _ arguments: StatementArguments) throws -> StoreValue {
        .array(try Row.fetchAll(db.cachedStatement(sql: sql), arguments: arguments).map(StoreValue.init))
    }

    private func ids(_ db: Database, _ sql: String, _ arguments: StatementArguments = []) throws -> StoreValue {
        .array(try DatabaseValue.fetchAll(db.cachedStatement(sql: sql), arguments: arguments).map(StoreValue.init))
    }
}
