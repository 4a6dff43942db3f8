import GRDB

extension QueryKey {
    /// Fetches the key's current value: a row (an object) or `.null` for
    /// single-row keys, an array of ids or rows for list keys.
    public func fetch(_ db: Database) throws -> StoreValue {
        if let statement = try statement() { return try statement.fetch(db) }
        switch self {
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
        default:
            // Every other key is one statement (QueryKey+Statement.swift).
            throw StoreError.invalidValue(table: "", column: "", reason: "query key \(self) has no fetch")
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
