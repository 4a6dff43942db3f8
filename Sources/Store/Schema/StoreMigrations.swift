import GRDB

/// The built-in migrations, named and ordered.
///
/// Migrations written in Lua are registered after these by the Bindings
/// layer, into the same `grdb_migrations` table.
public enum StoreMigrations {
    /// Identifiers of the built-in migrations, oldest first.
    public static let builtInIdentifiers = [
        Migration001InitialSchema.identifier,
        Migration002Indexes.identifier,
        Migration003Audit.identifier,
        Migration004Runners.identifier,
        Migration005AuditChain.identifier,
        Migration006SchemeEnvironment.identifier,
    ]

    /// A migrator with the built-in migrations registered.
    ///
    /// Migrations run with foreign keys checked at the end of each one
    /// (GRDB's default `.immediate` checking is off so a migration can
    /// reshape tables), and every migration runs in its own transaction.
    public static func makeMigrator() -> DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration(Migration001InitialSchema.identifier, migrate: Migration001InitialSchema.migrate)
        migrator.registerMigration(Migration002Indexes.identifier, migrate: Migration002Indexes.migrate)
        migrator.registerMigration(Migration003Audit.identifier, migrate: Migration003Audit.migrate)
        migrator.registerMigration(Migration004Runners.identifier, migrate: Migration004Runners.migrate)
        migrator.registerMigration(Migration005AuditChain.identifier, migrate: Migration005AuditChain.migrate)
        migrator.registerMigration(Migration006SchemeEnvironment.identifier, migrate: Migration006SchemeEnvironment.migrate)
        return migrator
    }
}
