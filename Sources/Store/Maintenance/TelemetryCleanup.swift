import Foundation
import GRDB

/// Retention cleanup of the `telemetry` table, in batches.
///
/// Each batch is one short transaction (the oldest `batchSize` matching
/// rows, or by default on SQLite as many as it deletes in
/// ``BatchPacing/lockAim``), so another process that writes to the
/// database waits at most about one batch for the lock, never the whole
/// cleanup: between batches the lock is left free a while (``BatchPacing``
/// on SQLite, ``Options/pauseFraction`` on PostgreSQL) and the WAL is
/// checkpointed. The loop does not own the transactions: the caller says
/// how to run one batch (``Store/cleanupTelemetry(_:shouldStop:progress:)``
/// uses the store's writer, the Lua binding its session), and may stop it
/// between batches; batches already committed stay committed.
///
/// ```swift
/// let report = try store.cleanupTelemetry(.init(olderThan: 30 * 86400, batchSize: 20_000))
/// ```
public struct TelemetryCleanup: Sendable {
    /// What to delete.
    public struct Options: Sendable, Hashable {
        /// Rows with `created_at` strictly before this (seconds since 1970).
        public var cutoff: Double
        /// Keep the `keep` newest matching rows, however old.
        public var keep: Int?
        /// Only rows of this event.
        public var event: String?
        /// Rows per batch (per transaction). nil: on SQLite a batch holds
        /// the lock for ``BatchPacing/lockAim`` (as many rows as it deletes
        /// in that time), on PostgreSQL ``defaultBatchSize`` rows.
        public var batchSize: Int?
        /// Count what would go; delete nothing.
        public var dryRun: Bool
        /// On PostgreSQL, after each batch the lock stays free for this
        /// fraction of the batch's time (a waiting writer is let in as
        /// soon as it is free). SQLite's writers sleep in their busy
        /// handler instead: ``BatchPacing`` says how long it stays free.
        public var pauseFraction = 0.5

        /// PostgreSQL's batch when none is given: a few tens of
        /// milliseconds of deleting.
        public static let defaultBatchSize = 20_000

        /// Rows per step of a SQLite batch without `batchSize`: between
        /// steps it checks whether another would end past its time
        /// (``BatchPacing``); about 2 ms each.
        static let stepRows = 2_000

        public init(cutoff: Double, keep: Int? = nil, event: String? = nil,
                    batchSize: Int? = nil, dryRun: Bool = false) {
            self.cutoff = cutoff
            self.keep = keep
            self.event = event
            self.batchSize = batchSize
            self.dryRun = dryRun
        }

        /// Rows older than `age` seconds before `now`.
        public init(olderThan age: Double, now: Date = Date(), keep: Int? = nil, event: String? = nil,
                    batchSize: Int? = nil, dryRun: Bool = false) {
            self.init(cutoff: now.timeIntervalSince1970 - age, keep: keep, event: event,
                      batchSize: batchSize, dryRun: dryRun)
        }
    }

    /// What a cleanup did.
    public struct Report: Sendable, Hashable {
        /// Rows deleted (in a dry run: rows that would be deleted).
        public var deleted = 0
        /// Transactions committed (0 in a dry run).
        public var batches = 0
        /// The longest batch transaction, in milliseconds, from asking for
        /// the write lock to the end of the commit.
        public var longestLockMs = 0.0
        /// Wall time of the whole cleanup.
        public var seconds = 0.0
        /// Of which batch transactions (the rest: counting, checkpoints,
        /// pauses that leave the lock to other writers).
        public var batchSeconds = 0.0
        public var dryRun = false
        /// Stopped between batches before the end (interrupt).
        public var stopped = false
        /// Rows that matched when the cleanup started (the progress total).
        public var matched = 0
        /// In a dry run: the filter the rows were counted by
        /// (``CountedInsteadOfChanged``).
        var countedBy: Filter?
        public init() {}
    }

    public let options: Options
    /// Rows an earlier cleanup of the same dry run counted (the filters it
    /// counted by): left out, as a real session's earlier cleanup would
    /// have deleted them (``CountedInsteadOfChanged``).
    private(set) var leftOut: [Filter] = []

    /// This cleanup, leaving out the rows `filters` match.
    func leavingOut(_ filters: [Filter]) -> TelemetryCleanup {
        var cleanup = self
        cleanup.leftOut = filters
        return cleanup
    }

    public init(_ options: Options) throws {
        if let batchSize = options.batchSize, batchSize <= 0 {
            throw StoreError.refused(reason: "batch must be a positive number of rows, got \(batchSize)")
        }
        if let keep = options.keep, keep < 0 {
            throw StoreError.refused(reason: "keep must be 0 or more rows, got \(keep)")
        }
        guard options.cutoff.isFinite else {
            throw StoreError.refused(reason: "the cutoff date must be a finite number of seconds since 1970")
        }
        self.options = options
    }

    /// The newest row that `keep` protects (with every newer one): rows at
    /// or after `(createdAt, id)` in that order are kept.
    struct Boundary: Sendable, Hashable {
        var createdAt: Double
        var id: Int64
    }

    /// The filter shared by the count and the batches (SQL both engines run).
    struct Filter: Sendable, Hashable {
        var sql: String
        var values: [StoreValue]
        var arguments: StatementArguments { StatementArguments(values.map(\.databaseValue)) }
    }

    /// Reads where `keep` draws the line (nil when it protects nothing or
    /// there is no `keep`) and how many rows the filter it gives matches
    /// now: 0 when fewer rows than `keep` match at all. One statement of
    /// each, in either engine's SQL.
    func survey(_ db: some RepositoryConnection) throws -> (matched: Int, filter: Filter) {
        var boundary: Boundary?
        if let keep = options.keep, keep > 0 {
            var sql = "SELECT created_at, id FROM telemetry WHERE 1 = 1"
            var values: [StoreValue] = []
            if let event = options.event {
                sql += " AND event = ?"
                values.append(.text(event))
            }
            for earlier in leftOut {
                sql += " AND (\(earlier.sql)) IS NOT TRUE"
                values += earlier.values
            }
            sql += " ORDER BY created_at DESC, id DESC LIMIT 1 OFFSET ?"
            values.append(.integer(Int64(keep - 1)))
            guard let row = try db.fetch(sql, values).rows.first,
                  case let .real(date) = row[0], case let .integer(id) = row[1] else {
                return (0, filter(boundary: nil))
            }
            boundary = Boundary(createdAt: date, id: id)
        }
        var filter = filter(boundary: boundary)
        if options.dryRun {
            // What a dry run counts is what a real cleanup would have
            // deleted by now: the rows matching now, not rows written
            // later that match too (an import of old rows, then a second
            // cleanup, which a real session's deletes). Written later,
            // they have larger ids (scripts/reliability-attacks.md, 27v).
            if let newest = try db.value("SELECT max(id) FROM telemetry", [])?.integerValue {
                filter.sql += " AND id <= ?"
                filter.values.append(.integer(newest))
            }
        }
        let matched = try db.value("SELECT count(*) FROM telemetry WHERE \(filter.sql)", filter.values)?.integerValue ?? 0
        return (Int(matched), filter)
    }

    func filter(boundary: Boundary?) -> Filter {
        var sql = "created_at < ?"
        var values: [StoreValue] = [.real(options.cutoff)]
        if let event = options.event {
            sql += " AND event = ?"
            values.append(.text(event))
        }
        // Rows older than the cutoff are all older than a boundary at or
        // after it: only a boundary before the cutoff narrows the filter.
        if let boundary, boundary.createdAt < options.cutoff {
            sql += " AND created_at <= ? AND (created_at < ? OR id < ?)"
            values += [.real(boundary.createdAt), .real(boundary.createdAt), .integer(boundary.id)]
        }
        // (IS NOT TRUE: a row an earlier filter's NULL left unmatched stays.)
        for earlier in leftOut {
            sql += " AND (\(earlier.sql)) IS NOT TRUE"
            values += earlier.values
        }
        return Filter(sql: sql, values: values)
    }

    /// How many rows the cleanup would delete now.
    func count(_ db: Database) throws -> Int {
        try survey(StoreDatabase(db)).matched
    }

    /// Deletes one batch: the `batchSize` oldest matching rows, or without
    /// a `batchSize` the oldest in steps of ``Options/stepRows`` until the
    /// next step, as long as the last, would end after `deadline`
    /// (`DispatchTime` nanoseconds). Returns the rows deleted, and whether
    /// that was the last batch.
    func deleteBatch(_ db: Database, filter: Filter, until deadline: UInt64) throws -> (deleted: Int, last: Bool) {
        if let batchSize = options.batchSize { return try deleteStep(db, filter: filter, rows: batchSize) }
        var deleted = 0
        while true {
            let stepStart = DispatchTime.now().uptimeNanoseconds
            let step = try deleteStep(db, filter: filter, rows: Options.stepRows)
            deleted += step.deleted
            if step.last || step.deleted == 0 { return (deleted, step.last) }
            let now = DispatchTime.now().uptimeNanoseconds
            if now + (now - stepStart) > deadline { return (deleted, false) }
        }
    }

    /// Deletes the `rows` oldest matching rows. Returns the rows deleted,
    /// and whether no matching row is left.
    ///
    /// The step is a date range, `created_at <` the date of the first row
    /// after it, read from the index: the same plan as one big
    /// `DELETE … WHERE created_at < ?`, which costs about half the CPU of
    /// `rowid IN (SELECT … LIMIT n)`. Only when more than a step share
    /// one date does it fall back to the latter.
    func deleteStep(_ db: Database, filter: Filter, rows: Int) throws -> (deleted: Int, last: Bool) {
        var arguments = filter.arguments
        arguments += [rows]
        let bound = try Double.fetchOne(db.cachedStatement(sql: """
            SELECT created_at FROM telemetry WHERE \(filter.sql) ORDER BY created_at LIMIT 1 OFFSET ?
            """), arguments: arguments)
        guard let bound else {
            try db.cachedStatement(sql: "DELETE FROM telemetry WHERE \(filter.sql)").execute(arguments: filter.arguments)
            return (db.changesCount, true)
        }
        // The bound row matches the filter, so every older row of the
        // event does too. (Only one upper bound on created_at: with two,
        // SQLite may scan up to the cutoff at each batch.)
        if let event = options.event {
            try db.cachedStatement(sql: "DELETE FROM telemetry WHERE event = ? AND created_at < ?")
                .execute(arguments: [event, bound])
        } else {
            try db.cachedStatement(sql: "DELETE FROM telemetry WHERE created_at < ?").execute(arguments: [bound])
        }
        if db.changesCount > 0 { return (db.changesCount, false) }
        arguments = filter.arguments
        arguments += [rows]
        try db.cachedStatement(sql: """
            DELETE FROM telemetry WHERE rowid IN (SELECT rowid FROM telemetry WHERE \(filter.sql) LIMIT ?)
            """).execute(arguments: arguments)
        return (db.changesCount, false)
    }

    /// Runs the cleanup on SQLite.
    ///
    /// - parameters:
    ///   - read: runs its body as a read (the count and the `keep` boundary).
    ///   - write: runs its body as one transaction of its own (a batch).
    ///   - unlocked: runs its body on the writer's connection outside any
    ///     transaction (nil: not available). Then the cleanup checkpoints
    ///     the WAL itself between batches, with the lock free, instead of
    ///     letting the commit of a batch (ours or another process's) do it,
    ///     and ends the pause after a batch once another connection has
    ///     committed (``BatchPacing``).
    ///   - shouldStop: asked before each batch; true stops the loop (the
    ///     report says `stopped`).
    ///   - progress: told after each batch (deleted so far, of matched).
    ///
    /// A batch that fails with SQLite's interrupt (`sqlite3_interrupt`, as
    /// Ctrl-C does) rolls back alone: the earlier ones stay committed and
    /// the report says `stopped`. Other errors are thrown.
    func run(
        read: ((Database) throws -> Void) throws -> Void,
        write: ((Database) throws -> Void) throws -> Void,
        unlocked: (((Database) throws -> Void) throws -> Void)? = nil,
        shouldStop: () -> Bool = { false },
        progress: (MaintenanceProgress) -> Void = { _ in }
    ) throws -> Report {
        // Checkpoints between batches rather than in commits.
        var autoCheckpoint: Int?
        // Frames in the WAL at the last checkpoint.
        var walFrames = 0
        defer {
            if let unlocked, let autoCheckpoint {
                try? unlocked { db in
                    try db.execute(sql: "PRAGMA wal_autocheckpoint = \(autoCheckpoint)")
                    _ = try Row.fetchAll(db, sql: "PRAGMA wal_checkpoint(PASSIVE)")
                }
            }
        }
        return try runBatches(
            survey: {
                var found: (matched: Int, filter: Filter)?
                try read { db in found = try survey(StoreDatabase(db)) }
                return found!
            },
            beforeFirstBatch: {
                try unlocked? { db in
                    autoCheckpoint = try Int.fetchOne(db, sql: "PRAGMA wal_autocheckpoint")
                    try db.execute(sql: "PRAGMA wal_autocheckpoint = 0")
                }
            },
            deleteBatch: { filter in
                // The WAL starts again from its beginning only when a
                // transaction begins with every frame copied back: a
                // writer that committed during the last checkpoint left
                // frames behind, and the WAL grew by a batch (37 MB seen,
                // the bench allows 64). Copy those few first.
                if walFrames > Self.walFramesBeforeCatchingUp {
                    try unlocked? { db in walFrames = try Self.checkpoint(db) }
                }
                var outcome = (deleted: 0, last: false)
                try write { db in
                    // The lock is held from here: the batch's time starts.
                    let aim = BatchPacing.lockAim - BatchPacing.commitAllowance
                    let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(aim * 1e6)
                    outcome = try deleteBatch(db, filter: filter, until: deadline)
                }
                return outcome
            },
            // The lock is free: checkpoint before leaving it free a while.
            betweenBatches: { try unlocked? { db in walFrames = try Self.checkpoint(db) } },
            sharing: unlocked.map { unlocked in
                LockSharing(
                    // SQLite's count of the commits of other connections.
                    commitsByOthers: {
                        var version = 0
                        try unlocked { db in version = try Int.fetchOne(db, sql: "PRAGMA data_version") ?? 0 }
                        return version
                    },
                    longestPause: BatchPacing.longestPause(afterHolding:))
            },
            isCancellation: { ($0 as? DatabaseError)?.resultCode == .SQLITE_INTERRUPT },
            shouldStop: shouldStop, progress: progress)
    }

    /// How the lock is left to writers that wait for it by sleeping and
    /// trying again (SQLite's busy handler, ``BatchPacing``), which nothing
    /// outside sees waiting.
    struct LockSharing {
        /// Other connections' commits so far: one more is a writer let in.
        var commitsByOthers: () throws -> Int
        /// After a batch that held the lock this many milliseconds, how
        /// long it stays free at most when no writer commits.
        var longestPause: (Double) -> Double
    }

    /// Past this many frames in the WAL (16 MB of 4 KB pages) at a
    /// checkpoint, the next batch checkpoints once more before it begins.
    static let walFramesBeforeCatchingUp = 4096

    /// A passive checkpoint; returns the frames in the WAL.
    static func checkpoint(_ db: Database) throws -> Int {
        let row = try Row.fetchOne(db, sql: "PRAGMA wal_checkpoint(PASSIVE)")
        return row?[1] ?? 0
    }

    /// The loop every engine's cleanup runs: the survey (count and `keep`
    /// boundary, read once: rows inserted later are newer, so it keeps at
    /// least `keep` rows), then batches, each a transaction of its own that
    /// the engine's `deleteBatch` runs, with the lock left free after each:
    /// with `sharing`, until another connection commits or for its longest
    /// pause; without, for ``Options/pauseFraction`` of the time it was
    /// held (less what `betweenBatches` took). A batch that fails with the
    /// engine's cancellation rolls back alone and the report says `stopped`.
    func runBatches(
        survey: () throws -> (matched: Int, filter: Filter),
        beforeFirstBatch: () throws -> Void = {},
        deleteBatch: (Filter) throws -> (deleted: Int, last: Bool),
        betweenBatches: () throws -> Void = {},
        sharing: LockSharing? = nil,
        isCancellation: (any Error) -> Bool,
        shouldStop: () -> Bool,
        progress: (MaintenanceProgress) -> Void
    ) throws -> Report {
        let start = DispatchTime.now().uptimeNanoseconds
        func elapsedSeconds() -> Double { Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9 }
        var report = Report()
        report.dryRun = options.dryRun
        let (matched, filter) = try survey()
        report.matched = matched
        if options.dryRun || report.matched == 0 {
            report.deleted = options.dryRun ? report.matched : 0
            if options.dryRun { report.countedBy = filter }
            report.seconds = elapsedSeconds()
            return report
        }
        progress(MaintenanceProgress(completed: 0, total: report.matched))
        try beforeFirstBatch()
        while true {
            if shouldStop() {
                report.stopped = true
                break
            }
            let batchStart = DispatchTime.now().uptimeNanoseconds
            let deleted: Int
            let last: Bool
            do {
                (deleted, last) = try deleteBatch(filter)
            } catch where isCancellation(error) {
                report.stopped = true
                break
            }
            let lockEnd = DispatchTime.now().uptimeNanoseconds
            let elapsed = Double(lockEnd - batchStart) / 1e6
            if deleted == 0 { break }
            report.longestLockMs = max(report.longestLockMs, elapsed)
            report.batchSeconds += elapsed / 1000
            report.batches += 1
            report.deleted += deleted
            // Read right after the batch (before the progress callback,
            // which may take a while): a commit after this is another's.
            // On failure the pause falls back to the fixed fraction; the
            // error, if it lasts, surfaces at the next statement.
            let version = sharing.flatMap { try? $0.commitsByOthers() }
            // Old rows written meanwhile may push the count past what
            // matched at the start.
            progress(MaintenanceProgress(completed: report.deleted, total: max(report.matched, report.deleted)))
            if last { break }
            do {
                try betweenBatches()
            } catch where isCancellation(error) {
                // Interrupted while checkpointing: the batches stay committed.
                report.stopped = true
                break
            }
            if let sharing, let version {
                // Free until a waiting writer got in and committed, or
                // until every writer that began waiting during the batch
                // has tried once.
                let pauseEnd = lockEnd + UInt64(sharing.longestPause(elapsed) * 1e6)
                do {
                    while DispatchTime.now().uptimeNanoseconds < pauseEnd, try sharing.commitsByOthers() == version {
                        usleep(300)
                    }
                } catch where isCancellation(error) {
                    report.stopped = true
                    break
                }
            } else {
                let free = Double(DispatchTime.now().uptimeNanoseconds - lockEnd) / 1e6
                let pause = options.pauseFraction * elapsed - free
                if pause > 0 { usleep(UInt32(pause * 1000)) }
            }
        }
        report.seconds = elapsedSeconds()
        return report
    }
}

extension Store {
    /// Deletes old telemetry in batches, each batch a transaction of its
    /// own on the store's writer. See ``TelemetryCleanup``.
    public func cleanupTelemetry(_ options: TelemetryCleanup.Options, shouldStop: () -> Bool = { false },
                                 progress: (MaintenanceProgress) -> Void = { _ in }) throws -> TelemetryCleanup.Report {
        let cleanup = try TelemetryCleanup(options)
        return try cleanup.run(
            read: { body in try writer.read(body) },
            write: { body in try writer.write(body) },
            unlocked: { body in try self.writer.writeWithoutTransaction(body) },
            shouldStop: shouldStop, progress: progress)
    }

    /// The telemetry retention of the storage configuration, in days:
    /// the `default` configuration's, else the first one's; nil when the
    /// database has no storage configuration.
    public func telemetryRetentionDays() throws -> Int? {
        try writer.read { db in try TelemetryCleanup.retentionDays(db) }
    }
}

extension TelemetryCleanup {
    /// The configured retention in days, nil without a storage configuration.
    static func retentionDays(_ db: Database) throws -> Int? {
        try Int.fetchOne(db, sql: """
            SELECT telemetry_retention_days FROM storage_config
            ORDER BY configuration_id = 'default' DESC, configuration_id LIMIT 1
            """)
    }
}

/// Durations as operators write them: `"30d"`, `"12h"`, `"15m"`, `"90s"`,
/// `"2w"` (a whole or decimal number and one unit).
public enum DurationText {
    public static let units: [Character: Double] = ["s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604_800]

    /// Seconds in `text`; throws naming the text when it is not a duration.
    public static func seconds(_ text: String) throws -> Double {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard let unit = trimmed.last, let factor = units[unit],
              let number = Double(trimmed.dropLast()), number.isFinite, number >= 0,
              trimmed.dropLast().allSatisfy({ $0.isNumber || $0 == "." })
        else {
            throw StoreError.refused(reason: "'\(text)' is not a duration: write a number and a unit, as \"30d\", \"12h\", \"15m\", \"90s\" or \"2w\"")
        }
        return number * factor
    }
}
