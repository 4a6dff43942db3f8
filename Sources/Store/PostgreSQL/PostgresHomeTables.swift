import PostgresWire

/// opsh's own statements name its tables unqualified (the repositories,
/// read-backs, query keys, jobs, cleanup, analytics, migrations'
/// bookkeeping), so on PostgreSQL the session's name lookup decides which
/// table they read and write: a TEMP table named as one of them (`pg_temp`
/// is searched first), a `search_path` a script set (`SET`, `set_config`,
/// a function that sets it for the session, `RESET`, a schema of its own
/// first), `SET ROLE` with a `"$user"` schema, would stand in for it
/// (scripts/reliability-attacks.md, 27x).
///
/// **How.** After each statement of the script (every statement the
/// session runs but opsh's own fixed texts: ``PostgresDatabase/ownStatements(_:)``),
/// in the same round trip and before its savepoint is released (outside a
/// transaction: in its implicit transaction), ``check`` asks the server
/// where each built-in table's name now leads (`to_regclass`, the lookup
/// the server's own statements make). A name that leads to a relation
/// outside the home schema (where the migrations made the tables, found as
/// the session opened, before any script ran) fails the check on the
/// server, as ``PostgresSandbox``'s does, so the statement is rolled back
/// with its effect (the TEMP table, the setting) and refused with the
/// reason; the transaction goes on. A name that leads nowhere (`SET
/// search_path = pg_catalog`) is let through: opsh's statements then fail
/// loudly, never write elsewhere. Every name in the check is qualified.
///
/// **What it costs.** The lookups cost the server about 100 µs; they are
/// made only when something that decides them may have changed since the
/// last check (``Baseline``): the `search_path` setting, the current role,
/// or the rows this transaction wrote in `pg_class` and `pg_namespace` (a
/// relation or schema made, renamed, moved or dropped, TEMP ones too, from
/// a `DO` block or a function as much as from a statement of its own).
/// Otherwise the check reads those and nothing more (about 25 µs on the
/// server, one more statement in the round trip the script's statement
/// takes anyway).
/// opsh's own statements (a repository call, a key) get no check.
struct PostgresHomeTables {
    /// What the last check that passed saw.
    struct Baseline {
        var path: String
        var role: String
        /// Rows the transaction had written in `pg_class` and
        /// `pg_namespace` (they only grow within a transaction).
        var written: Int64
        /// The transaction it was in (its start, in microseconds): the
        /// count compares only within one transaction; a transaction that
        /// wrote no such rows needs none.
        var transaction: Int64
    }

    /// The namespace the built-in tables are in.
    let schema: Int64
    /// Fails on the server, naming the table and where its name leads,
    /// when a built-in table's name leads out of ``schema``; `$1…$4` are
    /// the ``Baseline``, and the row it returns is the next one.
    let check: String
    /// The built-in tables by their lowercase name, as the schema spells them.
    let spelling: [String: String]

    static let marker = "opsh-home-table:"

    /// The built-in migrations' tables and the bookkeeping of both kinds
    /// of migrations.
    static var names: [String] {
        StoreMigrations.builtInTables + ["opsh_migrations", ExternalMigrations.checksumTable]
    }

    /// Where `opsh_migrations` is found now (at opening, before any script
    /// statement ran, or right after the migrations made it); nil when
    /// the database has none.
    init?(on connection: PostgresConnection) throws {
        let found = try connection.query("""
            SELECT c.relnamespace::pg_catalog.int8 FROM pg_catalog.pg_class c
            WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass('opsh_migrations')
              AND c.relnamespace OPERATOR(pg_catalog.<>) pg_catalog.pg_my_temp_schema()
            """).scalar
        guard case let .integer(schema)? = found else { return nil }
        self.schema = schema
        var spelling: [String: String] = [:]
        for name in Self.names { spelling[name.lowercased()] = name }
        self.spelling = spelling
        let names = "{" + spelling.keys.sorted().joined(separator: ",") + "}"
        // The lookups, failing at the first name that leads out of the
        // schema (its TEMP schema as ''). Run through query_to_xml, so
        // that the server sets their plan up only when they run: the
        // fast path's costs the server nothing more.
        let lookups = """
            SELECT CAST(pg_catalog.concat('\(Self.marker)', b.name, ':',
                     CASE WHEN c.relnamespace OPERATOR(pg_catalog.<>) pg_catalog.pg_my_temp_schema()
                          THEN c.relnamespace::pg_catalog.regnamespace::pg_catalog.text END) AS pg_catalog.int4)
            FROM pg_catalog.unnest('\(names)'::pg_catalog.text[]) AS b(name)
            JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(b.name)
            WHERE c.relnamespace OPERATOR(pg_catalog.<>) \(schema)::pg_catalog.oid LIMIT 1
            """
        // pg_class and pg_namespace by their OIDs, which never change: the
        // text stays short (the client hashes and scans it at each use).
        let written = [1259, 2615].flatMap { catalog in
            ["inserted", "updated", "deleted"].map { "pg_catalog.pg_stat_get_xact_tuples_\($0)(\(catalog))" }
        }.joined(separator: " OPERATOR(pg_catalog.+) ")
        check = """
            SELECT s.path, s.role, s.written, s.transaction,
              CASE
                WHEN s.path OPERATOR(pg_catalog.=) $1::pg_catalog.text AND s.role OPERATOR(pg_catalog.=) $2::pg_catalog.text
                  AND s.counted AND (s.written OPERATOR(pg_catalog.=) 0
                    OR (s.written OPERATOR(pg_catalog.=) $3::pg_catalog.int8 AND s.transaction OPERATOR(pg_catalog.=) $4::pg_catalog.int8))
                  THEN true
                WHEN pg_catalog.query_to_xml('\(lookups.replacingOccurrences(of: "'", with: "''"))', true, false, '') IS NOT NULL THEN false
              END
            FROM (SELECT pg_catalog.current_setting('search_path') AS path, CURRENT_USER::pg_catalog.text AS role,
                         pg_catalog.current_setting('track_counts') OPERATOR(pg_catalog.=) 'on' AS counted,
                         (\(written))::pg_catalog.int8 AS written,
                         (pg_catalog.date_part('epoch', pg_catalog.now()) OPERATOR(pg_catalog.*) 1000000)::pg_catalog.int8 AS transaction) AS s
            """
    }

    /// The check after a statement, against `baseline` (nil: none yet,
    /// every name is looked up).
    func step(against baseline: Baseline?) -> (sql: String, parameters: [PostgresValue]) {
        guard let baseline else { return (check, [.text(""), .text(""), .integer(-1), .integer(-1)]) }
        return (check, [.text(baseline.path), .text(baseline.role), .integer(baseline.written), .integer(baseline.transaction)])
    }

    /// The baseline for the next check, from the row of one that passed.
    static func baseline(from row: [PostgresValue]) -> Baseline? {
        guard row.count == 5, case let .text(path) = row[0], case let .text(role) = row[1],
              case let .integer(written) = row[2], case let .integer(transaction) = row[3] else { return nil }
        return Baseline(path: path, role: role, written: written, transaction: transaction)
    }

    /// The reason a failed check carries, or nil when `error` is not one.
    func refusal(in error: PostgresError) -> String? {
        guard let start = error.message.range(of: Self.marker) else { return nil }
        var rest = error.message[start.upperBound...]
        if rest.hasSuffix("\"") { rest = rest.dropLast() }
        let parts = rest.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { return nil }
        let table = spelling[String(parts[0])] ?? String(parts[0])
        // An empty schema: the session's TEMP schema.
        if parts[1].isEmpty { return TransactionGuard.shadowRefusal(table) }
        return "\(parts[1]).\(parts[0]) would stand in for opsh's \(table) table (found first on the search_path now: opsh's own statements would read and write it instead): keep opsh's schema first on the search_path"
    }
}
