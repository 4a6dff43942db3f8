import Foundation

// Export and import on PostgreSQL: ``Transfer`` itself runs over
// ``RepositoryConnection`` on both engines; this is how the session holds
// it, as ``SessionDatabase`` does on SQLite.

extension Transfer {
    /// A project's document from one snapshot (``PostgresDatabase/snapshot(_:)``).
    public static func exportProject(from database: PostgresDatabase, _ bundleIdentifier: String,
                                     options: ExportOptions = ExportOptions()) throws -> (text: String, summary: Summary) {
        try database.read("projects") { db in try db.snapshot { try exportProject(db, bundleIdentifier, options: options) } }
    }

    /// A model's document from one snapshot.
    public static func exportModel(from database: PostgresDatabase, _ id: String) throws -> (text: String, summary: Summary) {
        try database.read("model_metadata") { db in try db.snapshot { try exportModel(db, id) } }
    }

    /// Reads and checks the document first (outside any transaction of
    /// its own: no row is locked), then writes it in one transaction (a
    /// savepoint inside the session's): every row or none. `--read-only`
    /// refuses the write on the server (25006); a dry run's transaction
    /// is rolled back at its end, and counts the rows.
    public static func importDocument(_ text: String, into database: PostgresDatabase,
                                      options: ImportOptions = ImportOptions()) throws -> Summary {
        let prepared = try prepareImport(database, text)
        return try database.transaction { try apply(database, prepared, options: options) }
    }
}
