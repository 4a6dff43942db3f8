import Foundation
import GRDB
import PostgresWire

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
        let name = buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
        return String(decoding: name, as: UTF8.self)
    }()

    /// The SHA-256 of a script's text, as the trail records it.
    public static func digest(_ code: String) -> String {
        SHA256.hex(Array(code.utf8))
    }

    /// Whether this database has the trail (migration 003 applied).
    public static func exists(_ db: some RepositoryConnection) throws -> Bool {
        try ExternalMigrations.tableExists(db, table)
    }

    public static func insert(_ entry: AuditEntry, _ db: some RepositoryConnection) throws {
        // `user` is a reserved word on PostgreSQL; quoted, it is the same
        // column on both engines.
        try db.execute("""
            INSERT INTO opsh_audit (startedAt, endedAt, \(db.dialect.quote("user")), host, pid, version, mode, script,
                                    scriptSHA256, code, reason, dryRun, readOnly, changes, status, period)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """, [.real(entry.startedAt), .real(entry.endedAt), .text(entry.user), .text(entry.host),
                  .integer(Int64(entry.pid)), .text(entry.version), .text(entry.mode.rawValue), text(entry.script),
                  text(entry.scriptSHA256), text(entry.code), text(entry.reason), .integer(entry.dryRun ? 1 : 0),
                  .integer(entry.readOnly ? 1 : 0), .text(changesJSON(entry.changes)), .integer(Int64(entry.status)),
                  entry.period.map(StoreValue.real) ?? .null])
    }

    private static func text(_ value: String?) -> StoreValue {
        value.map(StoreValue.text) ?? .null
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

    /// The trail's columns as the repositories see them (what `audit.list`
    /// may filter and order on).
    public static func spec(_ db: some RepositoryConnection) throws -> TableSpec {
        try db.tableSpec(table, primaryKey: "id", jsonColumns: ["changes"], booleans: ["dryRun", "readOnly"])
    }

    /// The rows `request` selects, newest first unless it orders them;
    /// the same on both engines (text ordered by its bytes).
    public static func list(_ db: some RepositoryConnection, _ request: ListRequest) throws -> [AuditEntry] {
        let spec = try spec(db)
        var request = request
        if request.order.isEmpty { request.order = [ColumnOrder("startedAt", descending: true)] }
        let (sql, arguments) = try request.selectSQL(table: table, columns: spec.names, dialect: db.dialect,
                                                     textColumns: Set(spec.columns.filter { $0.kind == .text }.map(\.name)))
        let result = try db.fetch(sql, arguments)
        return result.rows.map { values in
            entry(Dictionary(zip(result.columns, values), uniquingKeysWith: { first, _ in first }))
        }
    }

    static func entry(_ row: [String: StoreValue]) -> AuditEntry {
        func text(_ name: String) -> String? { row[name]?.textValue }
        func number(_ name: String) -> Double? {
            switch row[name] {
            case let .real(value)?: value
            case let .integer(value)?: Double(value)
            default: nil
            }
        }
        func integer(_ name: String) -> Int64 {
            switch row[name] {
            case let .integer(value)?: value
            case let .real(value)?: Int64(value)
            default: 0
            }
        }
        var entry = AuditEntry(
            startedAt: number("startedAt") ?? 0, endedAt: number("endedAt") ?? 0,
            mode: text("mode").flatMap(AuditEntry.Mode.init(rawValue:)) ?? .run,
            script: text("script"), scriptSHA256: text("scriptSHA256"), code: text("code"), reason: text("reason"),
            dryRun: integer("dryRun") != 0, readOnly: integer("readOnly") != 0,
            changes: changes(fromJSON: text("changes") ?? "{}"),
            status: Int32(truncatingIfNeeded: integer("status")), period: number("period"),
            user: text("user") ?? "", host: text("host") ?? "", pid: Int32(truncatingIfNeeded: integer("pid")),
            version: text("version") ?? "")
        if case let .integer(id)? = row["id"] { entry.id = id }
        return entry
    }

    /// Deletes the rows that started before `cutoff`, in the caller's
    /// write transaction: the only way rows leave (a permit row the
    /// triggers check, removed again before the transaction ends).
    /// Returns how many rows went.
    public static func prune(before cutoff: Double, _ db: some RepositoryConnection) throws -> Int {
        try db.execute("INSERT INTO opsh_audit_prune (before) VALUES (?)", [.real(cutoff)])
        let deleted = try db.execute("DELETE FROM opsh_audit WHERE startedAt < ?", [.real(cutoff)])
        try db.execute("DELETE FROM opsh_audit_prune", [])
        return deleted
    }

    // MARK: Settings

    public static let requireReasonSetting = "requireReason"

    /// Whether the database asks every run and shell for a reason
    /// (`opsh_settings`, `requireReason` = 1).
    public static func requiresReason(_ db: some RepositoryConnection) throws -> Bool {
        guard try ExternalMigrations.tableExists(db, "opsh_settings") else { return false }
        let value = try db.value("SELECT value FROM opsh_settings WHERE name = ?", [.text(requireReasonSetting)])?.textValue
        return value.map { ["1", "true", "yes", "on"].contains($0.lowercased()) } ?? false
    }

    public static func setRequiresReason(_ required: Bool, _ db: some RepositoryConnection) throws {
        try db.execute("""
            INSERT INTO opsh_settings (name, value) VALUES (?, ?)
            ON CONFLICT (name) DO UPDATE SET value = excluded.value
            """, [.text(requireReasonSetting), .text(required ? "1" : "0")])
    }

    /// The secrets stored in the database (the configuration's API keys),
    /// to mask wherever a recorded text holds them.
    public static func knownSecrets(_ db: some RepositoryConnection) -> [String] {
        guard (try? ExternalMigrations.tableExists(db, "configuration")) == true else { return [] }
        let rows = (try? db.fetch("SELECT api_key FROM configuration WHERE api_key IS NOT NULL AND api_key <> ''", []).rows) ?? []
        return rows.compactMap { $0.first?.textValue }
    }
}

extension Store {
    /// Runs `body`'s reads on one snapshot of the store's writer, with the
    /// connection the engine-neutral operations take (the audit trail,
    /// `opsh runs`).
    public func read<T>(_ body: (StoreDatabase) throws -> T) throws -> T {
        try writer.read { db in try body(StoreDatabase(db)) }
    }

    /// Runs `body` in a short write transaction of the store's writer.
    public func write<T>(_ body: (StoreDatabase) throws -> T) throws -> T {
        try writer.write { db in try body(StoreDatabase(db)) }
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
        if try writer.read({ try AuditTrail.requiresReason(StoreDatabase($0)) }) { throw ReasonRequired() }
    }
}
