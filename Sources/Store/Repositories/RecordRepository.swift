import GRDB

/// The operations every table's repository has: get, list with filters,
/// order and paging, insert, update, upsert, delete, count.
///
/// Methods take the `Database` of the caller's transaction (GRDB-style), so
/// that several operations compose atomically:
///
/// ```swift
/// try store.client.write { db in
///     let project = try store.projects.insert(db, project)
///     try store.schemes.insert(db, SchemeRecord(projectBundleIdentifier: project.bundleIdentifier, name: "App"))
/// }
/// ```
public struct RecordRepository<Record: StoreRecord>: Sendable {
    public init() {}

    public var tableName: String { Record.databaseTableName }

    /// The table's columns, in schema order.
    public func columns(_ db: Database) throws -> [String] {
        try db.columns(in: Record.databaseTableName).map(\.name)
    }

    /// The row with this primary key, or nil.
    public func get(_ db: Database, _ key: some DatabaseValueConvertible) throws -> Record? {
        try Record.fetchOne(db, sql: "SELECT * FROM \(quoteIdentifier(tableName)) WHERE \(primaryKeyColumn) = ?",
                            arguments: [key])
    }

    /// The row with this primary key, or a ``StoreError/notFound(table:key:)``.
    public func require(_ db: Database, _ key: some DatabaseValueConvertible) throws -> Record {
        guard let record = try get(db, key) else {
            throw StoreError.notFound(table: tableName, key: "\(key.databaseValue)")
        }
        return record
    }

    /// The rows matching `request`.
    public func list(_ db: Database, _ request: ListRequest = ListRequest()) throws -> [Record] {
        let columns = try columns(db)
        let (whereSQL, whereArguments) = try request.whereClause(table: tableName, columns: columns)
        let (tailSQL, tailArguments) = try request.tail(table: tableName, columns: columns)
        return try Record.fetchAll(
            db, sql: "SELECT * FROM \(quoteIdentifier(tableName))\(whereSQL)\(tailSQL)",
            arguments: whereArguments + tailArguments)
    }

    /// How many rows match the filters of `request` (order and page ignored).
    public func count(_ db: Database, _ request: ListRequest = ListRequest()) throws -> Int {
        let (whereSQL, arguments) = try request.whereClause(table: tableName, columns: try columns(db))
        return try Int.fetchOne(db, sql: "SELECT count(*) FROM \(quoteIdentifier(tableName))\(whereSQL)",
                                arguments: arguments) ?? 0
    }

    /// Inserts a new row; fails if its key exists. Returns the record as
    /// stored (with its rowid for auto-incremented keys).
    @discardableResult
    public func insert(_ db: Database, _ record: Record) throws -> Record {
        var record = record
        try record.insert(db)
        return record
    }

    /// Replaces the row with the record's key; fails if there is none.
    public func update(_ db: Database, _ record: Record) throws {
        do {
            try record.update(db)
        } catch RecordError.recordNotFound(_, let key) {
            throw StoreError.notFound(table: tableName, key: "\(key.values.map(\.description).joined(separator: ", "))")
        }
    }

    /// Changes some columns of the row with this key, and returns the row
    /// as stored. Unknown columns and values the record type does not
    /// accept (a bad status, invalid JSON) are refused.
    @discardableResult
    public func update(_ db: Database, _ key: some DatabaseValueConvertible,
                       changes: [String: DatabaseValue]) throws -> Record {
        guard let row = try Row.fetchOne(
            db, sql: "SELECT * FROM \(quoteIdentifier(tableName)) WHERE \(primaryKeyColumn) = ?", arguments: [key])
        else {
            throw StoreError.notFound(table: tableName, key: "\(key.databaseValue)")
        }
        let columns = try columns(db)
        var fields = Dictionary(uniqueKeysWithValues: row.columnNames.map { ($0, row[$0] as DatabaseValue) })
        for (column, value) in changes {
            guard columns.contains(column) else {
                throw StoreError.unknownColumn(table: tableName, column: column, known: columns)
            }
            fields[column] = value
        }
        let record = try makeRecord(db, fields: fields)
        try record.update(db)
        return record
    }

    /// Changes the `changes` columns of the row with `key` with one cached
    /// UPDATE, without reading the row first: the columns the table does
    /// not have and words outside a column's allowed values are refused as
    /// ``makeRecord(_:fields:)`` refuses them, and SQLite's constraints
    /// check the rest. Returns whether there was such a row.
    public func updateColumns(_ db: Database, _ key: DatabaseValue, changes: [String: DatabaseValue],
                              columns: [String]) throws -> Bool {
        try validate(changes, columns: columns)
        try validateJSON(db, changes)
        let names = changes.keys.sorted()
        guard !names.isEmpty else {
            return try Bool.fetchOne(db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM \(quoteIdentifier(tableName)) WHERE \(primaryKeyColumn) = ?)"),
                                     arguments: [key]) ?? false
        }
        let assignments = names.map { quoteIdentifier($0) + " = ?" }.joined(separator: ", ")
        let statement = try db.cachedStatement(sql: "UPDATE \(quoteIdentifier(tableName)) SET \(assignments) WHERE \(primaryKeyColumn) = ?")
        try statement.execute(arguments: StatementArguments(names.map { changes[$0]! } + [key]))
        return db.changesCount > 0
    }

    /// Inserts a row of column values with one cached INSERT (columns the
    /// table does not have and words outside the allowed values refused);
    /// returns its rowid.
    @discardableResult
    public func insertColumns(_ db: Database, _ fields: [String: DatabaseValue], columns: [String]) throws -> Int64 {
        try validate(fields, columns: columns)
        try validateJSON(db, fields)
        let names = fields.keys.sorted()
        let statement = try db.cachedStatement(sql: """
            INSERT INTO \(quoteIdentifier(tableName)) (\(names.map(quoteIdentifier).joined(separator: ", "))) \
            VALUES (\(Array(repeating: "?", count: names.count).joined(separator: ", ")))
            """)
        try statement.execute(arguments: StatementArguments(names.map { fields[$0]! }))
        return db.lastInsertedRowID
    }

    /// Invalid JSON in a JSON column, named before SQLite's CHECK
    /// constraint would refuse it more tersely (as a record's `willSave`).
    private func validateJSON(_ db: Database, _ fields: [String: DatabaseValue]) throws {
        for column in Record.jsonColumns {
            guard let value = fields[column], case .string(let text) = value.storage else { continue }
            if try !JSONText.isValid(text, in: db) {
                throw StoreError.invalidValue(table: tableName, column: column, reason: "not valid JSON: \(Record.excerpt(text))")
            }
        }
    }

    /// Unknown columns, and words that are none of a column's allowed ones.
    private func validate(_ fields: [String: DatabaseValue], columns: [String]) throws {
        for column in fields.keys.sorted() where !columns.contains(column) {
            throw StoreError.unknownColumn(table: tableName, column: column, known: columns)
        }
        for (column, allowed) in Record.allowedValues {
            guard let value = fields[column], !value.isNull else { continue }
            let text = String.fromDatabaseValue(value)
            if text.map({ !allowed.contains($0) }) ?? true {
                throw StoreError.invalidValue(table: tableName, column: column,
                                              reason: "\(text.map { "'\($0)'" } ?? value.description) is not one of \(allowed.joined(separator: ", "))")
            }
        }
    }

    /// Inserts, or updates the row with the same key.
    @discardableResult
    public func upsert(_ db: Database, _ record: Record) throws -> Record {
        var record = record
        try record.upsert(db)
        return record
    }

    /// Deletes the row with this key; returns whether there was one.
    @discardableResult
    public func delete(_ db: Database, _ key: some DatabaseValueConvertible) throws -> Bool {
        try db.execute(sql: "DELETE FROM \(quoteIdentifier(tableName)) WHERE \(primaryKeyColumn) = ?", arguments: [key])
        return db.changesCount > 0
    }

    /// Builds a record from column values (a Lua row, an imported JSON
    /// object), refusing columns the table does not have.
    public func makeRecord(_ db: Database, fields: [String: DatabaseValue]) throws -> Record {
        try validate(fields, columns: try columns(db))
        let row = Row(fields)
        do {
            return try Record(row: row)
        } catch {
            throw StoreError.invalidValue(table: tableName, column: Self.column(of: error) ?? "?",
                                          reason: Self.reason(of: error))
        }
    }

    private var primaryKeyColumn: String {
        quoteIdentifier(Record.primaryKeyColumns[0])
    }

    /// The column a GRDB decoding error is about, from its description
    /// (`column: "status"`), since the error type is not public.
    static func column(of error: any Error) -> String? {
        let text = "\(error)"
        guard let range = text.range(of: "column: \"") else { return nil }
        let rest = text[range.upperBound...]
        return rest.firstIndex(of: "\"").map { String(rest[..<$0]) }
    }

    static func reason(of error: any Error) -> String {
        let text = "\(error)"
        if text.contains("could not decode") || text.contains("decoding") {
            if let range = text.range(of: "could not decode") {
                return String(text[range.lowerBound...]).components(separatedBy: " - ").first ?? text
            }
        }
        return text
    }
}
