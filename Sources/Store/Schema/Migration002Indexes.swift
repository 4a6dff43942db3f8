import GRDB

/// "002_indexes": one index per query the core runs (query keys,
/// repositories, cleanup, analytics), so none of them scans a big table.
enum Migration002Indexes {
    static let identifier = "002_indexes"

    static func migrate(_ db: Database) throws {
        try db.execute(sql: """
            -- project.{id}.schemes.ids, ordered
            CREATE INDEX schemes_on_project_order ON schemes(projectBundleIdentifier, "order");
            -- schemes.{ids}.builds.ids[.{version}], latestBuilds, build numbers
            CREATE INDEX builds_on_scheme_created ON builds(schemeId, createdAt);
            CREATE INDEX builds_on_scheme_version ON builds(schemeId, versionString);
            -- stale-build detection and job queues
            CREATE INDEX builds_on_status ON builds(status);
            -- build.{id}.logs.ids[.debug][.category{c}]
            CREATE INDEX buildLogs_on_build_created ON buildLogs(buildId, createdAt);
            -- build.{id}.crashLogs.ids
            CREATE INDEX crashLogs_on_build_created ON crashLogs(buildId, createdAt);

            CREATE INDEX routing_policies_on_configuration ON routing_policies(configuration_id, priority);
            CREATE INDEX model_usage_stats_on_day ON model_usage_stats(day);
            CREATE INDEX generation_sessions_on_model_created ON generation_sessions(model_id, created_at);
            CREATE INDEX generations_on_created ON generations(created_at);
            -- retention cleanup and counts by event
            CREATE INDEX telemetry_on_created ON telemetry(created_at);
            CREATE INDEX telemetry_on_event_created ON telemetry(event, created_at);
            """)
    }
}
