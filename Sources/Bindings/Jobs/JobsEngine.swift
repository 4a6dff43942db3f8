import Foundation
import Jobs
import LuaRuntime
import Store

/// What the `jobs` module (``JobsModule``) runs on: the session's database
/// (``DatabaseSession``) for the rules of when the job manager may write,
/// its row path for the rows `jobs.*` return, and a build queue of the
/// session's own (``DatabaseSession/makeBuildStore()``, made at first
/// use) for the job manager and the log lines, whatever the engine. The
/// job manager itself is the one `opsh runner` uses.
final class JobsEngine {
    unowned let session: OpshSession
    private var store: (any BuildStore)?

    init(session: OpshSession) {
        self.session = session
    }

    var runtime: LuaRuntime { session.runtime }
    var rowShapes: RowShapes { session.rowShapes }
    var events: EventQueue { session.events }
    func subscribe(_ handler: @escaping (Any & Sendable) throws -> Void) -> Int { session.subscribe(handler) }
    func unsubscribe(_ id: Int) { session.unsubscribe(id) }

    /// Where builds check out when `jobs.configure` did not say.
    var defaultWorkspaceRoot: String? { session.database.defaultWorkspaceRoot }

    /// The session's build queue, connected at first use.
    private func buildStore() throws -> any BuildStore {
        if let store { return store }
        let made = try session.database.makeBuildStore()
        store = made
        return made
    }

    /// The session's job manager (made once, by ``JobsModule/manager``).
    func makeManager(_ configuration: JobManager.Configuration) throws -> JobManager {
        JobManager(database: try buildStore(), configuration: configuration)
    }

    /// The functions that write builds (the others only read or wait).
    private static let writers: Set<String> = ["create", "enqueue", "start", "cancel", "delete", "markStale"]

    /// Why the job manager cannot write or be waited for now (inside
    /// `db.transaction`, a dry run …); nil: it can.
    func transactionRefusal(_ name: String) throws -> String? {
        try session.database.jobsRefusal(name, writes: Self.writers.contains(name))
    }

    /// Runs one of Store's reads of `jobs.*` (in the engine's dialect) and
    /// pushes its value as `db.first` / `db.query` would.
    func run(_ statement: (SQLDialect) -> QueryStatement, call: LuaCall) throws -> Int32 {
        let statement = statement(session.database.dialect)
        // The job manager's threads write through connections of their
        // own, which a shared read snapshot (SQLite's, up to 50 ms) does
        // not know of: a build just created or ended must be seen.
        session.releaseReadSnapshot()
        return try session.rows.run(statement.sql, statement.values, shape: statement.shape.resultShape, call: call)
    }

    /// A build's lines: the last `tail`, or those after `after` (at most
    /// `limit`); throws ``JobError/unknownBuild(_:)`` for an id without a build.
    func logs(_ id: String, tail: Int?, after: Int64?, limit: Int?, includeDebug: Bool) throws -> [BuildLogLine] {
        let store = try buildStore()
        guard try store.build(id) != nil else { throw JobError.unknownBuild(id) }
        if after != nil || limit != nil {
            return try store.logs(id, after: after ?? 0, limit: limit ?? 1000, includeDebug: includeDebug)
        }
        return try store.logs(id, tail: tail ?? 100, includeDebug: includeDebug)
    }

    /// Where `jobs.follow` starts: the build (nil: none) and the line before
    /// the last `tail` lines (nil: from the first line).
    func followStart(_ id: String, tail: Int?, includeDebug: Bool) throws -> (BuildRecord?, BuildLogLine?) {
        let store = try buildStore()
        guard let build = try store.build(id) else { return (nil, nil) }
        guard let tail else { return (build, nil) }
        let last = try store.logs(id, tail: tail + 1, includeDebug: includeDebug)
        return (build, last.count > tail ? last[0] : nil)
    }

    /// Reads a follower's next page; callable from any thread (a
    /// background follower's), never inside the session's transaction.
    func pageReader(_ manager: JobManager) -> BuildFollower.PageReader {
        let store = store
        return { build, after, limit, includeDebug in
            guard let store else { throw JobError.unknownBuild(build) }
            return try store.logPage(build: build, after: after, limit: limit, includeDebug: includeDebug)
        }
    }

    /// Reads a follower's next page on the Lua thread.
    func logPage(_ manager: JobManager, build: String, after: BuildLogLine?, limit: Int, includeDebug: Bool) throws -> BuildLogPage {
        try buildStore().logPage(build: build, after: after, limit: limit, includeDebug: includeDebug)
    }
}
