import CLuaShim
import Foundation
import GRDB
import LuaRuntime
import Store

/// What the repository modules share: the session's database, the `db`
/// markers and row shapes.
struct RepositoryContext {
    let database: SessionDatabase
    let markers: SQLMarkers
    let rowShapes: RowShapes

    let statements: RepositoryStatements

    init(session: OpshSession) {
        database = session.database
        markers = session.sql.markers
        rowShapes = session.sql.rowShapes
        statements = session.repositoryStatements
    }

    func reader(_ call: LuaCall) -> LuaRowReader {
        LuaRowReader(call: call, markers: markers)
    }

    func pusher(_ call: LuaCall) -> StoreValuePusher {
        StoreValuePusher(rowShapes: rowShapes, state: call.state)
    }

    /// Runs an atomic write; SQLite's terse errors get the table's name.
    func write<T>(_ table: String, _ body: (Database) throws -> T) throws -> T {
        do {
            return try database.write(body)
        } catch let error as DatabaseError {
            throw LuaCallError.message(Self.describe(error, table: table))
        }
    }

    /// What the core refuses (an unknown column) as the repositories say it.
    func storeErrors<T>(_ table: String, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as StoreError {
            throw LuaCallError.message("\(error)")
        }
    }

    func read<T>(_ table: String, _ body: (Database) throws -> T) throws -> T {
        do {
            return try database.read(body)
        } catch let error as DatabaseError {
            throw LuaCallError.message(Self.describe(error, table: table))
        }
    }

    static func describe(_ error: DatabaseError, table: String) -> String {
        let message = error.message ?? "\(error.resultCode)"
        switch error.extendedResultCode {
        case .SQLITE_CONSTRAINT_UNIQUE, .SQLITE_CONSTRAINT_PRIMARYKEY:
            return "\(table): a row with the same key exists (\(message))"
        case .SQLITE_CONSTRAINT_CHECK:
            return "invalid value for \(table): \(message)"
        case .SQLITE_CONSTRAINT_FOREIGNKEY:
            return "\(table): \(message) (a row refers to a missing row, or other rows still refer to this one)"
        default:
            return "\(table): \(message)"
        }
    }
}

/// The standard functions of one table's module (`get`, `list`, `count`,
/// `insert`, `update`, `upsert`, `delete`) over its ``RecordRepository``.
///
/// - Rows are tables keyed by column name, with the `db` module's row
///   metatables; NULL columns are absent; dates are numbers (seconds since
///   1970); JSON columns come back as the stored JSON text.
/// - `insert` fills what the script leaves out: a new id (`generatedKey`),
///   `createdAt`/`created_at`/`updated_at` = now, the schema's defaults.
/// - `update` changes the given fields (and sets `updated_at` to now where
///   the table has one); `upsert` updates the given fields of an existing
///   row, or inserts.
struct RecordTableFunctions<Record: StoreRecord> {
    let context: RepositoryContext
    let records: RecordRepository<Record>
    /// Text primary keys that `insert` generates when absent.
    var generatedKey = false
    /// Columns shown and accepted as booleans.
    var booleans: Set<String> = []
    /// Fills fields from others before defaults (`displayName` = `name`).
    var derive: (inout [String: DatabaseValue]) -> Void = { _ in }

    static var dateColumnsSetOnInsert: Set<String> { ["createdAt", "created_at", "updated_at", "updatedAt"] }
    static var dateColumnsSetOnUpdate: Set<String> { ["updated_at", "updatedAt"] }

    var table: String { records.tableName }

    func spec(_ db: Database) throws -> TableSpec {
        try TableSpec.load(db, table: table, primaryKey: Record.primaryKeyColumns[0],
                           jsonColumns: Record.jsonColumns, booleans: booleans)
    }

    /// The table's columns, read again only after a schema change.
    func cachedSpec() throws -> TableSpec {
        try context.statements.spec(table) { try context.read(table) { db in try spec(db) } }
    }

    /// Rows come back as `db` returns them (stored values; booleans would
    /// need converting), so the `db` module's machinery serves them.
    var readsThroughSQL: Bool { booleans.isEmpty }

    // MARK: Rows out

    func row(_ record: Record, columns: [String]) throws -> StoreValue {
        let values = try record.databaseDictionary
        return .object(columns.map { StoreValue.Field($0, StoreValue(values[$0] ?? .null)) })
    }

    func pushRow(_ record: Record?, columns: [String], call: LuaCall) throws -> Int32 {
        guard let record else { return call.results(nil) }
        context.pusher(call).push(try row(record, columns: columns), asRows: true)
        return 1
    }

    func pushRows(_ records: [Record], columns: [String], call: LuaCall) throws -> Int32 {
        let rows = try records.map { try row($0, columns: columns) }
        context.pusher(call).push(.array(rows), asRows: true, columns: columns)
        return 1
    }

    // MARK: Functions

    var standard: [String: LuaHostFunction] {
        [
            "get": { call in try get(call) },
            "list": { call in try list(call) },
            "count": { call in try count(call) },
            "insert": { call in try insert(call) },
            "update": { call in try update(call) },
            "upsert": { call in try upsert(call) },
            "delete": { call in try delete(call) },
        ]
    }

    func get(_ call: LuaCall) throws -> Int32 {
        if readsThroughSQL {
            let spec = try cachedSpec()
            let key = try context.reader(call).key(argument: 1, spec: spec)
            return try context.statements.row(of: table, keyColumn: Record.primaryKeyColumns[0], key: key, call: call)
        }
        let reader = context.reader(call)
        let (record, columns) = try context.read(table) { db -> (Record?, [String]) in
            let spec = try spec(db)
            return (try records.get(db, try reader.key(argument: 1, spec: spec)), spec.names)
        }
        return try pushRow(record, columns: columns, call: call)
    }

    func list(_ call: LuaCall) throws -> Int32 {
        if readsThroughSQL {
            let tableSpec = try cachedSpec()
            let request = try context.reader(call).listRequest(argument: 1, spec: tableSpec)
            let (sql, arguments) = try context.storeErrors(table) { try request.selectSQL(table: table, columns: tableSpec.names) }
            return try context.statements.run(sql, arguments, shape: .rows, call: call)
        }
        let tableSpec = try context.read(table) { db in try spec(db) }
        let request = try context.reader(call).listRequest(argument: 1, spec: tableSpec)
        let (found, columns) = try context.read(table) { db in
            (try records.list(db, request), try spec(db).names)
        }
        return try pushRows(found, columns: columns, call: call)
    }

    func count(_ call: LuaCall) throws -> Int32 {
        let tableSpec = try cachedSpec()
        if readsThroughSQL {
            let request = try context.reader(call).listRequest(argument: 1, allowed: ["where"], spec: tableSpec)
            let (sql, arguments) = try context.storeErrors(table) { try request.selectSQL(table: table, columns: tableSpec.names, counting: true) }
            return try context.statements.run(sql, arguments, shape: .value, call: call)
        }
        let request = try context.reader(call).listRequest(argument: 1, allowed: ["where"], spec: tableSpec)
        let total = try context.read(table) { db in try records.count(db, request) }
        return call.results(.integer(Int64(total)))
    }

    /// The fields of a new row, with what the script left out filled in.
    func newRowFields(_ db: Database, _ given: [String: DatabaseValue], spec: TableSpec, call: LuaCall,
                      argument: Int32) throws -> [String: DatabaseValue] {
        var fields = given
        derive(&fields)
        let now = Date().timeIntervalSince1970
        var missing: [String] = []
        for column in spec.columns where fields[column.name] == nil {
            if column.isPrimaryKey {
                if column.kind == .integer { continue }  // the rowid
                if generatedKey { fields[column.name] = makeIdentifier().databaseValue; continue }
            }
            if Self.dateColumnsSetOnInsert.contains(column.name) {
                fields[column.name] = now.databaseValue
            } else if let sql = column.defaultSQL {
                fields[column.name] = try DatabaseValue.fetchOne(db.cachedStatement(sql: "SELECT \(sql)")) ?? .null
            } else if column.notNull {
                missing.append(column.name)
            }
        }
        if let first = missing.first {
            let required = spec.columns.filter { $0.notNull && $0.defaultSQL == nil && !Self.dateColumnsSetOnInsert.contains($0.name)
                && !($0.isPrimaryKey && (generatedKey || $0.kind == .integer)) }.map(\.name)
            throw call.argumentError(argument, "missing field '\(first)' (\(table) needs: \(required.joined(separator: ", ")))")
        }
        try spec.checkReferences(db, fields)
        return fields
    }

    func insertRecord(_ db: Database, fields: [String: DatabaseValue], spec: TableSpec, call: LuaCall,
                      argument: Int32) throws -> Record {
        let complete = try newRowFields(db, fields, spec: spec, call: call, argument: argument)
        let record = try records.makeRecord(db, fields: complete)
        return try records.insert(db, record)
    }

    func insert(_ call: LuaCall) throws -> Int32 {
        let reader = context.reader(call)
        guard lua_type(call.state, 1) == LUA_TTABLE else { throw call.typeError(1, expected: "table") }
        if readsThroughSQL {
            // One cached INSERT, then the row as `get` reads it.
            let spec = try cachedSpec()
            let fields = try reader.fields(argument: 1, spec: spec)
            let keyColumn = Record.primaryKeyColumns[0]
            let key = try context.write(table) { db -> DatabaseValue in
                let complete = try newRowFields(db, fields, spec: spec, call: call, argument: 1)
                let rowid = try context.storeErrors(table) { try records.insertColumns(db, complete, columns: spec.names) }
                return complete[keyColumn] ?? rowid.databaseValue
            }
            return try context.statements.row(of: table, keyColumn: keyColumn, key: key, call: call)
        }
        let (record, columns) = try context.write(table) { db -> (Record, [String]) in
            let spec = try spec(db)
            let fields = try reader.fields(argument: 1, spec: spec)
            return (try insertRecord(db, fields: fields, spec: spec, call: call, argument: 1), spec.names)
        }
        return try pushRow(record, columns: columns, call: call)
    }

    /// The columns an update writes: `fields` without the key (which
    /// cannot change), and `updated_at` = now where the table has one.
    func changedColumns(key: DatabaseValue, fields: [String: DatabaseValue], spec: TableSpec,
                        call: LuaCall, argument: Int32) throws -> [String: DatabaseValue] {
        var changes = fields
        let keyColumn = Record.primaryKeyColumns[0]
        if let newKey = changes[keyColumn] {
            guard newKey == key else {
                throw call.argumentError(argument, "field '\(keyColumn)' is the key of \(table) and cannot be changed by update")
            }
            changes[keyColumn] = nil
        }
        for column in spec.columns where Self.dateColumnsSetOnUpdate.contains(column.name) && changes[column.name] == nil {
            changes[column.name] = Date().timeIntervalSince1970.databaseValue
        }
        return changes
    }

    /// Changes `fields` of the row with `key`; the key itself cannot change.
    func updateRecord(_ db: Database, key: DatabaseValue, fields: [String: DatabaseValue], spec: TableSpec,
                      call: LuaCall, argument: Int32) throws -> Record {
        let changes = try changedColumns(key: key, fields: fields, spec: spec, call: call, argument: argument)
        try spec.checkReferences(db, changes)
        guard try records.get(db, key) != nil else {
            throw StoreError.notFound(table: table, key: TableSpec.show(key))
        }
        return try records.update(db, key, changes: changes)
    }

    func update(_ call: LuaCall) throws -> Int32 {
        let reader = context.reader(call)
        guard lua_type(call.state, 2) == LUA_TTABLE else { throw call.typeError(2, expected: "table") }
        if readsThroughSQL {
            // One cached UPDATE, then the row as `get` reads it.
            let spec = try cachedSpec()
            let key = try reader.key(argument: 1, spec: spec)
            let fields = try reader.fields(argument: 2, spec: spec)
            let changes = try changedColumns(key: key, fields: fields, spec: spec, call: call, argument: 2)
            try context.write(table) { db in
                try spec.checkReferences(db, changes)
                guard try context.storeErrors(table, { try records.updateColumns(db, key, changes: changes, columns: spec.names) }) else {
                    throw StoreError.notFound(table: table, key: TableSpec.show(key))
                }
            }
            return try context.statements.row(of: table, keyColumn: Record.primaryKeyColumns[0], key: key, call: call)
        }
        let (record, columns) = try context.write(table) { db -> (Record, [String]) in
            let spec = try spec(db)
            let key = try reader.key(argument: 1, spec: spec)
            let fields = try reader.fields(argument: 2, spec: spec)
            return (try updateRecord(db, key: key, fields: fields, spec: spec, call: call, argument: 2), spec.names)
        }
        return try pushRow(record, columns: columns, call: call)
    }

    func upsert(_ call: LuaCall) throws -> Int32 {
        let reader = context.reader(call)
        guard lua_type(call.state, 1) == LUA_TTABLE else { throw call.typeError(1, expected: "table") }
        let (record, columns) = try context.write(table) { db -> (Record, [String]) in
            let spec = try spec(db)
            let fields = try reader.fields(argument: 1, spec: spec)
            if let key = fields[Record.primaryKeyColumns[0]], try records.get(db, key) != nil {
                return (try updateRecord(db, key: key, fields: fields, spec: spec, call: call, argument: 1), spec.names)
            }
            return (try insertRecord(db, fields: fields, spec: spec, call: call, argument: 1), spec.names)
        }
        return try pushRow(record, columns: columns, call: call)
    }

    /// `delete(id)`: true when a row went, false when there was none.
    func delete(_ call: LuaCall) throws -> Int32 {
        try delete(call, options: []) { db, key, _ in try records.delete(db, key) }
    }

    /// `delete(id [, options])` with the core's own delete.
    func delete(_ call: LuaCall, options: [String],
                _ body: (Database, DatabaseValue, [String: Bool]) throws -> Bool) throws -> Int32 {
        let reader = context.reader(call)
        let flags = try reader.flags(argument: 2, allowed: options)
        let deleted = try context.write(table) { db in
            try body(db, try reader.key(argument: 1, spec: try spec(db)), flags)
        }
        return call.results(.boolean(deleted))
    }
}
