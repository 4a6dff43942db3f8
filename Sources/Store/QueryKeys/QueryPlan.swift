import GRDB

/// How a query key's value is made from SQL statements: one statement for
/// most keys, several combined for the aggregates (`project.{id}.detail`,
/// `projects.versionStrings`, `telemetry.counts`, `config.{id}`).
///
/// The plan is the one place a key's SQL lives. Two interpreters run it:
/// ``QueryKey/fetch(_:)`` for Swift callers (through GRDB), and the Lua
/// bindings, which run each statement on the `db` module's machinery and
/// assemble the Lua value from the parts (ARCHITECTURE.md, "One data
/// path").
public indirect enum QueryPlan: Sendable {
    /// One statement's value.
    case statement(QueryStatement)
    /// An object of named parts, in order; nothing when the first part is
    /// nothing (a project's detail without the project).
    case object([Part])
    /// The row of a statement (nothing when there is none) with more
    /// fields after its columns, each a part of its own.
    case extendedRow(QueryStatement, [Part])
    /// Rows of `name` and `value` as one object, `name` → `value`.
    case pairs(QueryStatement)
    /// Rows of `name` and `value` as one object, `name` → the list of its
    /// values, in row order.
    case groups(QueryStatement)

    public struct Part: Sendable {
        public let name: String
        public let plan: QueryPlan
        init(_ name: String, _ plan: QueryPlan) {
            self.name = name
            self.plan = plan
        }
    }
}

extension QueryKey {
    /// How the key's value is made (see ``QueryPlan``), in `dialect`
    /// (ordered alike on both engines: ``statement(dialect:)``).
    public func plan(dialect: SQLDialect) throws -> QueryPlan {
        if let statement = try statement(dialect: dialect) { return .statement(statement) }
        func row(_ sql: String, _ arguments: [DatabaseValue]) -> QueryPlan {
            .statement(.init(sql: sql, arguments: arguments, shape: .row))
        }
        func rows(_ sql: String, _ arguments: [DatabaseValue]) -> QueryPlan {
            .statement(.init(sql: sql, arguments: arguments, shape: .rows))
        }
        func ids(_ sql: String, _ arguments: [DatabaseValue]) -> QueryPlan {
            .statement(.init(sql: sql, arguments: arguments, shape: .ids))
        }
        let order = KeyOrder(dialect: dialect)
        switch self {
        case .projectVersionStrings:
            return .groups(.init(sql: """
                SELECT p.bundleIdentifier AS name, b.versionString AS value
                FROM projects p
                JOIN schemes s ON p.bundleIdentifier = s.projectBundleIdentifier
                JOIN builds b ON s.id = b.schemeId
                GROUP BY p.bundleIdentifier, b.versionString
                ORDER BY \(order.text("p.bundleIdentifier")), \(order.text("b.versionString"))
                """, arguments: [], shape: .rows))
        case .projectDetail(let id):
            return .object([
                .init("project", row("SELECT * FROM projects WHERE bundleIdentifier = ?", [id.databaseValue])),
                .init("schemeIds", ids("""
                    SELECT id FROM schemes WHERE projectBundleIdentifier = ? ORDER BY \(order.schemes)
                    """, [id.databaseValue])),
                .init("recentBuildIds", ids("""
                    SELECT b.id FROM builds b JOIN schemes s ON s.id = b.schemeId
                    WHERE s.projectBundleIdentifier = ? ORDER BY \(order.newestBuilds("b.")) LIMIT 10
                    """, [id.databaseValue])),
            ])
        case .telemetryCounts:
            return .pairs(.init(sql: "SELECT event AS name, count(*) AS value FROM telemetry GROUP BY event ORDER BY \(order.text("event"))",
                                arguments: [], shape: .rows))
        case .configuration(let id):
            return .extendedRow(.init(sql: "SELECT * FROM configuration WHERE id = ?", arguments: [id.databaseValue], shape: .row), [
                .init("analytics", row("SELECT * FROM analytics_config WHERE configuration_id = ?", [id.databaseValue])),
                .init("storage", row("SELECT * FROM storage_config WHERE configuration_id = ?", [id.databaseValue])),
                .init("routing_policies", rows("""
                    SELECT * FROM routing_policies WHERE configuration_id = ? ORDER BY \(order.number("priority", descending: true)), \(order.text("name"))
                    """, [id.databaseValue])),
            ])
        default:
            // statement(dialect:) covers every other key (QueryKey+Statement.swift).
            throw StoreError.invalidValue(table: "", column: "", reason: "query key \(self) has no plan")
        }
    }
}

extension QueryPlan {
    /// Runs the plan on `db` (SQLite's, through GRDB) for a Swift caller.
    func fetch(_ db: Database) throws -> StoreValue {
        try fetch { try $0.fetch(db) }
    }

    /// The plan's value, each statement run by `run` (an engine's own
    /// fetch: GRDB's on SQLite, ``PostgresDatabase/fetch(_:)``), the parts
    /// assembled the same way on every engine.
    public func fetch(running run: (QueryStatement) throws -> StoreValue) throws -> StoreValue {
        switch self {
        case .statement(let statement):
            return try run(statement)
        case .object(let parts):
            var fields: [StoreValue.Field] = []
            for part in parts {
                let value = try part.plan.fetch(running: run)
                if fields.isEmpty, value == .null { return .null }
                fields.append(.init(part.name, value))
            }
            return .object(fields)
        case let .extendedRow(statement, parts):
            guard case .object(var fields) = try run(statement) else { return .null }
            for part in parts { fields.append(.init(part.name, try part.plan.fetch(running: run))) }
            return .object(fields)
        case .pairs(let statement), .groups(let statement):
            var fields: [StoreValue.Field] = []
            for row in try run(statement).arrayValue ?? [] {
                guard let name = row["name"]?.textValue, let value = row["value"] else { continue }
                if case .groups = self {
                    if let last = fields.indices.last, fields[last].name == name, case .array(var values) = fields[last].value {
                        values.append(value)
                        fields[last].value = .array(values)
                    } else {
                        fields.append(.init(name, .array([value])))
                    }
                } else {
                    fields.append(.init(name, value))
                }
            }
            return .object(fields)
        }
    }
}
