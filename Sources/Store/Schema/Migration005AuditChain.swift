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
/// - SQLite: `INSERT OR REPLACE` of an existing row is refused: REPLACE
///   deletes without firing the DELETE trigger, so it could rewrite a row,
///   even give it an old start and let a prune permit remove it.
/// - PostgreSQL closes three holes its own rules left:
///   - TRUNCATE fires no row trigger: a statement-level trigger refuses it
///     on the trail and its cuts.
///   - TRUNCATE deletes rows without counting them: a statement-level
///     trigger on each domain table notes its rows first, which the
///     session's counts read as deleted (``CommitTally``), so a dry run,
///     `--max-changes` and the audit row see them.
///   - A PL/pgSQL trigger function finds tables through the caller's
///     `search_path`, where a temporary table comes first: a script's
///     `CREATE TEMP TABLE opsh_audit_prune` would be the permit the delete
///     trigger reads. The functions that read a table are pinned to the
///     schema they were made in, `pg_temp` last.
enum Migration005AuditChain {
    static let identifier = "005_auditChain"

    static let replaceRefusal = "opsh_audit is append-only: a row cannot be replaced"
    static let cutRefusal = "opsh_audit_cut is append-only and written only by audit.prune"

    static let migration = BuiltInMigration(identifier, [
        .addColumn(table: "opsh_audit", SchemaColumn("previousHash", .text)),
        .addColumn(table: "opsh_audit", SchemaColumn("hash", .text)),

        .createTable(SchemaTable("opsh_audit_cut", [
            SchemaColumn("id", .integer, primaryKey: true),
            SchemaColumn("lastId", .integer, notNull: true,
                         note: "the chain goes on after this row (rows up to it were pruned, or, for the first cut, are from before the chain)"),
            SchemaColumn("lastHash", .text, notNull: true,
                         note: "the hash the next chained row's previousHash must be"),
            SchemaColumn.secondsSince1970("cutAt", notNull: true),
        ])),
        .statement { dialect in
            """
            INSERT INTO opsh_audit_cut (lastId, lastHash, cutAt)
            SELECT coalesce(max(id), 0), '\(AuditChain.genesis)', \(dialect.currentTimeInSeconds) FROM opsh_audit;
            """
        },

        .perEngine(sqlite: sqliteTriggers, postgresql: postgresTriggers),
    ])

    // MARK: The chain's triggers, per engine

    static let sqliteTriggers = """
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
        """

    static let postgresTriggers = """
        CREATE FUNCTION opsh_audit_refuse_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION '\(Migration003Audit.deleteRefusal)';
        END $$;
        CREATE TRIGGER opsh_audit_no_truncate BEFORE TRUNCATE ON opsh_audit
            FOR EACH STATEMENT EXECUTE FUNCTION opsh_audit_refuse_truncate();

        CREATE FUNCTION opsh_audit_cut_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION '\(cutRefusal)';
        END $$;
        CREATE TRIGGER opsh_audit_cut_no_change BEFORE UPDATE OR DELETE ON opsh_audit_cut
            FOR EACH ROW EXECUTE FUNCTION opsh_audit_cut_refuse_change();
        CREATE TRIGGER opsh_audit_cut_no_truncate BEFORE TRUNCATE ON opsh_audit_cut
            FOR EACH STATEMENT EXECUTE FUNCTION opsh_audit_cut_refuse_change();

        CREATE FUNCTION opsh_audit_cut_needs_permit() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NOT EXISTS (SELECT 1 FROM opsh_audit_prune) THEN
                RAISE EXCEPTION '\(cutRefusal)';
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER opsh_audit_cut_only_by_prune BEFORE INSERT ON opsh_audit_cut
            FOR EACH ROW EXECUTE FUNCTION opsh_audit_cut_needs_permit();

        DO $$
        BEGIN
            EXECUTE format('ALTER FUNCTION opsh_audit_refuse_delete() SET search_path = %I, pg_temp', current_schema());
            EXECUTE format('ALTER FUNCTION opsh_audit_cut_needs_permit() SET search_path = %I, pg_temp', current_schema());
        END $$;
        """ + CommitTally.truncateNotes(tables: Migration001InitialSchema.tables)
}
