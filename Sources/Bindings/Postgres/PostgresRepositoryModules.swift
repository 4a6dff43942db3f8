import CLuaShim
import Foundation
import LuaRuntime
import Store

/// The repositories on PostgreSQL: `projects`, `schemes`, `builds`,
/// `logs`, `crashes`, `models`, `sessions` and `telemetry` with the SQLite
/// session's API and behaviour. The Lua functions are the SQLite ones
/// (``BuildServerModules``, ``SDKRepositoryModules``,
/// ``RecordTableFunctions``), installed over this engine; Store's rules
/// (``RecordTable``, the repositories) run on ``PostgresDatabase``.
///
/// - A repository call's writes are one transaction (a savepoint inside
///   `db.transaction` or a dry run), through ``PostgresDatabase/execute(_:_:)``:
///   `--read-only` refuses them with the server's 25006, `--dry-run`
///   counts them.
/// - Rows come back as `db.query` returns them: keyed by the schema's
///   spelling, NULL columns absent, the `db` module's row metatables.
struct PostgresRepositoryEngine: RepositoryEngine {
    let database: PostgresDatabase
    let markers: SQLMarkers
    let rowShapes: RowShapes

    init(session: PostgresSession) {
        database = session.database
        markers = session.markers
        rowShapes = session.rowShapes
    }

    var dialect: SQLDialect { .postgresql }

    func pusher(_ call: LuaCall) -> StoreValuePusher {
        StoreValuePusher(rowShapes: rowShapes, state: call.state)
    }

    func write<T>(_ table: String, _ body: (PostgresDatabase) throws -> T) throws -> T {
        try database.write(table, body)
    }

    func read<T>(_ table: String, _ body: (PostgresDatabase) throws -> T) throws -> T {
        try database.read(table, body)
    }

    /// ``PostgresDatabase`` keeps each table's columns until a statement
    /// changes the schema.
    func spec(_ table: String, load: (PostgresDatabase) throws -> TableSpec) throws -> TableSpec {
        try read(table) { db in try load(db) }
    }

    func run(_ sql: String, _ arguments: [StoreValue], shape: SQLExecutor.ResultShape, call: LuaCall) throws -> Int32 {
        let result = try database.execute(sql, .positional(arguments))
        let pusher = pusher(call)
        switch shape {
        case .rows:
            pusher.pushRows(columns: result.columns, rows: result.rows)
        case .first:
            guard let row = result.rows.first else { return call.results(nil) }
            pusher.pushRow(columns: result.columns, values: row)
        case .value:
            guard let value = result.rows.first?.first else { return call.results(nil) }
            pusher.push(value, asRows: false)
        case .changes:
            return call.results(.integer(Int64(result.changes ?? 0)))
        case .column:
            pusher.push(.array(result.rows.map { $0.first ?? .null }), asRows: false)
        }
        return 1
    }

    /// Multi-row INSERTs in one transaction (PostgreSQL counts a dry
    /// run's rows itself).
    func insertTelemetry(_ events: [TelemetryRepository.Event]) throws {
        try write("telemetry") { db in try TelemetryRepository().insertRows(db, events) }
    }
}

enum PostgresRepositoryModules {
    /// The modules this installs (and ``PostgresSession`` no longer refuses).
    static let modules = ["projects", "schemes", "builds", "logs", "crashes", "models", "sessions", "telemetry", "config"]

    static func install(in session: PostgresSession) {
        let engine = PostgresRepositoryEngine(session: session)
        BuildServerModules.install(engine: engine, runtime: session.runtime)
        SDKRepositoryModules.install(engine: engine, runtime: session.runtime)
        ConfigModule.install(engine: engine, runtime: session.runtime)
    }
}
