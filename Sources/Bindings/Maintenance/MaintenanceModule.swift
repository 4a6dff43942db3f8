import CLuaShim
import Foundation
import Git
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
        let runtime = session.runtime
        // Closures live in the Lua state the session owns: they must not
        // capture the session (a cycle would keep it, and its builds, alive).
        let rowShapes = session.rowShapes
        runtime.register("backup") { call in try backup(call, database: database) }
        let sandbox = session.options.sandbox
        runtime.register("restore") { call in try restore(call, database: database, sandbox: sandbox, rowShapes: rowShapes) }
        runtime.register("vacuum") { call in
            let maintenance = database.maintenance
            guard try refusing({ try maintenance.mayRunOnItsOwn("vacuum", detail: nil) }) else {
                return call.results(.table(["dryRun": true]))
            }
            return push(try refusing { try maintenance.vacuum() }, call, rowShapes: rowShapes)
        }
        runtime.register("checkpoint") { call in
            let mode = try checkpointMode(call)
            let maintenance = database.maintenance
            guard try refusing({ try maintenance.mayRunOnItsOwn("checkpoint", detail: nil) }) else {
                return call.results(.table(["dryRun": true]))
            }
            return push(try refusing { try maintenance.checkpoint(mode) }, call, rowShapes: rowShapes)
        }
        runtime.register("check") { call in
            let report = try database.maintenance.check()
            let stack = call.stack
            lua_createtable(call.state, 0, 3)
            stack.push(.boolean(report.ok))
            stack.setField("ok", at: -2)
            stack.push(.array(report.problems.map(LuaValue.string)))
            stack.setField("problems", at: -2)
            StoreValuePusher(rowShapes: rowShapes, state: call.state)
                .push(.array(report.foreignKeys.map(Self.object)), asRows: true, columns: ["table", "rowid", "parent", "message"])
            stack.setField("foreignKeys", at: -2)
            return 1
        }
        runtime.register("stats") { call in
            let statistics = try database.maintenance.statistics()
            let stack = call.stack
            lua_createtable(call.state, 0, 10)
            let pusher = StoreValuePusher(rowShapes: rowShapes, state: call.state)
            for (name, value) in statistics.fields {
                pusher.push(value, asRows: false)
                stack.setField(name, at: -2)
            }
            var counts: [LuaValue: LuaValue] = [:]
            for table in statistics.tables {
                if case let .text(name)? = table["table"], case let .integer(rows)? = table["rows"] { counts[.string(name)] = .integer(rows) }
            }
            stack.push(.table(counts))
            stack.setField("rows", at: -2)
            pusher.push(.array(statistics.tables.map(Self.object)), asRows: true, columns: ["table", "rows", "bytes"])
            stack.setField("tables", at: -2)
            return 1
        }
    }

    /// A record in column order (NULL fields as nil).
    static func object(_ fields: [String: StoreValue]) -> StoreValue {
        .object(fields.sorted { $0.key < $1.key }.map { .init($0.key, $0.value) })
    }

    /// A result's fields as a table.
    static func push(_ fields: [(String, StoreValue)], _ call: LuaCall, rowShapes: RowShapes) -> Int32 {
        lua_createtable(call.state, 0, Int32(fields.count))
        let pusher = StoreValuePusher(rowShapes: rowShapes, state: call.state)
        for (name, value) in fields {
            pusher.push(value, asRows: false)
            call.stack.setField(name, at: -2)
        }
        return 1
    }

    /// Store's refusals as the Lua caller's errors.
    static func refusing<T>(_ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let StoreError.refused(reason) {
            throw LuaCallError.message(reason)
        }
    }

    /// `restore{ from = FILE, table = T, where = "SQL", args = {…} }`: the
    /// rows of T in the SQLite backup FILE that match `where` and that the
    /// table does not have now, written back as one write of the session
    /// (``Restore``). Returns `{table, matched, restored, alreadyThere}`.
    static func restore(_ call: LuaCall, database: any DatabaseSession, sandbox: Bool, rowShapes: RowShapes) throws -> Int32 {
        let options = try call.table(1)
        for name in options.keys.sorted() where !["from", "table", "where", "args"].contains(name) {
            throw call.argumentError(1, "unknown field '\(name)' (restore takes: from, table, where, args)")
        }
        guard case let .string(from)? = options["from"] else {
            throw call.argumentError(1, "from: the backup's path expected, got \(options["from"]?.typeName ?? "nil")")
        }
        guard case let .string(table)? = options["table"] else {
            throw call.argumentError(1, "table: a table's name expected, got \(options["table"]?.typeName ?? "nil")")
        }
        if sandbox { throw call.argumentError(1, "from: restore reads a backup file, and the sandbox has no files") }
        var condition: String?
        switch options["where"] {
        case nil: break
        case let .string(text)?: condition = text
        case let value?: throw call.argumentError(1, "where: an SQL condition (a string) expected, got \(value.typeName)")
        }
        var arguments: [StoreValue] = []
        switch options["args"] {
        case nil: break
        case let .array(values)?:
            arguments = try values.enumerated().map { index, value in
                switch value {
                case let .string(text): return .text(text)
                case let .integer(number): return .integer(number)
                case let .number(number): return .real(number)
                case let .boolean(flag): return .integer(flag ? 1 : 0)
                case let .bytes(bytes): return .blob(bytes)
                default: throw call.argumentError(1, "args[\(index + 1)]: a string, number or boolean expected, got \(value.typeName)")
                }
            }
        case let value?: throw call.argumentError(1, "args: a list of values for where's ? placeholders expected, got \(value.typeName)")
        }
        do {
            let request = try RestoreRequest(backupPath: (from as NSString).expandingTildeInPath, table: table,
                                             condition: condition, arguments: arguments)
            let summary = try Restore.run(request, into: database)
            return push([("table", .text(summary.table)), ("matched", .integer(Int64(summary.matched))),
                         ("restored", .integer(Int64(summary.restored))), ("alreadyThere", .integer(Int64(summary.alreadyThere)))],
                        call, rowShapes: rowShapes)
        } catch let failure as RestoreFailure {
            throw LuaCallError.message("restore into \(table): \(failure)")
        }
    }

    static func backup(_ call: LuaCall, database: any DatabaseSession) throws -> Int32 {
        let maintenance = database.maintenance
        let (path, keep, overwrite) = try backupArguments(call, files: FileEffects(database: database))
        let (target, kind) = maintenance.backupTarget(for: path)
        let rotation = try refusing { try keep.map { _ in try BackupRotation(path: target, kind: kind, isDatabaseFile: maintenance.isDatabaseFile) } }
        guard try refusing({ try maintenance.mayRunOnItsOwn("backup", detail: "would copy the database to \(target)") }) else {
            let wouldRemove = rotation.map { $0.doomed(keeping: keep!, newest: target) } ?? []
            return call.results(.table(["path": .string(target), "dryRun": true,
                                        "wouldRemove": .array(wouldRemove.map(LuaValue.string))]))
        }
        let started = Date()
        let line = ProgressBar(label: "backup", unit: "pages")
        let result: (path: String, pages: Int?)
        do {
            result = try refusing {
                try maintenance.backup(to: path, overwrite: overwrite, progress: { progress in
                    line.update(completed: progress.completed, total: progress.total)
                }, runTool: runTool)
            }
            line.finish()
        } catch {
            line.finish()
            throw error
        }
        var removed: [String] = []
        if let rotation, let keep {
            removed = try refusing { try rotation.prune(keeping: keep, newest: result.path) }
        }
        var fields: [LuaValue: LuaValue] = [
            "path": .string(result.path),
            "bytes": .integer(fileSize(result.path)),
            "seconds": .number((Date().timeIntervalSince(started) * 1000).rounded() / 1000),
            "removed": .array(removed.map(LuaValue.string)),
        ]
        if let pages = result.pages { fields[.string("pages")] = .integer(Int64(pages)) }
        return call.results(.table(fields))
    }

    /// Runs a tool (pg_dump) to its end in the environment Store gave;
    /// throws with what it wrote on stderr.
    static func runTool(_ executable: String, _ arguments: [String], _ environment: [String: String]) throws {
        let child = try Subprocess.spawn(executable: executable, arguments: arguments, environment: environment)
        var output = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 4096)
        for descriptor in [child.standardOutput, child.standardError] where descriptor >= 0 {
            while true {
                let count = read(descriptor, &buffer, buffer.count)
                if count > 0 { if descriptor == child.standardError { output += buffer[0..<count] }; continue }
                if count < 0 && errno == EINTR { continue }
                break
            }
            close(descriptor)
        }
        let ended = Subprocess.reap(child.pid)
        guard ended.exitCode == 0 else {
            let message = String(decoding: output, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            throw LuaCallError.message("backup: \((executable as NSString).lastPathComponent) failed (\(ended)): \(message); nothing was kept")
        }
    }

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

    static func fileSize(_ path: String) -> Int64 {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? NSNumber)?.int64Value ?? 0
    }
}
