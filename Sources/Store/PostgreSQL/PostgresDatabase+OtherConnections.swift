import PostgresWire

/// Extensions whose functions write through a database connection of their
/// own, which this session's transaction does not hold: what `--read-only`
/// and `--dry-run` cannot contain (issue 24, items 22 and 23).
///
/// dblink (`dblink_exec`, `dblink()` with a writing statement, `dblink_send_query`)
/// connects anew, to this server or another, and commits there whatever
/// this session then does. postgres_fdw is not among them: its remote
/// transaction follows the local one (committed or rolled back with it),
/// and a read-only transaction refuses writes to a foreign table; the tests
/// hold both (`PostgresSessionGuardTests`). Other extensions that connect
/// on their own (outside PostgreSQL's contrib) are not known here: the
/// docs/postgresql.md says so.
extension PostgresDatabase {
    static let extensionsThatConnectOnTheirOwn = ["dblink"]

    /// Refuses the session (`flag`: `--read-only` or `--dry-run`) when such
    /// an extension is installed in the database and this role may run one
    /// of its functions: the catalog's word, not the script's.
    public func refuseExtensionsThatConnectOnTheirOwn(for flag: String) throws {
        let result = try connection.query("""
            SELECT e.extname::text FROM pg_catalog.pg_extension e
            JOIN pg_catalog.pg_depend d ON d.refclassid = 'pg_catalog.pg_extension'::regclass AND d.refobjid = e.oid
              AND d.classid = 'pg_catalog.pg_proc'::regclass AND d.deptype = 'e'
            WHERE e.extname = ANY ($1::text::text[]) AND pg_catalog.has_function_privilege(d.objid, 'EXECUTE')
            GROUP BY 1 ORDER BY 1
            """, [.text("{" + Self.extensionsThatConnectOnTheirOwn.joined(separator: ",") + "}")])
        let found = result.rows.compactMap { row -> String? in
            if case let .text(name) = row[0] { return name }
            return nil
        }
        if !found.isEmpty { throw PostgresStoreError.connectsOnItsOwn(extensions: found, flag: flag) }
    }
}
