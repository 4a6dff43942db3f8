/// The built-in migrations in PostgreSQL's dialect: the same names as
/// SQLite's (`StoreMigrations.builtInIdentifiers`), the same tables,
/// columns, constraints and indexes, so that a repository, a query key or
/// an export reads the same rows on both engines.
///
/// How the dialects differ here (ARCHITECTURE.md, "PostgreSQL: names and
/// types"):
/// - **Names.** Identifiers are written unquoted, as on SQLite, so
///   PostgreSQL folds them to lower case (`bundleidentifier`,
///   `buildlogs`): hand-written SQL that writes them unquoted, in any case,
///   runs on both engines. The engine keys rows by the schema's own
///   spelling (`bundleIdentifier`), as SQLite does.
/// - **Types.** `REAL` dates and amounts are `double precision` (not
///   PostgreSQL's 4-byte `real`); integers are `bigint` (Lua's integers are
///   64-bit); an `INTEGER PRIMARY KEY` is an identity column; JSON columns
///   stay text, checked by `opsh_json_valid` (the text is kept as written,
///   so an export is the same document on both engines).
/// - **Triggers** are PL/pgSQL functions; every table of the domain also
///   tells listeners of each committed change with `pg_notify('opsh_changes',
///   table)` (what `watch` listens to), from a statement-level trigger.
public enum PostgresMigrations {
    /// The migrations, oldest first: name and SQL.
    public static let all: [(name: String, sql: String)] = [
        ("001_initialSchema", initialSchema),
        ("002_indexes", indexes),
        ("003_audit", audit),
        ("004_runners", runners),
        ("005_auditChain", auditChain),
        ("006_schemeEnvironment", schemeEnvironment),
    ]

    /// The table that records applied migrations (SQLite's is GRDB's
    /// `grdb_migrations`, with the same identifiers).
    public static let bookkeeping = """
        CREATE TABLE IF NOT EXISTS opsh_migrations (
            identifier text PRIMARY KEY NOT NULL,
            applied_at double precision NOT NULL DEFAULT extract(epoch FROM clock_timestamp())
        )
        """

    /// The tables whose commits `watch` hears of.
    public static let notifyingTables = [
        "projects", "schemes", "builds", "buildLogs", "crashLogs",
        "configuration", "routing_policies", "analytics_config", "storage_config",
        "model_metadata", "model_usage_stats", "generation_sessions", "generations", "telemetry",
    ]

    static let initialSchema = """
        CREATE FUNCTION opsh_json_valid(document text) RETURNS boolean
        LANGUAGE plpgsql IMMUTABLE AS $$
        BEGIN
            PERFORM document::json;
            RETURN true;
        EXCEPTION WHEN others THEN
            RETURN false;
        END $$;

        CREATE FUNCTION opsh_notify_change() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('opsh_changes', TG_TABLE_NAME);
            RETURN NULL;
        END $$;

        CREATE TABLE projects (
            bundleIdentifier text PRIMARY KEY NOT NULL CHECK (bundleIdentifier <> ''),
            name text NOT NULL,
            displayName text NOT NULL,
            gitRepositoryURL text NOT NULL,
            createdAt double precision NOT NULL
        );

        CREATE TABLE schemes (
            id text PRIMARY KEY NOT NULL,
            projectBundleIdentifier text NOT NULL
                REFERENCES projects(bundleIdentifier) ON DELETE CASCADE ON UPDATE CASCADE,
            name text NOT NULL,
            "order" bigint NOT NULL DEFAULT 0,
            buildCommand text NOT NULL DEFAULT '',
            platforms text NOT NULL DEFAULT '[]'
                CONSTRAINT platforms_is_json CHECK (opsh_json_valid(platforms)),
            UNIQUE (projectBundleIdentifier, name)
        );

        CREATE TABLE builds (
            id text PRIMARY KEY NOT NULL,
            schemeId text NOT NULL REFERENCES schemes(id) ON DELETE RESTRICT,
            versionString text NOT NULL,
            buildNumber bigint NOT NULL CHECK (buildNumber > 0),
            status text NOT NULL DEFAULT 'queued'
                CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
            createdAt double precision NOT NULL,
            startDate double precision,
            endDate double precision,
            exitCode bigint,
            progress double precision NOT NULL DEFAULT 0 CHECK (progress BETWEEN 0 AND 1),
            commitHash text,
            runnerHost text,
            runnerPid bigint,
            runnerStartedAt double precision,
            UNIQUE (schemeId, buildNumber)
        );

        CREATE TABLE buildLogs (
            id text PRIMARY KEY NOT NULL,
            buildId text NOT NULL REFERENCES builds(id) ON DELETE CASCADE,
            level text NOT NULL DEFAULT 'info'
                CHECK (level IN ('debug', 'info', 'warning', 'error')),
            category text NOT NULL DEFAULT 'build',
            content text NOT NULL,
            createdAt double precision NOT NULL
        );

        CREATE TABLE crashLogs (
            incidentIdentifier text PRIMARY KEY NOT NULL,
            buildId text NOT NULL REFERENCES builds(id) ON DELETE CASCADE,
            content text NOT NULL,
            signal bigint,
            createdAt double precision NOT NULL
        );

        CREATE TABLE configuration (
            id text PRIMARY KEY NOT NULL,
            api_key text,
            base_url text NOT NULL,
            model_cache_size bigint NOT NULL DEFAULT 0,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL
        );

        CREATE TABLE routing_policies (
            id text PRIMARY KEY NOT NULL,
            configuration_id text NOT NULL REFERENCES configuration(id) ON DELETE CASCADE,
            name text NOT NULL,
            priority bigint NOT NULL DEFAULT 0,
            execution_target text NOT NULL DEFAULT 'onDevice'
                CHECK (execution_target IN ('onDevice', 'cloud', 'hybrid')),
            conditions text NOT NULL DEFAULT '{}'
                CONSTRAINT conditions_is_json CHECK (opsh_json_valid(conditions))
        );

        CREATE TABLE analytics_config (
            configuration_id text PRIMARY KEY NOT NULL
                REFERENCES configuration(id) ON DELETE CASCADE,
            enabled bigint NOT NULL DEFAULT 1,
            sampling_rate double precision NOT NULL DEFAULT 1 CHECK (sampling_rate BETWEEN 0 AND 1),
            batch_size bigint NOT NULL DEFAULT 100,
            flush_interval_seconds double precision NOT NULL DEFAULT 60
        );

        CREATE TABLE storage_config (
            configuration_id text PRIMARY KEY NOT NULL
                REFERENCES configuration(id) ON DELETE CASCADE,
            max_cache_size_bytes bigint NOT NULL DEFAULT 0,
            telemetry_retention_days bigint NOT NULL DEFAULT 30
                CHECK (telemetry_retention_days > 0),
            auto_cleanup bigint NOT NULL DEFAULT 1
        );

        CREATE TABLE model_metadata (
            id text PRIMARY KEY NOT NULL,
            name text NOT NULL,
            format text NOT NULL,
            size_bytes bigint NOT NULL DEFAULT 0,
            framework text NOT NULL,
            quantization text,
            capabilities text NOT NULL DEFAULT '[]'
                CONSTRAINT capabilities_is_json CHECK (opsh_json_valid(capabilities)),
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL
        );

        CREATE TABLE model_usage_stats (
            id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
            model_id text NOT NULL REFERENCES model_metadata(id) ON DELETE CASCADE,
            day text NOT NULL,
            generation_count bigint NOT NULL DEFAULT 0,
            total_tokens bigint NOT NULL DEFAULT 0,
            total_cost double precision NOT NULL DEFAULT 0,
            total_latency_ms double precision NOT NULL DEFAULT 0,
            error_count bigint NOT NULL DEFAULT 0,
            UNIQUE (model_id, day)
        );

        CREATE TABLE generation_sessions (
            id text PRIMARY KEY NOT NULL,
            model_id text NOT NULL REFERENCES model_metadata(id) ON DELETE RESTRICT,
            session_type text NOT NULL DEFAULT 'chat',
            total_tokens bigint NOT NULL DEFAULT 0,
            total_cost double precision NOT NULL DEFAULT 0,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL
        );

        CREATE TABLE generations (
            id text PRIMARY KEY NOT NULL,
            session_id text NOT NULL REFERENCES generation_sessions(id) ON DELETE CASCADE,
            sequence_number bigint NOT NULL,
            prompt_tokens bigint NOT NULL DEFAULT 0,
            completion_tokens bigint NOT NULL DEFAULT 0,
            latency_ms double precision NOT NULL DEFAULT 0,
            cost double precision NOT NULL DEFAULT 0,
            execution_target text NOT NULL DEFAULT 'onDevice'
                CHECK (execution_target IN ('onDevice', 'cloud', 'hybrid')),
            created_at double precision NOT NULL,
            UNIQUE (session_id, sequence_number)
        );

        CREATE TABLE telemetry (
            id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
            event text NOT NULL,
            properties text
                CONSTRAINT properties_is_json CHECK (properties IS NULL OR opsh_json_valid(properties)),
            session_id text,
            created_at double precision NOT NULL
        );
        """ + notifyTriggers

    static var notifyTriggers: String {
        notifyingTables.map { table in
            "\nCREATE TRIGGER \(table)_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON \(table) "
                + "FOR EACH STATEMENT EXECUTE FUNCTION opsh_notify_change();"
        }.joined()
    }

    static let indexes = """
        CREATE INDEX schemes_on_project_order ON schemes(projectBundleIdentifier, "order");
        CREATE INDEX builds_on_scheme_created ON builds(schemeId, createdAt);
        CREATE INDEX builds_on_scheme_version ON builds(schemeId, versionString);
        CREATE INDEX builds_on_status ON builds(status);
        CREATE INDEX buildLogs_on_build_created ON buildLogs(buildId, createdAt);
        CREATE INDEX crashLogs_on_build_created ON crashLogs(buildId, createdAt);
        CREATE INDEX routing_policies_on_configuration ON routing_policies(configuration_id, priority);
        CREATE INDEX model_usage_stats_on_day ON model_usage_stats(day);
        CREATE INDEX generation_sessions_on_model_created ON generation_sessions(model_id, created_at);
        CREATE INDEX generations_on_created ON generations(created_at);
        CREATE INDEX telemetry_on_created ON telemetry(created_at);
        CREATE INDEX telemetry_on_event_created ON telemetry(event, created_at);
        """

    static let audit = """
        CREATE TABLE opsh_audit (
            id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
            startedAt double precision NOT NULL,
            endedAt double precision NOT NULL,
            "user" text NOT NULL,
            host text NOT NULL,
            pid bigint NOT NULL,
            version text NOT NULL,
            mode text NOT NULL CHECK (mode IN ('shell', 'run', 'eval')),
            script text,
            scriptSHA256 text,
            code text,
            reason text,
            dryRun bigint NOT NULL DEFAULT 0 CHECK (dryRun IN (0, 1)),
            readOnly bigint NOT NULL DEFAULT 0 CHECK (readOnly IN (0, 1)),
            changes text NOT NULL DEFAULT '{}' CHECK (opsh_json_valid(changes)),
            status bigint NOT NULL,
            period double precision
        );
        CREATE INDEX opsh_audit_on_script_started ON opsh_audit(script, startedAt);
        CREATE INDEX opsh_audit_on_started ON opsh_audit(startedAt);

        CREATE TABLE opsh_audit_prune (before double precision NOT NULL);

        CREATE FUNCTION opsh_audit_refuse_update() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION '\(Migration003Audit.updateRefusal)';
        END $$;
        CREATE TRIGGER opsh_audit_no_update BEFORE UPDATE ON opsh_audit
            FOR EACH ROW EXECUTE FUNCTION opsh_audit_refuse_update();

        CREATE FUNCTION opsh_audit_refuse_delete() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NOT EXISTS (SELECT 1 FROM opsh_audit_prune WHERE OLD.startedAt < before) THEN
                RAISE EXCEPTION '\(Migration003Audit.deleteRefusal)';
            END IF;
            RETURN OLD;
        END $$;
        CREATE TRIGGER opsh_audit_no_delete BEFORE DELETE ON opsh_audit
            FOR EACH ROW EXECUTE FUNCTION opsh_audit_refuse_delete();

        CREATE FUNCTION opsh_audit_refuse_recent_permit() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'UPDATE' OR NEW.before > extract(epoch FROM clock_timestamp()) - 86400 THEN
                RAISE EXCEPTION '\(Migration003Audit.permitRefusal)';
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER opsh_audit_prune_recent BEFORE INSERT OR UPDATE ON opsh_audit_prune
            FOR EACH ROW EXECUTE FUNCTION opsh_audit_refuse_recent_permit();

        CREATE TABLE opsh_settings (
            name text PRIMARY KEY NOT NULL,
            value text NOT NULL
        );
        """

    static let runners = """
        ALTER TABLE builds ADD COLUMN runnerId text;
        ALTER TABLE builds ADD COLUMN heartbeatAt double precision;
        ALTER TABLE builds ADD COLUMN heartbeatInterval double precision CHECK (heartbeatInterval > 0);
        ALTER TABLE builds ADD COLUMN attempts bigint NOT NULL DEFAULT 0 CHECK (attempts >= 0);
        CREATE INDEX builds_on_status_created ON builds(status, createdAt, buildNumber);
        CREATE INDEX builds_on_runner ON builds(runnerId);
        """

    /// "005_auditChain" (SQLite's `Migration005AuditChain`): the hash chain's
    /// columns and the cuts, as on SQLite; and two holes PostgreSQL's own
    /// rules left:
    /// - TRUNCATE fires no row trigger: a statement-level trigger refuses it
    ///   on the trail and its cuts.
    /// - TRUNCATE deletes rows without counting them: a statement-level
    ///   trigger on each domain table notes its rows first, which the
    ///   session's counts read as deleted (``CommitTally``), so a dry run,
    ///   `--max-changes` and the audit row see them.
    /// - A PL/pgSQL trigger function finds tables through the caller's
    ///   `search_path`, where a temporary table comes first: a script's
    ///   `CREATE TEMP TABLE opsh_audit_prune` would be the permit the delete
    ///   trigger reads. The functions that read a table are pinned to the
    ///   schema they were made in, `pg_temp` last.
    static let auditChain = """
        ALTER TABLE opsh_audit ADD COLUMN previousHash text;
        ALTER TABLE opsh_audit ADD COLUMN hash text;

        CREATE TABLE opsh_audit_cut (
            id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
            lastId bigint NOT NULL,
            lastHash text NOT NULL,
            cutAt double precision NOT NULL
        );
        INSERT INTO opsh_audit_cut (lastId, lastHash, cutAt)
        SELECT coalesce(max(id), 0), '\(AuditChain.genesis)', extract(epoch FROM clock_timestamp()) FROM opsh_audit;

        CREATE FUNCTION opsh_audit_refuse_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION '\(Migration003Audit.deleteRefusal)';
        END $$;
        CREATE TRIGGER opsh_audit_no_truncate BEFORE TRUNCATE ON opsh_audit
            FOR EACH STATEMENT EXECUTE FUNCTION opsh_audit_refuse_truncate();

        CREATE FUNCTION opsh_audit_cut_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION '\(Migration005AuditChain.cutRefusal)';
        END $$;
        CREATE TRIGGER opsh_audit_cut_no_change BEFORE UPDATE OR DELETE ON opsh_audit_cut
            FOR EACH ROW EXECUTE FUNCTION opsh_audit_cut_refuse_change();
        CREATE TRIGGER opsh_audit_cut_no_truncate BEFORE TRUNCATE ON opsh_audit_cut
            FOR EACH STATEMENT EXECUTE FUNCTION opsh_audit_cut_refuse_change();

        CREATE FUNCTION opsh_audit_cut_needs_permit() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NOT EXISTS (SELECT 1 FROM opsh_audit_prune) THEN
                RAISE EXCEPTION '\(Migration005AuditChain.cutRefusal)';
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
        """ + CommitTally.truncateNotes(tables: notifyingTables)
    /// Migration006SchemeEnvironment's column: the names of the runner's
    /// variables a scheme's builds get.
    static let schemeEnvironment = """
        ALTER TABLE schemes ADD COLUMN passEnvironment text NOT NULL DEFAULT '[]'
            CONSTRAINT passEnvironment_is_json CHECK (opsh_json_valid(passEnvironment));
        """
}
