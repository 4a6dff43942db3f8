/// "001_initialSchema": every table of the domain.
///
/// Two families live in one file, each keeping the column naming of the
/// design document it comes from:
/// - the build server (seeds 000/001): camelCase columns, as the seed's
///   queries (`projectBundleIdentifier`, `versionString`, …);
/// - the on-device AI analytics (ARCHITECTURE.md): snake_case columns.
///
/// Dates are REAL seconds since 1970 (UTC), so that SQL and Lua can compare
/// them with `os.time()` and do arithmetic on them. JSON columns carry a
/// CHECK constraint: the engine itself refuses invalid JSON, whoever writes.
///
/// On PostgreSQL the migration also makes `opsh_json_valid` (before the
/// tables that check with it) and, on every table, a statement-level
/// trigger that tells listeners of each committed change with
/// `pg_notify('opsh_changes', table)` (what `watch` listens to; SQLite's
/// `watch` reads the file's changes instead).
enum Migration001InitialSchema {
    static let identifier = "001_initialSchema"

    static let migration = BuiltInMigration(identifier,
        [.perEngine(sqlite: "", postgresql: postgresFunctions)]
            + (buildServer + analytics).map(SchemaStep.createTable)
            + [.perEngine(sqlite: "", postgresql: postgresNotifyTriggers)])

    /// The tables whose commits `watch` hears of on PostgreSQL.
    static var tables: [String] { (buildServer + analytics).map(\.name) }

    static let buildServer: [SchemaTable] = [
        SchemaTable("projects", [
            SchemaColumn("bundleIdentifier", .text, primaryKey: true, notNull: true, check: "bundleIdentifier <> ''"),
            SchemaColumn("name", .text, notNull: true),
            SchemaColumn("displayName", .text, notNull: true),
            SchemaColumn("gitRepositoryURL", .text, notNull: true),
            SchemaColumn.secondsSince1970("createdAt", notNull: true),
        ]),

        // Deleting a project deletes its schemes; a scheme with builds
        // refuses (builds.schemeId is RESTRICT), so a project with builds is
        // only deleted when asked to cascade (ProjectRepository.delete).
        SchemaTable("schemes", [
            SchemaColumn("id", .text, primaryKey: true, notNull: true),
            SchemaColumn("projectBundleIdentifier", .text, notNull: true,
                         references: SchemaReference("projects", "bundleIdentifier", onDelete: .cascade, onUpdate: .cascade)),
            SchemaColumn("name", .text, notNull: true),
            SchemaColumn("order", .integer, notNull: true, default: "0"),
            SchemaColumn("buildCommand", .text, notNull: true, default: "''"),
            SchemaColumn("platforms", .text, notNull: true, default: "'[]'", check: .json(named: "platforms_is_json")),
        ], unique: [["projectBundleIdentifier", "name"]]),

        SchemaTable("builds", [
            SchemaColumn("id", .text, primaryKey: true, notNull: true),
            SchemaColumn("schemeId", .text, notNull: true, references: SchemaReference("schemes", "id", onDelete: .restrict)),
            SchemaColumn("versionString", .text, notNull: true),
            SchemaColumn("buildNumber", .integer, notNull: true, check: "buildNumber > 0"),
            SchemaColumn("status", .text, notNull: true, default: "'queued'",
                         check: "status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')"),
            SchemaColumn.secondsSince1970("createdAt", notNull: true),
            SchemaColumn.secondsSince1970("startDate"),
            SchemaColumn.secondsSince1970("endDate"),
            SchemaColumn("exitCode", .integer),
            SchemaColumn("progress", .real, notNull: true, default: "0", check: "progress BETWEEN 0 AND 1"),
            SchemaColumn("commitHash", .text,
                         note: "The revision that was checked out (tag, branch or commit) and its commit."),
            SchemaColumn("runnerHost", .text,
                         note: "Who runs the build: with the pid and the process start time a build left running by a dead opsh is detectable as stale."),
            SchemaColumn("runnerPid", .integer),
            SchemaColumn.secondsSince1970("runnerStartedAt"),
        ], unique: [["schemeId", "buildNumber"]]),

        SchemaTable("buildLogs", [
            SchemaColumn("id", .text, primaryKey: true, notNull: true),
            SchemaColumn("buildId", .text, notNull: true, references: SchemaReference("builds", "id", onDelete: .cascade)),
            SchemaColumn("level", .text, notNull: true, default: "'info'",
                         check: "level IN ('debug', 'info', 'warning', 'error')"),
            SchemaColumn("category", .text, notNull: true, default: "'build'"),
            SchemaColumn("content", .text, notNull: true),
            SchemaColumn.secondsSince1970("createdAt", notNull: true),
        ]),

        SchemaTable("crashLogs", [
            SchemaColumn("incidentIdentifier", .text, primaryKey: true, notNull: true),
            SchemaColumn("buildId", .text, notNull: true, references: SchemaReference("builds", "id", onDelete: .cascade)),
            SchemaColumn("content", .text, notNull: true),
            SchemaColumn("signal", .integer),
            SchemaColumn.secondsSince1970("createdAt", notNull: true),
        ]),
    ]

    static let analytics: [SchemaTable] = [
        SchemaTable("configuration", [
            SchemaColumn("id", .text, primaryKey: true, notNull: true),
            SchemaColumn("api_key", .text),
            SchemaColumn("base_url", .text, notNull: true),
            SchemaColumn("model_cache_size", .integer, notNull: true, default: "0"),
            SchemaColumn.secondsSince1970("created_at", notNull: true),
            SchemaColumn.secondsSince1970("updated_at", notNull: true),
        ]),

        SchemaTable("routing_policies", [
            SchemaColumn("id", .text, primaryKey: true, notNull: true),
            SchemaColumn("configuration_id", .text, notNull: true,
                         references: SchemaReference("configuration", "id", onDelete: .cascade)),
            SchemaColumn("name", .text, notNull: true),
            SchemaColumn("priority", .integer, notNull: true, default: "0"),
            SchemaColumn("execution_target", .text, notNull: true, default: "'onDevice'",
                         check: "execution_target IN ('onDevice', 'cloud', 'hybrid')"),
            SchemaColumn("conditions", .text, notNull: true, default: "'{}'", check: .json(named: "conditions_is_json")),
        ]),

        SchemaTable("analytics_config", [
            SchemaColumn("configuration_id", .text, primaryKey: true, notNull: true,
                         references: SchemaReference("configuration", "id", onDelete: .cascade)),
            SchemaColumn("enabled", .integer, notNull: true, default: "1"),
            SchemaColumn("sampling_rate", .real, notNull: true, default: "1", check: "sampling_rate BETWEEN 0 AND 1"),
            SchemaColumn("batch_size", .integer, notNull: true, default: "100"),
            SchemaColumn("flush_interval_seconds", .real, notNull: true, default: "60"),
        ]),

        SchemaTable("storage_config", [
            SchemaColumn("configuration_id", .text, primaryKey: true, notNull: true,
                         references: SchemaReference("configuration", "id", onDelete: .cascade)),
            SchemaColumn("max_cache_size_bytes", .integer, notNull: true, default: "0"),
            SchemaColumn("telemetry_retention_days", .integer, notNull: true, default: "30",
                         check: "telemetry_retention_days > 0"),
            SchemaColumn("auto_cleanup", .integer, notNull: true, default: "1"),
        ]),

        SchemaTable("model_metadata", [
            SchemaColumn("id", .text, primaryKey: true, notNull: true),
            SchemaColumn("name", .text, notNull: true),
            SchemaColumn("format", .text, notNull: true),
            SchemaColumn("size_bytes", .integer, notNull: true, default: "0"),
            SchemaColumn("framework", .text, notNull: true),
            SchemaColumn("quantization", .text),
            SchemaColumn("capabilities", .text, notNull: true, default: "'[]'", check: .json(named: "capabilities_is_json")),
            SchemaColumn.secondsSince1970("created_at", notNull: true),
            SchemaColumn.secondsSince1970("updated_at", notNull: true),
        ]),

        // One row per model and UTC day.
        SchemaTable("model_usage_stats", [
            SchemaColumn("id", .integer, primaryKey: true),
            SchemaColumn("model_id", .text, notNull: true,
                         references: SchemaReference("model_metadata", "id", onDelete: .cascade)),
            SchemaColumn("day", .text, notNull: true),
            SchemaColumn("generation_count", .integer, notNull: true, default: "0"),
            SchemaColumn("total_tokens", .integer, notNull: true, default: "0"),
            SchemaColumn("total_cost", .real, notNull: true, default: "0"),
            SchemaColumn("total_latency_ms", .real, notNull: true, default: "0"),
            SchemaColumn("error_count", .integer, notNull: true, default: "0"),
        ], unique: [["model_id", "day"]]),

        SchemaTable("generation_sessions", [
            SchemaColumn("id", .text, primaryKey: true, notNull: true),
            SchemaColumn("model_id", .text, notNull: true,
                         references: SchemaReference("model_metadata", "id", onDelete: .restrict)),
            SchemaColumn("session_type", .text, notNull: true, default: "'chat'"),
            SchemaColumn("total_tokens", .integer, notNull: true, default: "0"),
            SchemaColumn("total_cost", .real, notNull: true, default: "0"),
            SchemaColumn.secondsSince1970("created_at", notNull: true),
            SchemaColumn.secondsSince1970("updated_at", notNull: true),
        ]),

        SchemaTable("generations", [
            SchemaColumn("id", .text, primaryKey: true, notNull: true),
            SchemaColumn("session_id", .text, notNull: true,
                         references: SchemaReference("generation_sessions", "id", onDelete: .cascade)),
            SchemaColumn("sequence_number", .integer, notNull: true),
            SchemaColumn("prompt_tokens", .integer, notNull: true, default: "0"),
            SchemaColumn("completion_tokens", .integer, notNull: true, default: "0"),
            SchemaColumn("latency_ms", .real, notNull: true, default: "0"),
            SchemaColumn("cost", .real, notNull: true, default: "0"),
            SchemaColumn("execution_target", .text, notNull: true, default: "'onDevice'",
                         check: "execution_target IN ('onDevice', 'cloud', 'hybrid')"),
            SchemaColumn.secondsSince1970("created_at", notNull: true),
        ], unique: [["session_id", "sequence_number"]]),

        // Fire-and-forget events: no foreign key, so that the SDK never
        // fails to record one.
        SchemaTable("telemetry", [
            SchemaColumn("id", .integer, primaryKey: true),
            SchemaColumn("event", .text, notNull: true),
            SchemaColumn("properties", .text, check: .json(named: "properties_is_json")),
            SchemaColumn("session_id", .text),
            SchemaColumn.secondsSince1970("created_at", notNull: true),
        ]),
    ]

    // MARK: PostgreSQL's own

    /// `opsh_json_valid`, the JSON columns' check; and the function every
    /// table's notify trigger runs.
    static let postgresFunctions = """
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
        """

    static var postgresNotifyTriggers: String {
        tables.map { table in
            "CREATE TRIGGER \(table)_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON \(table) "
                + "FOR EACH STATEMENT EXECUTE FUNCTION opsh_notify_change();"
        }.joined(separator: "\n")
    }
}
