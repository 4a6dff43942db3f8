import Foundation
import GRDB

/// Aggregations over the analytics tables (ARCHITECTURE.md) and the builds, as
/// rows: each result is an array of ``StoreValue`` objects whose fields
/// are in the order of ``Analytics/Report/columns`` (what the shell prints
/// as a table and `chart` draws).
///
/// Dates are seconds since 1970 UTC; days are UTC (`YYYY-MM-DD`). Sums of
/// costs are rounded to 6 decimals and averages to 2, so that printed
/// figures do not show floating-point noise.
public enum Analytics {
    /// Rows of one aggregation, with their columns (also for no rows).
    public struct Report: Sendable, Hashable {
        public var columns: [String]
        public var rows: [StoreValue]
    }

    /// A half-open time range `[since, until)`; nil ends are open.
    public struct Period: Sendable, Hashable {
        public var since: Double?
        public var until: Double?
        public init(since: Double? = nil, until: Double? = nil) {
            self.since = since
            self.until = until
        }

        /// `column >= ? AND column < ?` for the ends that are set.
        func conditions(_ column: String) -> (sql: [String], arguments: [StoreValue]) {
            var sql: [String] = []
            var arguments: [StoreValue] = []
            if let since {
                sql.append("\(column) >= ?")
                arguments.append(.real(since))
            }
            if let until {
                sql.append("\(column) < ?")
                arguments.append(.real(until))
            }
            return (sql, arguments)
        }
    }

    /// Per model, from generations (dated by the generation): sessions,
    /// generations, prompt, completion and total tokens, cost, average and
    /// maximum latency. Most tokens first.
    public static func models(_ db: some RepositoryConnection, period: Period = Period()) throws -> Report {
        let (conditions, arguments) = period.conditions("g.created_at")
        let sql = SQL(db.dialect)
        return try report(db, sql: """
            SELECT s.model_id AS model,
                   coalesce(m.name, s.model_id) AS name,
                   count(DISTINCT s.id) AS sessions,
                   count(*) AS generations,
                   \(sql.sum("g.prompt_tokens")) AS prompt_tokens,
                   \(sql.sum("g.completion_tokens")) AS completion_tokens,
                   \(sql.sum("g.prompt_tokens + g.completion_tokens")) AS tokens,
                   \(sql.round("sum(g.cost)", 6)) AS cost,
                   \(sql.round("avg(g.latency_ms)", 2)) AS avg_latency_ms,
                   max(g.latency_ms) AS max_latency_ms
            FROM generations g
            JOIN generation_sessions s ON s.id = g.session_id
            LEFT JOIN model_metadata m ON m.id = s.model_id
            \(whereClause(conditions))
            GROUP BY s.model_id, m.name
            ORDER BY tokens DESC, \(sql.text("s.model_id"))
            """, arguments: arguments)
    }

    /// Per UTC day, from generations: generations, tokens, cost, average
    /// latency; one model's, or all models' together. Oldest day first.
    public static func daily(_ db: some RepositoryConnection, model: String? = nil, period: Period = Period()) throws -> Report {
        var (conditions, arguments) = period.conditions("g.created_at")
        if let model {
            conditions.append("s.model_id = ?")
            arguments.append(.text(model))
        }
        let sql = SQL(db.dialect)
        return try report(db, sql: """
            SELECT \(sql.day("g.created_at")) AS day,
                   count(*) AS generations,
                   \(sql.sum("g.prompt_tokens + g.completion_tokens")) AS tokens,
                   \(sql.round("sum(g.cost)", 6)) AS cost,
                   \(sql.round("avg(g.latency_ms)", 2)) AS avg_latency_ms
            FROM generations g
            JOIN generation_sessions s ON s.id = g.session_id
            \(whereClause(conditions))
            GROUP BY day
            ORDER BY day
            """, arguments: arguments)
    }

    /// Per model, from the daily usage statistics (`model_usage_stats`):
    /// days with use, generations, tokens, cost, average latency, errors
    /// and error rate (percent of generations). Most generations first.
    /// `period` selects days (a day is in when its start is).
    public static func usage(_ db: some RepositoryConnection, model: String? = nil, period: Period = Period()) throws -> Report {
        let sql = SQL(db.dialect)
        var conditions: [String] = []
        var arguments: [StoreValue] = []
        if let since = period.since {
            conditions.append("u.day >= \(sql.day("?"))")
            arguments.append(.real(since))
        }
        if let until = period.until {
            conditions.append("u.day < \(sql.day("?"))")
            arguments.append(.real(until))
        }
        if let model {
            conditions.append("u.model_id = ?")
            arguments.append(.text(model))
        }
        return try report(db, sql: """
            SELECT u.model_id AS model,
                   coalesce(m.name, u.model_id) AS name,
                   count(*) AS days,
                   \(sql.sum("u.generation_count")) AS generations,
                   \(sql.sum("u.total_tokens")) AS tokens,
                   \(sql.round("sum(u.total_cost)", 6)) AS cost,
                   \(sql.round("sum(u.total_latency_ms) / nullif(sum(u.generation_count), 0)", 2)) AS avg_latency_ms,
                   \(sql.sum("u.error_count")) AS errors,
                   \(sql.round("100.0 * sum(u.error_count) / nullif(sum(u.generation_count), 0)", 2)) AS error_rate
            FROM model_usage_stats u
            LEFT JOIN model_metadata m ON m.id = u.model_id
            \(whereClause(conditions))
            GROUP BY u.model_id, m.name
            ORDER BY generations DESC, \(sql.text("u.model_id"))
            """, arguments: arguments)
    }

    /// Per scheme, from builds created in `period`: builds, succeeded,
    /// failed, cancelled, the success rate (percent of the builds that
    /// finished as succeeded or failed; nil when none did), and the
    /// average and longest duration in seconds of finished builds. By
    /// project and scheme name.
    public static func builds(_ db: some RepositoryConnection, period: Period = Period()) throws -> Report {
        let (conditions, arguments) = period.conditions("b.createdAt")
        let sql = SQL(db.dialect)
        return try report(db, sql: """
            SELECT sc.id AS scheme,
                   sc.projectBundleIdentifier AS project,
                   sc.name AS name,
                   count(*) AS builds,
                   \(sql.count("b.status = 'succeeded'")) AS succeeded,
                   \(sql.count("b.status = 'failed'")) AS failed,
                   \(sql.count("b.status = 'cancelled'")) AS cancelled,
                   \(sql.round("100.0 * \(sql.count("b.status = 'succeeded'")) / nullif(\(sql.count("b.status IN ('succeeded', 'failed')")), 0)", 2)) AS success_rate,
                   \(sql.round("avg(CASE WHEN b.status IN ('succeeded', 'failed') THEN b.endDate - b.startDate END)", 2))
                       AS avg_duration_s,
                   max(CASE WHEN b.status IN ('succeeded', 'failed') THEN b.endDate - b.startDate END)
                       AS max_duration_s
            FROM builds b
            JOIN schemes sc ON sc.id = b.schemeId
            \(whereClause(conditions))
            GROUP BY sc.id
            ORDER BY \(sql.text("sc.projectBundleIdentifier")), \(sql.text("sc.name"))
            """, arguments: arguments)
    }

    private static func whereClause(_ conditions: [String]) -> String {
        conditions.isEmpty ? "" : "WHERE " + conditions.joined(separator: " AND ")
    }

    private static func report(_ db: some RepositoryConnection, sql: String, arguments: [StoreValue]) throws -> Report {
        let (columns, rows) = try db.fetch(sql, arguments)
        return Report(columns: columns, rows: rows.map { values in
            .object(zip(columns, values).map { StoreValue.Field($0, $1) })
        })
    }

    /// What the aggregations spell differently on each engine, so that
    /// both return the same values of the same types: integer sums as
    /// integers (PostgreSQL's `sum(bigint)` is numeric), rounded figures as
    /// doubles (its `round` takes numeric), UTC days, counts of a condition,
    /// and text ordered by its bytes as SQLite orders it.
    struct SQL {
        let dialect: SQLDialect
        init(_ dialect: SQLDialect) { self.dialect = dialect }

        func sum(_ expression: String) -> String {
            dialect == .sqlite ? "sum(\(expression))" : "sum(\(expression))::bigint"
        }

        func round(_ expression: String, _ digits: Int) -> String {
            dialect == .sqlite ? "round(\(expression), \(digits))"
                : "round((\(expression))::numeric, \(digits))::double precision"
        }

        /// `YYYY-MM-DD` of a date in seconds since 1970, in UTC.
        func day(_ seconds: String) -> String {
            dialect == .sqlite ? "date(\(seconds), 'unixepoch')"
                : "to_char(to_timestamp(\(seconds)::double precision) AT TIME ZONE 'UTC', 'YYYY-MM-DD')"
        }

        /// How many rows of the group meet `condition`.
        func count(_ condition: String) -> String {
            dialect == .sqlite ? "sum(\(condition))" : "count(*) FILTER (WHERE \(condition))"
        }

        /// A text column in ORDER BY, sorted by bytes.
        func text(_ column: String) -> String {
            dialect == .sqlite ? column : "\(column) COLLATE \"C\""
        }
    }
}

extension Store {
    /// Runs an aggregation of ``Analytics`` on a reader.
    public func analytics(_ body: @escaping @Sendable (StoreDatabase) throws -> Analytics.Report) throws -> Analytics.Report {
        try writer.read { db in try body(StoreDatabase(db)) }
    }
}
