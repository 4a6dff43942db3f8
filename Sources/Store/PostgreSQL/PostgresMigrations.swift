/// The built-in migrations in PostgreSQL's dialect: the same migrations as
/// SQLite's, written once (``StoreMigrations``, `Store/Schema`) and
/// rendered by ``SQLDialect/postgresql``, so that a repository, a query
/// key or an export reads the same rows on both engines (ARCHITECTURE.md,
/// "PostgreSQL: the session", "Names and types"; `SQLDialect+Schema` says
/// how the dialects differ).
public enum PostgresMigrations {
    /// The migrations, oldest first: name and SQL.
    public static let all: [(name: String, sql: String)] = StoreMigrations.builtIn.map {
        ($0.identifier, $0.sql(for: .postgresql))
    }

    /// The table that records applied migrations (SQLite's is GRDB's
    /// `grdb_migrations`, with the same identifiers).
    public static let bookkeeping = """
        CREATE TABLE IF NOT EXISTS opsh_migrations (
            identifier text PRIMARY KEY NOT NULL,
            applied_at double precision NOT NULL DEFAULT extract(epoch FROM clock_timestamp())
        )
        """

    /// The tables whose commits `watch` hears of: migration 001's.
    public static let notifyingTables = Migration001InitialSchema.tables
}
