// A built-in migration written once for both engines (`Store/Schema`):
// its steps are tables, columns and indexes described once
// (`SchemaDescription`) and rendered by each engine's ``SQLDialect``
// (`SQLDialect+Schema`); what each engine says in its own language
// (triggers) stands side by side in the migration's file.

/// One statement (or, per engine, a few) of a built-in migration.
enum SchemaStep: Sendable {
    case createTable(SchemaTable)
    case addColumn(table: String, SchemaColumn)
    case createIndex(SchemaIndex)
    /// A statement written once with what the dialect spells differently
    /// (``SQLDialect/currentTimeInSeconds``).
    case statement(@Sendable (SQLDialect) -> String)
    /// What each engine says in its own language (triggers and their
    /// functions); an empty text is nothing on that engine.
    case perEngine(sqlite: String, postgresql: String)
}

/// A built-in migration: its identifier (recorded in `grdb_migrations` on
/// SQLite, `opsh_migrations` on PostgreSQL) and its steps, in order.
struct BuiltInMigration: Sendable {
    let identifier: String
    let steps: [SchemaStep]

    init(_ identifier: String, _ steps: [SchemaStep]) {
        self.identifier = identifier
        self.steps = steps
    }

    /// The migration in `dialect`'s SQL: its statements, in order.
    func sql(for dialect: SQLDialect) -> String {
        steps.map { dialect.sql(for: $0) }.filter { !$0.isEmpty }.joined(separator: "\n\n")
    }

    /// The names of the tables it makes and of the columns it makes or adds.
    var tableAndColumnNames: [String] {
        steps.flatMap { step -> [String] in
            switch step {
            case let .createTable(table): [table.name] + table.columns.map(\.name)
            case let .addColumn(_, column): [column.name]
            case .createIndex, .statement, .perEngine: []
            }
        }
    }
}
