import Foundation
import GRDB
import Testing
@testable import Store

/// The PostgreSQL schema is SQLite's in PostgreSQL's dialect: the same
/// tables and columns, the same NOT NULLs and keys, types mapped, and
/// every mixed-case name known to ``PostgresNames``.
@Suite struct PostgresSchemaTests {
    struct Column: Equatable, CustomStringConvertible {
        var table: String
        var name: String
        var type: String
        var notNull: Bool
        var description: String { "\(table).\(name) \(type)\(notNull ? " NOT NULL" : "")" }
    }

    /// SQLite's columns, with their types as the PostgreSQL schema must write them.
    func sqliteColumns() throws -> [Column] {
        let directory = TemporaryDirectory()
        let store = try makeStore(in: directory)
        return try store.client.read { db in
            let tables = try String.fetchAll(db, sql: """
                SELECT name FROM sqlite_master WHERE type = 'table'
                AND name NOT IN ('grdb_migrations', 'sqlite_sequence') ORDER BY name
                """)
            return try tables.flatMap { table in
                try db.columns(in: table).map { column in
                    let declared = column.type.uppercased()
                    let type = declared.contains("INT") ? "bigint" : declared.contains("REAL") ? "double precision" : "text"
                    return Column(table: table, name: column.name, type: type, notNull: column.isNotNull || column.primaryKeyIndex > 0)
                }
            }
        }
    }

    @Test func theTablesAndColumnsAreSQLitesInPostgresDialect() throws {
        let server = try PostgresServer.shared()
        let url = try server.makeDatabase()
        let database = try PostgresDatabase(url: url, options: .init(create: true))
        #expect(database.appliedMigrations == StoreMigrations.builtInIdentifiers)
        #expect(PostgresMigrations.all.map(\.name) == StoreMigrations.builtInIdentifiers)
        let onPostgres = try database.execute("""
            SELECT table_name, column_name, data_type, is_nullable FROM information_schema.columns
            WHERE table_schema = 'public' AND table_name <> 'opsh_migrations' ORDER BY table_name, ordinal_position
            """).rows.map { row -> Column in
                func text(_ value: StoreValue) -> String { value.textValue ?? "" }
                return Column(table: PostgresNames.rowKey(text(row[0])), name: PostgresNames.rowKey(text(row[1])),
                              type: text(row[2]), notNull: text(row[3]) == "NO")
            }
        let expected = try sqliteColumns()
        #expect(onPostgres.sorted { "\($0)" < "\($1)" }.map(\.description) == expected.sorted { "\($0)" < "\($1)" }.map(\.description))
    }

    /// Every name of the SQLite schema with a capital letter is one
    /// PostgresNames gives back; without it, a row would be keyed `createdat`.
    @Test func everyMixedCaseNameIsKnown() throws {
        let names = Set(try sqliteColumns().flatMap { [$0.table, $0.name] }.filter { $0 != $0.lowercased() })
        #expect(!names.isEmpty)
        #expect(names.subtracting(PostgresNames.mixedCase).isEmpty, "\(names.subtracting(PostgresNames.mixedCase).sorted())")
        #expect(Set(PostgresNames.mixedCase).subtracting(names).isEmpty)
        // The mapping itself: folded names come back, others stay.
        #expect(PostgresNames.rowKey("bundleidentifier") == "bundleIdentifier")
        #expect(PostgresNames.rowKey("n") == "n")
    }
}
