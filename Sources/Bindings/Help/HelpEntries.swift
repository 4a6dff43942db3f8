/// One function (or value) of the Lua API, as `help` shows it.
struct HelpEntry: Sendable, Equatable {
    /// The global table it lives in; "" for a global function.
    let module: String
    let name: String
    /// How to call it: `db.query(sql, ...) → rows`.
    let signature: String
    /// One line: what it does.
    let summary: String

    var qualifiedName: String { module.isEmpty ? name : "\(module).\(name)" }
}

/// The descriptions of the whole Lua API, as data. `help()` shows the
/// entries whose function exists in the session (modules of other
/// engineers may be absent from a build); a test checks that every
/// function of the described modules has an entry.
enum HelpEntries {
    /// Module summaries, in the order `help()` lists them.
    static let modules: [(name: String, summary: String)] = [
        ("", "global functions"),
        ("db", "SQL on the database"),
        ("json", "JSON text ⇄ Lua values"),
        ("projects", "build-server projects (table projects)"),
        ("schemes", "schemes of projects (table schemes)"),
        ("builds", "builds of schemes (table builds)"),
        ("logs", "build log lines (table buildLogs)"),
        ("crashes", "crash logs of builds (table crashLogs)"),
        ("config", "the SDK configuration aggregate"),
        ("models", "models and their daily usage (model_metadata, model_usage_stats)"),
        ("sessions", "generation sessions and generations"),
        ("telemetry", "telemetry events"),
        ("key", "query-key builder"),
        ("opsh", "the session: events and watches"),
        ("migrate", "schema migrations, built-in and in Lua"),
        ("jobs", "builds run by this opsh"),
        ("git", "versions and branches of a repository"),
        ("analytics", "aggregations over usage and builds"),
        ("export", "an aggregate as a JSON document (import() reads it back)"),
        ("audit", "the audit trail: who ran what, why, and what it committed"),
        ("undo", "what undo(n) can take back (SQLite, at the prompt)"),
    ]

    static func table(_ module: String, _ noun: String, key: String) -> [HelpEntry] {
        // "an event", "a build"
        let article = noun.first.map { "aeiou".contains($0) } == true ? "an" : "a"
        return [
            HelpEntry(module: module, name: "get", signature: "\(module).get(\(key)) → row|nil", summary: "The \(noun) with this key, or nil."),
            HelpEntry(module: module, name: "list", signature: "\(module).list{ where=, order=, limit=, offset= } → rows",
                      summary: "\(noun.capitalizedFirst)s matching where ({col = v}, {col = {a, b}} for IN, {col = {gt = v}}, db.NULL), ordered (\"col desc\")."),
            HelpEntry(module: module, name: "count", signature: "\(module).count{ where= } → integer", summary: "How many \(noun)s match."),
            HelpEntry(module: module, name: "insert", signature: "\(module).insert(row) → row", summary: "Inserts \(article) \(noun) (missing ids, dates and defaults filled in); returns it as stored."),
            HelpEntry(module: module, name: "update", signature: "\(module).update(\(key), fields) → row", summary: "Changes some fields of \(article) \(noun); fails if there is none."),
            HelpEntry(module: module, name: "upsert", signature: "\(module).upsert(row) → row", summary: "Updates the given fields of the \(noun) with the row's key, or inserts it."),
            HelpEntry(module: module, name: "delete", signature: "\(module).delete(\(key)) → boolean", summary: "Deletes \(article) \(noun); false when there was none."),
        ]
    }

    static func replacing(_ entries: [HelpEntry], _ replacements: [HelpEntry]) -> [HelpEntry] {
        entries.map { entry in replacements.first { $0.module == entry.module && $0.name == entry.name } ?? entry }
            + replacements.filter { new in !entries.contains { $0.module == new.module && $0.name == new.name } }
    }

    static let all: [HelpEntry] = globals + database + json + buildServer + analytics + keys + others

    static let globals: [HelpEntry] = [
        HelpEntry(module: "", name: "help", signature: "help([fn | \"module.name\" | module | {markdown=true|module}])",
                  summary: "Lists every module and function, or describes one; {markdown=true} prints every entry as Markdown (docs/lua-api.md is made of it)."),
        HelpEntry(module: "", name: "backup", signature: "backup(path [, {keep=N, overwrite=bool}]) → {path, pages, bytes, seconds, removed}",
                  summary: "Online copy of the database, checked with integrity_check; keep=N deletes all but the N newest backups of the series that opsh wrote (nothing else)."),
        HelpEntry(module: "", name: "restore", signature: "restore{from=backupFile, table=T [, where=\"SQL condition\", args={…}]} → {table, matched, restored, alreadyThere}",
                  summary: "Brings back the rows of T in an SQLite backup that match where and that T does not have now (a row T has is left as it is), as one write: shown, confirmed and undoable at the prompt, reported by --dry-run. where runs on the backup, read-only."),
        HelpEntry(module: "", name: "checkpoint", signature: "checkpoint([mode]) → {walFrames, checkpointed}", summary: "Copies the WAL into the database file: \"passive\" (default, waits for nobody), \"full\", \"restart\" or \"truncate\" (empties the -wal file). On PostgreSQL: the server's CHECKPOINT (superuser or pg_checkpoint only) → {seconds}."),
        HelpEntry(module: "", name: "vacuum", signature: "vacuum() → {pagesBefore, pagesAfter, freePagesBefore}", summary: "Rebuilds the file to reclaim free pages (not inside db.transaction). On PostgreSQL: VACUUM (ANALYZE) of opsh's tables, on a connection of its own → {tables, pagesBefore, pagesAfter, bytesBefore, bytesAfter, skipped}."),
        HelpEntry(module: "", name: "import", signature: "import(jsonText | {file=} [, {replace=bool}]) → rowsPerTable, replacedPerTable",
                  summary: "Writes an export document in one transaction after checking all of it; rows that exist are refused unless replace=true."),
        HelpEntry(module: "", name: "check", signature: "check() → {ok, problems, foreignKeys}", summary: "integrity_check and foreign_key_check: damage and rows pointing at missing rows."),
        HelpEntry(module: "", name: "stats", signature: "stats() → {path, fileSize, walSize, pageSize, pageCount, freePages, rows, tables, migrations}",
                  summary: "Sizes, row counts per table (rows.name) and applied migrations."),
        HelpEntry(module: "", name: "query", signature: "query(key) → value", summary: "Fetches a query key (a key.* builder or its text) once."),
        HelpEntry(module: "", name: "watch", signature: "watch(keyOrSql, fn [, ...]) → handle", summary: "Calls fn(new, old) whenever the key's value or the SELECT's rows change; handle:cancel() stops it."),
        HelpEntry(module: "", name: "undo", signature: "undo([n=1]) → string", summary: "Takes back the n-th last chunk typed at the shell's prompt that changed data, unless another process changed one of its rows since (SQLite; refused in scripts)."),
        HelpEntry(module: "undo", name: "list", signature: "undo.list() → string", summary: "What undo(n) can take back, newest first, with the n for each (as .undo shows it; SQLite, at the shell's prompt)."),
        HelpEntry(module: "", name: "chart", signature: "chart(rows, labelColumn, valueColumn [, {width=}]) → string", summary: "A horizontal bar chart of a row set."),
        HelpEntry(module: "", name: "sparkline", signature: "sparkline(rows, column | numbers) → string", summary: "A one-line chart of numbers."),
    ]

    static let database: [HelpEntry] = [
        HelpEntry(module: "db", name: "query", signature: "db.query(sql, ...) → rows", summary: "Runs SQL with ? or :name parameters; an array of rows keyed by column (NULL is an absent field)."),
        HelpEntry(module: "db", name: "first", signature: "db.first(sql, ...) → row|nil", summary: "The first row of a query, or nil."),
        HelpEntry(module: "db", name: "value", signature: "db.value(sql, ...) → value|nil", summary: "The first column of the first row, or nil."),
        HelpEntry(module: "db", name: "exec", signature: "db.exec(sql, ...) → changes, lastInsertId", summary: "Runs a statement (or a script of statements without parameters)."),
        HelpEntry(module: "db", name: "send", signature: "db.send(sql, ...)", summary: "db.exec without its result: in a transaction on PostgreSQL, sent without waiting (pipelined); a failure is raised at the next call that reads, or at the transaction's end, naming the line that sent it."),
        HelpEntry(module: "db", name: "copy", signature: "db.copy(table, rows|file [, {format=\"csv\", header=, columns=}]) → rows written", summary: "Writes rows (lists or keyed tables) or a CSV file into a table in one write, all or none (COPY on PostgreSQL); a bad row is named by its index or line and its column."),
        HelpEntry(module: "db", name: "rows", signature: "for row in db.rows(sql, ...) do … end", summary: "Streams the rows of a query at constant memory."),
        HelpEntry(module: "db", name: "transaction", signature: "db.transaction(fn [, {maxChanges=, allowSchemaChanges=}]) → fn's results", summary: "Runs fn in a transaction (a savepoint when nested); an error rolls back its level and is re-raised; past maxChanges rows (or a schema change, unless allowed) it rolls back."),
        HelpEntry(module: "db", name: "inTransaction", signature: "db.inTransaction() → boolean", summary: "Whether a db.transaction is open."),
        HelpEntry(module: "db", name: "blob", signature: "db.blob(string) → blob", summary: "Binds a string as a BLOB."),
        HelpEntry(module: "db", name: "NULL", signature: "db.NULL", summary: "Writes NULL where a table field would otherwise be absent (= json.null)."),
    ]

    static let json: [HelpEntry] = [
        HelpEntry(module: "json", name: "encode", signature: "json.encode(value [, {pretty=true}]) → string",
                  summary: "JSON text: 1…n tables are arrays, {} is [] (json.object() for {}), integers stay integers, keys sorted; a row keeps its columns' order, NULL as null."),
        HelpEntry(module: "json", name: "decode", signature: "json.decode(text) → value", summary: "Parses JSON; null becomes json.null (= db.NULL); errors give line and column."),
        HelpEntry(module: "json", name: "object", signature: "json.object([t]) → t", summary: "Marks a table as a JSON object, so that empty it encodes as {}."),
        HelpEntry(module: "json", name: "null", signature: "json.null", summary: "JSON null; the same value as db.NULL."),
    ]

    static let buildServer: [HelpEntry] =
        replacing(table("projects", "project", key: "bundleIdentifier"), [
            HelpEntry(module: "projects", name: "delete", signature: "projects.delete(bundleIdentifier [, {cascade=true}]) → boolean",
                      summary: "Deletes a project and its schemes; with builds only when cascade (they go too)."),
        ])
        + replacing(table("schemes", "scheme", key: "id"), [
            HelpEntry(module: "schemes", name: "list", signature: "schemes.list(bundleIdentifier | {where=, order=, limit=, offset=}) → rows",
                      summary: "A project's schemes in their order, or schemes matching where."),
            HelpEntry(module: "schemes", name: "delete", signature: "schemes.delete(id [, {cascade=true}]) → boolean",
                      summary: "Deletes a scheme; with builds only when cascade (they go too)."),
        ])
        + replacing(table("builds", "build", key: "id"), [
            HelpEntry(module: "builds", name: "create", signature: "builds.create(schemeId, version) → row", summary: "A queued build of a scheme with the next build number."),
            HelpEntry(module: "builds", name: "latest", signature: "builds.latest(bundleIdentifier [, n=10]) → rows", summary: "A project's n most recent builds, newest first."),
            HelpEntry(module: "builds", name: "delete", signature: "builds.delete(id) → boolean", summary: "Deletes a build with its logs and crash logs; a running build is refused."),
        ])
        + replacing(table("logs", "log line", key: "id"), [
            HelpEntry(module: "logs", name: "tail", signature: "logs.tail(buildId [, n=20 [, {debug=false}]]) → rows", summary: "A build's last n log lines, oldest first."),
        ])
        + table("crashes", "crash log", key: "incidentIdentifier")

    static let analytics: [HelpEntry] = [
        HelpEntry(module: "config", name: "get", signature: "config.get([id=\"default\"]) → config|nil",
                  summary: "The configuration with routing_policies, analytics and storage as one table."),
        HelpEntry(module: "config", name: "save", signature: "config.save(config) → config",
                  summary: "Stores the aggregate atomically: merges fields; routing_policies, when given, is the complete list."),
        HelpEntry(module: "config", name: "list", signature: "config.list{ where=, order=, limit=, offset= } → rows", summary: "The configuration rows."),
        HelpEntry(module: "config", name: "delete", signature: "config.delete(id) → boolean", summary: "Deletes a configuration with its policies and settings."),
    ]
        + replacing(table("models", "model", key: "id"), [
            HelpEntry(module: "models", name: "delete", signature: "models.delete(id [, {cascade=true}]) → boolean",
                      summary: "Deletes a model and its usage; with sessions only when cascade (they go too)."),
            HelpEntry(module: "models", name: "usage", signature: "models.usage(id) → rows", summary: "A model's usage, one row per UTC day, oldest first."),
            HelpEntry(module: "models", name: "recordUsage", signature: "models.recordUsage(id, {tokens=, cost=, latencyMs=, failed=, at=})",
                      summary: "Adds one generation's figures to the model's usage of that day."),
        ])
        + replacing(table("sessions", "session", key: "id"), [
            HelpEntry(module: "sessions", name: "generations", signature: "sessions.generations(id) → rows", summary: "A session's generations in sequence."),
            HelpEntry(module: "sessions", name: "addGeneration", signature: "sessions.addGeneration(row) → row",
                      summary: "Appends a generation, keeping the session's totals and the model's usage in step."),
        ])
        + replacing(table("telemetry", "event", key: "id"), [
            HelpEntry(module: "telemetry", name: "insertMany", signature: "telemetry.insertMany(rows) → count", summary: "Inserts many events in one transaction (batched)."),
            HelpEntry(module: "telemetry", name: "counts", signature: "telemetry.counts([since]) → rows", summary: "Event counts by name, most frequent first."),
            HelpEntry(module: "telemetry", name: "cleanup", signature: "telemetry.cleanup{ olderThan=\"30d\", keep=, event=, batch=, dryRun=, onBatch= } → report",
                      summary: "Deletes old events in short batches (the storage configuration's retention by default)."),
        ])

    static let keys: [HelpEntry] = [
        HelpEntry(module: "key", name: "project", signature: "key.project(id).detail | .schemes.ids | .latestBuilds(n) | …", summary: "Keys of a project."),
        HelpEntry(module: "key", name: "scheme", signature: "key.scheme(id)", summary: "The key of a scheme."),
        HelpEntry(module: "key", name: "schemes", signature: "key.schemes{ids}.builds.ids([version])", summary: "Keys of several schemes' builds."),
        HelpEntry(module: "key", name: "build", signature: "key.build(id) | .logs{debug=, category=} | .crashLogs.ids", summary: "Keys of a build and its logs."),
        HelpEntry(module: "key", name: "buildLog", signature: "key.buildLog(id)", summary: "The key of a build log line."),
        HelpEntry(module: "key", name: "crashLog", signature: "key.crashLog(id)", summary: "The key of a crash log."),
        HelpEntry(module: "key", name: "model", signature: "key.model(id) | .usage", summary: "Keys of a model."),
        HelpEntry(module: "key", name: "session", signature: "key.session(id) | .generations", summary: "Keys of a generation session."),
        HelpEntry(module: "key", name: "parse", signature: "key.parse(text) → key", summary: "Parses a textual query key (errors give the position)."),
        HelpEntry(module: "opsh", name: "wait", signature: "opsh.wait([timeout])", summary: "Runs watch callbacks until no watch is left or the timeout passes."),
        HelpEntry(module: "opsh", name: "dryRun", signature: "opsh.dryRun() → boolean", summary: "Whether this run is an `opsh run --dry-run` (everything is rolled back at the end)."),
        HelpEntry(module: "opsh", name: "watches", signature: "opsh.watches() → handles", summary: "The live watches."),
        HelpEntry(module: "migrate", name: "status", signature: "migrate.status([{folder=}]) → rows", summary: "Every migration, built-in and Lua, with its state."),
        HelpEntry(module: "migrate", name: "up", signature: "migrate.up([target | {folder=, target=}])", summary: "Applies pending migrations, each in a transaction, up to target."),
        HelpEntry(module: "migrate", name: "folder", signature: "migrate.folder([path]) → path", summary: "The folder of Lua migrations (sets it when given)."),
    ]

    static let others: [HelpEntry] = [
        HelpEntry(module: "jobs", name: "create", signature: "jobs.create{scheme=, version=} → row", summary: "A queued build: this opsh starts it with jobs.start, unless an `opsh runner` claims it first."),
        HelpEntry(module: "jobs", name: "enqueue", signature: "jobs.enqueue{scheme=, version=} → row", summary: "A queued build for the `opsh runner`s to claim and run (builds.create and jobs.create queue for them too)."),
        HelpEntry(module: "jobs", name: "start", signature: "jobs.start(id | {scheme=, version=}) → row", summary: "Runs a build in this opsh (creating it from a scheme and version, held so no runner takes it); refused, saying who, for a build a runner claimed."),
        HelpEntry(module: "jobs", name: "cancel", signature: "jobs.cancel(id) → boolean", summary: "Cancels a build; false when it had ended."),
        HelpEntry(module: "jobs", name: "delete", signature: "jobs.delete(id)", summary: "Deletes a build with its logs, crash logs and workspace."),
        HelpEntry(module: "jobs", name: "wait", signature: "jobs.wait(id [, timeout]) → row", summary: "Waits for a build to end; its final row."),
        HelpEntry(module: "jobs", name: "follow", signature: "jobs.follow(id [, {background=true}])", summary: "Prints a build's log as it is written."),
        HelpEntry(module: "jobs", name: "get", signature: "jobs.get(id) → row", summary: "A build's row."),
        HelpEntry(module: "jobs", name: "list", signature: "jobs.list{status=, scheme=, project=, limit=} → rows", summary: "Builds, newest first."),
        HelpEntry(module: "jobs", name: "logs", signature: "jobs.logs(id [, {tail=, debug=, after=}]) → rows", summary: "A build's log rows, oldest first."),
        HelpEntry(module: "jobs", name: "crashLogs", signature: "jobs.crashLogs(id) → rows", summary: "A build's crash logs."),
        HelpEntry(module: "jobs", name: "stale", signature: "jobs.stale() → rows", summary: "Running builds whose runner is gone: three heartbeats missed, or its process gone on this host."),
        HelpEntry(module: "jobs", name: "markStale", signature: "jobs.markStale(id, reason)", summary: "Marks a stale build failed."),
        HelpEntry(module: "jobs", name: "configure", signature: "jobs.configure{concurrency=, grace=, workspaces=, keepWorkspaces=}", summary: "Settings of the job manager (before the first build); keepWorkspaces: checkouts kept per scheme (5)."),
        HelpEntry(module: "git", name: "versions", signature: "git.versions(pathOrURL [, {timeout=}]) → rows, skipped", summary: "Tags that are semantic versions, oldest first."),
        HelpEntry(module: "git", name: "branches", signature: "git.branches(pathOrURL [, {timeout=}]) → rows", summary: "Local and remote-tracking branches."),
        HelpEntry(module: "export", name: "project", signature: "export.project(id [, {logs=bool, file=path, overwrite=bool}]) → jsonText|path, rowsPerTable",
                  summary: "A project with its schemes, builds, and (unless logs=false) build logs and crash logs, as JSON."),
        HelpEntry(module: "export", name: "model", signature: "export.model(id [, {file=path, overwrite=bool}]) → jsonText|path, rowsPerTable",
                  summary: "A model with its daily usage stats, as JSON."),
        HelpEntry(module: "analytics", name: "models", signature: "analytics.models{since=, until=} → rows", summary: "Per model: tokens, cost, latency."),
        HelpEntry(module: "analytics", name: "daily", signature: "analytics.daily{model=, since=, until=} → rows", summary: "Usage per day."),
        HelpEntry(module: "analytics", name: "usage", signature: "analytics.usage{since=} → rows", summary: "Usage from model_usage_stats with error rates."),
        HelpEntry(module: "analytics", name: "builds", signature: "analytics.builds{since=} → rows", summary: "Success rate and duration per scheme."),
        HelpEntry(module: "audit", name: "list", signature: "audit.list{ where=, order=, limit=, offset= } → rows",
                  summary: "Runs, one-liners and shell chunks recorded: startedAt, endedAt, user, host, pid, mode, script, code, reason, dryRun, readOnly, changes (table → {inserted, updated, deleted}), status, hash; newest first."),
        HelpEntry(module: "audit", name: "prune", signature: "audit.prune{ olderThan=\"90d\" } → {deleted}",
                  summary: "Deletes audit rows older than that (at least a day): the only way rows leave the trail."),
        HelpEntry(module: "audit", name: "requireReason", signature: "audit.requireReason(boolean)",
                  summary: "Whether every run, one-liner and shell on this database must give a reason (--reason, OPSH_REASON)."),
        HelpEntry(module: "audit", name: "verify", signature: "audit.verify() → {ok, rows, unchained, row, problem, untrusted, summary}",
                  summary: "Checks the trail's hash chain: the first row that was rewritten, removed from the middle or not written by opsh (as opsh runs --verify)."),
    ]
}

extension String {
    var capitalizedFirst: String { prefix(1).uppercased() + dropFirst() }
}
