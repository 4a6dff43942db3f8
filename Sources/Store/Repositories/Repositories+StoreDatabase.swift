import Foundation
import GRDB

// The repositories' operations for callers above the engine seam: each
// takes the ``StoreDatabase`` of a ``SessionDatabase/read(_:_:)`` or
// ``SessionDatabase/write(_:_:)`` and keys and fields as ``StoreValue``s,
// never a GRDB type (ARCHITECTURE.md, "The engine seam"). The rules of the
// aggregates (cascades, build numbers, a session's totals, the
// configuration's merge) stay in the methods these forward to.

extension RecordRepository {
    /// The row with this primary key, or nil.
    public func get(_ database: StoreDatabase, _ key: String) throws -> Record? {
        try get(database.db, key)
    }
}

extension SchemeRepository {
    public func list(_ database: StoreDatabase, project bundleIdentifier: String) throws -> [SchemeRecord] {
        try list(database.db, project: bundleIdentifier)
    }
}

extension BuildRepository {
    public func latest(_ database: StoreDatabase, project bundleIdentifier: String, limit: Int) throws -> [BuildRecord] {
        try latest(database.db, project: bundleIdentifier, limit: limit)
    }
}

extension BuildLogRepository {
    public func lastLines(_ database: StoreDatabase, build buildId: String, count: Int, includeDebug: Bool) throws -> [BuildLogLine] {
        try lastLines(database.db, build: buildId, count: count, includeDebug: includeDebug)
    }

    public func lines(_ database: StoreDatabase, build buildId: String, after cursor: Int64, limit: Int,
                      includeDebug: Bool) throws -> [BuildLogLine] {
        try lines(database.db, build: buildId, after: cursor, limit: limit, includeDebug: includeDebug)
    }

    public func tail(_ database: StoreDatabase, build buildId: String, count: Int, includeDebug: Bool) throws -> [BuildLogRecord] {
        try tail(database.db, build: buildId, count: count, includeDebug: includeDebug)
    }
}

extension ModelRepository {
    public func usage(_ database: StoreDatabase, model modelId: String) throws -> [ModelUsageStatRecord] {
        try usage(database.db, model: modelId)
    }
}

extension SessionRepository {
    public func generations(_ database: StoreDatabase, session sessionId: String) throws -> [GenerationRecord] {
        try generations(database.db, session: sessionId)
    }
}

extension TelemetryRepository {
    /// Inserts events in the caller's transaction: the batched C path, or
    /// with `counted` (a dry run, a shell chunk: ``SessionDatabase/isCountingChanges``)
    /// row by row through GRDB, whose observer counts each row.
    public func insert(_ database: StoreDatabase, _ events: [Event], counted: Bool) throws {
        guard counted else { return try insertBatch(database.db, events) }
        for event in events {
            var record = TelemetryRecord(event: event.event, properties: event.properties.map(JSONText.init),
                                         sessionId: event.sessionId, createdAt: Date(timeIntervalSince1970: event.createdAt))
            try record.insert(database.db)
        }
    }
}

extension ConfigurationChanges {
    /// Changes given as ``StoreValue``s (a Lua table's fields).
    public init(id: String, fields: [String: StoreValue], routingPolicies: [[String: StoreValue]]?,
                analytics: [String: StoreValue]?, storage: [String: StoreValue]?) {
        self.init(id: id, row: fields.mapValues(\.databaseValue),
                  routingPolicies: routingPolicies?.map { $0.mapValues(\.databaseValue) },
                  analytics: analytics?.mapValues(\.databaseValue), storage: storage?.mapValues(\.databaseValue))
    }
}

extension ColumnFilter {
    /// A condition with ``StoreValue``s (a Lua filter's values).
    public init(_ column: String, _ op: Operator, storeValues: [StoreValue]) {
        self.init(column, op, storeValues.map(\.databaseValue))
    }
}
