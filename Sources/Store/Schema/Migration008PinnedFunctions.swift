/// "008_pinnedFunctions": PostgreSQL only. opsh's functions no longer find
/// what they call through the caller's `search_path`.
///
/// A function runs under the `search_path` of the statement that calls it.
/// A trigger fires inside a script's statement, so it runs under the
/// script's path. The same holds for a CHECK evaluated for a script's
/// INSERT. `SET search_path = evil, pg_catalog, public` puts the script's
/// schema before the built-ins (scripts/reliability-attacks.md, 28e). Its
/// `evil.clock_timestamp()` then forged a prune permit for the audit
/// trail's last day. Its `evil.count(*)` hid a TRUNCATE's rows from the
/// run's counts. Its `evil.json` domain let any text pass the JSON
/// checks.
///
/// - The trigger functions run with `search_path = pg_catalog, pg_temp`
///   (a function's own setting). They fire only on the audit tables'
///   refused changes and on TRUNCATE, so the setting's cost per call does
///   not matter.
/// - The two functions called for every checked row and every written
///   statement (`opsh_json_valid`, `opsh_notify_change`) name what they
///   call in `pg_catalog` instead. A function's own setting would cost
///   every backend INSERT a save and restore of the path.
/// - `opsh_audit_refuse_delete` and `opsh_audit_cut_needs_permit` were
///   pinned by 005, to opsh's schema and `pg_temp`. pg_catalog, unnamed
///   there, is searched first.
enum Migration008PinnedFunctions {
    static let identifier = "008_pinnedFunctions"

    /// The trigger functions pinned by their own setting.
    static let pinnedTriggerFunctions = [
        "opsh_audit_refuse_update", "opsh_audit_refuse_recent_permit",
        "opsh_audit_refuse_truncate", "opsh_audit_cut_refuse_change", "opsh_note_truncate",
    ]

    static let migration = BuiltInMigration(identifier, [
        .perEngine(sqlite: "", postgresql: postgresql),
    ])

    static let postgresql = """
        CREATE OR REPLACE FUNCTION opsh_json_valid(document text) RETURNS boolean
        LANGUAGE plpgsql IMMUTABLE AS $$
        BEGIN
            PERFORM document::pg_catalog.json;
            RETURN true;
        EXCEPTION WHEN others THEN
            RETURN false;
        END $$;

        CREATE OR REPLACE FUNCTION opsh_notify_change() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_catalog.pg_notify('opsh_changes', TG_TABLE_NAME);
            RETURN NULL;
        END $$;

        """ + pinnedTriggerFunctions.map {
            "ALTER FUNCTION \($0)() SET search_path = pg_catalog, pg_temp;"
        }.joined(separator: "\n")
}
