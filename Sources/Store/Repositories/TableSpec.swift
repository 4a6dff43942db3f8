import GRDB

/// What a caller needs to know of one column to turn its own values (a
/// Lua table's fields) into what the table stores.
public struct ColumnSpec: Sendable {
    public enum Kind: Sendable {
        case text, integer, real, boolean, json
    }

    public let name: String
    public let kind: Kind
    public let notNull: Bool
    /// The schema's DEFAULT, as SQL (`'[]'`, `0`, `CURRENT_TIMESTAMP`).
    public let defaultSQL: String?
    public let isPrimaryKey: Bool

    /// What a type error says was expected.
    public var expected: String {
        switch kind {
        case .text: return "string"
        case .integer, .real: return "number"
        case .boolean: return "boolean"
        case .json: return "table or JSON text"
        }
    }
}

/// The columns of a table as the schema has them now, so that a Lua
/// migration that adds a column is seen at once (callers cache it per
/// schema version).
public struct TableSpec: Sendable {
    public let table: String
    public let columns: [ColumnSpec]
    /// Single-column foreign keys: column → (table, column) it refers to.
    let references: [(column: String, table: String, key: String)]

    public var names: [String] { columns.map(\.name) }

    public func column(_ name: String) -> ColumnSpec? {
        columns.first { $0.name == name }
    }

    /// Reads the table's columns: JSON columns and boolean columns as
    /// named, the rest by their declared type's affinity.
    public static func load(_ database: StoreDatabase, table: String, primaryKey: String, jsonColumns: [String],
                            booleans: Set<String> = []) throws -> TableSpec {
        try load(database.db, table: table, primaryKey: primaryKey, jsonColumns: jsonColumns, booleans: booleans)
    }

    static func load(_ db: Database, table: String, primaryKey: String, jsonColumns: [String],
                     booleans: Set<String> = []) throws -> TableSpec {
        let columns = try db.columns(in: table).map { info -> ColumnSpec in
            let declared = info.type.uppercased()
            let kind: ColumnSpec.Kind
            if jsonColumns.contains(info.name) { kind = .json }
            else if booleans.contains(info.name) { kind = .boolean }
            else if declared.contains("INT") { kind = .integer }
            else if declared.contains("REAL") || declared.contains("FLOA") || declared.contains("DOUB") { kind = .real }
            else { kind = .text }
            return ColumnSpec(name: info.name, kind: kind, notNull: info.isNotNull, defaultSQL: info.defaultValueSQL,
                              isPrimaryKey: info.name == primaryKey)
        }
        let references = try db.foreignKeys(on: table).filter { $0.mapping.count == 1 }.map {
            (column: $0.mapping[0].origin, table: $0.destinationTable, key: $0.mapping[0].destination)
        }
        return TableSpec(table: table, columns: columns, references: references)
    }

    /// Refuses values whose foreign key points at nothing, naming the row
    /// that is missing (SQLite only says "FOREIGN KEY constraint failed").
    func checkReferences(_ db: Database, _ fields: [String: StoreValue]) throws {
        for reference in references {
            guard let value = fields[reference.column], value != .null else { continue }
            let exists = try Bool.fetchOne(db.cachedStatement(sql: """
                SELECT EXISTS (SELECT 1 FROM \(reference.table.quotedDatabaseIdentifier) \
                WHERE \(reference.key.quotedDatabaseIdentifier) = ?)
                """), arguments: [value.databaseValue]) ?? false
            if !exists {
                throw StoreError.refused(reason: "no row in \(reference.table) with key \(Self.show(value)) (\(table).\(reference.column) refers to it)")
            }
        }
    }

    /// A key as messages show it: text as it is.
    public static func show(_ value: StoreValue) -> String {
        switch value {
        case .text(let text): return text
        case .integer(let number): return String(number)
        case .real(let number): return String(number)
        case .null: return "NULL"
        default: return "\(value)"
        }
    }
}
