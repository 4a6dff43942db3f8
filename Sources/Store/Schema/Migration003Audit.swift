import GRDB

/// "003_audit": the audit trail (`opsh_audit`), what may prune it
/// (`opsh_audit_prune`), and opsh's own settings (`opsh_settings`).
///
/// The trail is append-only by SQLite's own triggers, whoever writes
/// (opsh, the sqlite3 CLI, the backend): an UPDATE of a row is refused,
/// and a DELETE is refused unless a prune permit in the same transaction
/// covers the row (`audit.prune` writes the permit, deletes, and removes
/// the permit). A permit can only name a cutoff at least a day in the
/// past, so rows of the last day cannot leave by any route.
/// ARCHITECTURE.md, "Audit and lock-owner records".
enum Migration003Audit {
    static let identifier = "003_audit"

    static let updateRefusal = "opsh_audit is append-only: audit rows cannot be changed"
    static let deleteRefusal = "opsh_audit rows leave only through audit.prune{ olderThan = \"90d\" }"
    static let permitRefusal = "an audit prune permit must be at least a day in the past: the last day of the audit trail is never pruned"

    static func migrate(_ db: Database) throws {
        try db.execute(sql: """
            CREATE TABLE opsh_audit (
                id INTEGER PRIMARY KEY,
                startedAt REAL NOT NULL,
                endedAt REAL NOT NULL,
                user TEXT NOT NULL,
                host TEXT NOT NULL,
                pid INTEGER NOT NULL,
                version TEXT NOT NULL,
                mode TEXT NOT NULL CHECK (mode IN ('shell', 'run', 'eval')),
                script TEXT,
                scriptSHA256 TEXT,
                code TEXT,
                reason TEXT,
                dryRun INTEGER NOT NULL DEFAULT 0 CHECK (dryRun IN (0, 1)),
                readOnly INTEGER NOT NULL DEFAULT 0 CHECK (readOnly IN (0, 1)),
                changes TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(changes)),
                status INTEGER NOT NULL,
                -- seconds, from the script's `-- @every 10m` header; NULL without one
                period REAL
            );
            CREATE INDEX opsh_audit_on_script_started ON opsh_audit(script, startedAt);
            CREATE INDEX opsh_audit_on_started ON opsh_audit(startedAt);

            -- Written by audit.prune inside its transaction, and removed again
            -- before it commits: rows older than `before` may be deleted.
            CREATE TABLE opsh_audit_prune (before REAL NOT NULL);

            CREATE TRIGGER opsh_audit_no_update BEFORE UPDATE ON opsh_audit
            BEGIN SELECT RAISE(ABORT, '\(updateRefusal)'); END;

            CREATE TRIGGER opsh_audit_no_delete BEFORE DELETE ON opsh_audit
            WHEN NOT EXISTS (SELECT 1 FROM opsh_audit_prune WHERE OLD.startedAt < before)
            BEGIN SELECT RAISE(ABORT, '\(deleteRefusal)'); END;

            CREATE TRIGGER opsh_audit_prune_recent BEFORE INSERT ON opsh_audit_prune
            WHEN NEW.before > (julianday('now') - 2440587.5) * 86400.0 - 86400
            BEGIN SELECT RAISE(ABORT, '\(permitRefusal)'); END;

            CREATE TRIGGER opsh_audit_prune_no_update BEFORE UPDATE ON opsh_audit_prune
            BEGIN SELECT RAISE(ABORT, '\(permitRefusal)'); END;

            -- opsh's settings for everyone using this database, e.g.
            -- ('requireReason', '1'): every run and shell must give a reason.
            CREATE TABLE opsh_settings (
                name TEXT PRIMARY KEY NOT NULL,
                value TEXT NOT NULL
            );
            """)
    }
}
