import CLuaShim
import Foundation
import LuaRuntime
import Store

/// What the repository modules share: the session's database, the `db`
/// markers and row shapes, and the statements that read rows back.
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

    /// Runs one call's writes atomically in Store; its errors name `table`.
    func write<T>(_ table: String, _ body: (StoreDatabase) throws -> T) throws -> T {
        try database.write(table, body)
    }

    /// Runs one call's reads on one snapshot in Store; its errors name `table`.
    func read<T>(_ table: String, _ body: (StoreDatabase) throws -> T) throws -> T {
        try database.read(table, body)
    }
}

extension LuaCall {
    /// What Store refuses of a field, as an error of argument `argument`.
    func naming<T>(argument: Int32, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as FieldError {
            throw argumentError(argument, error.message)
        }
    }
}

/// The standard functions of one table's module (`get`, `list`, `count`,
/// `insert`, `update`, `upsert`, `delete`) over Store's ``RecordTable``.
///
/// - Rows are tables keyed by column name, with the `db` module's row
///   metatables; NULL columns are absent; dates are numbers (seconds since
///   1970); JSON columns come back as the stored JSON text.
/// - `insert` fills what the script leaves out (Store's rules: a new id,
///   `createdAt`/`created_at`/`updated_at` = now, the schema's defaults).
/// - `update` changes the given fields (and sets `updated_at` to now where
///   the table has one); `upsert` updates the given fields of an existing
///   row, or inserts.
///
/// Every function reads the Lua arguments into ``StoreValue``s, lets Store
/// write, and reads the row back as `db.first` would (ARCHITECTURE.md,
/// "One data path").
struct RecordTableFunctions<Record: StoreRecord> {
    let context: RepositoryContext
    var table: RecordTable<Record>

    init(context: RepositoryContext, records: RecordRepository<Record>) {
        self.context = context
        self.table = RecordTable(records)
    }

    var name: String { table.table }

    /// The table's columns, read again only after a schema change.
    func cachedSpec() throws -> TableSpec {
        try context.statements.spec(name) { try context.read(name) { db in try table.spec(db) } }
    }

    // MARK: Rows out

    func pushRow(_ row: StoreValue?, call: LuaCall) -> Int32 {
        guard let row else { return call.results(nil) }
        context.pusher(call).push(row, asRows: true)
        return 1
    }

    func pushRows(_ rows: [StoreValue], columns: [String], call: LuaCall) -> Int32 {
        context.pusher(call).push(.array(rows), asRows: true, columns: columns)
        return 1
    }

    /// Records a repository operation returned, as rows in column order.
    func pushRecords(_ read: (StoreDatabase) throws -> [Record], call: LuaCall) throws -> Int32 {
        let columns = try cachedSpec().names
        let rows = try context.read(name) { db in try read(db).map { try table.row($0, columns: columns) } }
        return pushRows(rows, columns: columns, call: call)
    }

    /// The row with `key`, read back as `get` reads it.
    func pushRow(key: StoreValue, call: LuaCall) throws -> Int32 {
        try context.statements.row(of: name, keyColumn: table.keyColumn, key: key, call: call)
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
        let key = try context.reader(call).key(argument: 1, spec: try cachedSpec())
        return try pushRow(key: key, call: call)
    }

    func list(_ call: LuaCall) throws -> Int32 {
        let spec = try cachedSpec()
        let request = try context.reader(call).listRequest(argument: 1, spec: spec)
        let (sql, arguments) = try request.selectSQL(table: name, columns: spec.names)
        return try context.statements.run(sql, arguments, shape: .rows, call: call)
    }

    func count(_ call: LuaCall) throws -> Int32 {
        let spec = try cachedSpec()
        let request = try context.reader(call).listRequest(argument: 1, allowed: ["where"], spec: spec)
        let (sql, arguments) = try request.selectSQL(table: name, columns: spec.names, counting: true)
        return try context.statements.run(sql, arguments, shape: .value, call: call)
    }

    /// One cached INSERT, then the row as `get` reads it.
    func insert(_ call: LuaCall) throws -> Int32 {
        guard lua_type(call.state, 1) == LUA_TTABLE else { throw call.typeError(1, expected: "table") }
        let spec = try cachedSpec()
        let fields = try context.reader(call).fields(argument: 1, spec: spec)
        let key = try call.naming(argument: 1) {
            try context.write(name) { db in try table.insert(db, fields, spec: spec) }
        }
        return try pushRow(key: key, call: call)
    }

    /// One cached UPDATE, then the row as `get` reads it.
    func update(_ call: LuaCall) throws -> Int32 {
        guard lua_type(call.state, 2) == LUA_TTABLE else { throw call.typeError(2, expected: "table") }
        let spec = try cachedSpec()
        let reader = context.reader(call)
        let key = try reader.key(argument: 1, spec: spec)
        let fields = try reader.fields(argument: 2, spec: spec)
        try call.naming(argument: 2) {
            try context.write(name) { db in try table.update(db, key: key, fields: fields, spec: spec) }
        }
        return try pushRow(key: key, call: call)
    }

    func upsert(_ call: LuaCall) throws -> Int32 {
        guard lua_type(call.state, 1) == LUA_TTABLE else { throw call.typeError(1, expected: "table") }
        let spec = try cachedSpec()
        let fields = try context.reader(call).fields(argument: 1, spec: spec)
        let key = try call.naming(argument: 1) {
            try context.write(name) { db in try table.upsert(db, fields, spec: spec) }
        }
        return try pushRow(key: key, call: call)
    }

    /// `delete(id)`: true when a row went, false when there was none.
    func delete(_ call: LuaCall) throws -> Int32 {
        try delete(call, options: []) { db, key, _ in try table.delete(db, key) }
    }

    /// `delete(id [, options])` with the core's own delete.
    func delete(_ call: LuaCall, options: [String],
                _ body: (StoreDatabase, StoreValue, [String: Bool]) throws -> Bool) throws -> Int32 {
        let reader = context.reader(call)
        let flags = try reader.flags(argument: 2, allowed: options)
        let key = try reader.key(argument: 1, spec: try cachedSpec())
        let deleted = try context.write(name) { db in try body(db, key, flags) }
        return call.results(.boolean(deleted))
    }
}
