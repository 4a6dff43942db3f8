/// "002_indexes": one index per query the core runs (query keys,
/// repositories, cleanup, analytics), so none of them scans a big table.
enum Migration002Indexes {
    static let identifier = "002_indexes"

    static let migration = BuiltInMigration(identifier, indexes.map(SchemaStep.createIndex))

    static let indexes: [SchemaIndex] = [
        // project.{id}.schemes.ids, ordered
        SchemaIndex("schemes_on_project_order", on: "schemes", ["projectBundleIdentifier", "order"]),
        // schemes.{ids}.builds.ids[.{version}], latestBuilds, build numbers
        SchemaIndex("builds_on_scheme_created", on: "builds", ["schemeId", "createdAt"]),
        SchemaIndex("builds_on_scheme_version", on: "builds", ["schemeId", "versionString"]),
        // stale-build detection and job queues
        SchemaIndex("builds_on_status", on: "builds", ["status"]),
        // build.{id}.logs.ids[.debug][.category{c}]
        SchemaIndex("buildLogs_on_build_created", on: "buildLogs", ["buildId", "createdAt"]),
        // build.{id}.crashLogs.ids
        SchemaIndex("crashLogs_on_build_created", on: "crashLogs", ["buildId", "createdAt"]),

        SchemaIndex("routing_policies_on_configuration", on: "routing_policies", ["configuration_id", "priority"]),
        SchemaIndex("model_usage_stats_on_day", on: "model_usage_stats", ["day"]),
        SchemaIndex("generation_sessions_on_model_created", on: "generation_sessions", ["model_id", "created_at"]),
        SchemaIndex("generations_on_created", on: "generations", ["created_at"]),
        // retention cleanup and counts by event
        SchemaIndex("telemetry_on_created", on: "telemetry", ["created_at"]),
        SchemaIndex("telemetry_on_event_created", on: "telemetry", ["event", "created_at"]),
    ]
}
