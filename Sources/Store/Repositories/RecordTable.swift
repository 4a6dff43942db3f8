import GRDB
import Foundation

/// A field a caller gave that a table refuses (a required field missing,
/// the key changed by an update): the caller names its argument
/// (`bad argument #1 to 'insert' (missing field 'name' …)`).
public struct FieldError: Error, CustomStringConvertible, Sendable {
    public let message: String
    public var description: String { message }
}

/// One table's rules for rows that callers write field by field (the Lua
/// repositories' `insert`, `update`, `upsert`, `delete`): what a new row
/// gets when a field is left out, what an update may not change, and the
/// references checked with a message naming the missing row. One cached
/// statement per write; the caller reads the row back on its own fast
/// path (ARCHITECTURE.md, "One data path").
///
/// Every method takes the ``RepositoryConnection`` of the caller's
/// atomic write or read — SQLite's ``StoreDatabase`` from
/// ``SessionDatabase/write(_:_:)`` or ``SessionDatabase/read(_:_:)``, or a
/// ``PostgresDatabase`` inside ``PostgresDatabase/write(_:_:)`` — so that
/// a call's statements are atomic and see the session's transaction, and
/// the rules are the same on both engines.
public struct RecordTable<Record: StoreRecord> {
    public let records: RecordRepository<Record>
    /// Text primary keys that `insert` generates when absent.
    public var generatedKey = false
    /// Fills fields from others before defaults (`displayName` = `name`).
    public var derive: @Sendable (inout [String: StoreValue]) -> Void = { _ in } {
        didSet { derives = true }
    }
    /// Whether a ``derive`` was set (``RecordWritePlans/plannedInsert(_:given:spec:dialect:layout:derives:generatedKey:)``
    /// leaves such a table's inserts to the general path).
    public private(set) var derives = false

    public static var dateColumnsSetOnInsert: Set<String> { recordDateColumnsSetOnInsert }
    public static var dateColumnsSetOnUpdate: Set<String> { recordDateColumnsSetOnUpdate }
    static var dateColumnsOrderedOnUpdate: [String] { recordDateColumnsOrderedOnUpdate }

    public init(_ records: RecordRepository<Record>) {
        self.records = records
    }

    public var table: String { records.tableName }
    public var keyColumn: String { Record.primaryKeyColumns[0] }

    /// The table's columns as the schema has them now.
    public func spec(_ database: some RepositoryConnection) throws -> TableSpec {
        try database.tableSpec(table, primaryKey: keyColumn, jsonColumns: Record.jsonColumns, booleans: [])
    }

    // MARK: Rows out

    /// A record as a row object, its columns in `columns`' order.
    public func row(_ record: Record, columns: [String]) throws -> StoreValue {
        let values = try record.databaseDictionary
        return .object(columns.map { StoreValue.Field($0, StoreValue(values[$0] ?? .null)) })
    }

    /// Records as rows, in the table's column order now.
    public func rows(_ found: [Record], _ database: StoreDatabase) throws -> [StoreValue] {
        let columns = try spec(database).names
        return try found.map { try row($0, columns: columns) }
    }

    // MARK: Writes

    /// The fields of a new row, with what the caller left out filled in:
    /// a generated key, the creation dates = now, the schema's defaults.
    /// Throws ``FieldError`` naming a required field left out, and
    /// refuses a reference to a missing row.
    public func newRowFields(_ database: some RepositoryConnection, _ given: [String: StoreValue],
                             spec: TableSpec) throws -> [String: StoreValue] {
        let fields = try insertedFields(database, given, spec: spec, evaluatingDefaults: true)
        try spec.checkReferences(database, fields)
        return fields
    }

    /// ``newRowFields(_:_:spec:)`` without its check of the references:
    /// with `evaluatingDefaults` false, a column the caller left out that
    /// has a DEFAULT is left out of the INSERT (the engine gives it its
    /// default, without a `SELECT` each) unless it is the key, which the
    /// caller gets back.
    func insertedFields(_ database: some RepositoryConnection, _ given: [String: StoreValue],
                        spec: TableSpec, evaluatingDefaults: Bool) throws -> [String: StoreValue] {
        var fields = given
        derive(&fields)
        let now = Date().timeIntervalSince1970
        var missing: [String] = []
        for column in spec.columns where fields[column.name] == nil {
            if column.isPrimaryKey {
                if column.kind == .integer { continue }  // the rowid
                if generatedKey { fields[column.name] = .text(makeIdentifier()); continue }
            }
            if Self.dateColumnsSetOnInsert.contains(column.name) {
                fields[column.name] = .real(now)
            } else if let sql = column.defaultSQL {
                guard evaluatingDefaults || column.isPrimaryKey else { continue }
                fields[column.name] = try database.value("SELECT \(sql)") ?? .null
            } else if column.notNull {
                missing.append(column.name)
            }
        }
        if let first = missing.first {
            let required = spec.columns.filter { $0.notNull && $0.defaultSQL == nil && !Self.dateColumnsSetOnInsert.contains($0.name)
                && !($0.isPrimaryKey && (generatedKey || $0.kind == .integer)) }.map(\.name)
            throw FieldError(message: "missing field '\(first)' (\(table) needs: \(required.joined(separator: ", ")))")
        }
        return fields
    }

    /// Inserts a new row with one cached INSERT, its only write (so a
    /// caller may run it without a savepoint,
    /// ``DatabaseSession/writeOneStatement(table:_:)``); invalid JSON is
    /// named once the engine refused it. The rows it refers to must exist
    /// in the same statement (`WHERE EXISTS`), and only when one is
    /// missing are they read, to name it: a foreign key left to refuse the
    /// row would leave it counted on PostgreSQL, past a transaction's
    /// `maxChanges`. Returns its key (the rowid where the key is the
    /// table's integer primary key).
    public func insert(_ database: some RepositoryConnection, _ fields: [String: StoreValue], spec: TableSpec) throws -> StoreValue {
        let complete = try insertedFields(database, fields, spec: spec, evaluatingDefaults: false)
        let references = spec.references(in: complete)
        if !references.isEmpty, let key = complete[keyColumn], key != .null {
            if try records.insertColumns(database, complete, columns: spec.names, whereReferenced: references) { return key }
            // Nothing written: a referenced row is missing (named here), or
            // it appeared since (another process's commit): written then.
        }
        try spec.checkReferences(database, complete)
        let rowid = try records.insertColumns(database, complete, columns: spec.names)
        return complete[keyColumn] ?? rowid.map(StoreValue.integer) ?? .null
    }

    /// The columns an update writes: `fields` without the key (which
    /// cannot change: ``FieldError``), and `updated_at` = now where the
    /// table has one.
    public func changedColumns(key: StoreValue, fields: [String: StoreValue], spec: TableSpec) throws -> [String: StoreValue] {
        var changes = fields
        if let newKey = changes[keyColumn] {
            guard newKey == key else {
                throw FieldError(message: "field '\(keyColumn)' is the key of \(table) and cannot be changed by update")
            }
            changes[keyColumn] = nil
        }
        // The two date names looked up, not every column hashed.
        for name in recordDateColumnsOrderedOnUpdate where changes[name] == nil && spec.columns.contains(where: { $0.name == name }) {
            changes[name] = .real(Date().timeIntervalSince1970)
        }
        return changes
    }

    /// Changes `fields` of the row with `key` with one cached UPDATE, its
    /// only write (the rows it refers to must exist in the same statement,
    /// read only to name the missing one; JSON named once the engine
    /// refused it, as ``insert(_:_:spec:)``'s);
    /// ``StoreError/notFound(table:key:)`` when there is no such row.
    public func update(_ database: some RepositoryConnection, key: StoreValue, fields: [String: StoreValue], spec: TableSpec) throws {
        let changes = try changedColumns(key: key, fields: fields, spec: spec)
        let references = spec.references(in: changes)
        if try records.updateColumns(database, key, changes: changes, columns: spec.names, whereReferenced: references) { return }
        guard !references.isEmpty else { throw StoreError.notFound(table: table, key: TableSpec.show(key)) }
        // No row changed: a referenced row is missing (named here), else
        // there is no row with this key, or the referenced row appeared
        // since (another process's commit) and the row changes now.
        try spec.checkReferences(database, changes)
        guard try records.updateColumns(database, key, changes: changes, columns: spec.names) else {
            throw StoreError.notFound(table: table, key: TableSpec.show(key))
        }
    }

    /// Updates the row whose key `fields` gives when there is one, else
    /// inserts; returns the row's key.
    public func upsert(_ database: some RepositoryConnection, _ fields: [String: StoreValue], spec: TableSpec) throws -> StoreValue {
        if let key = fields[keyColumn], try exists(database, key) {
            try update(database, key: key, fields: fields, spec: spec)
            return key
        }
        return try insert(database, fields, spec: spec)
    }

    /// Whether a row has this key.
    public func exists(_ database: some RepositoryConnection, _ key: StoreValue) throws -> Bool {
        let dialect = database.dialect
        return try database.exists("SELECT 1 FROM \(dialect.quote(table)) WHERE \(dialect.quote(keyColumn)) = ?", [key])
    }

    /// Deletes the row with this key: true when a row went.
    public func delete(_ database: some RepositoryConnection, _ key: StoreValue) throws -> Bool {
        try records.delete(database, key)
    }
}

/// ``RecordTable``'s date columns, made once (a generic type has no
/// stored statics; a set literal per call showed in the profile).
private let recordDateColumnsSetOnInsert: Set<String> = ["createdAt", "created_at", "updated_at", "updatedAt"]
private let recordDateColumnsSetOnUpdate: Set<String> = Set(recordDateColumnsOrderedOnUpdate)
private let recordDateColumnsOrderedOnUpdate = ["updated_at", "updatedAt"]
