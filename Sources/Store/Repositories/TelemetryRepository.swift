import Foundation
import GRDB
import GRDBSQLite
import PostgresWire

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

    /// Inserts events on PostgreSQL through one COPY FROM STDIN
    /// (``PostgresDatabase/copy(_:reportingServerErrors:)``: under the
    /// session's rules as `db.copy`, counted, refused by `--read-only`,
    /// checked by `--sandbox`), in the caller's transaction. Invalid JSON
    /// properties are named as ``insertBatch(_:_:)`` names them.
    func copyRows(_ database: PostgresDatabase, _ events: [Event]) throws {
        guard !events.isEmpty else { return }
        let rows = events.map { event -> [StoreValue] in
            [.text(event.event), event.properties.map(StoreValue.text) ?? .null,
             event.sessionId.map(StoreValue.text) ?? .null, .real(event.createdAt)]
        }
        let request = try CopyRequest(table: "telemetry", columns: ["event", "properties", "session_id", "created_at"],
                                      source: .rows(rows))
        do {
            _ = try database.copy(request, reportingServerErrors: true)
        } catch let error as PostgresError where error.code == "23514" && error.constraint == "properties_is_json" {
            // The CHECK refused a row (the copy rolled back to its
            // savepoint): the line of the data is the event's place.
            let refused = PostgresDatabase.copyLine(of: error).flatMap { events.indices.contains($0.line - 1) ? events[$0.line - 1] : nil }
            guard let properties = refused?.properties ?? events.first(where: { event in
                guard let properties = event.properties else { return false }
                return (try? database.isValidJSON(properties)) == false
            })?.properties else { throw error }
            throw StoreError.invalidValue(table: "telemetry", column: "properties",
                                          reason: "not valid JSON: \(TelemetryRecord.excerpt(properties))")
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
