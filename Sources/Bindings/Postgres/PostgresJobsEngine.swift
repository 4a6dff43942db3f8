import Foundation
import Jobs
import LuaRuntime
import Store

/// `jobs.*` on PostgreSQL: the SQLite module's functions (``JobsModule``)
/// over this engine. The job manager is the one `opsh runner` uses, over
/// ``PostgresBuildQueue`` (connections of its own, opened at the first
/// call that needs the manager; the server's clock; builds held as a
/// runner holds them, so no runner takes a build `jobs.start` runs).
///
/// - **Reads** of rows (`get`, `list`, `crashLogs`, `stale`, and the row
///   each function returns) run on the session's connection, as the
///   repositories' do, so they print as `query(key.build(id))` does.
///   Log lines (`logs`, `follow`) are read by the queue's connections:
///   what is committed, never inside the session's transaction (a
///   follower polls; it never waits in a transaction).
/// - **A line's cursor** is its place in its build's log (1, 2, …;
///   PostgresBuildQueue says why): `jobs.logs(id, { after = row.cursor })`
///   pages as on SQLite.
/// - **Refused** where the job manager's writes would escape the
///   session's rules: inside `db.transaction` or a dry run (as on
///   SQLite), in a shell chunk or a `--max-changes` run that has written
///   (its rows are not visible to the manager's connections, and they
///   could wait for its locks), and with `--read-only` (the manager's
///   connections are not the session's read-only transactions). What the
///   manager commits counts for the audit trail and against
///   `--max-changes` (``PostgresWritesElsewhere``).
final class PostgresJobsEngine: JobsEngine {
    unowned let session: PostgresSession
    private var queue: PostgresBuildQueue?

    init(session: PostgresSession) {
        self.session = session
    }

    /// Installs `jobs` and `git` (or, with `--sandbox`, functions that
    /// refuse, as on SQLite).
    static func install(in session: PostgresSession) throws {
        if session.sandbox {
            try session.runtime.execute("""
                local function refused(name)
                  return function() error(name .. " is not available in --sandbox (no files or processes)", 2) end
                end
                local function module(name)
                  return setmetatable({}, { __index = function(_, field) return refused(name .. "." .. field) end })
                end
                git, jobs = module("git"), module("jobs")
                """, chunkName: "=(sandbox)")
            return
        }
        try JobsModule.install(engine: PostgresJobsEngine(session: session))
        GitModule.install(runtime: session.runtime, rowShapes: session.rowShapes)
    }

    var runtime: LuaRuntime { session.runtime }
    var rowShapes: RowShapes { session.rowShapes }
    var events: EventQueue { session.events }
    func subscribe(_ handler: @escaping (Any & Sendable) throws -> Void) -> Int { session.subscriptions.subscribe(handler) }
    func unsubscribe(_ id: Int) { session.subscriptions.unsubscribe(id) }

    /// No database file to put them beside: opsh's data folder of the
    /// machine, as `opsh runner --db postgresql://…` does.
    var defaultWorkspaceRoot: String? { DatabaseLocation.dataDirectory() + "/workspaces" }

    /// The queue, connected at first use.
    private func buildQueue() throws -> PostgresBuildQueue {
        if let queue { return queue }
        let made = try PostgresBuildQueue(url: session.database.url, counted: session.database.writesElsewhere)
        queue = made
        return made
    }

    func makeManager(_ configuration: JobManager.Configuration) throws -> JobManager {
        JobManager(database: try buildQueue(), configuration: configuration)
    }

    /// The functions that write builds (the others only read or wait).
    private static let writers: Set<String> = ["create", "enqueue", "start", "cancel", "delete", "markStale"]

    func transactionRefusal(_ name: String) throws -> String? {
        let database = session.database
        if database.isDryRun {
            return "jobs.\(name) is refused in a dry run: builds are written outside its transaction, so they could not be rolled back"
        }
        if database.options.readOnly, Self.writers.contains(name) {
            return "jobs.\(name) is refused with --read-only: it writes builds"
        }
        if database.depth > (database.isInScope ? 1 : 0) {
            return "jobs.\(name) cannot run inside db.transaction: the job manager writes builds in transactions of its own; call it before or after the transaction"
        }
        if database.isInRunScope, try database.transactionHasWritten() {
            return "jobs.\(name) cannot run after a --max-changes run has written (the run is one transaction until it ends, and the job manager's connections cannot see its rows): call it before the run's first write"
        }
        if database.isInChunk, try database.transactionHasWritten() {
            return "jobs.\(name) cannot run inside a chunk that has written (a chunk at the prompt is one transaction until it ends, and the job manager's connections cannot see its rows: run this in a chunk of its own, or before the chunk's first write)"
        }
        return nil
    }

    func run(_ statement: (SQLDialect) -> QueryStatement, call: LuaCall) throws -> Int32 {
        let statement = statement(.postgresql)
        return try PostgresRepositoryEngine(session: session).run(statement.sql, statement.values,
                                                                  shape: statement.shape.executorShape, call: call)
    }

    func logs(_ id: String, tail: Int?, after: Int64?, limit: Int?, includeDebug: Bool) throws -> [BuildLogLine] {
        let queue = try buildQueue()
        guard try queue.build(id) != nil else { throw JobError.unknownBuild(id) }
        if after != nil || limit != nil {
            return try queue.logs(id, after: after ?? 0, limit: limit ?? 1000, includeDebug: includeDebug)
        }
        return try queue.logs(id, tail: tail ?? 100, includeDebug: includeDebug)
    }

    func followStart(_ id: String, tail: Int?, includeDebug: Bool) throws -> (BuildRecord?, BuildLogLine?) {
        let queue = try buildQueue()
        guard let build = try queue.build(id) else { return (nil, nil) }
        guard let tail else { return (build, nil) }
        let last = try queue.logs(id, tail: tail + 1, includeDebug: includeDebug)
        return (build, last.count > tail ? last[0] : nil)
    }

    func pageReader(_ manager: JobManager) -> BuildFollower.PageReader {
        let queue = queue
        return { build, after, limit, includeDebug in
            guard let queue else { throw JobError.unknownBuild(build) }
            return try queue.logPage(build: build, after: after, limit: limit, includeDebug: includeDebug)
        }
    }

    func logPage(_ manager: JobManager, build: String, after: BuildLogLine?, limit: Int, includeDebug: Bool) throws -> BuildLogPage {
        try buildQueue().logPage(build: build, after: after, limit: limit, includeDebug: includeDebug)
    }
}
