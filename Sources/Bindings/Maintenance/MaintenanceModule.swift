import CLuaShim
import Foundation
import LuaRuntime
import Store

/// Maintenance as global functions: `backup`, `vacuum`, `check`, `stats`.
///
/// ```lua
/// backup(os.date("/var/backups/opsh/opsh-%Y%m%d-%H%M%S.sqlite"), { keep = 7 })
/// local r = check()       -- { ok = true, problems = {}, foreignKeys = {} }
/// if not r.ok then for _, v in ipairs(r.foreignKeys) do print(v.table, v.rowid, v.parent) end end
/// print(stats().rows.telemetry, stats().fileSize)
/// vacuum()
/// ```
///
/// `backup` copies the committed database online (other processes keep
/// reading and writing) with SQLite's backup API, shows a progress line on
/// stderr when it is a terminal, and checks the copy with
/// `integrity_check` (a copy that fails is removed). `keep = N` then keeps
/// the N newest backups opsh wrote in the destination's folder whose names
/// match the destination's with its digits varying (`opsh-20240501.sqlite`,
/// `opsh-20240502.sqlite`, …) and deletes the others (``BackupRotation``:
/// nothing opsh did not write there is deleted).
///
/// `backup` and `vacuum` need connections of their own, so they are
/// refused inside `db.transaction`; under `opsh run --dry-run` they do
/// nothing and say so on stderr.
enum MaintenanceModule {
    static func install(in session: OpshSession) {
        let database = session.database
        let store = session.store
        let runtime = session.runtime
        // Closures live in the Lua state the session owns: they must not
        // capture the session (a cycle would keep it, and its builds, alive).
        let rowShapes = session.sql.rowShapes
        runtime.register("backup") { call in try backup(call, database: database, store: store) }
        runtime.register("vacuum") { call in try vacuum(call, database: database, store: store) }
        runtime.register("checkpoint") { call in try checkpoint(call, database: database, store: store) }
        runtime.register("check") { call in
            let report = try database.check()
            let stack = call.stack
            lua_createtable(call.state, 0, 3)
            stack.push(.boolean(report.isOK))
            stack.setField("ok", at: -2)
            stack.push(.array(report.integrityProblems.map(LuaValue.string)))
            stack.setField("problems", at: -2)
            let violations = StoreValue.array(report.foreignKeyViolations.map { violation in
                .object([
                    .init("table", .text(violation.table)),
                    .init("rowid", violation.rowid.map(StoreValue.integer) ?? .null),
                    .init("parent", .text(violation.parent)),
                    .init("message", .text(violation.description)),
                ])
            })
            StoreValuePusher(rowShapes: rowShapes, state: call.state)
                .push(violations, asRows: true, columns: ["table", "rowid", "parent", "message"])
            stack.setField("foreignKeys", at: -2)
            return 1
        }
        runtime.register("stats") { call in
            let statistics = try database.statistics()
            let bytes = statistics.tableBytes
            let stack = call.stack
            lua_createtable(call.state, 0, 10)
            func set(_ name: String, _ value: LuaValue) {
                stack.push(value)
                stack.setField(name, at: -2)
            }
            set("path", statistics.path.map(LuaValue.string) ?? .nil)
            set("fileSize", .integer(statistics.fileSize))
            set("walSize", .integer(statistics.walSize))
            set("pageSize", .integer(Int64(statistics.pageSize)))
            set("pageCount", .integer(Int64(statistics.pageCount)))
            set("freePages", .integer(Int64(statistics.freePageCount)))
            set("migrations", .array(statistics.migrations.map(LuaValue.string)))
            var counts: [LuaValue: LuaValue] = [:]
            for (table, rows) in statistics.rowCounts { counts[.string(table)] = .integer(Int64(rows)) }
            set("rows", .table(counts))
            let tables = StoreValue.array(statistics.rowCounts.map { entry in
                .object([.init("table", .text(entry.table)), .init("rows", .integer(Int64(entry.rows))),
                         .init("bytes", bytes[entry.table].map(StoreValue.integer) ?? .null)])
            })
            StoreValuePusher(rowShapes: rowShapes, state: call.state)
                .push(tables, asRows: true, columns: ["table", "rows", "bytes"])
            stack.setField("tables", at: -2)
            return 1
        }
    }

    /// Refuses inside `db.transaction`; true under a dry run (skip).
    private static func outsideTransaction(_ name: String, database: SessionDatabase, detail: String) throws -> Bool {
        if database.isDryRun {
            FileHandle.standardError.write(Data("opsh: dry run: \(name) skipped (\(detail))\n".utf8))
            return false
        }
        if database.isInTransaction {
            throw LuaCallError.message("\(name) cannot run inside \(database.openTransactionName): it needs a database connection of its own; call it outside the transaction")
        }
        return true
    }

    static func backup(_ call: LuaCall, database: SessionDatabase, store: Store) throws -> Int32 {
        let (path, keep, overwrite) = try backupArguments(call, files: FileEffects(database: database))
        let target = Store.backupPath(for: path)
        let rotation = try keep.map { _ in try BackupRotation(path: target, kind: .sqlite, isDatabaseFile: store.isDatabaseFile) }
        guard try outsideTransaction("backup", database: database, detail: "would copy the database to \(target)") else {
            let wouldRemove = rotation.map { $0.doomed(keeping: keep!, newest: target) } ?? []
            return call.results(.table(["path": .string(target), "dryRun": true,
                                        "wouldRemove": .array(wouldRemove.map(LuaValue.string))]))
        }

        let started = Date()
        let line = ProgressBar(label: "backup", unit: "pages")
        let result: BackupResult
        do {
            result = try store.backup(to: path, overwrite: overwrite) { progress in
                line.update(completed: progress.completed, total: progress.total)
            }
            line.finish()
        } catch {
            line.finish()
            throw error
        }
        var removed: [String] = []
        if let rotation, let keep {
            removed = try rotation.prune(keeping: keep, newest: result.path)
        }
        return call.results(.table([
            "path": .string(result.path),
            "pages": .integer(Int64(result.pages)),
            "bytes": .integer(fileSize(result.path)),
            "seconds": .number((Date().timeIntervalSince(started) * 1000).rounded() / 1000),
            "removed": .array(removed.map(LuaValue.string)),
        ]))
    }

    /// `backup`'s `keep = N` option (argument 2): nil when absent.
    /// `backup(PATH [, { keep = N, overwrite = true }])` on either engine:
    /// the path (`~` expanded), the options checked, and what may delete
    /// files (`keep`, `overwrite`) refused where `files` forbids it.
    static func backupArguments(_ call: LuaCall, files: FileEffects) throws -> (path: String, keep: Int?, overwrite: Bool) {
        let path = (try call.string(1) as NSString).expandingTildeInPath
        if path.isEmpty { throw call.argumentError(1, "a file path expected, got an empty string") }
        let options = call.isNoneOrNil(2) ? [:] : try call.table(2)
        for name in options.keys.sorted() where !["keep", "overwrite"].contains(name) {
            throw call.argumentError(2, "unknown option '\(name)' (options: keep, overwrite)")
        }
        let keep = try keepOption(call, options)
        var overwrite = false
        switch options["overwrite"] ?? .nil {
        case .nil: break
        case let .boolean(flag): overwrite = flag
        case let value: throw call.argumentError(2, "overwrite: boolean expected, got \(value.typeName)")
        }
        if overwrite { try files.requireMayDelete("backup", "overwrite = true replaces an earlier backup") }
        if keep != nil { try files.requireMayDelete("backup", "keep = N deletes older backups") }
        return (path, keep, overwrite)
    }

    /// `checkpoint([mode])`'s mode on either engine: "passive" when none.
    static func checkpointMode(_ call: LuaCall) throws -> CheckpointMode {
        let name = call.isNoneOrNil(1) ? "passive" : try call.string(1)
        guard let mode = CheckpointMode(rawValue: name) else {
            throw call.argumentError(1, "a checkpoint mode expected (passive, full, restart, truncate), got '\(name)'")
        }
        return mode
    }

    static func keepOption(_ call: LuaCall, _ options: [String: LuaValue]) throws -> Int? {
        switch options["keep"] ?? .nil {
        case .nil: return nil
        case let .integer(count) where count >= 1: return Int(clamping: count)
        case let .number(count) where count >= 1 && count == count.rounded() && count < 1e9: return Int(count)
        case let .integer(count):
            throw call.argumentError(2, "keep: a number of backups of 1 or more expected, got \(count)")
        case let .number(count):
            throw call.argumentError(2, "keep: a number of backups of 1 or more expected, got \(count)")
        case let value:
            throw call.argumentError(2, "keep: number expected, got \(value.typeName)")
        }
    }

    /// `checkpoint([mode])`: "passive" (the default: waits for nobody),
    /// "full", "restart" or "truncate" (empties the -wal file).
    static func checkpoint(_ call: LuaCall, database: SessionDatabase, store: Store) throws -> Int32 {
        let mode = try checkpointMode(call)
        guard try outsideTransaction("checkpoint", database: database, detail: "would copy the WAL into the database file") else {
            return call.results(.table(["dryRun": true]))
        }
        let result = try store.checkpoint(mode)
        return call.results(.table(["walFrames": .integer(Int64(result.walFrames)),
                                    "checkpointed": .integer(Int64(result.checkpointedFrames))]))
    }

    static func vacuum(_ call: LuaCall, database: SessionDatabase, store: Store) throws -> Int32 {
        guard try outsideTransaction("vacuum", database: database, detail: "would rebuild the database file") else {
            return call.results(.table(["dryRun": true]))
        }
        let before = try store.statistics()
        try store.vacuum()
        let after = try store.statistics()
        return call.results(.table([
            "pagesBefore": .integer(Int64(before.pageCount)),
            "pagesAfter": .integer(Int64(after.pageCount)),
            "freePagesBefore": .integer(Int64(before.freePageCount)),
        ]))
    }

    static func fileSize(_ path: String) -> Int64 {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? NSNumber)?.int64Value ?? 0
    }
}
