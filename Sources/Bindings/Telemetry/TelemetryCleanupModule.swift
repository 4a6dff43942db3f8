import Foundation
import LuaRuntime
import Store

/// `telemetry.cleanup{ … }`: retention cleanup in short batches.
///
/// ```lua
/// local r = telemetry.cleanup{ olderThan = "30d" }            -- or a date: os.time() - 86400
/// print(r.deleted, r.batches, r.longestLockMs, r.seconds, r.dryRun)
/// telemetry.cleanup{ olderThan = "7d", event = "debug", keep = 1000, batch = 2000 }
/// telemetry.cleanup{}                -- the retention of the storage configuration
/// telemetry.cleanup{ olderThan = "30d", dryRun = true }      -- counts, deletes nothing
/// telemetry.cleanup{ olderThan = "30d", onBatch = function(r) print(r.deleted) end }
/// ```
///
/// Each batch is a transaction of its own (``TelemetryCleanup``), so it is
/// refused inside `db.transaction`; under `--dry-run` it counts, deletes
/// nothing and takes no write lock, and the dry run's summary names the
/// rows as deleted (the session's `countedInsteadOfChanged`). On a
/// terminal a progress bar runs on stderr.
/// An interrupt (Ctrl-C, timeout) stops it between batches; the batches
/// done stay done, and stderr says how many rows went.
enum TelemetryCleanupModule {
    static let optionNames = ["olderThan", "keep", "event", "batch", "dryRun", "onBatch"]

    static func install(in session: OpshSession) {
        let database = session.database
        session.runtime.register(module: "telemetry", [
            "cleanup": { call in try cleanup(call, database: database) },
        ])
    }

    static func cleanup(_ call: LuaCall, database: any DatabaseSession) throws -> Int32 {
        let maintenance = database.maintenance
        if let refusal = maintenance.cleanupRefusal() { throw LuaCallError.message(refusal) }
        let note = maintenance.cleanupNote
        if let note { FileHandle.standardError.write(Data("opsh: \(note)\n".utf8)) }
        return try cleanup(call, isDryRun: database.isDryRun, commitsEachBatch: maintenance.cleanupCommitsEachBatch,
                           outsideTheChunk: note != nil,
                           retentionDays: { try maintenance.telemetryRetentionDays() },
                           run: { cleanup, shouldStop, progress in
                               try maintenance.cleanTelemetry(cleanup, shouldStop: shouldStop, progress: progress)
                           })
    }

    /// The engine-neutral part: the options read and checked, the progress
    /// bar, `onBatch`, the interrupt's message and the result table; `run`
    /// runs the batches on the session's engine.
    /// `outsideTheChunk`: at the prompt, where the chunk itself changes
    /// nothing and its "committed" note never comes, so the cleanup's note
    /// names the rows its batches deleted.
    static func cleanup(_ call: LuaCall, isDryRun: Bool, commitsEachBatch: Bool = true, outsideTheChunk: Bool = false,
                        retentionDays: () throws -> Int?,
                        run: (TelemetryCleanup, () -> Bool, (MaintenanceProgress) -> Void) throws -> TelemetryCleanup.Report) throws -> Int32 {
        let fields = call.isNoneOrNil(1) ? [:] : try call.table(1)
        for name in fields.keys.sorted() where !optionNames.contains(name) {
            throw call.argumentError(1, "unknown option '\(name)' (options: \(optionNames.joined(separator: ", ")))")
        }

        // olderThan: a duration ("30d") or a date (seconds since 1970);
        // else the configured retention.
        let cutoff: Double
        switch fields["olderThan"] ?? .nil {
        case .nil:
            guard let days = try retentionDays() else {
                throw LuaCallError.message("telemetry.cleanup: no olderThan given and the database has no storage configuration (storage_config) to take the retention from; pass one, e.g. olderThan = \"30d\"")
            }
            cutoff = Date().timeIntervalSince1970 - Double(days) * 86400
        case let .integer(date):
            cutoff = Double(date)
        case let .number(date):
            guard date.isFinite else { throw call.argumentError(1, "olderThan: a date must be a finite number of seconds since 1970") }
            cutoff = date
        case let value:
            guard let text = value.stringValue else {
                throw call.argumentError(1, "olderThan: a duration (\"30d\") or a date (seconds since 1970) expected, got \(value.typeName)")
            }
            do {
                cutoff = Date().timeIntervalSince1970 - (try DurationText.seconds(text))
            } catch {
                throw call.argumentError(1, "olderThan: \(error)")
            }
        }

        func integer(_ name: String) throws -> Int? {
            switch fields[name] ?? .nil {
            case .nil: return nil
            case let .integer(value): return Int(value)
            case let .number(value) where value == value.rounded() && abs(value) < 1e15: return Int(value)
            case let .number(value): throw call.argumentError(1, "\(name): a whole number expected, got \(value)")
            case let value: throw call.argumentError(1, "\(name): a whole number expected, got \(value.typeName)")
            }
        }
        let keep = try integer("keep")
        if let keep, keep < 0 { throw call.argumentError(1, "keep: 0 or more rows expected, got \(keep)") }
        // No batch: the engine's (on SQLite, as many rows as fit in its time).
        let batch = try integer("batch")
        if let batch, batch <= 0 { throw call.argumentError(1, "batch: a positive number of rows expected, got \(batch)") }
        var event: String?
        if let value = fields["event"], value != .nil {
            guard let text = value.stringValue else { throw call.argumentError(1, "event: a string expected, got \(value.typeName)") }
            event = text
        }
        var dryRun = isDryRun
        switch fields["dryRun"] ?? .nil {
        case .nil: break
        case let .boolean(flag): dryRun = dryRun || flag
        case let value: throw call.argumentError(1, "dryRun: a boolean expected, got \(value.typeName)")
        }
        var onBatch: LuaReference?
        switch fields["onBatch"] ?? .nil {
        case .nil: break
        case let .reference(function) where function.typeName == "function": onBatch = function
        case let value: throw call.argumentError(1, "onBatch: a function expected, got \(value.typeName)")
        }

        let cleanup = try TelemetryCleanup(.init(cutoff: cutoff, keep: keep, event: event, batchSize: batch, dryRun: dryRun))
        let bar = ProgressBar(label: "telemetry.cleanup", unit: "rows")
        var callbackError: (any Error)?
        var batches = 0
        // What is committed so far, for the interrupt's message however
        // the interrupt surfaces (between batches, or failing one).
        var committed = (rows: 0, batches: 0)
        func interrupted(_ rows: Int, _ batches: Int) -> LuaCallError {
            let message = "telemetry.cleanup interrupted: \(rows) rows deleted in \(batches) batches "
                + (commitsEachBatch ? "(committed)" : "(in the run's transaction, rolled back with it)")
            FileHandle.standardError.write(Data("opsh: \(message)\n".utf8))
            return LuaCallError.message(message)
        }
        let report: TelemetryCleanup.Report
        do {
            report = try run(
            cleanup,
            { callbackError != nil || call.host.interruptRequested != nil },
            { progress in
                bar.update(completed: progress.completed, total: progress.total)
                if progress.completed > 0 { committed = (progress.completed, committed.batches + 1) }
                guard let onBatch, progress.completed > 0 else { return }
                batches += 1
                do {
                    _ = try call.call(onBatch, [.table(["deleted": .integer(Int64(progress.completed)),
                                                        "batches": .integer(Int64(batches)),
                                                        "matched": .integer(Int64(progress.total))])])
                } catch {
                    callbackError = error
                }
            })
        } catch where call.host.interruptRequested != nil && !isDryRun {
            bar.finish()
            throw interrupted(committed.rows, committed.batches)
        }
        bar.finish()
        if report.stopped, call.host.interruptRequested != nil {
            throw interrupted(report.deleted, report.batches)
        }
        if let callbackError { throw callbackError }
        if outsideTheChunk, !isDryRun {
            FileHandle.standardError.write(Data("opsh: telemetry.cleanup: \(report.deleted) rows deleted in \(report.batches) batches, each committed as it went (undo() cannot take them back)\n".utf8))
        }
        if isDryRun {
            FileHandle.standardError.write(Data("opsh: telemetry.cleanup: dry run: \(report.deleted) rows would have been deleted (counted, not deleted: no write lock taken)\n".utf8))
        }
        return call.results(.table([
            "deleted": .integer(Int64(report.deleted)),
            "batches": .integer(Int64(report.batches)),
            "longestLockMs": .number((report.longestLockMs * 10).rounded() / 10),
            "seconds": .number((report.seconds * 1000).rounded() / 1000),
            "dryRun": .boolean(report.dryRun),
        ]))
    }
}
