import CLuaShim
import Foundation
import LuaRuntime
import Store

/// `audit`: the audit trail (`opsh_audit`).
///
/// ```lua
/// audit.list{ where = { mode = "run", status = { ne = 0 } }, order = "startedAt desc", limit = 10 }
/// audit.list{ where = { startedAt = { gt = "1d" } } }    -- a duration means that long ago
/// audit.prune{ olderThan = "90d" }                       --> { deleted = 120 }
/// audit.requireReason(true)                              -- every run and shell must give a reason
/// audit.verify()                                         --> { ok = false, row = 7, problem = "…", rows = 9 }
/// ```
///
/// Rows leave only through `audit.prune` (the schema's triggers refuse an
/// UPDATE, and a DELETE without prune's permit); `audit.verify` checks
/// the hash chain (``AuditChain``). Written once over
/// ``RepositoryEngine``: the same functions on SQLite and PostgreSQL.
enum AuditModule {
    static let listOptions = ["where", "order", "limit", "offset"]

    static func install(in session: OpshSession) {
        install(engine: SessionRepositories(session: session), runtime: session.runtime)
    }

    static func install<Engine: RepositoryEngine>(engine context: Engine, runtime: LuaRuntime) {
        runtime.register(module: "audit", [
            "list": { call in try list(call, context: context) },
            "prune": { call in try prune(call, context: context) },
            "requireReason": { call in try requireReason(call, context: context) },
            "verify": { call in try verify(call, context: context) },
        ])
    }

    static let missing = "this database has no audit trail yet (migration \(AuditTrail.migration) is pending): run `opsh migrate`"

    static func list(_ call: LuaCall, context: some RepositoryEngine) throws -> Int32 {
        let entries: [AuditEntry] = try context.read(AuditTrail.table) { db in
            guard try AuditTrail.exists(db) else { throw LuaCallError.message(missing) }
            let spec = try AuditTrail.spec(db)
            let request = try context.reader(call).listRequest(argument: 1, allowed: listOptions, spec: spec)
            do {
                return try AuditTrail.list(db, request)
            } catch let error as StoreError {
                throw call.argumentError(1, "\(error)")
            }
        }
        call.stack.push(.array(entries.map(value)))
        for offset in entries.indices {
            lua_rawgeti(call.state, -1, lua_Integer(offset + 1))
            RowShapes.markDates(call.state, at: -1, table: AuditTrail.table, fields: ["startedAt", "endedAt"])
            opsh_pop(call.state, 1)
        }
        return 1
    }

    static func value(_ entry: AuditEntry) -> LuaValue {
        var fields: [LuaValue: LuaValue] = [
            "startedAt": .number(entry.startedAt), "endedAt": .number(entry.endedAt),
            "user": .string(entry.user), "host": .string(entry.host), "pid": .integer(Int64(entry.pid)),
            "version": .string(entry.version), "mode": .string(entry.mode.rawValue),
            "dryRun": .boolean(entry.dryRun), "readOnly": .boolean(entry.readOnly),
            "status": .integer(Int64(entry.status)),
        ]
        if let id = entry.id { fields["id"] = .integer(id) }
        for (name, text) in [("script", entry.script), ("scriptSHA256", entry.scriptSHA256), ("code", entry.code),
                             ("reason", entry.reason)] {
            if let text { fields[.string(name)] = .string(text) }
        }
        if let period = entry.period { fields["period"] = .number(period) }
        if let hash = entry.hash { fields["hash"] = .string(hash) }
        var changes: [LuaValue: LuaValue] = [:]
        for (table, counts) in entry.changes {
            changes[.string(table)] = .table(["inserted": .integer(Int64(counts.inserted)),
                                              "updated": .integer(Int64(counts.updated)),
                                              "deleted": .integer(Int64(counts.deleted))])
        }
        fields["changes"] = .table(changes)
        return .table(fields)
    }

    static func prune(_ call: LuaCall, context: some RepositoryEngine) throws -> Int32 {
        let fields = try call.table(1)
        for name in fields.keys.sorted() where name != "olderThan" {
            throw call.argumentError(1, "unknown option '\(name)' (options: olderThan)")
        }
        let now = Date().timeIntervalSince1970
        let cutoff: Double
        switch fields["olderThan"] ?? .nil {
        case .nil:
            throw call.argumentError(1, "olderThan: a duration such as \"90d\" is required (rows younger than a day are never pruned)")
        case let .integer(date): cutoff = Double(date)
        case let .number(date) where date.isFinite: cutoff = date
        case let value:
            guard let text = value.stringValue else {
                throw call.argumentError(1, "olderThan: a duration (\"90d\") or a date (seconds since 1970) expected, got \(value.typeName)")
            }
            do {
                cutoff = now - (try DurationText.seconds(text))
            } catch {
                throw call.argumentError(1, "olderThan: \(error)")
            }
        }
        guard cutoff <= now - 86400 else {
            throw call.argumentError(1, "olderThan: the audit trail keeps at least its last day; give a duration of 1d or more")
        }
        let pruned = try context.write(AuditTrail.table) { db -> AuditTrail.Pruned in
            guard try AuditTrail.exists(db) else { throw LuaCallError.message(missing) }
            return try AuditTrail.prune(before: cutoff, db)
        }
        AuditSyslog.pruned(deleted: pruned.deleted, cut: pruned.cut, database: label(of: context))
        return call.results(.table(["deleted": .integer(Int64(pruned.deleted))]))
    }

    /// The database as syslog names it: the file, or the URL without its password.
    static func label(of context: some RepositoryEngine) -> String {
        context.databaseLabel
    }

    /// `audit.verify()`: reads the whole trail and checks its hash chain.
    /// `ok`, `rows`, `unchained` (rows from before the chain), and for the
    /// first row that does not fit, `row` and `problem`; `untrusted`, the
    /// ids of every such row.
    static func verify(_ call: LuaCall, context: some RepositoryEngine) throws -> Int32 {
        let verdict = try context.read(AuditTrail.table) { db -> AuditChain.Verdict in
            guard try AuditTrail.exists(db) else { throw LuaCallError.message(missing) }
            return try AuditChain.verify(db)
        }
        guard verdict.hasChain else { throw LuaCallError.message(verdict.summary) }
        var fields: [LuaValue: LuaValue] = [
            "ok": .boolean(verdict.holds), "rows": .integer(Int64(verdict.rows)),
            "unchained": .integer(Int64(verdict.unchained)), "summary": .string(verdict.summary),
            "untrusted": .array(verdict.misfits.map { .integer($0.row) }),
        ]
        if let first = verdict.misfits.first {
            fields["row"] = .integer(first.row)
            fields["problem"] = .string(first.problem)
        }
        return call.results(.table(fields))
    }

    static func requireReason(_ call: LuaCall, context: some RepositoryEngine) throws -> Int32 {
        guard case let .boolean(required) = try call.value(1) else { throw call.typeError(1, expected: "boolean") }
        try context.write("opsh_settings") { db in
            guard try AuditTrail.exists(db) else { throw LuaCallError.message(missing) }
            try AuditTrail.setRequiresReason(required, db)
        }
        return 0
    }
}
