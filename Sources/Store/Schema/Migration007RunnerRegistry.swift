/// "007_runnerRegistry": the runners themselves (`opsh_runners`), so that
/// `opsh runners` lists an idle runner too, not only the ones holding a
/// build (README, "Build runners"; ARCHITECTURE.md, "Build runners and the
/// queue").
///
/// One row per `opsh runner` process, written by the runner at its start,
/// its `heartbeatAt` refreshed by one short UPDATE each heartbeat, and
/// `stoppedAt` set when it exits cleanly. A runner without a `stoppedAt`
/// whose heartbeat is older than three of its intervals was lost (killed,
/// its machine gone). Times are the database's clock: the machine's on
/// SQLite, the server's on PostgreSQL. The builds a runner holds are not
/// copied here: they are `builds` rows whose `runnerId` is the row's `id`.
///
/// The table is opsh's own (hence the `opsh_` prefix, beside `opsh_audit`:
/// a backend may well have a `runners` table of its own); a runner deletes
/// only rows of runners that ended a week ago (``RunnerRegistry``).
enum Migration007RunnerRegistry {
    static let identifier = "007_runnerRegistry"

    static let migration = BuiltInMigration(identifier, [
        .createTable(SchemaTable(RunnerRegistry.table, [
            SchemaColumn("id", .text, primaryKey: true, notNull: true, note: "the runner's holder id: builds.runnerId"),
            SchemaColumn("host", .text, notNull: true),
            SchemaColumn("pid", .integer, notNull: true),
            SchemaColumn.secondsSince1970("processStartedAt", note: "the process's start on its machine (/proc), telling it from a later process with its pid"),
            SchemaColumn.secondsSince1970("startedAt", notNull: true, note: "the database's clock when it registered"),
            SchemaColumn.secondsSince1970("heartbeatAt", notNull: true),
            SchemaColumn("heartbeatInterval", .real, notNull: true, check: "heartbeatInterval > 0"),
            SchemaColumn.secondsSince1970("stoppedAt", note: "NULL while it runs, or when it was lost"),
            SchemaColumn("version", .text, notNull: true, note: "the opsh that runs it"),
            SchemaColumn("concurrency", .integer, notNull: true, check: "concurrency > 0"),
            SchemaColumn("schemes", .text, note: "its --scheme values, comma-separated; NULL: every scheme"),
        ])),
    ])
}
