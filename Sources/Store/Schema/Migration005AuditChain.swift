import GRDB

/// "005_auditChain": the audit trail becomes tamper-evident rather than
/// trusted to its triggers (ARCHITECTURE.md, "Audit and lock-owner
/// records").
///
/// - Each row carries `previousHash`, the hash of the chained row before
///   it, and `hash`, SHA-256 over that and the row's own columns
///   (``AuditChain``): a row rewritten, removed from the middle or forged
///   without the hash does not fit, and `audit.verify()` and
///   `opsh runs --verify` name it.
/// - `opsh_audit_cut` records where the chain starts: this migration's
///   row (the rows already there, up to `lastId`, are from before the chain
///   and stay unchained), and one per `audit.prune` that removed chained
///   rows (the last one's hash, which the first row left must follow). It
///   is append-only, and a cut is written only inside `audit.prune` (with
///   its permit).
/// - `INSERT OR REPLACE` of an existing row is refused: REPLACE deletes
///   without firing the DELETE trigger, so it could rewrite a row, even
///   give it an old start and let a prune permit remove it.
enum Migration005AuditChain {
    static let identifier = "005_auditChain"

    static let replaceRefusal = "opsh_audit is append-only: a row cannot be replaced"
    static let cutRefusal = "opsh_audit_cut is append-only and written only by audit.prune"

    static func migrate(_ db: Database) throws {
        try db.execute(sql: """
            ALTER TABLE opsh_audit ADD COLUMN previousHash TEXT;
            ALTER TABLE opsh_audit ADD COLUMN hash TEXT;

            CREATE TABLE opsh_audit_cut (
                id INTEGER PRIMARY KEY,
                -- the chain goes on after this row (rows up to it were pruned,
                -- or, for the first cut, are from before the chain)
                lastId INTEGER NOT NULL,
                -- the hash the next chained row's previousHash must be
                lastHash TEXT NOT NULL,
                cutAt REAL NOT NULL
            );
            INSERT INTO opsh_audit_cut (lastId, lastHash, cutAt)
            SELECT coalesce(max(id), 0), '\(AuditChain.genesis)', (julianday('now') - 2440587.5) * 86400.0 FROM opsh_audit;

            CREATE TRIGGER opsh_audit_no_replace BEFORE INSERT ON opsh_audit
            WHEN NEW.id > 0 AND EXISTS (SELECT 1 FROM opsh_audit WHERE id = NEW.id)
            BEGIN SELECT RAISE(ABORT, '\(replaceRefusal)'); END;

            CREATE TRIGGER opsh_audit_cut_only_by_prune BEFORE INSERT ON opsh_audit_cut
            WHEN NOT EXISTS (SELECT 1 FROM opsh_audit_prune)
              OR (NEW.id > 0 AND EXISTS (SELECT 1 FROM opsh_audit_cut WHERE id = NEW.id))
            BEGIN SELECT RAISE(ABORT, '\(cutRefusal)'); END;

            CREATE TRIGGER opsh_audit_cut_no_update BEFORE UPDATE ON opsh_audit_cut
            BEGIN SELECT RAISE(ABORT, '\(cutRefusal)'); END;

            CREATE TRIGGER opsh_audit_cut_no_delete BEFORE DELETE ON opsh_audit_cut
            BEGIN SELECT RAISE(ABORT, '\(cutRefusal)'); END;
            """)
    }
}
