import Foundation
import Jobs
import LuaRuntime
import Store

/// What the `jobs` module (``JobsModule``) needs of a session, so that its
/// Lua functions are written once for SQLite (``SQLiteJobsEngine``, over
/// ``OpshSession``) and PostgreSQL (``PostgresJobsEngine``, over
/// ``PostgresSession``), as ``RepositoryEngine`` does for the
/// repositories. The job manager itself is the same on both: it reaches
/// the database through ``BuildStore``.
protocol JobsEngine {
    var runtime: LuaRuntime { get }
    var rowShapes: RowShapes { get }
    var events: EventQueue { get }
    func subscribe(_ handler: @escaping (Any & Sendable) throws -> Void) -> Int
    func unsubscribe(_ id: Int)

    /// Where builds check out when `jobs.configure` did not say.
    var defaultWorkspaceRoot: String? { get }
    /// The session's job manager (made once, by ``JobsModule/manager``).
    func makeManager(_ configuration: JobManager.Configuration) throws -> JobManager
    /// Why the job manager cannot write or be waited for now (inside
    /// `db.transaction`, a dry run …); nil: it can.
    func transactionRefusal(_ name: String) throws -> String?

    /// Runs one of Store's reads of `jobs.*` (in the engine's dialect) and
    /// pushes its value as `db.first` / `db.query` would.
    func run(_ statement: (SQLDialect) -> QueryStatement, call: LuaCall) throws -> Int32
    /// A build's lines: the last `tail`, or those after `after` (at most
    /// `limit`); throws ``JobError/unknownBuild(_:)`` for an id without a build.
    func logs(_ id: String, tail: Int?, after: Int64?, limit: Int?, includeDebug: Bool) throws -> [BuildLogLine]
    /// Where `jobs.follow` starts: the build (nil: none) and the line before
    /// the last `tail` lines (nil: from the first line).
    func followStart(_ id: String, tail: Int?, includeDebug: Bool) throws -> (BuildRecord?, BuildLogLine?)
    /// Reads a follower's next page; callable from any thread (a
    /// background follower's), never inside the session's transaction.
    func pageReader(_ manager: JobManager) -> BuildFollower.PageReader
    /// Reads a follower's next page on the Lua thread.
    func logPage(_ manager: JobManager, build: String, after: BuildLogLine?, limit: Int, includeDebug: Bool) throws -> BuildLogPage
}

// MARK: - SQLite

/// The SQLite session's jobs: reads on the session's database (inside
/// its transaction, with its own writes) and the `db` module's statement
/// cache; the job manager over the store (``SQLiteBuildStore``).
struct SQLiteJobsEngine: JobsEngine {
    unowned let session: OpshSession

    var runtime: LuaRuntime { session.runtime }
    var rowShapes: RowShapes { session.sql.rowShapes }
    var events: EventQueue { session.events }
    func subscribe(_ handler: @escaping (Any & Sendable) throws -> Void) -> Int { session.subscribe(handler) }
    func unsubscribe(_ id: Int) { session.unsubscribe(id) }

    /// `workspaces/` next to the database file.
    var defaultWorkspaceRoot: String? {
        session.store.path.map {
            (($0 as NSString).deletingLastPathComponent as NSString).appendingPathComponent("workspaces")
        }
    }

    func makeManager(_ configuration: JobManager.Configuration) throws -> JobManager {
        JobManager(store: session.store, configuration: configuration)
    }

    func transactionRefusal(_ name: String) throws -> String? {
        if session.database.isDryRun {
            return "jobs.\(name) is refused in a dry run: builds are written outside its transaction, so they could not be rolled back"
        }
        if session.database.isInTransaction {
            return "jobs.\(name) cannot run inside \(session.database.openTransactionName): the job manager writes builds in transactions of its own; call it before or after the transaction"
        }
        return nil
    }

    func run(_ statement: (SQLDialect) -> QueryStatement, call: LuaCall) throws -> Int32 {
        let statement = statement(.sqlite)
        // The job manager's threads write through the store's own writer,
        // which the read connection's shared snapshot (up to 50 ms) does
        // not know of: a build just created or ended must be seen.
        session.releaseReadSnapshot()
        return try session.repositoryStatements.run(statement.sql, statement.values, shape: statement.shape.executorShape,
                                                    call: call)
    }

    func logs(_ id: String, tail: Int?, after: Int64?, limit: Int?, includeDebug: Bool) throws -> [BuildLogLine] {
        let store = session.store
        return try session.database.read("buildLogs") { db -> [BuildLogLine] in
            guard try store.builds.records.get(db, id) != nil else { throw JobError.unknownBuild(id) }
            if after != nil || limit != nil {
                return try store.buildLogs.lines(db, build: id, after: after ?? 0, limit: limit ?? 1000,
                                                 includeDebug: includeDebug)
            }
            return try store.buildLogs.lastLines(db, build: id, count: tail ?? 100, includeDebug: includeDebug)
        }
    }

    func followStart(_ id: String, tail: Int?, includeDebug: Bool) throws -> (BuildRecord?, BuildLogLine?) {
        let store = session.store
        return try session.database.unsafeRead("buildLogs") { db -> (BuildRecord?, BuildLogLine?) in
            guard let build = try store.builds.records.get(db, id) else { return (nil, nil) }
            guard let tail else { return (build, nil) }
            let last = try store.buildLogs.lastLines(db, build: id, count: tail + 1, includeDebug: includeDebug)
            return (build, last.count > tail ? last[0] : nil)
        }
    }

    func pageReader(_ manager: JobManager) -> BuildFollower.PageReader {
        let store = session.store
        return { build, after, limit, includeDebug in
            try store.logPage(build: build, after: after?.cursor ?? 0, limit: limit, includeDebug: includeDebug)
        }
    }

    func logPage(_ manager: JobManager, build: String, after: BuildLogLine?, limit: Int, includeDebug: Bool) throws -> BuildLogPage {
        try session.database.logPage(build: build, after: after?.cursor ?? 0, limit: limit, includeDebug: includeDebug)
    }
}

extension QueryStatement.Shape {
    /// The `db` module's result shape for a Store statement's.
    var executorShape: SQLExecutor.ResultShape {
        switch self {
        case .row: .first
        case .rows: .rows
        case .ids: .column
        }
    }
}
