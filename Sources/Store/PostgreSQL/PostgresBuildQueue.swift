import Foundation
import GRDB
import PostgresWire
import TextCodec

/// The job runner's database on PostgreSQL (``BuildStore``): the build
/// queue's statements of BuildQueueQueries in PostgreSQL's dialect, for
/// `opsh runner`s on many machines sharing one queue (ARCHITECTURE.md,
/// "Build runners and the queue").
///
/// - **The claim** is `UPDATE … WHERE id = (SELECT … ORDER BY createdAt,
///   buildNumber LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING *`: one short
///   transaction of its own; two runners claiming at once lock different
///   rows and never wait for each other. Every other decision (reserve,
///   claim, heartbeat, take-back, finish) is one conditional UPDATE,
///   which PostgreSQL re-checks on the row's newest version once a
///   concurrent writer's lock is released, so exactly one of two racing
///   statements changes a row.
/// - **The clock is the server's**: heartbeats, a claim's start and an
///   end are written as `extract(epoch FROM clock_timestamp())`, and a
///   lease is judged stale against the same clock, so runners' machines
///   need not agree on the time. (Log lines keep their runner's time:
///   they order a run's own lines.)
/// - **Log lines** go in as multi-row INSERTs (chunks of 512, 256, … rows:
///   a handful of prepared statements serve every batch), with the fence's
///   read and the progress, in one transaction sent as one pipeline: one
///   round trip a flush (``appendLog(build:_:progress:fence:)``).
/// - **Connections.** A `PostgresConnection` serves one thread at a time;
///   this queue keeps a few idle ones and opens another when every one is
///   busy (the runner's loop, its heartbeat, each run and its log flusher
///   may write at once). A connection that broke is dropped, and the next
///   call opens a new one: a runner outlives a restarted server.
/// - **Counted** when a session's jobs write through it
///   (``PostgresWritesElsewhere``): each write's rows go to the session's
///   audit counts, and a script's own (`jobs.delete`, `jobs.cancel`, …)
///   count against its `--max-changes`, refused at their commit past it.
public final class PostgresBuildQueue: BuildStore, @unchecked Sendable {
    public let url: PostgresURL
    /// The session whose writes these are, when a session's `jobs.*` use
    /// the queue (nil for `opsh runner`).
    private let counted: PostgresWritesElsewhere?
    private let lock = NSLock()
    private var idle: [PostgresConnection] = []
    /// Idle connections kept open; more are closed when returned.
    private let idleLimit = 8
    /// Run-time parameters every connection starts with (``init(url:counted:idleInTransactionLimit:)``).
    private let settings: [(name: String, value: String)]

    /// Connects (and checks the server answers).
    public convenience init(url text: String) throws {
        try self.init(url: try PostgresURL(text))
    }

    /// Connects to the database a session has open (`jobs.*` on
    /// PostgreSQL); its writes are counted in `counted`.
    ///
    /// - parameter idleInTransactionLimit: for `opsh runner`, the lease's
    ///   length (three heartbeats). The server ends a session of this queue
    ///   that sits inside a transaction longer than that
    ///   (`idle_in_transaction_session_timeout`), rolling it back: a runner
    ///   stopped between two statements of its transaction (SIGSTOP, a
    ///   frozen machine, a lost network) would otherwise keep its build's
    ///   row locked, and a take-back skips a locked row, for as long as it
    ///   stays stopped. The queue's own transactions are a few statements
    ///   with nothing waited on between them.
    ///
    /// - parameter searchPath: a session's pinned path (``PostgresOwnPath``):
    ///   the queue's statements name opsh's tables unqualified, and a new
    ///   connection's path is the role's and database's, which a script may
    ///   have given a schema of its own first (a schema named as the role,
    ///   `"$user"`; `ALTER ROLE … SET search_path`): `jobs.enqueue` wrote
    ///   such a schema's `builds` (scripts/reliability-attacks.md, 28g).
    public init(url: PostgresURL, counted: PostgresWritesElsewhere? = nil, idleInTransactionLimit: Double? = nil,
                searchPath: String? = nil) throws {
        self.url = url
        self.counted = counted
        settings = (idleInTransactionLimit.map {
            [(name: "idle_in_transaction_session_timeout", value: "\(max(Int(($0 * 1000).rounded()), 1))ms")]
        } ?? []) + (searchPath.map { [(name: "search_path", value: $0)] } ?? [])
        idle.append(try PostgresConnection(url: url, settings: settings))
    }

    deinit {
        for connection in idle { connection.close() }
    }

    public var label: String { url.description }
    public var path: String? { nil }

    /// The server's clock, seconds since 1970.
    static let now = "extract(epoch FROM clock_timestamp())::double precision"

    /// When the server last started, seconds since 1970: a lease's three
    /// heartbeats are counted from then at the earliest, since no holder
    /// could beat while the server was down (a restart is not a missed
    /// heartbeat).
    static let serverStart = "extract(epoch FROM pg_postmaster_start_time())::double precision"

    public func clock() throws -> Date {
        let value = try connection { try $0.query("SELECT \(Self.now)").scalar }
        guard case let .double(seconds)? = value else { throw PostgresStoreError.statement("the server did not tell its time") }
        return Date(timeIntervalSince1970: seconds)
    }

    // MARK: Connections

    /// Runs `body` on a connection of its own for the call.
    private func connection<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        let reused = lock.withLock { idle.popLast() }
        let connection = try reused ?? PostgresConnection(url: url, settings: settings)
        do {
            let result = try body(connection)
            release(connection)
            return result
        } catch {
            release(connection)
            throw error
        }
    }

    private func release(_ connection: PostgresConnection) {
        if connection.isOpen, connection.transactionStatus != .idle { _ = try? connection.simpleQuery("ROLLBACK") }
        guard connection.isOpen, connection.transactionStatus == .idle else {
            connection.close()
            return
        }
        let kept = lock.withLock { () -> Bool in
            guard idle.count < idleLimit else { return false }
            idle.append(connection)
            return true
        }
        if !kept { connection.close() }
    }

    /// `body` in one transaction: committed when it returns, rolled back
    /// when it throws. A statement the connection kept prepared that went
    /// stale (another session's ALTER TABLE changed its result: 0A000;
    /// DISCARD ALL: 26000) is refused by the server before it runs, which
    /// aborts the transaction; the connection has forgotten it, so the
    /// transaction runs again from its start, preparing it again (as the
    /// `db` path runs its statement again under its savepoint): a backend's
    /// migration does not fail the next `jobs.enqueue` or claim. Each stale
    /// statement is met once (a migration of several tables: one each).
    private func transaction<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        var attempts = 0
        while true {
            attempts += 1
            do {
                return try transactionOnce(body)
            } catch let error as PostgresError where (error.code == "0A000" || error.code == "26000") && attempts < Self.staleStatementAttempts {
                continue
            }
        }
    }

    /// How often a transaction meets a stale statement before its error is
    /// the caller's: more than the kept statements one transaction runs.
    static let staleStatementAttempts = 8

    private func transactionOnce<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        try connection { connection in
            if let counted { return try counted.transaction(on: connection) { try body(connection) } }
            try connection.simpleQuery("BEGIN")
            let result: T
            do {
                result = try body(connection)
            } catch {
                if connection.isOpen, connection.transactionStatus != .idle { _ = try? connection.simpleQuery("ROLLBACK") }
                throw error
            }
            try connection.simpleQuery("COMMIT")
            return result
        }
    }

    // MARK: Rows

    /// A result's rows as GRDB rows keyed by the schema's spelling, so
    /// that records decode as they do on SQLite.
    static func rows(_ result: PostgresResult) -> [Row] {
        let names = result.columns.map { PostgresNames.rowKey($0.name) }
        return result.rows.map { values in
            var dictionary: [String: (any DatabaseValueConvertible)?] = [:]
            for (name, value) in zip(names, values) {
                switch value {
                case .null: dictionary[name] = DatabaseValue.null
                case let .integer(number): dictionary[name] = number
                case let .double(number): dictionary[name] = number
                case let .text(text): dictionary[name] = text
                case let .bytes(bytes): dictionary[name] = Data(bytes)
                case let .bool(flag): dictionary[name] = flag ? Int64(1) : Int64(0)
                }
            }
            return Row(dictionary)
        }
    }

    private func records<R: FetchableRecord>(_ type: R.Type, _ sql: String, _ parameters: [PostgresValue] = []) throws -> [R] {
        try connection { try Self.rows($0.query(sql, parameters)).map(R.init(row:)) }
    }

    private static func text(_ value: String?) -> PostgresValue { value.map { .text($0) } ?? .null }
    private static func textOf(_ value: PostgresValue) -> String? { if case let .text(text) = value { text } else { nil } }
    private static func double(_ value: Double?) -> PostgresValue { value.map { .double($0) } ?? .null }
    private static func integer(_ value: Int?) -> PostgresValue { value.map { .integer(Int64($0)) } ?? .null }

    // MARK: Reading

    public func build(_ id: String) throws -> BuildRecord? {
        try records(BuildRecord.self, "SELECT * FROM builds WHERE id = $1::text", [.text(id)]).first
    }

    public func schemeAndProject(_ schemeId: String) throws -> (SchemeRecord?, ProjectRecord?) {
        try connection { connection in try Self.schemeAndProject(connection, schemeId, lock: false) }
    }

    /// With `lock`, the scheme's row is locked until the transaction ends
    /// (build numbers are taken one at a time per scheme).
    private static func schemeAndProject(_ connection: PostgresConnection, _ schemeId: String,
                                         lock: Bool) throws -> (SchemeRecord?, ProjectRecord?) {
        let schemes = try rows(connection.query("SELECT * FROM schemes WHERE id = $1::text\(lock ? " FOR UPDATE" : "")",
                                                [.text(schemeId)]))
        guard let scheme = try schemes.first.map(SchemeRecord.init(row:)) else { return (nil, nil) }
        let projects = try rows(connection.query("SELECT * FROM projects WHERE bundleIdentifier = $1::text",
                                                 [.text(scheme.projectBundleIdentifier)]))
        return (scheme, try projects.first.map(ProjectRecord.init(row:)))
    }

    public func queueColumnsExist() throws -> Bool {
        try connection { connection in
            try connection.query("""
                SELECT EXISTS (SELECT 1 FROM information_schema.columns
                               WHERE table_schema = current_schema() AND table_name = 'builds' AND column_name = 'heartbeatat')
                """).scalar == .bool(true)
        }
    }

    public func schemeExists(idOrName: String) throws -> Bool {
        try connection { connection in
            try connection.query("SELECT EXISTS (SELECT 1 FROM schemes WHERE id = $1::text OR name = $1::text)",
                                 [.text(idOrName)]).scalar == .bool(true)
        }
    }

    public func list(status: BuildStatus?, scheme: String?, limit: Int?) throws -> [BuildRecord] {
        try records(BuildRecord.self, """
            SELECT * FROM builds WHERE ($1::text IS NULL OR status = $1::text) AND ($2::text IS NULL OR schemeId = $2::text)
            ORDER BY createdAt DESC, buildNumber DESC LIMIT $3::bigint
            """, [Self.text(status?.rawValue), Self.text(scheme), Self.integer(limit)])
    }

    // MARK: Log lines and their cursors
    //
    // PostgreSQL has no rowid, and a sequence's numbers are taken in the
    // order transactions insert, not the order they commit. A line's
    // cursor here is its place in its build's log, in the log's order
    // (createdAt, then id by bytes: the job runner's ids sort in line
    // order within one instant): line 1, 2, … of the build. No column is
    // added to buildLogs (its rows, exports and the schema stay SQLite's).
    // A cursor stays valid while lines are only appended, which is how
    // builds write; deleting lines by hand renumbers the later ones.
    // Followers (``logPage(build:after:limit:includeDebug:)``) page by
    // the last line's (createdAt, id) instead: a range on the
    // buildLogs(buildId, createdAt) index, cheap however long the log.

    /// The build's lines numbered in log order, as `numbered`.
    static let numberedLines = """
        SELECT row_number() OVER (ORDER BY createdAt, id COLLATE "C") AS cursor, * FROM buildLogs WHERE buildId = $1::text
        """

    public func logs(_ id: String, tail count: Int, includeDebug: Bool) throws -> [BuildLogLine] {
        try lines("""
            SELECT * FROM (\(Self.numberedLines)) AS numbered WHERE ($2::boolean OR level <> 'debug')
            ORDER BY cursor DESC LIMIT $3::bigint
            """, [.text(id), .bool(includeDebug), .integer(Int64(max(0, count)))]).reversed()
    }

    public func logs(_ id: String, after cursor: Int64, limit: Int, includeDebug: Bool) throws -> [BuildLogLine] {
        try lines("""
            SELECT * FROM (\(Self.numberedLines)) AS numbered WHERE cursor > $2::bigint AND ($3::boolean OR level <> 'debug')
            ORDER BY cursor LIMIT $4::bigint
            """, [.text(id), .integer(cursor), .bool(includeDebug), .integer(Int64(max(0, limit)))])
    }

    private func lines(_ sql: String, _ parameters: [PostgresValue]) throws -> [BuildLogLine] {
        try connection { connection in
            try Self.rows(connection.query(sql, parameters)).map { row in
                BuildLogLine(cursor: row["cursor"], record: try BuildLogRecord(row: row))
            }
        }
    }

    /// A page of a build's log for a follower: the lines after `line` (nil:
    /// from the first) in log order, at most `limit`, their cursors 0 (the
    /// follower pages by the line itself). The build is read first, in a
    /// statement of its own: a build seen ended then has every line
    /// committed before the lines are read (its last lines and its end
    /// are written before, or in, the transaction that ends it), so an
    /// empty page after it means the log is complete.
    public func logPage(build buildId: String, after line: BuildLogLine?, limit: Int, includeDebug: Bool) throws -> BuildLogPage {
        try connection { connection in
            let build = try Self.rows(connection.query("SELECT * FROM builds WHERE id = $1::text", [.text(buildId)]))
                .first.map(BuildRecord.init(row:))
            let from: PostgresValue = line.map { .double($0.record.createdAt.timeIntervalSince1970) } ?? .null
            let rows = try Self.rows(connection.query("""
                SELECT * FROM buildLogs
                WHERE buildId = $1::text AND ($2::double precision IS NULL OR createdAt >= $2::double precision)
                  AND ($2::double precision IS NULL OR createdAt > $2::double precision OR id COLLATE "C" > $3::text COLLATE "C")
                  AND ($4::boolean OR level <> 'debug')
                ORDER BY createdAt, id COLLATE "C" LIMIT $5::bigint
                """, [.text(buildId), from, .text(line?.record.id ?? ""), .bool(includeDebug), .integer(Int64(max(0, limit)))]))
            return BuildLogPage(lines: try rows.map { BuildLogLine(cursor: 0, record: try BuildLogRecord(row: $0)) }, build: build)
        }
    }

    public func crashLogs(_ id: String) throws -> [CrashLogRecord] {
        try records(CrashLogRecord.self, "SELECT * FROM crashLogs WHERE buildId = $1::text ORDER BY createdAt", [.text(id)])
    }

    public func delete(_ id: String) throws {
        try transaction { connection in
            let status = try connection.query("SELECT status FROM builds WHERE id = $1::text FOR UPDATE", [.text(id)]).scalar
            if status == .text(BuildStatus.running.rawValue) {
                throw StoreError.refused(reason: "build \(id) is running; cancel it first")
            }
            try connection.query("DELETE FROM builds WHERE id = $1::text", [.text(id)])
        }
    }

    // MARK: Holding

    /// A queued build nobody holds, or whose holder missed three heartbeats.
    private static let unheld = """
        status = 'queued' AND (runnerId IS NULL OR coalesce(heartbeatAt + \(BuildLease.missedHeartbeats) * heartbeatInterval, 0) < \(now))
        """

    /// Of the schemes named in the JSON array $1 by id or by name; all when $1 is NULL.
    private static let ofSchemes = """
        ($1::text IS NULL OR schemeId IN (SELECT id FROM schemes WHERE id IN (SELECT json_array_elements_text($1::text::json))
                                                                   OR name IN (SELECT json_array_elements_text($1::text::json))))
        """

    private static func schemesArgument(_ schemes: [String]?) -> PostgresValue {
        schemes.map { .text(JSON.array($0.map(JSON.string)).compactText()) } ?? .null
    }

    private static func holderArguments(_ holder: BuildHolder) -> [PostgresValue] {
        [.text(holder.id), .text(holder.host), .integer(Int64(holder.pid)), .double(holder.startedAt),
         .double(holder.heartbeatInterval)]
    }

    public func create(scheme schemeId: String, version: String, reservedFor holder: BuildHolder?,
                       check: (SchemeRecord?, ProjectRecord?) throws -> Void) throws -> BuildRecord {
        try transaction { connection in
            let (scheme, project) = try Self.schemeAndProject(connection, schemeId, lock: true)
            try check(scheme, project)
            guard scheme != nil else { throw StoreError.notFound(table: "schemes", key: schemeId) }
            let id = makeIdentifier()
            return try Self.refusingSchemeWrites(connection, subject: { _ in (nil, schemeId) }) {
                let inserted = try connection.query("""
                    INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt)
                    SELECT $1::text, $2::text, $3::text, coalesce(max(buildNumber), 0) + 1, 'queued', \(Self.now)
                    FROM builds WHERE schemeId = $2::text
                    RETURNING *
                    """, [.text(id), .text(schemeId), .text(version)])
                if let holder {
                    try connection.query("""
                        UPDATE builds SET runnerId = $2::text, runnerHost = $3::text, runnerPid = $4, runnerStartedAt = $5,
                                          heartbeatAt = \(Self.now), heartbeatInterval = $6
                        WHERE id = $1::text
                        """, [.text(id)] + Self.holderArguments(holder))
                }
                guard let row = Self.rows(inserted).first else { throw StoreError.notFound(table: "builds", key: id) }
                return try BuildRecord(row: row)
            }
        }
    }

    public func reserve(_ id: String, for holder: BuildHolder) throws -> Bool {
        try transaction { connection in
            let scheme = try connection.query("SELECT schemeId FROM builds WHERE id = $1::text", [.text(id)]).scalar.flatMap(Self.textOf) ?? "?"
            return try Self.refusingSchemeWrites(connection, subject: { _ in (id, scheme) }) {
                try connection.query("""
                    UPDATE builds SET runnerId = $2::text, runnerHost = $3::text, runnerPid = $4, runnerStartedAt = $5,
                                      heartbeatAt = \(Self.now), heartbeatInterval = $6
                    WHERE id = $1::text AND status = 'queued'
                      AND (runnerId IS NULL OR runnerId = $2::text
                           OR coalesce(heartbeatAt + \(BuildLease.missedHeartbeats) * heartbeatInterval, 0) < \(Self.now))
                    """, [.text(id)] + Self.holderArguments(holder)).affectedRows ?? 0 > 0
            }
        }
    }

    public func hasClaimable(schemes: [String]?) throws -> Bool {
        try connection { connection in
            try connection.query("SELECT EXISTS (SELECT 1 FROM builds WHERE \(Self.unheld) AND \(Self.ofSchemes))",
                                 [Self.schemesArgument(schemes)]).scalar == .bool(true)
        }
    }

    /// The claim: the oldest queued build nobody holds, locked with SKIP
    /// LOCKED (a row another runner is claiming right now is passed over,
    /// never waited for), held for `holder` in the same statement.
    public func watchQueue(_ onChange: @escaping @Sendable () -> Void) throws -> StorageCancellable? {
        let listener = PostgresChangeListener(url: url)
        let subscription = try listener.observe(["builds"], onChange: onChange)
        return StorageCancellable { withExtendedLifetime(listener) { subscription.cancel() } }
    }

    public func reserveNext(for holder: BuildHolder, schemes: [String]?) throws -> BuildRecord? {
        try transaction { connection in
            try Self.refusingSchemeWrites(connection, subject: { ($0?.id, $0?.schemeId ?? "?") }) {
                let result = try connection.query("""
                    UPDATE builds SET runnerId = $2::text, runnerHost = $3::text, runnerPid = $4, runnerStartedAt = $5,
                                      heartbeatAt = \(Self.now), heartbeatInterval = $6
                    WHERE id = (SELECT id FROM builds WHERE \(Self.unheld) AND \(Self.ofSchemes)
                                ORDER BY createdAt, buildNumber, id LIMIT 1
                                FOR UPDATE SKIP LOCKED)
                    RETURNING *
                    """, [Self.schemesArgument(schemes)] + Self.holderArguments(holder))
                return try Self.rows(result).first.map(BuildRecord.init(row:))
            }
        }
    }

    public func claim(_ id: String, for holder: BuildHolder,
                      check: (SchemeRecord?, ProjectRecord?) throws -> Void) throws -> ClaimedBuild? {
        try transaction { connection in
            guard let build = try Self.rows(connection.query("SELECT * FROM builds WHERE id = $1::text", [.text(id)]))
                .first.map(BuildRecord.init(row:)) else { return nil }
            let (scheme, project) = try Self.schemeAndProject(connection, build.schemeId, lock: false)
            try check(scheme, project)
            guard let scheme, let project else { return nil }
            let passEnvironment = try connection.query("""
                SELECT CASE WHEN EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()
                                         AND table_name = 'schemes' AND column_name = 'passenvironment')
                       THEN (SELECT to_jsonb(s) ->> 'passenvironment' FROM schemes AS s WHERE s.id = $1::text) END
                """, [.text(scheme.id)]).scalar.flatMap(Self.textOf)
            let attempt = try Self.refusingSchemeWrites(connection, subject: { _ in (id, scheme.id) }) {
                try connection.query("""
                    UPDATE builds SET status = 'running', startDate = \(Self.now), endDate = NULL, exitCode = NULL, progress = 0,
                                      heartbeatAt = \(Self.now), attempts = attempts + 1
                    WHERE id = $1::text AND status = 'queued' AND runnerId = $2::text
                    RETURNING attempts
                    """, [.text(id), .text(holder.id)]).scalar
            }
            guard case let .integer(attempts)? = attempt else { return nil }
            return ClaimedBuild(build: build, scheme: scheme, project: project, passEnvironment: passEnvironment,
                                fence: BuildFence(runnerId: holder.id, attempt: Int(attempts)))
        }
    }

    /// Rows this transaction changed in schemes and projects so far (the
    /// server's counters of the open transaction, a trigger's writes and
    /// those of its subtransactions included).
    private static func schemeWrites(_ connection: PostgresConnection) throws -> Int64 {
        let value = try connection.query("""
            SELECT coalesce(sum(pg_stat_get_xact_tuples_inserted(o) + pg_stat_get_xact_tuples_updated(o)
                                + pg_stat_get_xact_tuples_deleted(o)), 0)::bigint
            FROM unnest(ARRAY['schemes'::regclass, 'projects'::regclass]::oid[]) AS o
            """).scalar
        if case let .integer(count)? = value { return count }
        return 0
    }

    /// Runs `body` (in the caller's transaction); when a trigger wrote a
    /// scheme or project meanwhile, throws ``SchemeChangedByTrigger`` for
    /// what `subject` names in the result (the transaction is rolled back).
    private static func refusingSchemeWrites<T>(_ connection: PostgresConnection,
                                                subject: (T) -> (build: String?, scheme: String),
                                                _ body: () throws -> T) throws -> T {
        let before = try schemeWrites(connection)
        let result = try body()
        guard try schemeWrites(connection) == before else {
            let (build, scheme) = subject(result)
            let triggers = try connection.query("""
                SELECT tgname::text FROM pg_trigger
                WHERE tgrelid = 'builds'::regclass AND NOT tgisinternal AND tgenabled <> 'D'
                  AND tgfoid <> 'opsh_notify_change'::regproc
                  AND tgtype & 28 <> 0  -- fires on INSERT (4), DELETE (8) or UPDATE (16): not only on TRUNCATE
                ORDER BY 1
                """).rows.compactMap { $0.first.flatMap(Self.textOf) }
            throw SchemeChangedByTrigger(buildId: build, schemeId: scheme, triggers: triggers)
        }
        return result
    }

    /// A write of one statement: a transaction of its own when counted.
    private func write<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        counted == nil ? try connection(body) : try transaction(body)
    }

    public func heartbeat(for holder: BuildHolder) throws -> Set<String>? {
        try write { connection in
            let result = try connection.query("""
                UPDATE builds SET heartbeatAt = \(Self.now) WHERE runnerId = $1::text AND status IN ('queued', 'running') RETURNING id
                """, [.text(holder.id)])
            return Set(result.rows.compactMap { if case let .text(id)? = $0.first { return id } else { return nil } })
        }
    }

    private static let leaseColumns = "id, status, runnerHost, runnerPid, runnerStartedAt, runnerId, heartbeatAt, heartbeatInterval, attempts"

    private func leases(_ sql: String, _ parameters: [PostgresValue] = []) throws -> [BuildLease] {
        try connection { try Self.rows($0.query(sql, parameters)).map(BuildLease.init(row:)) }
    }

    public func lease(_ id: String) throws -> BuildLease? {
        try leases("SELECT \(Self.leaseColumns) FROM builds WHERE id = $1::text", [.text(id)]).first
    }

    public func runningLeases() throws -> [BuildLease] {
        try leases("SELECT \(Self.leaseColumns) FROM builds WHERE status = 'running' ORDER BY startDate, createdAt")
    }

    public func expiredLeases() throws -> (now: Date, leases: [BuildLease]) {
        try connection { connection in
            guard case let .double(now)? = try connection.query("SELECT \(Self.now)").scalar else {
                throw PostgresStoreError.statement("the server did not tell its time")
            }
            let result = try connection.query("""
                SELECT \(Self.leaseColumns) FROM builds
                WHERE status = 'running'
                  AND greatest(heartbeatAt, \(Self.serverStart)) + \(BuildLease.missedHeartbeats) * heartbeatInterval < $1
                ORDER BY heartbeatAt
                """, [.double(now)])
            return (Date(timeIntervalSince1970: now), try Self.rows(result).map(BuildLease.init(row:)))
        }
    }

    /// The server answers: it takes writes (a lock on one row is not an
    /// outage; a take-back skips a row a writer holds).
    public func takesWrites(within seconds: Double) throws {
        _ = try clock()
    }

    public func takeBack(_ lease: BuildLease, _ action: BuildTakeBack, note: String) throws -> Bool {
        let unchanged = """
            id = $1::text AND status = 'running' AND runnerId IS NOT DISTINCT FROM $2::text
            AND heartbeatAt IS NOT DISTINCT FROM $3::double precision
            """
        let arguments: [PostgresValue] = [.text(lease.buildId), Self.text(lease.runnerId), Self.double(lease.heartbeatAt)]
        return try transaction { connection in
            // A holder writing under its lease holds the row (FOR SHARE,
            // requireFence): its write lands first and the build is judged
            // again next period, rather than this sweep waiting on it.
            guard try connection.query("SELECT 1 FROM builds WHERE id = $1::text FOR UPDATE SKIP LOCKED", [.text(lease.buildId)])
                .scalar != nil else { return false }
            let changed: Int
            switch action {
            case .requeue:
                changed = try connection.query("""
                    UPDATE builds SET status = 'queued', startDate = NULL, endDate = NULL, exitCode = NULL, progress = 0,
                                      commitHash = NULL, runnerId = NULL, runnerHost = NULL, runnerPid = NULL,
                                      runnerStartedAt = NULL, heartbeatAt = NULL, heartbeatInterval = NULL
                    WHERE \(unchanged)
                    """, arguments).affectedRows ?? 0
            case .fail:
                // The holder is cleared (host and pid stay): its run's fence is gone (BuildFence).
                changed = try connection.query("UPDATE builds SET status = 'failed', endDate = \(Self.now), runnerId = NULL WHERE \(unchanged)",
                                               arguments).affectedRows ?? 0
            }
            guard changed > 0 else { return false }
            try connection.query("""
                INSERT INTO buildLogs (id, buildId, level, category, content, createdAt) VALUES ($1::text, $2::text, $3::text, 'runner', $4::text, \(Self.now))
                """, [.text(makeIdentifier()), .text(lease.buildId),
                      .text((action == .fail ? BuildLogLevel.error : .warning).rawValue), .text(Self.clean(note))])
            return true
        }
    }

    // MARK: Running and ending

    public func finish(_ id: String, status: BuildStatus, exitCode: Int?, progress: Double?, fence: BuildFence?,
                       log: BuildLogRecord?, crash: CrashLogRecord?) throws -> Bool {
        precondition(status.isFinished, "finish needs a final status")
        return try transaction { connection in
            try Self.requireFence(connection, id, fence)
            let changed = try connection.query("""
                UPDATE builds SET status = $1::text, endDate = \(Self.now), exitCode = $2, progress = coalesce($3, progress)
                WHERE id = $4::text AND status IN ('queued', 'running')
                """, [.text(status.rawValue), Self.integer(exitCode), Self.double(progress), .text(id)])
                .affectedRows ?? 0
            // A run's end line (fenced: the run still holds the build) lands
            // with its end, and also when the build was ended elsewhere
            // meanwhile (jobs.cancel); a resent end's line lands once.
            guard changed > 0 || fence != nil else { return false }
            if let log { try Self.insertLines(connection, build: id, [NewBuildLogLine(log)]) }
            guard changed > 0 else { return false }
            if let crash {
                try connection.query("""
                    INSERT INTO crashLogs (incidentIdentifier, buildId, content, signal, createdAt) VALUES ($1::text, $2::text, $3::text, $4, $5)
                    """, [.text(crash.incidentIdentifier), .text(crash.buildId), .text(Self.clean(crash.content)),
                          Self.integer(crash.signal), .double(crash.createdAt.timeIntervalSince1970)])
            }
            return true
        }
    }

    /// Throws ``BuildLeaseLost`` when `fence` is no longer the build's.
    /// The row stays locked (`FOR SHARE`) until the write's transaction
    /// ends, so no take-back or claim slips in between the check and the
    /// write.
    private static func requireFence(_ connection: PostgresConnection, _ id: String, _ fence: BuildFence?) throws {
        guard let fence else { return }
        let lease = try rows(connection.query(fenceRead, [.text(id)])).first.map(BuildLease.init(row:))
        if let refusal = try leaseLost(connection, id, fence, lease) { throw refusal }
    }

    /// The build's lease, its row locked until the transaction ends.
    private static let fenceRead = "SELECT \(leaseColumns) FROM builds WHERE id = $1::text FOR SHARE"

    /// Nil while `lease` (as the write's transaction read it) is `fence`'s;
    /// otherwise the refusal, with the take-back's line of the build's log.
    private static func leaseLost(_ connection: PostgresConnection, _ id: String, _ fence: BuildFence,
                                  _ lease: BuildLease?) throws -> BuildLeaseLost? {
        guard lease?.runnerId != fence.runnerId || lease?.attempts != fence.attempt else { return nil }
        let note = try connection.query("""
            SELECT content FROM buildLogs WHERE buildId = $1::text AND category = 'runner' ORDER BY createdAt DESC, id DESC LIMIT 1
            """, [.text(id)]).scalar.flatMap(textOf)
        return fence.refusal(buildId: id, lease: lease, takenBackBy: note)
    }

    public func knownSecrets() throws -> [String] {
        try connection { connection in
            try connection.query("""
                SELECT api_key FROM configuration WHERE api_key IS NOT NULL AND api_key <> ''
                """).rows.compactMap { $0.first.flatMap(Self.textOf) }
        }
    }

    public func setCommit(_ id: String, _ commit: String, fence: BuildFence?) throws {
        try transaction { connection in
            try Self.requireFence(connection, id, fence)
            _ = try connection.query("UPDATE builds SET commitHash = $1::text WHERE id = $2::text", [.text(commit), .text(id)])
        }
    }

    /// One round trip for a batch: BEGIN, the fence's read, the lines'
    /// INSERTs, the progress and COMMIT in one pipeline (in a counted
    /// transaction, the statements between its readings). The fence's
    /// result is read only once everything was sent, so each write carries
    /// the fence itself (``logSteps(build:_:progress:fence:)``): when it is
    /// gone the server lands nothing, and the batch throws ``BuildLeaseLost``.
    public func appendLog(build buildId: String, _ lines: [NewBuildLogLine], progress: Double?, fence: BuildFence?) throws {
        guard !lines.isEmpty || progress != nil else { return }
        let steps = Self.logSteps(build: buildId, lines, progress: progress, fence: fence)
        try connection { connection in
            // The fence's read is the first step.
            func refusal(_ results: ArraySlice<PostgresResult>) throws -> BuildLeaseLost? {
                guard let fence, let read = results.first else { return nil }
                return try Self.leaseLost(connection, buildId, fence, Self.rows(read).first.map(BuildLease.init(row:)))
            }
            if let counted {
                try counted.transaction(on: connection) {
                    if let refused = try refusal(connection.pipeline(steps)[...]) { throw refused }
                }
            } else {
                let results = try connection.pipeline([("BEGIN", [])] + steps + [("COMMIT", [])])
                if let refused = try refusal(results.dropFirst()) { throw refused }
            }
        }
    }

    /// A log batch's statements: with a fence, its read first (the build's
    /// row locked `FOR SHARE` until the transaction ends), and every write
    /// conditional on the row still naming the fence's holder and attempt;
    /// then the lines as multi-row INSERTs (``largestChunk``), then the
    /// progress of a running build.
    static func logSteps(build buildId: String, _ lines: [NewBuildLogLine], progress: Double?,
                         fence: BuildFence?) -> [(sql: String, parameters: [PostgresValue])] {
        let fenced: [PostgresValue] = fence.map { [.text(buildId), .text($0.runnerId), .integer(Int64($0.attempt))] } ?? []
        var steps: [(sql: String, parameters: [PostgresValue])] = fence == nil ? [] : [(fenceRead, [.text(buildId)])]
        var start = 0
        while start < lines.count {
            var size = largestChunk
            while size > lines.count - start { size /= 2 }
            var parameters = fenced
            parameters.reserveCapacity(fenced.count + size * 6)
            for line in lines[start..<start + size] {
                parameters += [.text(line.id), .text(buildId), .text(line.level.rawValue), .text(line.category),
                               .text(clean(line.content)), .double(line.createdAt)]
            }
            steps.append((fence == nil ? insertSQL(rows: size) : fencedInsertStatements[size]!, parameters))
            start += size
        }
        if let progress {
            let value = PostgresValue.double(min(1, max(0, progress)))
            steps.append(fence == nil
                ? ("UPDATE builds SET progress = $1 WHERE id = $2::text AND status = 'running'", [value, .text(buildId)])
                : ("UPDATE builds SET progress = $4 WHERE id = $1::text AND status = 'running' AND runnerId = $2::text AND attempts = $3",
                   fenced + [value]))
        }
        return steps
    }

    /// The most rows one INSERT carries (6 parameters each).
    static let largestChunk = 512

    /// Multi-row INSERTs: the batch cut into chunks whose sizes are powers
    /// of two (512, 256, … 1), so that a few prepared statements serve
    /// every batch and a batch of n lines takes about log2(n) round trips.
    static func insertLines(_ connection: PostgresConnection, build buildId: String, _ lines: [NewBuildLogLine]) throws {
        var start = 0
        while start < lines.count {
            var size = largestChunk
            while size > lines.count - start { size /= 2 }
            let chunk = lines[start..<start + size]
            var parameters: [PostgresValue] = []
            parameters.reserveCapacity(size * 6)
            for line in chunk {
                parameters += [.text(line.id), .text(buildId), .text(line.level.rawValue), .text(line.category),
                               .text(clean(line.content)), .double(line.createdAt)]
            }
            try connection.query(insertSQL(rows: size), parameters)
            start += size
        }
    }

    private static let insertStatements: [Int: String] = {
        var statements: [Int: String] = [:]
        var size = largestChunk
        while size >= 1 {
            let values: String = (0..<size).map { (row: Int) -> String in
                let k = row * 6
                return "($\(k + 1)::text, $\(k + 2)::text, $\(k + 3)::text, $\(k + 4)::text, $\(k + 5)::text, $\(k + 6))"
            }.joined(separator: ", ")
            // A line sent again (its batch's commit answer was lost) lands once.
            statements[size] = "INSERT INTO buildLogs (id, buildId, level, category, content, createdAt) VALUES " + values
                + " ON CONFLICT (id) DO NOTHING"
            size /= 2
        }
        return statements
    }()

    private static func insertSQL(rows: Int) -> String { insertStatements[rows]! }

    /// As ``insertStatements``, landing the rows only while the build
    /// (`$1`) names the holder (`$2`) and attempt (`$3`) of the batch's
    /// fence; the rows' values from `$4`.
    private static let fencedInsertStatements: [Int: String] = {
        var statements: [Int: String] = [:]
        var size = largestChunk
        while size >= 1 {
            let values: String = (0..<size).map { (row: Int) -> String in
                let k = 3 + row * 6
                return "($\(k + 1)::text, $\(k + 2)::text, $\(k + 3)::text, $\(k + 4)::text, $\(k + 5)::text, $\(k + 6)::double precision)"
            }.joined(separator: ", ")
            statements[size] = "INSERT INTO buildLogs (id, buildId, level, category, content, createdAt) SELECT * FROM (VALUES "
                + values + ") AS line WHERE EXISTS (SELECT FROM builds WHERE id = $1::text AND runnerId = $2::text AND attempts = $3)"
                + " ON CONFLICT (id) DO NOTHING"
            size /= 2
        }
        return statements
    }()

    /// PostgreSQL's text cannot hold NUL (SQLite's can): a build printing
    /// one keeps its line, with U+FFFD in its place.
    static func clean(_ text: String) -> String {
        text.utf8.contains(0) ? text.replacingOccurrences(of: "\u{0}", with: "\u{FFFD}") : text
    }
}

extension NewBuildLogLine {
    init(_ record: BuildLogRecord) {
        self.init(id: record.id, level: record.level, category: record.category, content: record.content,
                  createdAt: record.createdAt.timeIntervalSince1970)
    }
}

// MARK: - The runner itself

/// PostgreSQL's side of ``RunnerRegistry``: the server's clock, one
/// statement each (the registration's prune and insert in one transaction).
extension PostgresBuildQueue {
    public func registerRunner(_ runner: RunnerRegistration) throws -> Bool {
        try transaction { connection in
            guard try Self.registryExists(connection) else { return false }
            try connection.query(RunnerRegistry.pruneEnded.replacingOccurrences(of: "?", with: "\(Self.now) - $1"),
                                 [.double(RunnerRegistry.keptAfterEnd)])
            try Self.insert(connection, runner)
            return true
        }
    }

    public func beatRunner(_ runner: RunnerRegistration, registered: Bool) throws {
        try write { connection in
            guard registered else {
                _ = try connection.query("UPDATE builds SET id = id WHERE false")  // a write that changes nothing
                return
            }
            let beat = try connection.query("""
                UPDATE \(RunnerRegistry.table) SET heartbeatAt = \(Self.now), stoppedAt = NULL WHERE id = $1::text RETURNING id
                """, [.text(runner.id)])
            if beat.rows.isEmpty { try Self.insert(connection, runner) }
        }
    }

    public func runnerStopped(_ id: String) throws {
        try write { connection in
            guard try Self.registryExists(connection) else { return }
            _ = try connection.query("UPDATE \(RunnerRegistry.table) SET stoppedAt = \(Self.now) WHERE id = $1::text", [.text(id)])
        }
    }

    private static func registryExists(_ connection: PostgresConnection) throws -> Bool {
        try connection.query("SELECT CASE WHEN to_regclass('\(RunnerRegistry.table)') IS NULL THEN 0 ELSE 1 END").scalar == .integer(1)
    }

    private static func insert(_ connection: PostgresConnection, _ runner: RunnerRegistration) throws {
        try connection.query("""
            INSERT INTO \(RunnerRegistry.table) (\(RunnerRegistry.insertColumns))
            VALUES ($1::text, $2::text, $3::bigint, $4::double precision, \(now), \(now), $5::double precision, $6::text, $7::bigint, $8::text)
            """, [.text(runner.id), .text(runner.host), .integer(Int64(runner.pid)), double(runner.processStartedAt),
                  .double(runner.heartbeatInterval), .text(runner.version), .integer(Int64(runner.concurrency)),
                  text(runner.schemes?.joined(separator: ", "))])
    }
}
