/// "004_runners": what the build runners sharing one queue need on
/// `builds` (README, "Build runners"; ARCHITECTURE.md, "Build runners and
/// the queue").
///
/// - `runnerId`: the job manager that holds the build (one per `opsh
///   runner`, one per shell or script that starts builds), beside the
///   existing host, pid and start time that say which process it is.
/// - `heartbeatAt`, `heartbeatInterval`: the holder refreshes
///   `heartbeatAt` every `heartbeatInterval` seconds; a build whose
///   heartbeat is older than three of its own intervals is stale on every
///   machine (a pid means nothing on another host).
/// - `attempts`: how many times a build was started; a runner requeues a
///   stale build until it has used its attempts, then marks it failed.
///
/// The index serves the claim: the oldest queued build, in order.
enum Migration004Runners {
    static let identifier = "004_runners"

    static let migration = BuiltInMigration(identifier, [
        .addColumn(table: "builds", SchemaColumn("runnerId", .text)),
        .addColumn(table: "builds", SchemaColumn.secondsSince1970("heartbeatAt")),
        .addColumn(table: "builds", SchemaColumn("heartbeatInterval", .real, check: "heartbeatInterval > 0")),
        .addColumn(table: "builds", SchemaColumn("attempts", .integer, notNull: true, default: "0", check: "attempts >= 0")),
        // the claim: the oldest queued build
        .createIndex(SchemaIndex("builds_on_status_created", on: "builds", ["status", "createdAt", "buildNumber"])),
        // a holder's heartbeat: the builds it holds
        .createIndex(SchemaIndex("builds_on_runner", on: "builds", ["runnerId"])),
    ])
}
