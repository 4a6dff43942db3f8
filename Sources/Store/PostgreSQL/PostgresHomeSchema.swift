import PostgresWire

/// Where opsh's tables are, so that opsh's own statements reach them
/// whatever the script does to its session.
///
/// On PostgreSQL an unqualified name is looked up along the session's
/// `search_path`, and the session's TEMP schema comes first: a repair
/// script's staging copy (`CREATE TEMP TABLE projects AS SELECT * FROM
/// projects`), a `SET search_path` (or `set_config` in a query, a function
/// that sets it, `SET ROLE` with a `"$user"` schema) would otherwise stand
/// in for opsh's tables in `projects.update`, a key, a cleanup, a
/// migration's bookkeeping (scripts/reliability-attacks.md, 27x).
///
/// **How.** opsh's own statements (every statement the session runs but a
/// script's: ``PostgresDatabase/scriptStatements(_:)``) are written with
/// this schema before the names of opsh's tables and functions, once per
/// text as its placeholders are rewritten (``PostgresPlaceholders/Qualifier``).
/// The server's own lookup then has nothing to choose: a TEMP table or a
/// schema first on the path takes none of opsh's reads or writes. A
/// script's statements are run as written, so its names mean what the
/// session's path says, as in psql (its TEMP copy is its own).
///
/// The schema is the one `opsh_migrations` is in when the session opens,
/// before any statement of a script (or right after the migrations made
/// it). It costs nothing per statement: the check after each script
/// statement that this replaced cost about 22 µs (BENCHMARKS.md).
struct PostgresHomeSchema {
    /// The schema's name, as the server quotes it.
    let quotedName: String
    let qualifier: PostgresPlaceholders.Qualifier

    /// The built-in migrations' tables and the bookkeeping of both kinds
    /// of migrations.
    static var tables: [String] {
        StoreMigrations.builtInTables + ["opsh_migrations", ExternalMigrations.checksumTable]
    }

    /// Where `opsh_migrations` is found now (a TEMP one left out); nil
    /// when the database has none.
    ///
    /// - throws: ``PostgresStoreError/ambiguousSchema(_:schemas:)`` when
    ///   more than one schema on the session's path holds opsh's tables:
    ///   the first would win, and a schema a script made (one named as the
    ///   role, the default path's `"$user"`, comes before `public`) would
    ///   take every later session's reads and writes
    ///   (scripts/reliability-attacks.md, 28k). The operator names one.
    init?(on connection: PostgresConnection, label: String) throws {
        // One round trip: the schemas on the path that hold `opsh_migrations`,
        // in the path's order, the first with opsh's functions. The holders
        // are found in a CTE the planner keeps apart (MATERIALIZED), so
        // `to_regclass` runs over the path's own entries only: joined with
        // `pg_namespace` it was run over every schema, pg_toast's too,
        // which a role without rights there cannot look into.
        let rows = try connection.query("""
            WITH holders AS MATERIALIZED (
                SELECT s.name, s.position
                FROM pg_catalog.unnest(pg_catalog.current_schemas(false)) WITH ORDINALITY AS s(name, position)
                WHERE pg_catalog.to_regclass(pg_catalog.concat(pg_catalog.quote_ident(s.name::pg_catalog.text), '.opsh_migrations')) IS NOT NULL
                  AND pg_catalog.to_regnamespace(pg_catalog.quote_ident(s.name::pg_catalog.text)) OPERATOR(pg_catalog.<>) pg_catalog.pg_my_temp_schema()
            )
            SELECT pg_catalog.quote_ident(h.name::pg_catalog.text),
                   (SELECT pg_catalog.array_agg(p.proname::pg_catalog.text) FROM pg_catalog.pg_proc p
                    WHERE p.pronamespace OPERATOR(pg_catalog.=) pg_catalog.to_regnamespace(pg_catalog.quote_ident(h.name::pg_catalog.text))
                      AND p.proname::pg_catalog.text LIKE 'opsh\\_%')
            FROM holders h
            ORDER BY h.position
            """).rows
        let holders = rows.compactMap { row -> String? in
            if case let .text(name)? = row.first { return name }
            return nil
        }
        if holders.count > 1 { throw PostgresStoreError.ambiguousSchema(label, schemas: holders) }
        guard let found = rows.first, case let .text(name) = found[0] else { return nil }
        quotedName = name
        var functions: [String] = []
        if case let .text(array) = found[1] {
            functions = array.trimmingPrefix("{").dropLast().split(separator: ",").map(String.init)
        }
        qualifier = PostgresPlaceholders.Qualifier(schema: name, tables: Self.tables, functions: functions)
    }

    /// Refuses a session whose `search_path` comes from the database's or
    /// the role's own setting (`ALTER DATABASE … SET`, `ALTER ROLE … SET`)
    /// while a schema off that path, which the role may read, holds
    /// `opsh_migrations`.
    ///
    /// Such a setting is made by a statement any session of the role may
    /// run, a script's among them, and it outlives the script: set to a
    /// schema of copies (or an empty one), every later session found one
    /// holder on its path, the copy, and read, wrote and audited there
    /// with no refusal (scripts/reliability-attacks.md, 28n; 28k looks only
    /// along the path). A path the connection names (its `options`,
    /// `PGOPTIONS`) is the operator's, which no script can set: never
    /// refused. Called before the migrations, so `--create` makes nothing
    /// in a schema a script chose.
    static func refuseAPathSetAway(on connection: PostgresConnection, label: String) throws {
        let result = try connection.query("""
            SELECT pg_catalog.quote_ident(n.nspname::pg_catalog.text), pg_catalog.current_setting('search_path')
            FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
            WHERE c.relname OPERATOR(pg_catalog.=) 'opsh_migrations' AND c.relkind OPERATOR(pg_catalog.=) 'r'
              AND n.nspname OPERATOR(pg_catalog.<>) ALL (pg_catalog.current_schemas(false))
              AND n.nspname OPERATOR(pg_catalog.!~) '^pg_(toast_)?temp_'
              AND pg_catalog.has_schema_privilege(n.oid, 'USAGE') AND pg_catalog.has_table_privilege(c.oid, 'SELECT')
              AND (SELECT s.source FROM pg_catalog.pg_settings s WHERE s.name OPERATOR(pg_catalog.=) 'search_path')
                  OPERATOR(pg_catalog.=) ANY ('{database,user,"database user"}'::pg_catalog.text[])
            ORDER BY 1
            """)
        let elsewhere = result.rows.compactMap { row -> String? in
            if case let .text(name)? = row.first { return name }
            return nil
        }
        guard !elsewhere.isEmpty, case let .text(path)? = result.rows.first?.last else { return }
        throw PostgresStoreError.pathSetAway(label, path: path, elsewhere: elsewhere)
    }

    /// `table` qualified with the schema when it is one of opsh's tables
    /// (a name for `to_regclass` or a COPY); any other name as it is.
    func qualified(_ table: String) -> String {
        qualifier.tables.contains(table.lowercased()) ? "\(quotedName).\(SQLDialect.postgresql.quote(table))" : table
    }
}
