import CSQLiteStore
import PostgresWire

// PostgreSQL's row source (``RowSource/wire(_:_:)``): each DataRow's
// bytes as the connection reads them, with the layout of its result.

extension PostgresDatabase {
    /// Runs one statement as ``execute(_:_:)`` does, lending each row to
    /// `eachRow` in place (valid only during the call). The result has no
    /// rows; its columns name them.
    @discardableResult
    public func execute(_ sql: String, _ arguments: Arguments = .positional([]),
                        rows eachRow: (RowSource) throws -> Void) throws -> Result {
        var last: (PostgresRowLayout, WireLayout)?
        // Read before the statement: nothing else can run on the
        // connection while its rows arrive.
        let timeColumns = try timeColumns()
        return try execute(sql, arguments) { (row: PostgresDataRow) in
            let layout: WireLayout
            if let last, last.0 === row.layout {
                layout = last.1
            } else {
                layout = Self.wireLayout(row.layout, timeColumns: timeColumns)
                last = (row.layout, layout)
            }
            try eachRow(.wire(row.body, layout))
        }
    }

    /// A result's names and kinds, once per row description.
    static func wireLayout(_ layout: PostgresRowLayout, timeColumns: PostgresTimeColumns) -> WireLayout {
        WireLayout(names: rowKeys(layout),
                   kinds: zip(layout.columns, layout.binary).map { kind(type: $0.typeOID, binary: $1) },
                   dates: timeColumns.dates(of: layout))
    }

    /// How `opsh_pg_push_value` reads a column of this type in this format.
    static func kind(type: UInt32, binary: Bool) -> UInt8 {
        let kind: opsh_pg_kind
        if binary {
            switch type {
            case PostgresType.int2: kind = OPSH_PG_BINARY_INT2
            case PostgresType.int4: kind = OPSH_PG_BINARY_INT4
            case PostgresType.oid: kind = OPSH_PG_BINARY_OID
            case PostgresType.int8: kind = OPSH_PG_BINARY_INT8
            case PostgresType.float4: kind = OPSH_PG_BINARY_FLOAT4
            case PostgresType.float8: kind = OPSH_PG_BINARY_FLOAT8
            case PostgresType.bool: kind = OPSH_PG_BINARY_BOOL
            case PostgresType.bytea: kind = OPSH_PG_BINARY_BYTEA
            default: kind = OPSH_PG_TEXT
            }
        } else {
            switch type {
            case PostgresType.int2, PostgresType.int4, PostgresType.int8, PostgresType.oid: kind = OPSH_PG_TEXT_INTEGER
            case PostgresType.float4: kind = OPSH_PG_TEXT_FLOAT4
            case PostgresType.float8: kind = OPSH_PG_TEXT_FLOAT8
            case PostgresType.bool: kind = OPSH_PG_TEXT_BOOL
            case PostgresType.bytea: kind = OPSH_PG_TEXT_BYTEA
            case PostgresType.numeric: kind = OPSH_PG_TEXT_NUMERIC
            default: kind = OPSH_PG_TEXT
            }
        }
        return UInt8(kind.rawValue)
    }
}

extension PostgresDatabase: WireStatements {
    /// A script's statement (``scriptStatements(_:)``): run as written.
    public func run(_ sql: String, _ arguments: SQLArguments, rows: (RowSource) throws -> Void) throws -> StatementOutcome {
        let result = try scriptStatements { try execute(sql, arguments, rows: rows) }
        return StatementOutcome(columns: result.columns, changes: result.changes)
    }

    public func runOwn(_ sql: String, _ arguments: SQLArguments, rows: (RowSource) throws -> Void) throws -> StatementOutcome {
        let result = try ownStatements { try execute(sql, arguments, rows: rows) }
        return StatementOutcome(columns: result.columns, changes: result.changes)
    }

    public func runScript(_ sql: String) throws -> Int {
        try scriptStatements { try executeScript(sql).changes ?? 0 }
    }
}
