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
    func columns(_ db: Database) throws -> [String] {
        try db.columns(in: Record.databaseTableName).map(\.name)
    }

    /// The row with this primary key, or nil.
    func get(_ db: Database, _ key: some DatabaseValueConvertible) throws -> Record? {
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
    func list(_ db: Database, _ request: ListRequest = ListRequest()) throws -> [Record] {
        let columns = try columns(db)
        try request.checkAllowedValues(Record.allowedValues, table: tableName)
        let (whereSQL, whereArguments) = try request.whereClause(table: tableName, columns: columns)
        let (tailSQL, tailArguments) = try request.tail(table: tableName, columns: columns)
        return try Record.fetchAll(
            db, sql: "SELECT * FROM \(quoteIdentifier(tableName))\(whereSQL)\(tailSQL)",
            arguments: whereArguments + tailArguments)
    }

    /// How many rows match the filters of `request` (order and page ignored).
    public func count(_ db: Database, _ request: ListRequest = ListRequest()) throws -> Int {
        try request.checkAllowedValues(Record.allowedValues, table: tableName)
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
    /// ``makeRecord(_:fields:)`` refuses them, and the engine's constraints
    /// check the rest. With `references`, the row changes only where every
    /// row they name exists (`AND EXISTS`, in the same statement): false
    /// then also when one is missing. Returns whether there was such a row.
    public func updateColumns(_ database: some RepositoryConnection, _ key: StoreValue, changes: [String: StoreValue],
                              columns: [String], whereReferenced references: [TableSpec.Reference] = []) throws -> Bool {
        try validate(changes, columns: columns)
        try refuseNULInJSON(changes)
        let dialect = database.dialect
        let names = changes.keys.sorted()
        guard !names.isEmpty else {
            return try database.exists(
                "SELECT 1 FROM \(dialect.quote(tableName)) WHERE \(dialect.quote(Record.primaryKeyColumns[0])) = ?", [key])
        }
        let sql = RecordWriteTexts.shared.text(.init(table: tableName, dialect: dialect, isUpdate: true, columns: names,
                                                     references: references.map(\.column))) {
            let assignments = names.map { dialect.quote($0) + " = ?" }.joined(separator: ", ")
            return "UPDATE \(dialect.quote(tableName)) SET \(assignments) WHERE \(dialect.quote(Record.primaryKeyColumns[0])) = ?"
                + Self.existing(references, dialect, joinedBy: " AND ")
        }
        var arguments = names.map { changes[$0]! }
        arguments.append(key)
        for reference in references { arguments.append(changes[reference.column]!) }
        do {
            return try database.execute(sql, arguments) > 0
        } catch {
            throw explanation(of: error, database, changes)
        }
    }

    /// Inserts a row of column values with one cached INSERT (columns the
    /// table does not have and words outside the allowed values refused);
    /// returns the integer key the database gave it (SQLite's rowid).
    @discardableResult
    public func insertColumns(_ database: some RepositoryConnection, _ fields: [String: StoreValue],
                              columns: [String]) throws -> Int64? {
        try validate(fields, columns: columns)
        try refuseNULInJSON(fields)
        let dialect = database.dialect
        let names = fields.keys.sorted()
        let sql = RecordWriteTexts.shared.text(.init(table: tableName, dialect: dialect, isUpdate: false, columns: names,
                                                     references: [])) {
            "INSERT INTO \(dialect.quote(tableName)) (\(names.map(dialect.quote).joined(separator: ", "))) "
                + "VALUES (\(Array(repeating: "?", count: names.count).joined(separator: ", ")))"
        }
        do {
            return try database.insert(sql, names.map { fields[$0]! }, keyColumn: Record.primaryKeyColumns[0])
        } catch {
            throw explanation(of: error, database, fields)
        }
    }

    /// ``insertColumns(_:_:columns:)`` for a row whose key the caller
    /// knows, written only where every row `references` names exists, in
    /// the same statement (`INSERT … SELECT … WHERE EXISTS`): a reference
    /// read first was one more statement per call, on PostgreSQL one more
    /// round trip (BENCHMARKS.md, "The domain layer against hand-written
    /// SQL"), and a foreign key left to refuse the row would leave it
    /// counted on PostgreSQL. Returns false, having written nothing, when
    /// a referenced row is missing.
    public func insertColumns(_ database: some RepositoryConnection, _ fields: [String: StoreValue], columns: [String],
                              whereReferenced references: [TableSpec.Reference]) throws -> Bool {
        try validate(fields, columns: columns)
        try refuseNULInJSON(fields)
        let dialect = database.dialect
        let names = fields.keys.sorted()
        let sql = RecordWriteTexts.shared.text(.init(table: tableName, dialect: dialect, isUpdate: false, columns: names,
                                                     references: references.map(\.column))) {
            "INSERT INTO \(dialect.quote(tableName)) (\(names.map(dialect.quote).joined(separator: ", "))) "
                + "SELECT \(Array(repeating: "?", count: names.count).joined(separator: ", "))"
                + Self.existing(references, dialect, joinedBy: " WHERE ")
        }
        var arguments = names.map { fields[$0]! }
        for reference in references { arguments.append(fields[reference.column]!) }
        do {
            return try database.execute(sql, arguments) > 0
        } catch {
            throw explanation(of: error, database, fields)
        }
    }

    /// ` WHERE EXISTS (SELECT 1 FROM r WHERE k = ?) AND EXISTS (…)`, the
    /// first term after `lead`; empty without references.
    private static func existing(_ references: [TableSpec.Reference], _ dialect: SQLDialect, joinedBy lead: String) -> String {
        guard !references.isEmpty else { return "" }
        return lead + references.map {
            "EXISTS (SELECT 1 FROM \(dialect.quote($0.table)) WHERE \(dialect.quote($0.key)) = ?)"
        }.joined(separator: " AND ")
    }

    /// Why the engine refused a write, in the repositories' words. A JSON
    /// column's CHECK is what refuses invalid JSON: nothing is read before
    /// the write to check it (a statement per call, on PostgreSQL a round
    /// trip; BENCHMARKS.md, "The domain layer against hand-written SQL").
    /// Only after a constraint failure is the text looked at; else the
    /// engine's own error stands.
    func explanation(of error: any Error, _ database: some RepositoryConnection, _ fields: [String: StoreValue]) -> any Error {
        guard database.isConstraintFailure(error) else { return error }
        do {
            try validateJSON(database, fields)
        } catch let finding as StoreError {
            return finding
        } catch {
            // The reason could not be read: the engine's own error stands.
        }
        return error
    }

    /// Text with a NUL byte is never JSON, though SQLite's `json_valid`
    /// (the column's CHECK there) stops reading at it: refused before the
    /// write, from the text alone, as ``JSONText`` refuses it.
    private func refuseNULInJSON(_ fields: [String: StoreValue]) throws {
        for column in Record.jsonColumns {
            guard case .text(let text)? = fields[column], text.utf8.contains(0) else { continue }
            throw StoreError.invalidValue(table: tableName, column: column, reason: "not valid JSON: \(Record.excerpt(text))")
        }
    }

    /// Invalid JSON in a JSON column, named as the engine's CHECK
    /// constraint would not name it (as a record's `willSave`).
    private func validateJSON(_ database: some RepositoryConnection, _ fields: [String: StoreValue]) throws {
        for column in Record.jsonColumns {
            guard let value = fields[column], case .text(let text) = value else { continue }
            if try !database.isValidJSON(text) {
                throw StoreError.invalidValue(table: tableName, column: column, reason: "not valid JSON: \(Record.excerpt(text))")
            }
        }
    }

    /// Unknown columns, and words that are none of a column's allowed ones.
    func validate(_ fields: [String: StoreValue], columns: [String]) throws {
        // Sorted only to name the first unknown one: the names are known.
        if !fields.keys.allSatisfy(columns.contains) {
            for column in fields.keys.sorted() where !columns.contains(column) {
                throw StoreError.unknownColumn(table: tableName, column: column, known: columns)
            }
        }
        for (column, allowed) in Record.allowedValues {
            guard let value = fields[column]?.databaseValue, !value.isNull else { continue }
            let text = String.fromDatabaseValue(value)
            if text.map({ !allowed.contains($0) }) ?? true {
                throw StoreError.invalidValue(table: tableName, column: column,
                                              reason: "\(text.map { "'\($0)'" } ?? value.description) is not one of \(allowed.joined(separator: ", "))")
            }
        }
    }

    /// Inserts, or updates the row with the same key.
    @discardableResult
    func upsert(_ db: Database, _ record: Record) throws -> Record {
        var record = record
        try record.upsert(db)
        return record
    }

    /// Deletes the row with this key; returns whether there was one.
    @discardableResult
    func delete(_ db: Database, _ key: some DatabaseValueConvertible) throws -> Bool {
        try delete(StoreDatabase(db), StoreValue(key.databaseValue))
    }

    /// Deletes the row with this key; returns whether there was one.
    @discardableResult
    public func delete(_ database: some RepositoryConnection, _ key: StoreValue) throws -> Bool {
        let dialect = database.dialect
        return try database.execute("DELETE FROM \(dialect.quote(tableName)) WHERE \(dialect.quote(Record.primaryKeyColumns[0])) = ?",
                                    [key]) > 0
    }

    /// Deletes the row with `key` and, with `cascade`, the rows of
    /// `children` that point at it (their own children go by the schema's
    /// ON DELETE CASCADE); without it a row that has children is refused,
    /// naming how many. Returns whether there was such a row.
    public func delete(_ database: some RepositoryConnection, _ key: String, children: (table: String, column: String, noun: String),
                       owner: String, cascade: Bool) throws -> Bool {
        let dialect = database.dialect
        let table = dialect.quote(children.table)
        let column = dialect.quote(children.column)
        let count = try database.integer("SELECT count(*) FROM \(table) WHERE \(column) = ?", [.text(key)]) ?? 0
        if count > 0 {
            guard cascade else {
                throw StoreError.refused(reason: "\(owner) \(key) has \(count) \(children.noun)(s); delete them first or pass cascade = true")
            }
            try database.execute("DELETE FROM \(table) WHERE \(column) = ?", [.text(key)])
        }
        return try delete(database, .text(key))
    }

    /// Builds a record from column values (a Lua row, an imported JSON
    /// object), refusing columns the table does not have.
    func makeRecord(_ db: Database, fields: [String: DatabaseValue]) throws -> Record {
        try makeRecord(fields: fields, columns: try columns(db))
    }

    /// ``makeRecord(_:fields:)`` with the table's columns already known:
    /// no statement runs, so it serves any engine (an import's checks).
    public func makeRecord(fields: [String: DatabaseValue], columns: [String]) throws -> Record {
        try validate(fields.mapValues(StoreValue.init), columns: columns)
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
