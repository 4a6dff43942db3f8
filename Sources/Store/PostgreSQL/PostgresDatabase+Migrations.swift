import Foundation
import PostgresWire

extension PostgresDatabase {
    /// Applies the pending migrations up to `target` (nil: all), the
    /// built-in ones in PostgreSQL's SQL and the Lua ones (`migrate.up`),
    /// as on SQLite: the same checks first (``ExternalMigrations/plan(_:external:upTo:)``:
    /// changed or missing files, order, the target), then each in a
    /// transaction of its own under the migrations' advisory lock, recorded
    /// in `opsh_migrations` (Lua ones as `lua:NAME`, with their checksum in
    /// `opsh_lua_migrations`). A failure rolls back that migration only.
    ///
    /// Inside a `--max-changes` run each is a savepoint of the run's
    /// transaction: its rows count against the cap and roll back with the
    /// run, and it is refused first, as a schema change, unless schema
    /// changes are allowed.
    @discardableResult
    public func migrate(external: [ExternalMigration], upTo target: String?) throws -> [String] {
        if let transaction = transactionRefusingMigrations { throw PostgresStoreError.inTransaction("migrating inside \(transaction)") }
        guard !options.readOnly else { throw ExternalMigrationError("cannot migrate a database opened read-only") }
        let pending = try ExternalMigrations.plan(self, external: external, upTo: target)
        if !pending.isEmpty { try refuseSchemaChange("migrate.up applies \(pending.joined(separator: ", "))") }
        let builtIn = Dictionary(uniqueKeysWithValues: PostgresMigrations.all.map { ($0.name, $0.sql) })
        let lua = Dictionary(external.map { ($0.identifier, $0) }, uniquingKeysWith: { first, _ in first })
        var applied: [String] = []
        for identifier in pending {
            do {
                try transaction {
                    _ = try execute("SELECT pg_advisory_xact_lock(?)", .positional([.integer(Self.migrationLock)]))
                    // Another process may have applied it meanwhile.
                    guard try execute("SELECT 1 FROM opsh_migrations WHERE identifier = ?",
                                      .positional([.text(identifier)])).rowCount == 0 else { return }
                    if let sql = builtIn[identifier] {
                        try connection.simpleQuery(sql)
                    } else if let migration = lua[identifier] {
                        try migration.migrate(nil)
                        try execute("""
                            CREATE TABLE IF NOT EXISTS \(ExternalMigrations.checksumTable) (
                              identifier text NOT NULL PRIMARY KEY, checksum text NOT NULL, applied_at double precision NOT NULL)
                            """)
                        try execute("""
                            INSERT INTO \(ExternalMigrations.checksumTable) (identifier, checksum, applied_at) VALUES (?, ?, ?)
                            ON CONFLICT (identifier) DO UPDATE SET checksum = excluded.checksum, applied_at = excluded.applied_at
                            """, .positional([.text(identifier), .text(migration.checksum), .real(Date().timeIntervalSince1970)]))
                    }
                    try execute("INSERT INTO opsh_migrations (identifier) VALUES (?)", .positional([.text(identifier)]))
                    applied.append(identifier)
                }
            } catch let error as PostgresError {
                throw ExternalMigrationError("migration '\(ExternalMigrations.display(identifier))' failed and was rolled back: \(error)")
            } catch let error as PostgresStoreError {
                throw ExternalMigrationError("migration '\(ExternalMigrations.display(identifier))' failed and was rolled back: \(error)")
            }
        }
        appliedMigrations = try readApplied()
        knownTallyRelations = nil
        knownTimeColumns = nil
        tableSpecs = [:]
        return applied
    }
}
