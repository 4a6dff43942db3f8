/// "003_audit": the audit trail (`opsh_audit`), what may prune it
/// (`opsh_audit_prune`), and opsh's own settings (`opsh_settings`).
///
/// The trail is append-only by the engine's own triggers, whoever writes
/// (opsh, the sqlite3 CLI or psql, the backend): an UPDATE of a row is
/// refused, and a DELETE is refused unless a prune permit in the same
/// transaction covers the row (`audit.prune` writes the permit, deletes,
/// and removes the permit). A permit can only name a cutoff at least a
/// day in the past, so rows of the last day cannot leave by any route.
/// ARCHITECTURE.md, "Audit and lock-owner records".
enum Migration003Audit {
    static let identifier = "003_audit"

    static let updateRefusal = "opsh_audit is append-only: audit rows cannot be changed"
    static let deleteRefusal = "opsh_audit rows leave only through audit.prune{ olderThan = \"90d\" }"
    static let permitRefusal = "an audit prune permit must be at least a day in the past: the last day of the audit trail is never pruned"

    static let migration = BuiltInMigration(identifier, [
        .createTable(SchemaTable("opsh_audit", [
            SchemaColumn("id", .integer, primaryKey: true),
            SchemaColumn.secondsSince1970("startedAt", notNull: true),
            SchemaColumn.secondsSince1970("endedAt", notNull: true),
            SchemaColumn("user", .text, notNull: true),
            SchemaColumn("host", .text, notNull: true),
            SchemaColumn("pid", .integer, notNull: true),
            SchemaColumn("version", .text, notNull: true),
            SchemaColumn("mode", .text, notNull: true, check: "mode IN ('shell', 'run', 'eval')"),
            SchemaColumn("script", .text),
            SchemaColumn("scriptSHA256", .text),
            SchemaColumn("code", .text),
            SchemaColumn("reason", .text),
            SchemaColumn("dryRun", .integer, notNull: true, default: "0", check: "dryRun IN (0, 1)"),
            SchemaColumn("readOnly", .integer, notNull: true, default: "0", check: "readOnly IN (0, 1)"),
            SchemaColumn("changes", .text, notNull: true, default: "'{}'", check: .json()),
            SchemaColumn("status", .integer, notNull: true),
            SchemaColumn("period", .real, note: "seconds, from the script's `-- @every 10m` header; NULL without one"),
        ])),
        .createIndex(SchemaIndex("opsh_audit_on_script_started", on: "opsh_audit", ["script", "startedAt"])),
        .createIndex(SchemaIndex("opsh_audit_on_started", on: "opsh_audit", ["startedAt"])),

        // Written by audit.prune inside its transaction, and removed again
        // before it commits: rows older than `before` may be deleted.
        .createTable(SchemaTable("opsh_audit_prune", [SchemaColumn.secondsSince1970("before", notNull: true)])),

        .perEngine(sqlite: sqliteTriggers, postgresql: postgresTriggers),

        // opsh's settings for everyone using this database, e.g.
        // ('requireReason', '1'): every run and shell must give a reason.
        .createTable(SchemaTable("opsh_settings", [
            SchemaColumn("name", .text, primaryKey: true, notNull: true),
            SchemaColumn("value", .text, notNull: true),
        ])),
    ])

    // MARK: The trail's triggers, per engine

    static let sqliteTriggers = """
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
        """

    static let postgresTriggers = """
        CREATE FUNCTION opsh_audit_refuse_update() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION '\(updateRefusal)';
        END $$;
        CREATE TRIGGER opsh_audit_no_update BEFORE UPDATE ON opsh_audit
            FOR EACH ROW EXECUTE FUNCTION opsh_audit_refuse_update();

        CREATE FUNCTION opsh_audit_refuse_delete() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NOT EXISTS (SELECT 1 FROM opsh_audit_prune WHERE OLD.startedAt < before) THEN
                RAISE EXCEPTION '\(deleteRefusal)';
            END IF;
            RETURN OLD;
        END $$;
        CREATE TRIGGER opsh_audit_no_delete BEFORE DELETE ON opsh_audit
            FOR EACH ROW EXECUTE FUNCTION opsh_audit_refuse_delete();

        CREATE FUNCTION opsh_audit_refuse_recent_permit() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'UPDATE' OR NEW.before > extract(epoch FROM clock_timestamp()) - 86400 THEN
                RAISE EXCEPTION '\(permitRefusal)';
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER opsh_audit_prune_recent BEFORE INSERT OR UPDATE ON opsh_audit_prune
            FOR EACH ROW EXECUTE FUNCTION opsh_audit_refuse_recent_permit();
        """
}
