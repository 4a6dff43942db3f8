import PostgresWire

/// opsh's own statements run with the `search_path` pinned to
/// `<home schema>, pg_temp` (pg_catalog searched first); a script's statements run with
/// the path the script left (scripts/reliability-attacks.md, 28e).
///
/// Naming opsh's tables in their schema (``PostgresHomeSchema``) leaves the
/// rest of an own statement to the session's path: its operators (`=` in
/// `DELETE FROM projects WHERE id = $1`), its functions (`count`, the
/// server counters `--max-changes` reads) and its types. pg_catalog is
/// searched first only when the path does not name it: after `SET
/// search_path = s, pg_catalog, public` an operator `s.=` that holds for
/// every row made `projects.delete` delete every project.
///
/// **How.** As the session sends an own statement, the connection's
/// ``PostgresConnection/prelude`` puts one step before it in the same
/// round trip (no exchange of its own): the script's path is kept in the
/// setting `opsh.script_path` (marked, so that an empty path is kept too)
/// and the pinned one set. Before the next statement of the script (or
/// batch of `db.send` writes, or copy it names) another step puts the
/// script's path back. Both are the session's settings outside a
/// transaction block and the block's (`SET LOCAL`) inside one, so the
/// block's end leaves the script's settings as psql would (28m); both are
/// idempotent on the server: a second pin while the pinned path is in
/// force keeps the first one's saved path; a restore with nothing saved
/// does nothing. Between them nothing is sent: a loop of
/// `db.exec` or of repository calls pays nothing; alternating ones pay one
/// small step per switch.
///
/// A setting made inside a transaction is undone when it, or a savepoint
/// before the setting, rolls back, and a COMMIT runs the transaction's
/// deferred triggers, one of which (a script's, on its own table) may set
/// the path for the session (28l): what the session believes it set holds
/// only while the connection's ``PostgresConnection/rollbackCount`` and
/// ``PostgresConnection/commitCount`` are the same; after any rollback
/// (or error) or COMMIT the next statement of either kind sends its step
/// again.
struct PostgresOwnPath {
    /// Which kind of statement is being sent (``PostgresDatabase/pathNeed``).
    enum Need {
        /// opsh's own: pinned.
        case own
        /// The script's: its own path.
        case script
        /// Neither (transaction control, the counters): as it is.
        case none
    }

    /// Where the session believes the path is, and since when.
    struct Mark: Equatable {
        let connection: ObjectIdentifier
        let rollbacks: Int
        let commits: Int
    }

    /// Every name qualified, so the script's path decides nothing of it.
    /// `$1` is the pinned path, `$2` whether the settings are the
    /// transaction block's (`SET LOCAL`) rather than the session's. A
    /// saved path is kept only while the pinned one is in force (a pin
    /// sent again after a rollback that did not undo it); any other path
    /// is the script's, saved anew.
    static let pinText = """
        SELECT CASE WHEN NOT (pg_catalog.starts_with(COALESCE(s.saved, ''), 'p:')
                              AND s.path OPERATOR(pg_catalog.=) $1::pg_catalog.text)
                    THEN pg_catalog.set_config('opsh.script_path', pg_catalog.concat('p:', s.path), $2::pg_catalog.bool) END,
               pg_catalog.set_config('search_path', $1::pg_catalog.text, $2::pg_catalog.bool)
        FROM (SELECT pg_catalog.current_setting('opsh.script_path', true), pg_catalog.current_setting('search_path')) AS s(saved, path)
        """

    /// `$1` is the pinned path, `$2` as for the pin. The saved path is put
    /// back only over the pinned one: another path in force is the
    /// script's, set since by a way the session does not see (a deferred
    /// trigger's `set_config` at a COMMIT that ended the block's own).
    static let restoreText = """
        SELECT CASE WHEN pg_catalog.starts_with(s.saved, 'p:') AND s.path OPERATOR(pg_catalog.=) $1::pg_catalog.text
                    THEN pg_catalog.set_config('search_path', pg_catalog.substr(s.saved, 3), $2::pg_catalog.bool) END,
               pg_catalog.set_config('opsh.script_path', '', $2::pg_catalog.bool)
        FROM (SELECT pg_catalog.current_setting('opsh.script_path', true), pg_catalog.current_setting('search_path')) AS s(saved, path)
        WHERE s.saved IS NOT NULL AND s.saved OPERATOR(pg_catalog.<>) ''
        """

    /// Pinned since (nil: the script's path may be in force).
    var pinnedAt: Mark?
    /// The script's path put back since (nil: it may not be).
    var restoredAt: Mark?
    /// The connection a pin was ever sent on: before one, nothing is to
    /// put back.
    var pinnedOn: ObjectIdentifier?

    /// opsh's schema, then `pg_temp`: pg_catalog, not named, is searched
    /// before both; `pg_temp`, named, is searched last (not first, as for
    /// tables and types when it is not named). `current_schema()` is opsh's
    /// schema, where the migrations make tables.
    let pinnedPath: String

    init(home: PostgresHomeSchema) {
        pinnedPath = "\(home.quotedName), pg_temp"
    }

    /// The step to send first for a statement of kind `need` on
    /// `connection`, if any; marks it as sent.
    mutating func step(for need: Need, on connection: PostgresConnection) -> (sql: String, parameters: [PostgresValue])? {
        // Inside a transaction block the steps set the block's values, as
        // `SET LOCAL`: its end puts back the session's own, so a script's
        // `SET LOCAL search_path` ends with its transaction as in psql, not
        // made the session's by a step (28m). Deferred writes in flight
        // (`db.send`) never begin or end a block: the status is current.
        let local = PostgresValue.bool(connection.transactionStatus != .idle)
        let here = Mark(connection: ObjectIdentifier(connection), rollbacks: connection.rollbackCount,
                        commits: connection.commitCount)
        switch need {
        case .none:
            return nil
        case .own:
            guard pinnedAt != here else { return nil }
            pinnedAt = here
            restoredAt = nil
            pinnedOn = here.connection
            return (Self.pinText, [.text(pinnedPath), local])
        case .script:
            guard pinnedOn == here.connection, restoredAt != here else { return nil }
            restoredAt = here
            pinnedAt = nil
            return (Self.restoreText, [.text(pinnedPath), local])
        }
    }
}
