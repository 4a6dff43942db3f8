import GRDB

/// One object of the database file's schema that a transaction made,
/// dropped or changed.
public struct SchemaChange: Sendable, Equatable, CustomStringConvertible {
    public enum Kind: String, Sendable { case created, dropped, altered }
    public let kind: Kind
    /// "table", "index", "view" or "trigger".
    public let type: String
    public let name: String
    /// The table it belongs to (for a table, itself).
    public let table: String

    /// "dropped table telemetry", "created index zi on builds".
    public var description: String {
        "\(kind.rawValue) \(type) \(name)" + (type == "table" || table == name ? "" : " on \(table)")
    }
}

/// The database file's schema at the start of a transaction, to say at its
/// end what it changed: SQLite's schema cookie says whether it did (every
/// schema change writes it: `CSQLiteStore/opsh_sql_guard.h`), the
/// `sqlite_master` rows then and now say what. TEMP objects are the
/// connection's own and vanish with it: not counted.
struct SchemaSnapshot {
    private let version: Int
    private let objects: [String: Object]

    private struct Object: Equatable {
        let type: String
        let table: String
        let sql: String?
    }

    private static func read(_ db: Database) throws -> [String: Object] {
        var objects: [String: Object] = [:]
        for row in try Row.fetchAll(db, sql: "SELECT type, name, tbl_name, sql FROM main.sqlite_master") {
            let name: String = row["name"]
            objects[name] = Object(type: row["type"], table: row["tbl_name"], sql: row["sql"])
        }
        return objects
    }

    private static func version(_ db: Database) throws -> Int {
        try Int.fetchOne(db, sql: "PRAGMA main.schema_version") ?? 0
    }

    /// The schema as `db`'s open transaction sees it.
    static func take(_ db: Database) throws -> SchemaSnapshot {
        SchemaSnapshot(version: try version(db), objects: try read(db))
    }

    /// What `db`'s transaction changed since: nothing unless the schema
    /// cookie moved. A table renamed shows as dropped under its old name
    /// and created under its new one.
    func changes(now db: Database) throws -> [SchemaChange] {
        guard try Self.version(db) != version else { return [] }
        let now = try Self.read(db)
        var changes: [SchemaChange] = []
        for (name, object) in objects.sorted(by: { $0.key < $1.key }) {
            guard let current = now[name] else {
                changes.append(SchemaChange(kind: .dropped, type: object.type, name: name, table: object.table))
                continue
            }
            if current != object {
                changes.append(SchemaChange(kind: .altered, type: current.type, name: name, table: current.table))
            }
        }
        for (name, object) in now.sorted(by: { $0.key < $1.key }) where objects[name] == nil {
            changes.append(SchemaChange(kind: .created, type: object.type, name: name, table: object.table))
        }
        // Tables first; an index or trigger dropped with its table goes
        // without saying.
        let droppedTables = Set(changes.filter { $0.kind == .dropped && $0.type == "table" }.map(\.name))
        return changes.filter { $0.type == "table" }
            + changes.filter { $0.type != "table" && !($0.kind == .dropped && droppedTables.contains($0.table)) }
    }
}
