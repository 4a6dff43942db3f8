import Foundation
import GRDB
import TextCodec

// The build queue's statements: holding a build (reserve, claim), proving
// the holder lives (heartbeat), and taking back builds whose holder
// stopped (expired leases). Every statement that decides who runs a build
// is in this file and nowhere else, so that a PostgreSQL engine swaps in
// its own here: `SELECT … FOR UPDATE SKIP LOCKED` for the claim, and the
// server's clock rather than the caller's for heartbeats (ARCHITECTURE.md,
// "Build runners and the queue").
//
// On SQLite each decision is one conditional statement in a short write
// transaction: the write lock makes two claims of one build impossible,
// and no statement holds that lock longer than itself (opsh runs beside a
// live backend). A database without migration 004_runners has no
// heartbeat columns: there, builds are held as before 004 (queued → running
// with the runner's host, pid and start time) and nothing heartbeats.

/// The job manager that holds builds: one per `opsh runner`, one per shell
/// or script that starts builds. `id` tells two managers of one process
/// apart; host, pid and start time say which process it is.
public struct BuildHolder: Sendable, Hashable {
    public var id: String
    public var host: String
    public var pid: Int
    /// Seconds since 1970 when the process started.
    public var startedAt: Double
    /// How often it refreshes `heartbeatAt`, in seconds.
    public var heartbeatInterval: Double

    public init(id: String, host: String, pid: Int, startedAt: Double, heartbeatInterval: Double) {
        self.id = id
        self.host = host
        self.pid = pid
        self.startedAt = startedAt
        self.heartbeatInterval = heartbeatInterval
    }
}

/// Who holds a build and when it last said so.
public struct BuildLease: Sendable, Hashable {
    public var buildId: String
    public var status: BuildStatus
    public var runnerId: String?
    public var runnerHost: String?
    public var runnerPid: Int?
    public var runnerStartedAt: Double?
    /// Seconds since 1970; nil when nobody heartbeats it (a build started
    /// before 004_runners, or by hand).
    public var heartbeatAt: Double?
    public var heartbeatInterval: Double?
    public var attempts: Int

    /// A lease is stale after this many heartbeat intervals without one.
    public static let missedHeartbeats = 3.0

    /// Whether its holder missed ``missedHeartbeats`` heartbeats by `now`.
    public func heartbeatLapsed(at now: Date) -> Bool {
        guard let heartbeatAt, let heartbeatInterval else { return false }
        return heartbeatAt + Self.missedHeartbeats * heartbeatInterval < now.timeIntervalSince1970
    }

    init(row: Row) throws {
        buildId = row["id"]
        guard let status = BuildStatus(rawValue: row["status"]) else {
            throw StoreError.refused(reason: "build \(buildId) has an unknown status")
        }
        self.status = status
        runnerId = row["runnerId"]
        runnerHost = row["runnerHost"]
        runnerPid = row["runnerPid"]
        runnerStartedAt = row["runnerStartedAt"]
        heartbeatAt = row["heartbeatAt"]
        heartbeatInterval = row["heartbeatInterval"]
        attempts = row["attempts"]
    }
}

/// What a runner does with a build whose holder stopped heartbeating.
public enum BuildTakeBack: Sendable, Hashable {
    /// Back to `queued`, for any runner to start again.
    case requeue
    /// Ended `failed`: it used its attempts.
    case fail
}

extension BuildRepository {
    /// Whether the database has migration 004_runners' columns.
    func queueColumnsExist(_ db: Database) throws -> Bool {
        try db.columns(in: "builds").contains { $0.name == "heartbeatAt" }
    }

    /// A queued build nobody holds, or whose holder's heartbeat lapsed
    /// (?1: now, seconds since 1970).
    private static let unheld = """
        status = 'queued' AND (runnerId IS NULL OR coalesce(heartbeatAt + \(BuildLease.missedHeartbeats) * heartbeatInterval, 0) < ?1)
        """

    /// Of the schemes named in the JSON array ?2 by id or by name; all when ?2 is NULL.
    private static let ofSchemes = """
        (?2 IS NULL OR schemeId IN (SELECT id FROM schemes WHERE id IN (SELECT value FROM json_each(?2))
                                                          OR name IN (SELECT value FROM json_each(?2))))
        """

    private static func schemesArgument(_ schemes: [String]?) -> String? {
        schemes.map { JSON.array($0.map(JSON.string)).compactText() }
    }

    /// Holds the queued build `id` for `holder` (it stays queued until
    /// ``claim(_:_:for:at:)``): false when it is not queued, or another
    /// holder with a live heartbeat has it. So a build a shell starts
    /// cannot be taken by a runner between its creation and its start.
    public func reserve(_ db: Database, _ id: String, for holder: BuildHolder, at now: Date = Date()) throws -> Bool {
        guard try queueColumnsExist(db) else {
            return try String.fetchOne(db, sql: "SELECT status FROM builds WHERE id = ?", arguments: [id]) == BuildStatus.queued.rawValue
        }
        try db.execute(sql: """
            UPDATE builds SET runnerId = ?3, runnerHost = ?4, runnerPid = ?5, runnerStartedAt = ?6,
                              heartbeatAt = ?1, heartbeatInterval = ?7
            WHERE id = ?2 AND status = 'queued'
              AND (runnerId IS NULL OR runnerId = ?3 OR coalesce(heartbeatAt + \(BuildLease.missedHeartbeats) * heartbeatInterval, 0) < ?1)
            """, arguments: [now.timeIntervalSince1970, id, holder.id, holder.host, holder.pid, holder.startedAt,
                             holder.heartbeatInterval])
        return db.changesCount > 0
    }

    /// Whether a queued build waits for a runner (of `schemes`, ids or
    /// names; nil: any). A read: an idle runner polls with it and takes
    /// the write lock only when there is something to claim.
    func hasClaimable(_ db: Database, schemes: [String]?, at now: Date = Date()) throws -> Bool {
        guard try queueColumnsExist(db) else { return false }
        return try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM builds WHERE \(Self.unheld) AND \(Self.ofSchemes))",
                                 arguments: [now.timeIntervalSince1970, Self.schemesArgument(schemes)]) ?? false
    }

    /// The claim: holds the oldest queued build nobody holds (of
    /// `schemes`, ids or names; nil: any) for `holder`, in one statement,
    /// and returns it; nil when there is none. On PostgreSQL the inner
    /// SELECT becomes `… FOR UPDATE SKIP LOCKED`.
    public func reserveNext(_ db: Database, for holder: BuildHolder, schemes: [String]?,
                            at now: Date = Date()) throws -> BuildRecord? {
        guard try queueColumnsExist(db) else { return nil }
        return try BuildRecord.fetchOne(db, sql: """
            UPDATE builds SET runnerId = ?3, runnerHost = ?4, runnerPid = ?5, runnerStartedAt = ?6,
                              heartbeatAt = ?1, heartbeatInterval = ?7
            WHERE id = (SELECT id FROM builds WHERE \(Self.unheld) AND \(Self.ofSchemes)
                        ORDER BY createdAt, buildNumber, id LIMIT 1)
            RETURNING *
            """, arguments: [now.timeIntervalSince1970, Self.schemesArgument(schemes), holder.id, holder.host,
                             holder.pid, holder.startedAt, holder.heartbeatInterval])
    }

    /// Moves a build `holder` holds from queued to running, counting the
    /// attempt; false when it is no longer queued and held by `holder`
    /// (cancelled, deleted, or taken meanwhile).
    public func claim(_ db: Database, _ id: String, for holder: BuildHolder, at now: Date = Date()) throws -> Bool {
        guard try queueColumnsExist(db) else {
            try db.execute(sql: """
                UPDATE builds SET status = 'running', startDate = ?, endDate = NULL, exitCode = NULL, progress = 0,
                                  runnerHost = ?, runnerPid = ?, runnerStartedAt = ?
                WHERE id = ? AND status = 'queued'
                """, arguments: [now.timeIntervalSince1970, holder.host, holder.pid, holder.startedAt, id])
            return db.changesCount > 0
        }
        try db.execute(sql: """
            UPDATE builds SET status = 'running', startDate = ?1, endDate = NULL, exitCode = NULL, progress = 0,
                              heartbeatAt = ?1, attempts = attempts + 1
            WHERE id = ?2 AND status = 'queued' AND runnerId = ?3
            """, arguments: [now.timeIntervalSince1970, id, holder.id])
        return db.changesCount > 0
    }

    /// The heartbeat: one statement for every build `holder` holds, queued
    /// or running. Returns the ids it still holds (a build missing from
    /// them was taken back or ended), or nil on a database without
    /// 004_runners (nothing to refresh).
    func heartbeat(_ db: Database, for holder: BuildHolder, at now: Date = Date()) throws -> Set<String>? {
        guard try queueColumnsExist(db) else { return nil }
        return Set(try String.fetchAll(db, sql: """
            UPDATE builds SET heartbeatAt = ? WHERE runnerId = ? AND status IN ('queued', 'running') RETURNING id
            """, arguments: [now.timeIntervalSince1970, holder.id]))
    }

    /// Who holds a build, or nil when there is no such build.
    public func lease(_ db: Database, _ id: String) throws -> BuildLease? {
        try Row.fetchOne(db, sql: "SELECT \(try Self.leaseColumns(db)) FROM builds WHERE id = ?", arguments: [id])
            .map(BuildLease.init(row:))
    }

    /// Every running build's lease, oldest first.
    func runningLeases(_ db: Database) throws -> [BuildLease] {
        try Row.fetchAll(db, sql: """
            SELECT \(try Self.leaseColumns(db)) FROM builds WHERE status = 'running' ORDER BY startDate, createdAt
            """).map(BuildLease.init(row:))
    }

    /// Running builds whose holder missed three heartbeats by `now`,
    /// longest silent first.
    func expiredLeases(_ db: Database, at now: Date = Date()) throws -> [BuildLease] {
        guard try queueColumnsExist(db) else { return [] }
        return try Row.fetchAll(db, sql: """
            SELECT \(try Self.leaseColumns(db)) FROM builds
            WHERE status = 'running' AND heartbeatAt + \(BuildLease.missedHeartbeats) * heartbeatInterval < ?
            ORDER BY heartbeatAt
            """, arguments: [now.timeIntervalSince1970]).map(BuildLease.init(row:))
    }

    /// Takes back a build whose holder stopped: requeued (for any runner)
    /// or failed, with `note` as its log line, in one transaction. Only if
    /// the build is still running under that same lease (holder and last
    /// heartbeat): false when it ended, heartbeated again, or another
    /// runner took it back first.
    public func takeBack(_ db: Database, _ lease: BuildLease, _ action: BuildTakeBack, note: String,
                         at now: Date = Date()) throws -> Bool {
        let unchanged = "id = ? AND status = 'running' AND runnerId IS ? AND heartbeatAt IS ?"
        let leaseArguments: StatementArguments = [lease.buildId, lease.runnerId, lease.heartbeatAt]
        switch action {
        case .requeue:
            try db.execute(sql: """
                UPDATE builds SET status = 'queued', startDate = NULL, endDate = NULL, exitCode = NULL, progress = 0,
                                  commitHash = NULL, runnerId = NULL, runnerHost = NULL, runnerPid = NULL,
                                  runnerStartedAt = NULL, heartbeatAt = NULL, heartbeatInterval = NULL
                WHERE \(unchanged)
                """, arguments: leaseArguments)
        case .fail:
            // The holder is cleared (its host and pid stay, for the record):
            // the run it took back from must find its fence gone (BuildFence).
            try db.execute(sql: "UPDATE builds SET status = 'failed', endDate = ?, runnerId = NULL WHERE \(unchanged)",
                           arguments: [now.timeIntervalSince1970] + leaseArguments)
        }
        guard db.changesCount > 0 else { return false }
        try BuildLogRepository().append(db, [BuildLogRecord(buildId: lease.buildId, level: action == .fail ? .error : .warning,
                                                             category: "runner", content: note, createdAt: now)])
        return true
    }

    private static func leaseColumns(_ db: Database) throws -> String {
        let common = "id, status, runnerHost, runnerPid, runnerStartedAt"
        return try BuildRepository().queueColumnsExist(db)
            ? common + ", runnerId, heartbeatAt, heartbeatInterval, attempts"
            : common + ", NULL AS runnerId, NULL AS heartbeatAt, NULL AS heartbeatInterval, 0 AS attempts"
    }
}
