import Foundation
import GRDB
import GRDBSQLite

/// Telemetry events: written at high rates, counted, and cleaned up.
public struct TelemetryRepository: Sendable {
    public let records = RecordRepository<TelemetryRecord>()
    public init() {}

    /// One event to insert in a batch. Properties are JSON text, checked
    /// by the table's CHECK constraint.
    public struct Event: Sendable {
        public var event: String
        public var properties: String?
        public var sessionId: String?
        public var createdAt: Double

        public init(event: String, properties: String? = nil, sessionId: String? = nil, createdAt: Date = Date()) {
            self.event = event
            self.properties = properties
            self.sessionId = sessionId
            self.createdAt = createdAt.timeIntervalSince1970
        }
    }

    /// Inserts events through one prepared statement bound with SQLite's C
    /// API (hundreds of thousands of rows per second). Run it in the
    /// caller's transaction: one transaction per batch.
    public func insertBatch(_ db: Database, _ events: [Event]) throws {
        guard !events.isEmpty else { return }
        let statement = try db.cachedStatement(
            sql: "INSERT INTO telemetry (event, properties, session_id, created_at) VALUES (?, ?, ?, ?)")
        let handle = statement.sqliteStatement
        for event in events {
            sqlite3_reset(handle)
            bindText(handle, 1, event.event)
            if let properties = event.properties { bindText(handle, 2, properties) } else { sqlite3_bind_null(handle, 2) }
            if let session = event.sessionId { bindText(handle, 3, session) } else { sqlite3_bind_null(handle, 3) }
            sqlite3_bind_double(handle, 4, event.createdAt)
            let code = sqlite3_step(handle)
            if code != SQLITE_DONE {
                let message = String(cString: sqlite3_errmsg(db.sqliteConnection))
                sqlite3_reset(handle)
                if message.contains("properties_is_json") {
                    throw StoreError.invalidValue(table: "telemetry", column: "properties",
                                                  reason: "not valid JSON: \(TelemetryRecord.excerpt(event.properties ?? ""))")
                }
                throw DatabaseError(resultCode: ResultCode(rawValue: code), message: message,
                                    sql: statement.sql)
            }
        }
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
        // The raw steps bypass GRDB's change tracking: tell observers.
        try db.notifyChanges(in: Table(TelemetryRecord.databaseTableName))
    }

    /// Event counts by name, most frequent first.
    func countsByEvent(_ db: Database, since: Date? = nil) throws -> [(event: String, count: Int)] {
        try countsByEvent(StoreDatabase(db), since: since)
    }

    public func countsByEvent(_ database: some RepositoryConnection, since: Date? = nil) throws -> [(event: String, count: Int)] {
        let event = database.dialect.orderTerm("event", descending: false, isText: true)
        return try database.fetch("""
            SELECT event, count(*) AS count FROM telemetry WHERE created_at >= ?
            GROUP BY event ORDER BY count DESC, \(event)
            """, [.real(since?.timeIntervalSince1970 ?? -Double.infinity)]).rows.map { row in
                guard row.count == 2, case let .text(name) = row[0], case let .integer(count) = row[1] else {
                    return (event: "", count: 0)
                }
                return (event: name, count: Int(count))
            }
    }

    /// Inserts events with multi-row INSERTs (on an engine without
    /// SQLite's C path: PostgreSQL), in the caller's transaction. Invalid
    /// JSON properties are named as ``insertBatch(_:_:)`` names them.
    public func insertRows(_ database: some RepositoryConnection, _ events: [Event]) throws {
        // 4 values a row, well under the 65,535 parameters of a statement.
        let batch = 1000
        var start = 0
        while start < events.count {
            let slice = events[start..<min(start + batch, events.count)]
            let sql = "INSERT INTO telemetry (event, properties, session_id, created_at) VALUES "
                + Array(repeating: "(?, ?, ?, ?)", count: slice.count).joined(separator: ", ")
            var arguments: [StoreValue] = []
            arguments.reserveCapacity(slice.count * 4)
            for event in slice {
                arguments += [.text(event.event), event.properties.map(StoreValue.text) ?? .null,
                              event.sessionId.map(StoreValue.text) ?? .null, .real(event.createdAt)]
            }
            do {
                try database.execute(sql, arguments)
            } catch {
                // The CHECK refused a row: name it as SQLite's path does.
                for event in slice {
                    if let properties = event.properties, try !database.isValidJSON(properties) {
                        throw StoreError.invalidValue(table: "telemetry", column: "properties",
                                                      reason: "not valid JSON: \(TelemetryRecord.excerpt(properties))")
                    }
                }
                throw error
            }
            start += batch
        }
    }

    private func bindText(_ handle: OpaquePointer, _ index: Int32, _ text: String) {
        var text = text
        text.withUTF8 { bytes in
            // An empty buffer may have no address; bind '' rather than NULL.
            guard bytes.count > 0 else {
                _ = sqlite3_bind_text(handle, index, "", 0, SQLITE_TRANSIENT)
                return
            }
            _ = sqlite3_bind_text(handle, index, bytes.baseAddress.map { UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self) },
                                  Int32(bytes.count), SQLITE_TRANSIENT)
        }
    }
}

/// SQLite's "copy the bytes now" destructor, which Swift cannot import as a macro.
let SQLITE_TRANSIENT = unsafeBitCast(OpaquePointer(bitPattern: -1), to: sqlite3_destructor_type.self)
