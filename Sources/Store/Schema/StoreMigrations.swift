import GRDB

/// The built-in migrations, named and ordered, written once for both
/// engines (``BuiltInMigration``): SQLite runs each one's SQL in its
/// dialect through GRDB's migrator, PostgreSQL through
/// ``PostgresMigrations``.
///
/// Migrations written in Lua are registered after these by the Bindings
/// layer, into the same `grdb_migrations` table.
public enum StoreMigrations {
    /// The migrations, oldest first. A new one is a file of its own
    /// (`Migration009….swift`) and a line here.
    static let builtIn: [BuiltInMigration] = [
        Migration001InitialSchema.migration,
        Migration002Indexes.migration,
        Migration003Audit.migration,
        Migration004Runners.migration,
        Migration005AuditChain.migration,
        Migration006SchemeEnvironment.migration,
        Migration007RunnerRegistry.migration,
        Migration008PinnedFunctions.migration,
    ]

    /// The tables the built-in migrations make.
    public static let builtInTables: [String] = builtIn.flatMap { migration in
        migration.steps.compactMap { step -> String? in
            if case let .createTable(table) = step { table.name } else { nil }
        }
    }

    /// Every table opsh's own statements name unqualified on SQLite: the
    /// built-in ones and the migrations' records (GRDB's, and the Lua
    /// migrations' checksums). A TEMP table may not take their names
    /// (``TransactionGuard``): a TEMP `opsh_lua_migrations` took
    /// `migrate.up`'s checksum row, and the next `migrate.up` failed
    /// (scripts/reliability-attacks.md, 28b).
    public static let opshTables: [String] = builtInTables + ["grdb_migrations", ExternalMigrations.checksumTable]

    /// Identifiers of the built-in migrations, oldest first.
    public static let builtInIdentifiers = builtIn.map(\.identifier)

    /// A migrator with the built-in migrations registered.
    ///
    /// Migrations run with foreign keys checked at the end of each one
    /// (GRDB's default `.immediate` checking is off so a migration can
    /// reshape tables), and every migration runs in its own transaction.
    public static func makeMigrator() -> DatabaseMigrator {
        var migrator = DatabaseMigrator()
        for migration in builtIn {
            let sql = migration.sql(for: .sqlite)
            migrator.registerMigration(migration.identifier) { db in try db.execute(sql: sql) }
        }
        return migrator
    }
}
