import Foundation
import GRDB
import PostgresWire
import TextCodec

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
    /// The row's hash in the chain (migration 005), once written.
    public var hash: String?

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

/// Reading and writing the audit trail. Every statement here names the
/// trail's tables with their schema (``Tables``): a script's TEMP table or
/// `search_path` cannot stand in for them (docs/operations.md, "The audit
/// trail").
/// Rows are appended to the hash chain (``append(_:_:tables:)``,
/// ``AuditChain``), written through a connection of opsh's own
/// (``AuditConnection``) or in a shell chunk's own transaction.
public enum AuditTrail {
    public static let table = "opsh_audit"
    /// The migration that makes the trail.
    public static let migration = Migration003Audit.identifier
    /// The migration that chains it.
    public static let chainMigration = Migration005AuditChain.identifier

    public static let currentUser: String = {
        if let entry = getpwuid(geteuid()), let name = entry.pointee.pw_name { return String(cString: name) }
        return EnvironmentVariables.process["USER"] ?? "uid \(geteuid())"
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
        try tables(db) != nil
    }

    /// Whether the trail has the chain's columns (migration 005 applied).
    static func hasChain(_ db: some RepositoryConnection, _ tables: Tables) throws -> Bool {
        switch db.dialect {
        case .sqlite:
            try db.value("SELECT count(*) FROM pragma_table_info('opsh_audit', 'main') WHERE name = 'hash'") == .integer(1)
        case .postgresql:
            try db.value("""
                SELECT count(*) FROM pg_catalog.pg_attribute
                WHERE attrelid = pg_catalog.to_regclass(?) AND attname = 'hash' AND NOT attisdropped
                """, [.text(tables.audit)]) == .integer(1)
        }
    }

    /// Appends `entry` to the trail: reads the chain's head, inserts the
    /// row with its hash, and reads it back, so that a row something in
    /// the database dropped or changed (a trigger) is an error, not a
    /// silence. Call it inside a write transaction (a savepoint of one),
    /// which serializes appenders on SQLite; on PostgreSQL the append
    /// takes a transaction-scoped advisory lock for the same. On a trail
    /// without the chain (migration 005 pending) the row is written
    /// unchained. Returns the row's id and hashes.
    @discardableResult
    public static func append(_ entry: AuditEntry, _ db: some RepositoryConnection, tables: Tables) throws -> AuditRowStamp {
        let values = AuditChain.values(of: entry)
        let names = AuditChain.columns.map { db.dialect.quote($0.name) }
        let placeholders = Array(repeating: "?", count: names.count)
        guard try hasChain(db, tables) else {
            let id = try db.insert("INSERT INTO \(tables.audit) (\(names.joined(separator: ", "))) VALUES (\(placeholders.joined(separator: ", ")))",
                                   values, keyColumn: "id")
            guard let id, try db.value("SELECT count(*) FROM \(tables.audit) WHERE id = ?", [.integer(id)]) == .integer(1) else {
                throw AuditTrailError.didNotLand(tables.audit)
            }
            return AuditRowStamp(id: id, hash: nil, previousHash: nil)
        }
        if db.dialect == .postgresql {
            _ = try db.fetch("SELECT pg_catalog.pg_advisory_xact_lock(?)", [.integer(chainLock)])
        }
        let previous = try head(db, tables)
        let hash = AuditChain.hash(values, previous: previous)
        let id = try db.insert("""
            INSERT INTO \(tables.audit) (\(names.joined(separator: ", ")), previousHash, hash)
            VALUES (\(placeholders.joined(separator: ", ")), ?, ?)
            """, values + [.text(previous), .text(hash)], keyColumn: "id")
        // Read back: the row as the database keeps it hashes the same.
        guard let id,
              let stored = try db.fetch("SELECT previousHash, hash, \(names.joined(separator: ", ")) FROM \(tables.audit) WHERE id = ?",
                                        [.integer(id)]).rows.first,
              stored[0].textValue == previous, stored[1].textValue == hash,
              AuditChain.hash(Array(stored[2...]), previous: previous) == hash
        else {
            throw AuditTrailError.didNotLand(tables.audit)
        }
        return AuditRowStamp(id: id, hash: hash, previousHash: previous)
    }

    /// The advisory lock PostgreSQL's appenders take in turn ("opshaudt").
    static let chainLock: Int64 = 0x6F70_7368_6175_6474

    /// The hash the next row chains after: the last chained row's, else
    /// the latest cut's.
    static func head(_ db: some RepositoryConnection, _ tables: Tables) throws -> String {
        let cut = try db.fetch("SELECT lastId, lastHash FROM \(tables.cut) ORDER BY id DESC LIMIT 1", []).rows.first
        let after = cut.flatMap { AuditChain.integer($0[0]) } ?? 0
        if let last = try db.value("SELECT hash FROM \(tables.audit) WHERE hash IS NOT NULL AND id > ? ORDER BY id DESC LIMIT 1",
                                   [.integer(after)])?.textValue {
            return last
        }
        return cut?[1].textValue ?? AuditChain.genesis
    }

    /// Whether the row `stamp` names is in the trail with its hash: the
    /// check, through opsh's own connection, that a row written in a shell
    /// chunk's transaction landed as written.
    static func contains(_ stamp: AuditRowStamp, _ db: some RepositoryConnection, tables: Tables) throws -> Bool {
        guard let hash = stamp.hash else {
            return try db.value("SELECT count(*) FROM \(tables.audit) WHERE id = ?", [.integer(stamp.id)]) == .integer(1)
        }
        let names = AuditChain.columns.map { db.dialect.quote($0.name) }.joined(separator: ", ")
        guard let stored = try db.fetch("SELECT previousHash, hash, \(names) FROM \(tables.audit) WHERE id = ?",
                                        [.integer(stamp.id)]).rows.first,
              let previous = stored[0].textValue, stored[1].textValue == hash else { return false }
        return AuditChain.hash(Array(stored[2...]), previous: previous) == hash
    }

    /// `{"builds":{"deleted":0,"inserted":1,"updated":0}}`: compact, tables
    /// and counts in the byte order of their names.
    public static func changesJSON(_ changes: TableChanges) -> String {
        changes.json.compactText(sortingKeys: true)
    }

    /// The counts `changesJSON` wrote; none when the text is not such a document.
    static func changes(fromJSON text: String) -> TableChanges {
        (try? JSON.parse(text)).flatMap(TableChanges.init(json:)) ?? [:]
    }

    /// The trail's columns as the repositories see them (what `audit.list`
    /// may filter and order on).
    public static func spec(_ db: some RepositoryConnection) throws -> TableSpec {
        let tables = try tables(db)
        let name = db.dialect == .postgresql ? tables?.audit ?? table : table
        return try db.tableSpec(name, primaryKey: "id", jsonColumns: ["changes"], booleans: ["dryRun", "readOnly"])
    }

    /// The rows `request` selects, newest first unless it orders them;
    /// the same on both engines (text ordered by its bytes).
    public static func list(_ db: some RepositoryConnection, _ request: ListRequest) throws -> [AuditEntry] {
        guard let tables = try tables(db) else { throw AuditTrailError.missing }
        let spec = try spec(db)
        var request = request
        if request.order.isEmpty { request.order = [ColumnOrder("startedAt", descending: true)] }
        let (sql, arguments) = try request.selectSQL(table: table, columns: spec.names, dialect: db.dialect,
                                                     textColumns: Set(spec.columns.filter { $0.kind == .text }.map(\.name)),
                                                     source: tables.audit)
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
        entry.hash = text("hash")
        return entry
    }

    /// What ``prune(before:_:)`` removed, and where it cut the chain.
    public struct Pruned: Sendable, Equatable {
        public var deleted: Int
        /// The last chained row removed and its hash (recorded in
        /// `opsh_audit_cut`), nil when no chained row went.
        public var cut: AuditRowStamp?
    }

    /// Deletes the rows that started before `cutoff`, in the caller's
    /// write transaction: the only way rows leave (a permit row the
    /// triggers check, removed again before the transaction ends).
    ///
    /// Chained rows leave only from the chain's start, so that what stays
    /// is still one chain: the chained rows before the first one that
    /// started at or after `cutoff`. The last of them is recorded as the
    /// cut (its id and hash), which the first row left must follow
    /// (``AuditChain/verify(_:)``). Unchained rows (from before the
    /// chain, or not written by opsh) older than `cutoff` go too.
    public static func prune(before cutoff: Double, _ db: some RepositoryConnection) throws -> Pruned {
        guard let tables = try tables(db) else { throw AuditTrailError.missing }
        try db.execute("INSERT INTO \(tables.prune) (before) VALUES (?)", [.real(cutoff)])
        var pruned = Pruned(deleted: 0)
        if try hasChain(db, tables) {
            let keepFrom = try db.value("SELECT min(id) FROM \(tables.audit) WHERE hash IS NOT NULL AND startedAt >= ?", [.real(cutoff)])
            let bound = keepFrom.flatMap(AuditChain.integer)
            let condition = bound.map { "id < \($0)" } ?? "1 = 1"
            if let last = try db.fetch("SELECT id, hash FROM \(tables.audit) WHERE hash IS NOT NULL AND \(condition) ORDER BY id DESC LIMIT 1",
                                       []).rows.first,
               let id = AuditChain.integer(last[0]), let hash = last[1].textValue {
                pruned.deleted += try db.execute("DELETE FROM \(tables.audit) WHERE hash IS NOT NULL AND id <= ?", [.integer(id)])
                try db.execute("INSERT INTO \(tables.cut) (lastId, lastHash, cutAt) VALUES (?, ?, ?)",
                               [.integer(id), .text(hash), .real(Date().timeIntervalSince1970)])
                pruned.cut = AuditRowStamp(id: id, hash: hash, previousHash: nil)
            }
            pruned.deleted += try db.execute("DELETE FROM \(tables.audit) WHERE hash IS NULL AND startedAt < ?", [.real(cutoff)])
        } else {
            pruned.deleted = try db.execute("DELETE FROM \(tables.audit) WHERE startedAt < ?", [.real(cutoff)])
        }
        try db.execute("DELETE FROM \(tables.prune)", [])
        return pruned
    }

    // MARK: Settings

    public static let requireReasonSetting = "requireReason"

    /// Whether the database asks every run and shell for a reason
    /// (`opsh_settings`, `requireReason` = 1).
    public static func requiresReason(_ db: some RepositoryConnection) throws -> Bool {
        guard let tables = try tables(db) else { return false }
        let value = try db.value("SELECT value FROM \(tables.settings) WHERE name = ?", [.text(requireReasonSetting)])?.textValue
        return value.map { ["1", "true", "yes", "on"].contains($0.lowercased()) } ?? false
    }

    public static func setRequiresReason(_ required: Bool, _ db: some RepositoryConnection) throws {
        guard let tables = try tables(db) else { throw AuditTrailError.missing }
        try db.execute("""
            INSERT INTO \(tables.settings) (name, value) VALUES (?, ?)
            ON CONFLICT (name) DO UPDATE SET value = excluded.value
            """, [.text(requireReasonSetting), .text(required ? "1" : "0")])
    }

    /// The secrets stored in the database (the configuration's API keys),
    /// to mask wherever a recorded text holds them.
    public static func knownSecrets(_ db: some RepositoryConnection) -> [String] {
        guard let tables = try? tables(db) else { return [] }
        let rows = (try? db.fetch("SELECT api_key FROM \(tables.configuration) WHERE api_key IS NOT NULL AND api_key <> ''", []).rows) ?? []
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
