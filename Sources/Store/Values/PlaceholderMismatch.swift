import TextCodec

/// Values that do not fit a statement's placeholders, refused in the same
/// words on both engines (issue 24, item 16): a value with no placeholder
/// is never ignored (`db.exec("DELETE FROM side", 5)` deleted every row on
/// PostgreSQL), a placeholder with no value never left NULL. SQLite's
/// `StatementBridge` and PostgreSQL's ``PostgresDatabase`` refuse with it.
public enum PlaceholderMismatch: Error, Equatable, CustomStringConvertible, Sendable {
    /// Values given one by one (`db.exec(sql, a, b)`).
    case count(placeholders: Int, given: Int, hint: String?, sql: String)
    /// A table of parameters with more values by position than the
    /// statement has positional placeholders.
    case tablePositions(placeholders: Int, given: Int, hint: String?, sql: String)
    /// A table of parameters with names no placeholder names.
    case unusedNames([String], sql: String)
    /// A placeholder the table of parameters gives no value for.
    case missing(placeholder: String, sql: String)

    /// PostgreSQL's: a bare `?` is a placeholder there, as psycopg and JDBC
    /// take it (``PostgresPlaceholders``).
    public static let questionMarkHint = "on PostgreSQL ? is a placeholder: write jsonb's ? operator as ??, or use $1…$n placeholders"

    public var description: String {
        switch self {
        case let .count(placeholders, given, hint, sql):
            return "the statement has \(Self.count(placeholders, "placeholder")) but \(Self.count(given, "value")) \(given == 1 ? "was" : "were") given"
                + Self.shown(hint, sql)
        case let .tablePositions(placeholders, given, hint, sql):
            return "the table of parameters gives \(Self.count(given, "value")) by position but the statement has "
                + "\(Self.count(placeholders, "positional placeholder"))" + Self.shown(hint, sql)
        case let .unusedNames(names, sql):
            return "the table of parameters gives \(names.map { "'\(TextBytes.visible($0))'" }.joined(separator: ", ")), "
                + "which no placeholder of the statement names" + Self.shown(nil, sql)
        case let .missing(placeholder, sql):
            return "no value for parameter \(placeholder) in the table of parameters"
                + (placeholder.hasPrefix(":") || placeholder.hasPrefix("@") || placeholder.hasPrefix("$") ? "" : " (write NULL as db.NULL)")
                + Self.shown(nil, sql)
        }
    }

    private static func count(_ number: Int, _ noun: String) -> String {
        "\(number) \(noun)\(number == 1 ? "" : "s")"
    }

    private static func shown(_ hint: String?, _ sql: String) -> String {
        (hint.map { " (\($0))" } ?? "") + ": " + TextBytes.visibleSQL(sql)
    }
}
