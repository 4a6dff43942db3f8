import Foundation

/// A runner as it records itself in `opsh_runners` (migration
/// 007_runnerRegistry): who it is and how it runs.
public struct RunnerRegistration: Sendable, Hashable {
    /// Its holder id: the `runnerId` of the builds it holds.
    public var id: String
    public var host: String
    public var pid: Int
    /// The process's start on its machine, seconds since 1970.
    public var processStartedAt: Double?
    public var heartbeatInterval: Double
    /// The opsh that runs it (``OpshVersion``).
    public var version: String
    public var concurrency: Int
    /// Its `--scheme` values; nil: every scheme.
    public var schemes: [String]?

    public init(id: String, host: String, pid: Int, processStartedAt: Double?, heartbeatInterval: Double,
                version: String = OpshVersion.current, concurrency: Int, schemes: [String]?) {
        self.id = id
        self.host = host
        self.pid = pid
        self.processStartedAt = processStartedAt
        self.heartbeatInterval = heartbeatInterval
        self.version = version
        self.concurrency = concurrency
        self.schemes = schemes
    }

    /// The row's values, in ``RunnerRegistry/insertColumns`` order (the
    /// times `startedAt` and `heartbeatAt` both `now`).
    func values(now: Double) -> [StoreValue] {
        [.text(id), .text(host), .integer(Int64(pid)), processStartedAt.map(StoreValue.real) ?? .null,
         .real(now), .real(now), .real(heartbeatInterval), .text(version), .integer(Int64(concurrency)),
         schemes.map { .text($0.joined(separator: ", ")) } ?? .null]
    }
}

/// A runner as `opsh runners` lists it: its row, how many builds it holds
/// now, and what it is by the database's clock.
public struct RunnerEntry: Sendable {
    public enum State: String, Sendable {
        /// It beat within three of its intervals.
        case live
        /// It exited cleanly (`stoppedAt`).
        case stopped
        /// It missed three heartbeats without saying it stopped: killed,
        /// its machine gone, or it cannot reach the database.
        case lost
    }

    public var id: String
    public var host: String
    public var pid: Int
    public var startedAt: Double
    public var heartbeatAt: Double
    public var heartbeatInterval: Double
    public var stoppedAt: Double?
    public var version: String
    public var concurrency: Int
    public var schemes: String?
    /// Builds it holds now: queued (reserved for it) or running.
    public var buildsHeld: Int
    public var state: State
}

/// The runners' own rows (`opsh_runners`, migration 007_runnerRegistry):
/// what `opsh runners` reads, on either engine, and the statements each
/// engine's ``BuildStore`` writes them with (README, "Build runners").
public enum RunnerRegistry {
    public static let table = "opsh_runners"
    /// The migration that makes the table.
    public static let migration = Migration007RunnerRegistry.identifier
    /// How long the row of a runner that stopped (or was lost) is kept
    /// before a runner starting deletes it: a week, in seconds.
    public static let keptAfterEnd: Double = 7 * 86_400

    static let insertColumns = "id, host, pid, processStartedAt, startedAt, heartbeatAt, heartbeatInterval, version, concurrency, schemes"

    /// Rows of runners that ended before `cutoff` (stopped then, or whose
    /// last heartbeat lapsed then): the only rows a runner deletes, and
    /// only its own table's.
    static let pruneEnded = "DELETE FROM \(table) WHERE coalesce(stoppedAt, heartbeatAt + \(BuildLease.missedHeartbeats) * heartbeatInterval) < ?"

    /// Whether the database has the table (migration 007_runnerRegistry).
    public static func exists(_ db: some RepositoryConnection) throws -> Bool {
        switch db.dialect {
        case .sqlite:
            try db.value("SELECT count(*) FROM main.sqlite_master WHERE type = 'table' AND name = '\(table)'") == .integer(1)
        case .postgresql:
            // The table the unqualified name finds (the runners' statements name it so).
            try db.value("SELECT CASE WHEN to_regclass('\(table)') IS NULL THEN 0 ELSE 1 END") == .integer(1)
        }
    }

    /// The runners, by host then start; without `includeEnded` only the
    /// live ones. With the database's clock (`now`), seconds since 1970.
    public static func list(_ db: some RepositoryConnection, includeEnded: Bool) throws -> (now: Double, runners: [RunnerEntry]) {
        let result = try db.fetch("""
            SELECT r.id, r.host, r.pid, r.startedAt, r.heartbeatAt, r.heartbeatInterval, r.stoppedAt, r.version,
                   r.concurrency, r.schemes,
                   (SELECT count(*) FROM builds b WHERE b.runnerId = r.id AND b.status IN ('queued', 'running')),
                   \(db.dialect.currentTimeInSeconds)
            FROM \(table) r
            ORDER BY r.host, r.startedAt, r.pid
            """, [])
        var now = Date().timeIntervalSince1970
        var runners: [RunnerEntry] = []
        for row in result.rows {
            now = double(row[11]) ?? now
            let heartbeatAt = double(row[4]) ?? 0
            let interval = double(row[5]) ?? 1
            let stoppedAt = double(row[6])
            let state: RunnerEntry.State = stoppedAt != nil ? .stopped
                : heartbeatAt + BuildLease.missedHeartbeats * interval >= now ? .live : .lost
            guard includeEnded || state == .live else { continue }
            runners.append(RunnerEntry(
                id: row[0].textValue ?? "", host: row[1].textValue ?? "", pid: Int(double(row[2]) ?? 0),
                startedAt: double(row[3]) ?? 0, heartbeatAt: heartbeatAt, heartbeatInterval: interval,
                stoppedAt: stoppedAt, version: row[7].textValue ?? "", concurrency: Int(double(row[8]) ?? 0),
                schemes: row[9].textValue, buildsHeld: Int(double(row[10]) ?? 0), state: state))
        }
        if result.rows.isEmpty, let clock = try double(db.value("SELECT \(db.dialect.currentTimeInSeconds)")) { now = clock }
        return (now, runners)
    }

    private static func double(_ value: StoreValue?) -> Double? {
        switch value {
        case let .integer(number)?: Double(number)
        case let .real(number)?: number
        case let .text(text)?: Double(text)
        default: nil
        }
    }
}
