import GRDBSQLite

/// What a column's values mean beyond their SQL type, as the schema
/// declares it (``SchemaColumn/meaning``). The shell shows a number from a
/// column of seconds since 1970 as a date, whatever the result column is
/// called (`createdAt AS latest` is a date, `42 AS endDate` a number):
/// the engine says where a result column comes from (SQLite's column
/// metadata, PostgreSQL's RowDescription), the schema what it holds.
public enum ColumnMeaning: Sendable, Equatable {
    /// A REAL of seconds since 1970 (UTC).
    case secondsSince1970
}

/// The columns the built-in migrations declare as seconds since 1970
/// (``StoreMigrations``), by table; names compared in lower case, as
/// PostgreSQL folds the schema's unquoted identifiers.
public enum DeclaredTimeColumns {
    static let byTable: [String: Set<String>] = {
        var tables: [String: Set<String>] = [:]
        for migration in StoreMigrations.builtIn {
            for step in migration.steps {
                switch step {
                case let .createTable(table):
                    for column in table.columns where column.meaning == .secondsSince1970 {
                        tables[table.name.lowercased(), default: []].insert(column.name.lowercased())
                    }
                case let .addColumn(table, column) where column.meaning == .secondsSince1970:
                    tables[table.lowercased(), default: []].insert(column.name.lowercased())
                default:
                    break
                }
            }
        }
        return tables
    }()

    /// Whether `table.column` of the database holds seconds since 1970.
    public static func contains(table: String, column: String) -> Bool {
        byTable[table.lowercased()]?.contains(column.lowercased()) ?? false
    }

    /// The tables that have such columns (lower case).
    static var tables: Set<String> { Set(byTable.keys) }

    /// Per result column of a prepared SQLite statement: whether it is a
    /// column of the database file declared as seconds since 1970, read
    /// directly or under an alias (SQLite's column metadata: the table and
    /// column an expression that is only a column reference comes from;
    /// none for any other expression, an aggregate's included).
    public static func ofSQLiteStatement(_ statement: OpaquePointer) -> [Bool] {
        let count = sqlite3_column_count(statement)
        guard count > 0 else { return [] }
        return (0..<count).map { index in
            guard let database = sqlite3_column_database_name(statement, index),
                  String(cString: database) == "main",
                  let table = sqlite3_column_table_name(statement, index),
                  let column = sqlite3_column_origin_name(statement, index) else { return false }
            return contains(table: String(cString: table), column: String(cString: column))
        }
    }
}
