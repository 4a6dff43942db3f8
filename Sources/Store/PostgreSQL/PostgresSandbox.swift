import PostgresWire

/// `--sandbox` on PostgreSQL (issue 24, item 1; ARCHITECTURE.md, decision
/// 9): a sandboxed script changes no schema and writes no scheme's build
/// command or environment, so that nothing it leaves can make a later build
/// outside the sandbox (a runner's claim, `jobs.start`) run a command of
/// its choice. SQLite's sandbox refuses such statements as they are
/// compiled; PostgreSQL's side is the server's own counters, read after
/// each statement, never the statement's words.
///
/// **How.** Every statement of a sandboxed session runs in a transaction
/// (a statement outside one gets a transaction of its own) under the
/// statement's savepoint, and right after it, in the same round trip and
/// before the savepoint is released, one more statement (``check``)
/// compares the server's counters with what they were before it:
///
/// - the rows this backend's transaction inserted, updated and deleted in
///   every table of `pg_catalog` (`pg_stat_get_xact_tuples_*`, shared
///   catalogs such as `pg_authid` included). Every schema change writes the
///   catalog: a table, view, index, trigger, function or procedure made,
///   dropped or altered, TEMP ones too, from a `DO` block or a function's
///   `EXECUTE` as much as from a statement of its own. The counters only
///   grow inside a transaction (what a rolled-back subtransaction did
///   stays counted), and no statement of the script can lower them;
/// - the rows inserted into `schemes` (SQLite's sandbox refuses every
///   insert there), and, when rows of `schemes` were updated, whether a
///   row now has a build command or an environment (`passEnvironment`) that
///   no row with its id had before (fingerprints of `(id, buildCommand)`
///   and `(id, passEnvironment)` read as the transaction began): renaming
///   a scheme goes on, as on SQLite.
///
/// When they moved, the check fails on the server (the cast of a stable
/// function's text, as ``CommitGuard``'s), so the savepoint is never
/// released: opsh rolls back to it and refuses the statement with the
/// reason; the transaction goes on without it. Every name in the check is
/// qualified (`pg_catalog.`, `OPERATOR(pg_catalog.=)`, the schema of
/// `schemes`), so a `search_path` or an object the script made cannot stand
/// in for the server's. `track_counts` off (a superuser's setting) would
/// stop the counters: then every statement is refused.
///
/// **What it costs**: the check (about as much as one reading of the
/// audit's counters), and for a statement outside a transaction a
/// transaction of its own; only under `--sandbox`.
///
/// **What it refuses beyond SQLite's sandbox**: whatever writes the catalog
/// without changing the schema as SQLite sees it. `TRUNCATE` gives a table
/// a new file (its `pg_class` row), which the counters cannot tell from
/// `ALTER TABLE`: DELETE the rows instead. `ANALYZE`, `GRANT`, `COMMENT`,
/// large objects and statements PostgreSQL runs only outside a transaction
/// block (`VACUUM`, `CREATE INDEX CONCURRENTLY`) are refused too.
struct PostgresSandbox {
    /// The counters before a statement (as the transaction began, or after
    /// the last statement that passed the check).
    struct Baseline {
        /// Rows written in `pg_catalog`'s tables.
        var catalog: Int64
        /// Rows inserted and updated in `schemes`.
        var schemesInserted: Int64
        var schemesUpdated: Int64
        /// Fingerprints of each scheme's `(id, buildCommand)` and `(id,
        /// passEnvironment)`, as array literals.
        var commands: String
        var environments: String
    }

    /// Why the check refused a statement: the marker the failing cast
    /// carries in the server's message.
    enum Refusal: String, CaseIterable {
        case uncounted = "opsh-sandbox:uncounted"
        case catalog = "opsh-sandbox:catalog"
        case schemeInserted = "opsh-sandbox:scheme-inserted"
        case buildCommand = "opsh-sandbox:build-command"
        case environment = "opsh-sandbox:environment"
    }

    /// Reads the counters and fingerprints as the transaction is now.
    let reading: String
    /// The check after a statement: `$1…$5` are the ``Baseline``.
    let check: String

    /// Reads what the check needs of the catalog, once per session.
    init(on connection: PostgresConnection) throws {
        let catalogs = try connection.query("""
            SELECT pg_catalog.array_agg(c.oid ORDER BY c.oid)::pg_catalog.text FROM pg_catalog.pg_class c
            WHERE c.relnamespace OPERATOR(pg_catalog.=) 'pg_catalog'::pg_catalog.regnamespace
              AND c.relkind OPERATOR(pg_catalog.=) 'r'
            """).scalar
        let schemes = try connection.query("""
            SELECT c.oid::pg_catalog.int8, pg_catalog.quote_ident(n.nspname::pg_catalog.text),
                   pg_catalog.bool_or(a.attname OPERATOR(pg_catalog.=) 'passenvironment')
            FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
            JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) c.oid AND a.attnum OPERATOR(pg_catalog.>) 0
                 AND NOT a.attisdropped
            WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass('schemes')
            GROUP BY 1, 2
            """).rows.first
        guard case let .text(catalogOIDs)? = catalogs, let schemes, case let .integer(oid) = schemes[0],
              case let .text(schema) = schemes[1] else {
            throw PostgresStoreError.statement("--sandbox: this database has no schemes table in its schema, whose build commands the sandbox keeps; nothing was run")
        }
        let hasEnvironment = schemes[2] == .bool(true)
        let table = "\(schema).schemes"
        let counted = "'\(catalogOIDs)'::pg_catalog.oid[]"
        let command = "pg_catalog.md5(pg_catalog.format('%L,%L', s.id, s.buildcommand))"
        let environment = hasEnvironment ? "pg_catalog.md5(pg_catalog.format('%L,%L', s.id, s.passenvironment))" : "''"
        let counters = """
            SELECT (SELECT pg_catalog.sum(pg_catalog.pg_stat_get_xact_tuples_inserted(o)
                                          OPERATOR(pg_catalog.+) pg_catalog.pg_stat_get_xact_tuples_updated(o)
                                          OPERATOR(pg_catalog.+) pg_catalog.pg_stat_get_xact_tuples_deleted(o))
                    FROM pg_catalog.unnest(\(counted)) AS o)::pg_catalog.int8 AS catalog,
                   pg_catalog.pg_stat_get_xact_tuples_inserted(\(oid)::pg_catalog.oid) AS inserted,
                   pg_catalog.pg_stat_get_xact_tuples_updated(\(oid)::pg_catalog.oid) AS updated
            """
        reading = """
            SELECT counts.catalog, counts.inserted, counts.updated,
                   (SELECT coalesce(pg_catalog.array_agg(\(command))::pg_catalog.text, '{}') FROM \(table) AS s),
                   (SELECT coalesce(pg_catalog.array_agg(\(environment))::pg_catalog.text, '{}') FROM \(table) AS s)
            FROM (\(counters)) AS counts
            """
        func refuse(_ refusal: Refusal) -> String {
            "CAST(pg_catalog.concat('\(refusal.rawValue)') AS pg_catalog.int4)"
        }
        check = """
            SELECT counts.catalog, counts.inserted, counts.updated,
              CASE
                WHEN pg_catalog.current_setting('track_counts') OPERATOR(pg_catalog.<>) 'on' THEN \(refuse(.uncounted))
                WHEN counts.catalog OPERATOR(pg_catalog.<>) $1::pg_catalog.int8 THEN \(refuse(.catalog))
                WHEN counts.inserted OPERATOR(pg_catalog.<>) $2::pg_catalog.int8 THEN \(refuse(.schemeInserted))
                WHEN counts.updated OPERATOR(pg_catalog.=) $3::pg_catalog.int8 THEN NULL
                WHEN EXISTS (SELECT 1 FROM \(table) AS s
                             WHERE NOT (\(command) OPERATOR(pg_catalog.=) ANY ($4::pg_catalog.text::pg_catalog.text[])))
                  THEN \(refuse(.buildCommand))
                WHEN EXISTS (SELECT 1 FROM \(table) AS s
                             WHERE NOT (\(environment) OPERATOR(pg_catalog.=) ANY ($5::pg_catalog.text::pg_catalog.text[])))
                  THEN \(refuse(.environment))
              END
            FROM (\(counters)) AS counts
            """
    }

    /// The counters and fingerprints now (at a transaction's first
    /// statement, or after a refusal moved the counters).
    func baseline(on connection: PostgresConnection) throws -> Baseline {
        guard let row = try connection.query(reading).rows.first, let baseline = Self.baseline(from: row) else {
            throw PostgresStoreError.statement("--sandbox: the server did not give its counters (track_counts off?); nothing was run")
        }
        return baseline
    }

    /// A row of ``reading`` (nil when it is not one: the next statement
    /// reads the baseline again).
    static func baseline(from row: [PostgresValue]) -> Baseline? {
        guard row.count == 5, case let .integer(catalog) = row[0], case let .integer(inserted) = row[1],
              case let .integer(updated) = row[2], case let .text(commands) = row[3], case let .text(environments) = row[4]
        else { return nil }
        return Baseline(catalog: catalog, schemesInserted: inserted, schemesUpdated: updated,
                        commands: commands, environments: environments)
    }

    /// The check after a statement, against `baseline`.
    func step(against baseline: Baseline) -> (sql: String, parameters: [PostgresValue]) {
        (check, [.integer(baseline.catalog), .integer(baseline.schemesInserted), .integer(baseline.schemesUpdated),
                 .text(baseline.commands), .text(baseline.environments)])
    }

    /// The baseline for the next statement, from the row of a check that
    /// passed (a scheme renamed moves the updated rows' counter).
    static func advanced(_ baseline: Baseline, by row: [PostgresValue]) -> Baseline {
        var next = baseline
        if row.count > 2, case let .integer(updated) = row[2] { next.schemesUpdated = updated }
        return next
    }

    /// The refusal a failed check carries, or nil when `error` is not one.
    /// A check that cannot find what it reads (`schemes` or its columns
    /// renamed or dropped by the statement: SQLSTATE 42P01, 42703) is a
    /// schema change too.
    static func refusal(in error: PostgresError) -> Refusal? {
        if ["42P01", "42703"].contains(error.code) { return .catalog }
        return Refusal.allCases.first { error.message.contains($0.rawValue) }
    }

    /// What the user is told.
    static func message(_ refusal: Refusal) -> String {
        switch refusal {
        case .uncounted:
            "sandbox: the server does not count this session's writes (track_counts is off), so opsh cannot check a statement for schema changes; every statement is refused"
        case .catalog:
            TransactionGuard.sandboxSchemaRefusal
                + " (on PostgreSQL, every statement that writes the server's catalog is refused: TRUNCATE too, which gives a table a new file, so DELETE its rows instead)"
        case .schemeInserted, .buildCommand:
            SessionDatabase.sandboxRefusal
        case .environment:
            SessionDatabase.sandboxEnvironmentRefusal
        }
    }
}
