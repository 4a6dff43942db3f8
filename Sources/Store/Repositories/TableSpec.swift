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

    public init(name: String, kind: Kind, notNull: Bool, defaultSQL: String?, isPrimaryKey: Bool) {
        self.name = name
        self.kind = kind
        self.notNull = notNull
        self.defaultSQL = defaultSQL
        self.isPrimaryKey = isPrimaryKey
    }

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
/// schema version). A class of constants: a repository call hands it on
/// several times, each copy one reference where the struct's were four.
public final class TableSpec: Sendable {
    public let table: String
    public let columns: [ColumnSpec]
    /// A single-column foreign key: `column` refers to `table`'s `key`.
    public typealias Reference = (column: String, table: String, key: String)

    /// Single-column foreign keys: column → (table, column) it refers to.
    let references: [Reference]
    /// The columns' names, in schema order: made once, not per write (a
    /// repository call reads them several times).
    public let names: [String]

    /// An engine's reading of a table (``RepositoryConnection/tableSpec(_:primaryKey:jsonColumns:booleans:)``).
    public init(table: String, columns: [ColumnSpec], references: [(column: String, table: String, key: String)]) {
        self.table = table
        self.columns = columns
        self.references = references
        names = columns.map(\.name)
    }

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
            ColumnSpec(name: info.name, kind: kind(of: info.name, declared: info.type, jsonColumns: jsonColumns, booleans: booleans),
                       notNull: info.isNotNull, defaultSQL: info.defaultValueSQL, isPrimaryKey: info.name == primaryKey)
        }
        let references = try db.foreignKeys(on: table).filter { $0.mapping.count == 1 }.map {
            (column: $0.mapping[0].origin, table: $0.destinationTable, key: $0.mapping[0].destination)
        }
        return TableSpec(table: table, columns: columns, references: references)
    }

    /// A column's kind: JSON columns and boolean columns as named, the
    /// rest by their declared type's affinity (SQLite's rules, which read
    /// PostgreSQL's `bigint` and `double precision` the same way).
    public static func kind(of name: String, declared type: String, jsonColumns: [String], booleans: Set<String>) -> ColumnSpec.Kind {
        let declared = type.uppercased()
        if jsonColumns.contains(name) { return .json }
        if booleans.contains(name) { return .boolean }
        if declared.contains("INT") { return .integer }
        if declared.contains("REAL") || declared.contains("FLOA") || declared.contains("DOUB") { return .real }
        return .text
    }

    /// The references `fields` gives a value other than NULL: the rows a
    /// write of them needs.
    func references(in fields: [String: StoreValue]) -> [Reference] {
        references.filter { reference in fields[reference.column].map { $0 != .null } ?? false }
    }

    /// Refuses values whose foreign key points at nothing, naming the row
    /// that is missing (SQLite only says "FOREIGN KEY constraint failed").
    func checkReferences(_ database: some RepositoryConnection, _ fields: [String: StoreValue]) throws {
        let dialect = database.dialect
        for reference in references {
            guard let value = fields[reference.column], value != .null else { continue }
            let exists = try database.exists(
                "SELECT 1 FROM \(dialect.quote(reference.table)) WHERE \(dialect.quote(reference.key)) = ?", [value])
            if !exists {
                throw StoreError.refused(reason: "no row in \(reference.table) with key \(Self.show(value)) (\(table).\(reference.column) refers to it)")
            }
        }
    }

    /// The columns that hold text (what PostgreSQL orders by their bytes).
    public var textColumns: Set<String> {
        Set(columns.filter { $0.kind == .text || $0.kind == .json }.map(\.name))
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
