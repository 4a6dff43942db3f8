import Foundation
import PostgresWire

// The repositories on PostgreSQL: how their rules (``RecordTable``,
// ``RecordRepository``, the repositories' cascades, build numbers and
// totals, written once over ``RepositoryConnection``) run on this engine.
// This file is PostgreSQL's one place for that, as ``StoreDatabase`` is
// SQLite's.

extension PostgresDatabase: RepositoryConnection {
    public var dialect: SQLDialect { .postgresql }

    // Store's own statements (fixed texts): not checked as a script's
    // are (``ownStatements(_:)``).

    public func fetch(_ sql: String, _ arguments: [StoreValue]) throws -> (columns: [String], rows: [[StoreValue]]) {
        let result = try ownStatements { try execute(sql, .positional(arguments)) }
        return (result.columns, result.rows)
    }

    public func execute(_ sql: String, _ arguments: [StoreValue]) throws -> Int {
        try ownStatements { try execute(sql, .positional(arguments)).changes ?? 0 }
    }

    /// The INSERT with `RETURNING` the key: the identity column's value
    /// where the table has one (`telemetry.id`), as SQLite's rowid.
    public func insert(_ sql: String, _ arguments: [StoreValue], keyColumn: String) throws -> Int64? {
        let result = try ownStatements { try execute(sql + " RETURNING " + dialect.quote(keyColumn), .positional(arguments)) }
        if case let .integer(key)? = result.rows.first?.first { return key }
        return nil
    }

    /// The table's columns from the catalog, named as the schema spells
    /// them (``PostgresNames``): type, NOT NULL, the DEFAULT expression
    /// (evaluated with `SELECT <default>` as SQLite's are; a text literal's
    /// `::text` cast dropped, so `'[]'` reads as on SQLite), the primary key
    /// and the single-column foreign keys. Read once per session and table
    /// (``forgetTableSpecs()`` after a schema change).
    public func tableSpec(_ table: String, primaryKey: String, jsonColumns: [String], booleans: Set<String>) throws -> TableSpec {
        if let known = tableSpecs[table] { return known }
        return try ownStatements { try readTableSpec(table, primaryKey: primaryKey, jsonColumns: jsonColumns, booleans: booleans) }
    }

    private func readTableSpec(_ table: String, primaryKey: String, jsonColumns: [String], booleans: Set<String>) throws -> TableSpec {
        // opsh's tables by their schema's name: a TEMP table of the name
        // is not theirs (PostgresHomeSchema).
        let relation = homeSchema.map { $0.qualified(table.lowercased()) } ?? table.lowercased()
        let columns = try execute("""
            SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, pg_get_expr(d.adbin, d.adrelid)
            FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
            WHERE a.attrelid = to_regclass(?) AND a.attnum > 0 AND NOT a.attisdropped
            ORDER BY a.attnum
            """, .positional([.text(relation)])).rows.map { row -> ColumnSpec in
                let name = PostgresNames.rowKey(Self.text(row[0]))
                return ColumnSpec(name: name, kind: TableSpec.kind(of: name, declared: Self.text(row[1]), jsonColumns: jsonColumns,
                                                                   booleans: booleans),
                                  notNull: row[2] == .integer(1), defaultSQL: Self.defaultSQL(row[3]),
                                  isPrimaryKey: name == primaryKey)
            }
        guard !columns.isEmpty else {
            throw PostgresStoreError.statement("no table \(table) in \(label)")
        }
        let references = try execute("""
            SELECT a.attname, r.relname, fa.attname
            FROM pg_constraint c
            JOIN pg_class r ON r.oid = c.confrelid
            JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
            JOIN pg_attribute fa ON fa.attrelid = c.confrelid AND fa.attnum = c.confkey[1]
            WHERE c.conrelid = to_regclass(?) AND c.contype = 'f' AND cardinality(c.conkey) = 1
            ORDER BY c.conname
            """, .positional([.text(relation)])).rows.map { row in
                (column: PostgresNames.rowKey(Self.text(row[0])), table: PostgresNames.rowKey(Self.text(row[1])),
                 key: PostgresNames.rowKey(Self.text(row[2])))
            }
        let spec = TableSpec(table: table, columns: columns, references: references)
        tableSpecs[table] = spec
        return spec
    }

    /// What `opsh_json_valid`, the JSON columns' CHECK, says of `text`.
    public func isValidJSON(_ text: String) throws -> Bool {
        try ownStatements { try execute("SELECT opsh_json_valid(?)", .positional([.text(text)])).rows.first?.first == .integer(1) }
    }

    /// SQLSTATE class 23, integrity constraint violation.
    public func isConstraintFailure(_ error: any Error) -> Bool {
        (error as? PostgresError)?.code.hasPrefix("23") == true
    }

    private static func text(_ value: StoreValue) -> String {
        if case let .text(text) = value { return text }
        return ""
    }

    /// `'[]'::text` → `'[]'`; other expressions as the catalog has them.
    static func defaultSQL(_ value: StoreValue) -> String? {
        guard case let .text(expression) = value else { return nil }
        if expression.hasPrefix("'"), expression.hasSuffix("'::text") {
            return String(expression.dropLast("::text".count))
        }
        return expression
    }

    // MARK: Atomic calls

    /// Runs one repository call's writes atomically (a transaction, or a
    /// savepoint inside the open one) with the session's rules
    /// (`--read-only`, `--dry-run`); constraint failures say what SQLite's
    /// say (``SessionDatabase/write(_:_:)``), naming `table`.
    public func write<T>(_ table: String, _ body: (PostgresDatabase) throws -> T) throws -> T {
        try naming(table) { try transaction { try body(self) } }
    }

    /// Runs one repository call whose only write is one statement: each
    /// statement under the session's rules as ``execute(_:_:)`` runs it
    /// (alone, or under its savepoint in the open transaction), without
    /// the BEGIN and COMMIT, or SAVEPOINT and RELEASE, of ``write(_:_:)``:
    /// the server makes one statement atomic. Errors named as `write`'s.
    ///
    /// In a counted transaction whose failed statements are not read
    /// exactly (a batch run's, ``startCountingCommits(exactly:)``), a
    /// refused write's rows would stay counted: there the call keeps
    /// ``write(_:_:)``'s savepoint, whose rollback sets them aside.
    public func writeOneStatement<T>(_ table: String, _ body: (PostgresDatabase) throws -> T) throws -> T {
        guard depth == 0 || measure == nil || dryRunning || countsFailedStatementsExactly else {
            return try write(table, body)
        }
        return try naming(table) { try body(self) }
    }

    /// Runs one repository call's reads; errors named as ``write(_:_:)``'s.
    public func read<T>(_ table: String, _ body: (PostgresDatabase) throws -> T) throws -> T {
        try naming(table) { try body(self) }
    }

    private func naming<T>(_ table: String, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as PostgresError {
            guard let reason = Self.describe(error, table: table) else { throw error }
            throw StoreError.refused(reason: reason)
        }
    }

    /// A constraint's failure as the repositories say it on SQLite
    /// (`SessionDatabase.describe`); nil for other errors, which keep
    /// their SQLSTATE (25006 for a write under `--read-only`).
    static func describe(_ error: PostgresError, table: String) -> String? {
        let message = error.message
        switch error.code {
        case "23505":
            return "\(table): a row with the same key exists (\(message))"
        case "23514":
            return "invalid value for \(table): \(message)"
        case "23503":
            return "\(table): \(message) (a row refers to a missing row, or other rows still refer to this one)"
        case "23502":
            return "\(table): \(message)"
        default:
            return nil
        }
    }
}
