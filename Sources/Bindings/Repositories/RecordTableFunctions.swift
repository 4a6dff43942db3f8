import CLuaShim
import CSQLBridge
import Foundation
import LuaRuntime
import Store

/// What the repository modules need of an engine, so that their Lua
/// functions (``RecordTableFunctions``, ``BuildServerModules``,
/// ``SDKRepositoryModules``) are written once: atomic calls over Store's
/// ``RepositoryConnection`` (on which Store's rules run), the table's
/// columns, and the session's row path (``SessionRepositories``).
protocol RepositoryEngine {
    associatedtype Connection: RepositoryConnection
    var markers: SQLMarkers { get }
    var dialect: SQLDialect { get }
    func pusher(_ call: LuaCall) -> StoreValuePusher
    /// Runs one call's writes atomically in Store; its errors name `table`.
    func write<T>(_ table: String, _ body: (Connection) throws -> T) throws -> T
    /// Runs one call whose only write is one statement, without a
    /// savepoint or transaction of its own (the engine makes a statement
    /// atomic); its errors name `table`. The statement may run on the row
    /// path's C write (``RowPathWriteConnection``), on `call`'s stack: the
    /// call's own arguments must have been read.
    func writeOneStatement<T>(_ table: String, call: LuaCall, _ body: (Connection) throws -> T) throws -> T
    /// Steps a planned write as `db.exec` steps a write in the open
    /// transaction (the row path's C write), and returns the row's key;
    /// nil when that path declined or the write needs Store's words
    /// (``writeOneStatement(_:call:_:)`` then runs it). The call's own
    /// arguments must have been read.
    func writeInOpenTransaction(_ planned: PlannedWrite, call: LuaCall) throws -> StoreValue?
    /// ``writeInOpenTransaction(_:call:)`` for an update whose key is the
    /// call's argument `keyArgument` as Lua holds it (checked by the
    /// caller); when it returns a key, that Lua value is still at
    /// `keyArgument` (the other arguments gone) where the engine keeps it.
    func writeInOpenTransaction(_ planned: PlannedWrite, keyArgument: Int32?, call: LuaCall) throws -> StoreValue?
    /// Whether ``writeInOpenTransaction(_:keyArgument:luaValuesAt:call:)``
    /// may step a write now (SQLite's C write, a transaction open): only
    /// then are a row table's values left as Lua holds them.
    var bindsLuaValues: Bool { get }
    /// ``writeInOpenTransaction(_:keyArgument:call:)`` for a plan with
    /// values the script gave as they are (``PlannedWrite/given``), in
    /// stack slots from `slots` (``LuaRowReader/columnValues(argument:spec:layout:)``);
    /// the call's arguments stay below whatever happens (when it returns
    /// a key too), the slots gone.
    func writeInOpenTransaction(_ planned: PlannedWrite, keyArgument: Int32?, luaValuesAt slots: Int32,
                                call: LuaCall) throws -> StoreValue?
    /// Runs one call's reads (on one snapshot where the engine has them).
    func read<T>(_ table: String, _ body: (Connection) throws -> T) throws -> T
    /// The table's columns as the schema has them now (cached).
    func spec(_ table: String, load: (Connection) throws -> TableSpec) throws -> TableSpec
    /// Runs a read and pushes what `db.first` (`.first`), `db.query`
    /// (`.rows`) or `db.value` (`.value`) would.
    func run(_ sql: String, _ arguments: [StoreValue], shape: ResultShape, call: LuaCall) throws -> Int32
    /// ``run(_:_:shape:call:)`` with one value, the call's argument at
    /// `index` as Lua holds it (checked by the caller to be the value it
    /// binds); nil where the engine has no such path (PostgreSQL's).
    func run(_ sql: String, luaArgumentAt index: Int32, shape: ResultShape, call: LuaCall) throws -> Int32?
    /// ``run(_:_:shape:call:)`` with one value, `key`.
    func run(_ sql: String, key: StoreValue, shape: ResultShape, call: LuaCall) throws -> Int32
    /// Inserts telemetry events in one atomic call (the engine's bulk path).
    func insertTelemetry(_ events: [TelemetryRepository.Event]) throws
    /// The database, as messages and syslog name it.
    var databaseLabel: String { get }
}

extension RepositoryEngine {
    func reader(_ call: LuaCall) -> LuaRowReader {
        LuaRowReader(call: call, markers: markers, dialect: dialect)
    }
}

/// The session's repositories, whatever its engine: Store's rules run on
/// the session's connection (``DatabaseSession/read(table:_:)``,
/// ``DatabaseSession/write(table:_:)``), rows come back through the
/// session's row path (``RowRunner``), each made once, in C.
struct SessionRepositories: RepositoryEngine {
    let database: any DatabaseSession
    let rows: any RowRunner
    let markers: SQLMarkers
    let rowShapes: RowShapes
    /// The row path's C writes, where it has them (SQLite's).
    let writes: RepositoryStatements?

    init(session: OpshSession) {
        database = session.database
        rows = session.rows
        markers = session.markers
        rowShapes = session.rowShapes
        writes = (session.rows as? SQLiteRows)?.statements
    }

    var dialect: SQLDialect { database.dialect }

    func pusher(_ call: LuaCall) -> StoreValuePusher {
        StoreValuePusher(rowShapes: rowShapes, state: call.state)
    }

    func write<T>(_ table: String, _ body: (AnyRepositoryConnection) throws -> T) throws -> T {
        try database.write(table: table) { db in try body(AnyRepositoryConnection(db)) }
    }

    func writeOneStatement<T>(_ table: String, call: LuaCall, _ body: (AnyRepositoryConnection) throws -> T) throws -> T {
        try database.writeOneStatement(table: table) { db in
            guard let writes else { return try body(AnyRepositoryConnection(db)) }
            return try body(AnyRepositoryConnection(RowPathWriteConnection(base: db, statements: writes, call: call)))
        }
    }

    /// Inside the open transaction the session's rules around one
    /// statement (``DatabaseSession/writeOneStatement(table:_:)``) are the
    /// C write's own: it steps only on the transaction's connection, while
    /// SQLite has not ended that transaction, and never while writes are
    /// counted (a dry run, a cap), as for `db.exec`; the transaction's end
    /// tells the read connection that the session wrote. So the layers
    /// around the statement (the session's bookkeeping, the connection
    /// wrapper, the closures naming errors) were a repository write's own
    /// cost beside `db.exec` (issue 27), and run only when C declines or
    /// SQLite refused: then Store runs the statement and says why.
    func writeInOpenTransaction(_ planned: PlannedWrite, call: LuaCall) throws -> StoreValue? {
        try writeInOpenTransaction(planned, keyArgument: nil, call: call)
    }

    func writeInOpenTransaction(_ planned: PlannedWrite, keyArgument: Int32?, call: LuaCall) throws -> StoreValue? {
        guard let writes else { return nil }
        switch writes.write(planned, keyArgument: keyArgument, state: call.state) {
        case let .done(changes, rowid): return planned.key(changes: changes, rowid: rowid)
        case let .failed(message, kept) where kept || call.host.interruptRequested != nil: throw LuaCallError.message(message)
        case .failed, .declined: return nil
        }
    }

    /// What C's write reads first (`opsh_sql_fast_exec`); C still decides.
    var bindsLuaValues: Bool {
        guard let route = writes?.executor.session.route else { return false }
        return route.pointee.transaction != nil && route.pointee.dry_run == 0
    }

    func writeInOpenTransaction(_ planned: PlannedWrite, keyArgument: Int32?, luaValuesAt slots: Int32,
                                call: LuaCall) throws -> StoreValue? {
        guard let writes else { return nil }
        switch writes.write(planned, keyArgument: keyArgument, luaValuesAt: slots, state: call.state) {
        case let .done(changes, rowid): return planned.key(changes: changes, rowid: rowid)
        case let .failed(message, kept) where kept || call.host.interruptRequested != nil: throw LuaCallError.message(message)
        case .failed, .declined: return nil
        }
    }

    func read<T>(_ table: String, _ body: (AnyRepositoryConnection) throws -> T) throws -> T {
        try database.read(table: table) { db in try body(AnyRepositoryConnection(db)) }
    }

    /// Read again only after a schema change.
    func spec(_ table: String, load: (AnyRepositoryConnection) throws -> TableSpec) throws -> TableSpec {
        try rows.spec(table) { try read(table) { db in try load(db) } }
    }

    func run(_ sql: String, _ arguments: [StoreValue], shape: ResultShape, call: LuaCall) throws -> Int32 {
        try rows.run(sql, arguments, shape: shape, call: call)
    }

    func run(_ sql: String, luaArgumentAt index: Int32, shape: ResultShape, call: LuaCall) throws -> Int32? {
        guard let writes else { return nil }
        return try writes.run(sql, luaArgumentAt: index, shape: shape, call: call)
    }

    /// A write's read-back, once per call: on the row path's C reads
    /// without an array made for its one value (issue 27).
    func run(_ sql: String, key: StoreValue, shape: ResultShape, call: LuaCall) throws -> Int32 {
        guard let writes else { return try rows.run(sql, [key], shape: shape, call: call) }
        return try writes.run(sql, key, shape: shape, call: call)
    }

    func insertTelemetry(_ events: [TelemetryRepository.Event]) throws {
        try database.insertTelemetry(events)
    }

    var databaseLabel: String { database.label }
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
struct RecordTableFunctions<Record: StoreRecord, Engine: RepositoryEngine> {
    let context: Engine
    var table: RecordTable<Record>
    /// `SELECT * FROM table WHERE key = ?`, made once: every write reads
    /// its row back with it.
    let rowByKey: String
    /// Insert and update statements by the columns written
    /// (``RecordWritePlans``), shared by this module's functions.
    let plans = RecordWritePlans()

    init(context: Engine, records: RecordRepository<Record>) {
        self.context = context
        self.table = RecordTable(records)
        rowByKey = context.dialect.rowByKey(table: records.tableName, keyColumn: Record.primaryKeyColumns[0])
    }

    var name: String { table.table }

    /// The table's columns, read again only after a schema change.
    func cachedSpec() throws -> TableSpec {
        try context.spec(name) { db in try table.spec(db) }
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

    /// The rows `request` selects, as `list` pushes them.
    func pushList(_ request: ListRequest, counting: Bool = false, call: LuaCall) throws -> Int32 {
        let spec = try cachedSpec()
        try request.checkAllowedValues(Record.allowedValues, table: name)
        let (sql, arguments) = try request.selectSQL(table: name, columns: spec.names, counting: counting,
                                                     dialect: context.dialect, textColumns: spec.textColumns)
        return try context.run(sql, arguments, shape: counting ? .value : .rows, call: call)
    }

    /// The row with `key`, read back as `get` reads it.
    func pushRow(key: StoreValue, call: LuaCall) throws -> Int32 {
        try context.run(rowByKey, key: key, shape: .first, call: call)
    }

    /// The row with `key`, which the call's argument `argument` gave: that
    /// Lua value is bound where it is the same value (a string of the same
    /// bytes, the same integer), so nothing is made from it again.
    func pushRow(key: StoreValue, givenAt argument: Int32, call: LuaCall) throws -> Int32 {
        if Self.luaValue(at: argument, in: call.state, is: key),
           let results = try context.run(rowByKey, luaArgumentAt: argument, shape: .first, call: call) {
            return results
        }
        return try pushRow(key: key, call: call)
    }

    /// ``pushRow(key:givenAt:call:)`` where the caller has checked that
    /// argument `argument` is `key` as Lua holds it.
    func pushRow(key: StoreValue, checkedAt argument: Int32, call: LuaCall) throws -> Int32 {
        if let results = try context.run(rowByKey, luaArgumentAt: argument, shape: .first, call: call) { return results }
        return try pushRow(key: key, call: call)
    }

    /// Whether `key`, which ``LuaRowReader/key(argument:spec:)`` read
    /// from the value at `index`, is that Lua value itself.
    private static func keyIsLuaValue(at index: Int32, in state: OpaquePointer, _ key: StoreValue) -> Bool {
        switch key {
        case .text: return lua_type(state, index) == LUA_TSTRING
        case .integer: return lua_type(state, index) == LUA_TNUMBER && lua_isinteger(state, index) != 0
        default: return false
        }
    }

    private static func luaValue(at index: Int32, in state: OpaquePointer, is key: StoreValue) -> Bool {
        switch key {
        case let .text(text):
            guard lua_type(state, index) == LUA_TSTRING else { return false }
            var length = 0
            guard let bytes = lua_tolstring(state, index, &length) else { return false }
            var text = text
            return text.withUTF8 { $0.count == length && ($0.isEmpty || memcmp($0.baseAddress!, bytes, length) == 0) }
        case let .integer(number):
            return lua_type(state, index) == LUA_TNUMBER && lua_isinteger(state, index) != 0
                && lua_tointegerx(state, index, nil) == lua_Integer(number)
        default:
            return false
        }
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
        return try pushRow(key: key, givenAt: 1, call: call)
    }

    func list(_ call: LuaCall) throws -> Int32 {
        let spec = try cachedSpec()
        let request = try context.reader(call).listRequest(argument: 1, spec: spec)
        return try pushList(request, call: call)
    }

    func count(_ call: LuaCall) throws -> Int32 {
        let spec = try cachedSpec()
        let request = try context.reader(call).listRequest(argument: 1, allowed: ["where"], spec: spec)
        return try pushList(request, counting: true, call: call)
    }

    /// One cached INSERT (no savepoint: it is the call's one write), then
    /// the row as `get` reads it.
    func insert(_ call: LuaCall) throws -> Int32 {
        guard lua_type(call.state, 1) == LUA_TTABLE else { throw call.typeError(1, expected: "table") }
        let spec = try cachedSpec()
        let reader = context.reader(call)
        // The planned statement when Store plans one; else the general path.
        if let layout = plans.layout(spec, Record.self),
           let values = reader.columnValues(argument: 1, spec: spec, names: layout.utf8Names),
           let planned = plans.plannedInsert(values, given: 0, spec: spec, dialect: context.dialect, layout: layout,
                                             derives: table.derives, generatedKey: table.generatedKey) {
            if let key = try context.writeInOpenTransaction(planned, call: call) { return try pushRow(key: key, call: call) }
            let key = try call.naming(argument: 1) {
                try context.writeOneStatement(name, call: call) { db in try table.run(planned, db, spec: spec) }
            }
            return try pushRow(key: key, call: call)
        }
        let fields = try reader.fields(argument: 1, spec: spec)
        let key = try call.naming(argument: 1) {
            try context.writeOneStatement(name, call: call) { db in try table.insert(db, fields, spec: spec) }
        }
        return try pushRow(key: key, call: call)
    }

    /// One cached UPDATE (no savepoint: it is the call's one write), then
    /// the row as `get` reads it.
    func update(_ call: LuaCall) throws -> Int32 {
        guard lua_type(call.state, 2) == LUA_TTABLE else { throw call.typeError(2, expected: "table") }
        let spec = try cachedSpec()
        let reader = context.reader(call)
        let key = try reader.key(argument: 1, spec: spec)
        // The key as the script gave it, bound by both statements: what
        // ``LuaRowReader/key(argument:spec:)`` made of a string is its
        // every byte, of an integer the integer (a float or a number for
        // a text key became another value), so the type tells, where
        // comparing the bytes again was a share of the call (issue 27).
        let keyArgument: Int32? = Self.keyIsLuaValue(at: 1, in: call.state, key) ? 1 : nil
        guard let layout = plans.layout(spec, Record.self) else { return try generalUpdate(key: key, spec: spec, call: call) }
        var triedInC = false
        if context.bindsLuaValues {
            // The script's own values bound (stack slots above the
            // arguments); what C does not step is read again below.
            let slots = lua_gettop(call.state) + 1
            if let row = reader.columnValues(argument: 2, spec: spec, layout: layout),
               let planned = plans.plannedUpdate(key: key, row.values, given: row.given, spec: spec,
                                                 dialect: context.dialect, layout: layout) {
                triedInC = true
                let givenKey = keyArgument
                if try context.writeInOpenTransaction(planned, keyArgument: givenKey, luaValuesAt: slots, call: call) != nil {
                    guard let givenKey else { return try pushRow(key: key, call: call) }
                    return try pushRow(key: key, checkedAt: givenKey, call: call)
                }
            }
            lua_settop(call.state, slots - 1)
        }
        if let values = reader.columnValues(argument: 2, spec: spec, names: layout.utf8Names),
           let planned = plans.plannedUpdate(key: key, values, given: 0, spec: spec, dialect: context.dialect, layout: layout) {
            if !triedInC, try context.writeInOpenTransaction(planned, keyArgument: keyArgument, call: call) != nil {
                guard let keyArgument else { return try pushRow(key: key, call: call) }
                return try pushRow(key: key, givenAt: keyArgument, call: call)
            }
            _ = try call.naming(argument: 2) {
                try context.writeOneStatement(name, call: call) { db in try table.run(planned, db, spec: spec) }
            }
            return try pushRow(key: key, call: call)
        }
        return try generalUpdate(key: key, spec: spec, call: call)
    }

    /// The update Store judges field by field: its refusals and messages.
    private func generalUpdate(key: StoreValue, spec: TableSpec, call: LuaCall) throws -> Int32 {
        let fields = try context.reader(call).fields(argument: 2, spec: spec)
        try call.naming(argument: 2) {
            try context.writeOneStatement(name, call: call) { db in try table.update(db, key: key, fields: fields, spec: spec) }
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
                _ body: (Engine.Connection, StoreValue, [String: Bool]) throws -> Bool) throws -> Int32 {
        let reader = context.reader(call)
        let flags = try reader.flags(argument: 2, allowed: options)
        let key = try reader.key(argument: 1, spec: try cachedSpec())
        let deleted = try context.write(name) { db in try body(db, key, flags) }
        return call.results(.boolean(deleted))
    }
}
