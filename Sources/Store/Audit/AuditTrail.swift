import Foundation
import GRDB

/// One row of the audit trail (`opsh_audit`, migration 003): who ran
/// what against the database, when, why, and what it committed.
public struct AuditEntry: Sendable, Equatable {
    public enum Mode: String, Sendable {
        case shell, run, eval
    }

    public var id: Int64?
    public var startedAt: Double
    public var endedAt: Double
    public var user: String
    public var host: String
    public var pid: Int32
    public var version: String
    public var mode: Mode
    /// The script's absolute path (`run`), "-" for stdin; nil otherwise.
    public var script: String?
    public var scriptSHA256: String?
    /// The chunk's or `-e`'s text, secrets masked (``CodeMask``).
    public var code: String?
    public var reason: String?
    public var dryRun: Bool
    public var readOnly: Bool
    public var changes: TableChanges
    /// The exit status (a shell chunk: 0, or 1 when it failed).
    public var status: Int32
    /// Seconds, from the script's `-- @every` header.
    public var period: Double?

    public init(startedAt: Double, endedAt: Double, mode: Mode, script: String? = nil, scriptSHA256: String? = nil,
                code: String? = nil, reason: String? = nil, dryRun: Bool = false, readOnly: Bool = false,
                changes: TableChanges = [:], status: Int32, period: Double? = nil,
                user: String = AuditTrail.currentUser, host: String = AuditTrail.currentHost,
                pid: Int32 = getpid(), version: String = OpshVersion.current) {
        self.startedAt = startedAt
        self.endedAt = endedAt
        self.mode = mode
        self.script = script
        self.scriptSHA256 = scriptSHA256
        self.code = code
        self.reason = reason
        self.dryRun = dryRun
        self.readOnly = readOnly
        self.changes = changes
        self.status = status
        self.period = period
        self.user = user
        self.host = host
        self.pid = pid
        self.version = version
    }
}

/// opsh's version, as the audit trail records it.
public enum OpshVersion {
    public static let current = "0.16.0"
}

/// Reading and writing the audit trail. The rows are written after the
/// work's own transaction ended (a rollback does not take them along),
/// and SQLite's triggers keep them (migration 003).
public enum AuditTrail {
    public static let table = "opsh_audit"
    /// The migration that makes the trail.
    public static let migration = Migration003Audit.identifier

    public static let currentUser: String = {
        if let entry = getpwuid(geteuid()), let name = entry.pointee.pw_name { return String(cString: name) }
        return ProcessInfo.processInfo.environment["USER"] ?? "uid \(geteuid())"
    }()

    public static let currentHost: String = {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "?" }
        return String(cString: buffer)
    }()

    /// Whether this database has the trail (migration 003 applied).
    public static func exists(_ db: Database) throws -> Bool {
        try db.tableExists(table)
    }

    public static func insert(_ entry: AuditEntry, _ db: Database) throws {
        try db.execute(sql: """
            INSERT INTO opsh_audit (startedAt, endedAt, user, host, pid, version, mode, script, scriptSHA256, code,
                                    reason, dryRun, readOnly, changes, status, period)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """, arguments: [entry.startedAt, entry.endedAt, entry.user, entry.host, Int64(entry.pid), entry.version,
                             entry.mode.rawValue, entry.script, entry.scriptSHA256, entry.code, entry.reason,
                             entry.dryRun, entry.readOnly, changesJSON(entry.changes), Int64(entry.status), entry.period])
    }

    /// `{"builds":{"inserted":1,"updated":0,"deleted":0}}`, tables sorted.
    public static func changesJSON(_ changes: TableChanges) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return (try? encoder.encode(changes)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }

    static func changes(fromJSON text: String) -> TableChanges {
        (try? JSONDecoder().decode(TableChanges.self, from: Data(text.utf8))) ?? [:]
    }

    /// The columns `audit.list` may filter and order on.
    public static func columns(_ db: Database) throws -> [String] {
        try db.columns(in: table).map(\.name)
    }

    public static func list(_ db: Database, _ request: ListRequest) throws -> [AuditEntry] {
        let columns = try columns(db)
        let (whereSQL, whereArguments) = try request.whereClause(table: table, columns: columns)
        var tailRequest = request
        if tailRequest.order.isEmpty { tailRequest.order = [ColumnOrder("startedAt", descending: true)] }
        let (tailSQL, tailArguments) = try tailRequest.tail(table: table, columns: columns)
        var arguments = whereArguments
        _ = arguments.append(contentsOf: tailArguments)
        return try Row.fetchAll(db, sql: "SELECT * FROM opsh_audit" + whereSQL + tailSQL, arguments: arguments).map(entry)
    }

    static func entry(_ row: Row) -> AuditEntry {
        var entry = AuditEntry(
            startedAt: row["startedAt"], endedAt: row["endedAt"], mode: AuditEntry.Mode(rawValue: row["mode"]) ?? .run,
            script: row["script"], scriptSHA256: row["scriptSHA256"], code: row["code"], reason: row["reason"],
            dryRun: row["dryRun"], readOnly: row["readOnly"], changes: changes(fromJSON: row["changes"] ?? "{}"),
            status: Int32(truncatingIfNeeded: row["status"] as Int64), period: row["period"],
            user: row["user"], host: row["host"], pid: Int32(truncatingIfNeeded: row["pid"] as Int64), version: row["version"])
        entry.id = row["id"]
        return entry
    }

    /// Deletes the rows that started before `cutoff`, in the caller's
    /// write transaction: the only way rows leave (a permit row the
    /// triggers check, removed again before the transaction ends).
    /// Returns how many rows went.
    public static func prune(before cutoff: Double, _ db: Database) throws -> Int {
        try db.execute(sql: "INSERT INTO opsh_audit_prune (before) VALUES (?)", arguments: [cutoff])
        try db.execute(sql: "DELETE FROM opsh_audit WHERE startedAt < ?", arguments: [cutoff])
        let deleted = db.changesCount
        try db.execute(sql: "DELETE FROM opsh_audit_prune")
        return deleted
    }

    // MARK: Settings

    public static let requireReasonSetting = "requireReason"

    /// Whether the database asks every run and shell for a reason
    /// (`opsh_settings`, `requireReason` = 1).
    public static func requiresReason(_ db: Database) throws -> Bool {
        guard try db.tableExists("opsh_settings") else { return false }
        let value = try String.fetchOne(db, sql: "SELECT value FROM opsh_settings WHERE name = ?", arguments: [requireReasonSetting])
        return value.map { ["1", "true", "yes", "on"].contains($0.lowercased()) } ?? false
    }

    public static func setRequiresReason(_ required: Bool, _ db: Database) throws {
        try db.execute(sql: "INSERT OR REPLACE INTO opsh_settings (name, value) VALUES (?, ?)",
                       arguments: [requireReasonSetting, required ? "1" : "0"])
    }

    /// The secrets stored in the database (the configuration's API keys),
    /// to mask wherever a recorded text holds them.
    public static func knownSecrets(_ db: Database) -> [String] {
        guard (try? db.tableExists("configuration")) == true else { return [] }
        return (try? String.fetchAll(db, sql: "SELECT api_key FROM configuration WHERE api_key IS NOT NULL AND api_key <> ''")) ?? []
    }
}

/// A run refused because the database asks for a reason
/// (`audit.requireReason(true)`) and none was given.
public struct ReasonRequired: Error, CustomStringConvertible {
    public static let message = "this database requires a reason for every run (opsh_settings requireReason = 1): give --reason TEXT (or set OPSH_REASON)"
    public init() {}
    public var description: String { Self.message }

    /// A check for ``StoreOptions/afterConnecting``: refuses the
    /// connection when the database requires a reason.
    public static func check(_ writer: any DatabaseWriter) throws {
        if try writer.read({ try AuditTrail.requiresReason($0) }) { throw ReasonRequired() }
    }
}
