import GRDB

/// Which rows a repository's `list` and `count` return: filters on
/// columns, an order, and a page.
///
/// Column names are checked against the table, so a typo is an error
/// naming the known columns instead of an empty result; values are always
/// bound as SQL arguments, never spliced into the SQL.
public struct ListRequest: Sendable, Equatable {
    public var filters: [ColumnFilter]
    public var order: [ColumnOrder]
    public var limit: Int?
    public var offset: Int?

    public init(filters: [ColumnFilter] = [], order: [ColumnOrder] = [], limit: Int? = nil, offset: Int? = nil) {
        self.filters = filters
        self.order = order
        self.limit = limit
        self.offset = offset
    }
}

/// A condition on one column.
public struct ColumnFilter: Sendable, Equatable {
    public enum Operator: String, Sendable, CaseIterable {
        case equal = "=", notEqual = "<>", less = "<", lessOrEqual = "<=",
             greater = ">", greaterOrEqual = ">=", like = "LIKE", `in` = "IN"
        case isNull = "IS NULL", isNotNull = "IS NOT NULL"
    }

    public var column: String
    public var op: Operator
    /// One value, or several for `.in`.
    public var values: [DatabaseValue]

    public init(_ column: String, _ op: Operator = .equal, _ values: [DatabaseValue]) {
        self.column = column
        self.op = op
        self.values = values
    }

    public init(_ column: String, _ op: Operator = .equal, _ value: some DatabaseValueConvertible) {
        self.init(column, op, [value.databaseValue])
    }
}

/// One ordering term.
public struct ColumnOrder: Sendable, Equatable {
    public var column: String
    public var descending: Bool

    public init(_ column: String, descending: Bool = false) {
        self.column = column
        self.descending = descending
    }

    /// Parses `"createdAt"`, `"createdAt desc"`, `"-createdAt"`.
    public init?(parsing text: String) {
        let words = text.split(separator: " ", omittingEmptySubsequences: true)
        guard let first = words.first, words.count <= 2 else { return nil }
        if words.count == 2 {
            switch words[1].lowercased() {
            case "asc": descending = false
            case "desc": descending = true
            default: return nil
            }
            column = String(first)
        } else if first.hasPrefix("-") {
            column = String(first.dropFirst())
            descending = true
        } else {
            column = String(first)
            descending = false
        }
        if column.isEmpty { return nil }
    }
}

/// SQL identifier quoting: "name" with inner quotes doubled.
func quoteIdentifier(_ name: String) -> String {
    // Foundation's replacingOccurrences costs microseconds: an import
    // quotes names for every row.
    guard name.utf8.contains(UInt8(ascii: "\"")) else { return "\"" + name + "\"" }
    return "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\""
}

extension ListRequest {
    /// The WHERE clause and its arguments; columns checked against `table`.
    func whereClause(table: String, columns: [String]) throws -> (sql: String, arguments: StatementArguments) {
        let (sql, values) = try whereParts(table: table, columns: columns)
        return (sql, StatementArguments(values))
    }

    func tail(table: String, columns: [String]) throws -> (sql: String, arguments: StatementArguments) {
        let (sql, values) = try tailParts(table: table, columns: columns)
        return (sql, StatementArguments(values))
    }

    /// `SELECT * FROM table WHERE … ORDER BY … LIMIT …` (or `SELECT
    /// count(*)` when `counting`) with its arguments in order: for callers
    /// that run it on a statement cache of their own (the Lua bindings),
    /// in either engine's `dialect` (`textColumns`: the columns that hold
    /// text, which PostgreSQL orders by their bytes as SQLite does).
    /// Unknown columns are refused as ``RecordRepository/list(_:_:)`` does.
    /// - parameter source: what the statement reads FROM, when not the
    ///   table's quoted name (a schema-qualified name: the audit trail's).
    public func selectSQL(table: String, columns: [String], counting: Bool = false, dialect: SQLDialect = .sqlite,
                          textColumns: Set<String> = [], source: String? = nil) throws -> (sql: String, arguments: [StoreValue]) {
        let from = source ?? dialect.quote(table)
        let (whereSQL, whereValues) = try whereParts(table: table, columns: columns, dialect: dialect)
        if counting { return ("SELECT count(*) FROM " + from + whereSQL, whereValues.map(StoreValue.init)) }
        let (tailSQL, tailValues) = try tailParts(table: table, columns: columns, dialect: dialect, textColumns: textColumns)
        return ("SELECT * FROM " + from + whereSQL + tailSQL, (whereValues + tailValues).map(StoreValue.init))
    }

    private func whereParts(table: String, columns: [String], dialect: SQLDialect = .sqlite) throws -> (sql: String, arguments: [DatabaseValue]) {
        var terms: [String] = []
        var arguments: [DatabaseValue] = []
        for filter in filters {
            try checkColumn(filter.column, table: table, columns: columns)
            let column = dialect.quote(filter.column)
            switch filter.op {
            case .isNull, .isNotNull:
                terms.append("\(column) \(filter.op.rawValue)")
            case .in:
                if filter.values.isEmpty {
                    terms.append(dialect.never)
                } else {
                    terms.append("\(column) IN (\(Array(repeating: "?", count: filter.values.count).joined(separator: ", ")))")
                    arguments += filter.values
                }
            default:
                guard filter.values.count == 1 else {
                    throw StoreError.invalidValue(table: table, column: filter.column,
                                                  reason: "the \(filter.op.rawValue) filter takes one value, got \(filter.values.count)")
                }
                if filter.values[0].isNull {
                    // `= NULL` is never true in SQL; say what is meant.
                    terms.append(filter.op == .notEqual ? "\(column) IS NOT NULL" : "\(column) IS NULL")
                } else {
                    terms.append("\(column) \(filter.op == .like ? dialect.like : filter.op.rawValue) ?")
                    arguments.append(filter.values[0])
                }
            }
        }
        return (terms.isEmpty ? "" : " WHERE " + terms.joined(separator: " AND "), arguments)
    }

    /// The ORDER BY / LIMIT / OFFSET tail.
    private func tailParts(table: String, columns: [String], dialect: SQLDialect = .sqlite,
                           textColumns: Set<String> = []) throws -> (sql: String, arguments: [DatabaseValue]) {
        var sql = ""
        var arguments: [DatabaseValue] = []
        if !order.isEmpty {
            for term in order { try checkColumn(term.column, table: table, columns: columns) }
            sql += " ORDER BY " + order.map {
                dialect.orderTerm($0.column, descending: $0.descending, isText: textColumns.contains($0.column))
            }.joined(separator: ", ")
        }
        if let limit {
            sql += " LIMIT ?"
            arguments.append(limit.databaseValue)
        }
        if let offset {
            if limit == nil { sql += dialect.noLimit }
            sql += " OFFSET ?"
            arguments.append(offset.databaseValue)
        }
        return (sql, arguments)
    }

    /// Refuses a filter's value that is none of its column's allowed words
    /// (a status, a level), with the words a write would refuse it with:
    /// a typo (`status = "faild"`) would otherwise match nothing.
    public func checkAllowedValues(_ allowed: [String: [String]], table: String) throws {
        for filter in filters where [.equal, .notEqual, .in].contains(filter.op) {
            guard let words = allowed[filter.column] else { continue }
            for value in filter.values where !value.isNull {
                let text = String.fromDatabaseValue(value)
                if text.map({ !words.contains($0) }) ?? true {
                    throw StoreError.invalidValue(table: table, column: filter.column,
                                                  reason: "\(text.map { "'\($0)'" } ?? value.description) is not one of \(words.joined(separator: ", "))")
                }
            }
        }
    }

    private func checkColumn(_ column: String, table: String, columns: [String]) throws {
        if !columns.contains(column) {
            throw StoreError.unknownColumn(table: table, column: column, known: columns)
        }
    }
}
