import PostgresWire

/// Which result columns hold seconds since 1970 on PostgreSQL: a
/// RowDescription names each column's table (its OID) and attribute
/// number, or 0 for an expression; the catalog maps the tables of opsh's
/// schema that the session's names reach (`pg_table_is_visible`) to them
/// once, and the schema's declared meanings (``DeclaredTimeColumns``) say
/// which attributes are times. Read again after a statement changes the
/// schema (a table made again has a new OID).
struct PostgresTimeColumns {
    /// `oid << 16 | attribute number` of each time column.
    private let keys: Set<Int64>

    static let none = PostgresTimeColumns(keys: [])

    private static func key(_ table: Int64, _ attribute: Int64) -> Int64 { table << 16 | (attribute & 0xFFFF) }

    static func load(on connection: PostgresConnection) throws -> PostgresTimeColumns {
        // The names are the schema's own constants, not data.
        let tables = DeclaredTimeColumns.tables.sorted().map { "'\($0)'" }.joined(separator: ", ")
        guard !tables.isEmpty else { return .none }
        let result = try connection.query("""
            SELECT a.attrelid::bigint, a.attnum::bigint, c.relname::text, a.attname::text
            FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
            WHERE c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
              AND lower(c.relname) IN (\(tables)) AND pg_catalog.pg_table_is_visible(c.oid)
            """)
        var keys = Set<Int64>()
        for row in result.rows {
            guard case let .integer(table) = row[0], case let .integer(attribute) = row[1],
                  case let .text(tableName) = row[2], case let .text(column) = row[3],
                  DeclaredTimeColumns.contains(table: tableName, column: column) else { continue }
            keys.insert(key(table, attribute))
        }
        return PostgresTimeColumns(keys: keys)
    }

    /// Per column of `layout`: whether it is a declared time column, read
    /// directly or under an alias (an expression, an aggregate's included,
    /// has no table).
    func dates(of layout: PostgresRowLayout) -> [Bool] {
        layout.columns.map { column in
            column.tableOID != 0 && keys.contains(Self.key(Int64(column.tableOID), Int64(column.attributeNumber)))
        }
    }
}

extension PostgresDatabase {
    /// The session's ``PostgresTimeColumns``, read at the first statement
    /// that needs them and after a schema change. Its errors are the ones
    /// the statement would meet first: a lost connection, a write sent
    /// earlier that failed (`db.send`: the connection runs the queue
    /// before any call).
    func timeColumns() throws -> PostgresTimeColumns {
        if let known = knownTimeColumns { return known }
        try reconnectIfLost()
        let loaded = try PostgresTimeColumns.load(on: connection)
        knownTimeColumns = loaded
        return loaded
    }
}
