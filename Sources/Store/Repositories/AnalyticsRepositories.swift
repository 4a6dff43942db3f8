import Foundation
import GRDB
import TextCodec

/// The configuration aggregate: four tables mapped to one ``SDKConfiguration``.
public struct ConfigurationRepository: Sendable {
    public let records = RecordRepository<ConfigurationRecord>()
    public let routingPolicies = RecordRepository<RoutingPolicyRecord>()
    public let analytics = RecordRepository<AnalyticsConfigRecord>()
    public let storage = RecordRepository<StorageConfigRecord>()
    public init() {}

    /// The configuration with this id, with its policies and settings.
    func get(_ db: Database, id: String = "default") throws -> SDKConfiguration? {
        guard let record = try records.get(db, id) else { return nil }
        let policies = try routingPolicies.list(db, ListRequest(
            filters: [ColumnFilter("configuration_id", .equal, id)], order: [ColumnOrder("priority", descending: true)]))
        return try mapToEntity(record, policies: policies,
                               analytics: try analytics.get(db, id), storage: try storage.get(db, id))
    }

    /// Stores the whole aggregate: the row, its settings, and exactly its
    /// policies (policies no longer listed are removed).
    func save(_ db: Database, _ configuration: SDKConfiguration) throws {
        let (record, policies, analyticsRecord, storageRecord) = try mapToRecords(configuration)
        try records.upsert(db, record)
        try analytics.upsert(db, analyticsRecord)
        try storage.upsert(db, storageRecord)
        let keep = policies.map(\.id)
        try db.execute(sql: """
            DELETE FROM routing_policies WHERE configuration_id = ? AND id NOT IN (SELECT value FROM json_each(?))
            """, arguments: [configuration.id, JSONText(.array(keep.map(JSON.string))).text])
        for policy in policies { try routingPolicies.upsert(db, policy) }
    }

    /// Days of telemetry to keep: the storage configuration's retention,
    /// or 30 days when no configuration exists.
    func telemetryRetentionDays(_ db: Database) throws -> Int {
        try Int.fetchOne(db, sql: "SELECT telemetry_retention_days FROM storage_config ORDER BY configuration_id = 'default' DESC LIMIT 1") ?? 30
    }

    // MARK: Mapping

    func mapToEntity(_ record: ConfigurationRecord, policies: [RoutingPolicyRecord],
                     analytics: AnalyticsConfigRecord?, storage: StorageConfigRecord?) throws -> SDKConfiguration {
        var configuration = SDKConfiguration(
            id: record.id, apiKey: record.apiKey, baseURL: record.baseUrl, modelCacheSize: record.modelCacheSize,
            createdAt: record.createdAt, updatedAt: record.updatedAt)
        configuration.routingPolicies = try policies.map(Self.policy)
        if let analytics {
            configuration.analytics.enabled = analytics.enabled
            configuration.analytics.samplingRate = analytics.samplingRate
            configuration.analytics.batchSize = analytics.batchSize
            configuration.analytics.flushIntervalSeconds = analytics.flushIntervalSeconds
        }
        if let storage {
            configuration.storage.maxCacheSizeBytes = storage.maxCacheSizeBytes
            configuration.storage.telemetryRetentionDays = storage.telemetryRetentionDays
            configuration.storage.autoCleanup = storage.autoCleanup
        }
        return configuration
    }

    func mapToRecords(_ configuration: SDKConfiguration) throws
        -> (ConfigurationRecord, [RoutingPolicyRecord], AnalyticsConfigRecord, StorageConfigRecord)
    {
        let record = ConfigurationRecord(
            id: configuration.id, apiKey: configuration.apiKey, baseUrl: configuration.baseURL,
            modelCacheSize: configuration.modelCacheSize,
            createdAt: configuration.createdAt, updatedAt: configuration.updatedAt)
        let policies = try configuration.routingPolicies.map { policy in
            RoutingPolicyRecord(
                id: policy.id, configurationId: configuration.id, name: policy.name, priority: policy.priority,
                executionTarget: policy.executionTarget, conditions: JSONText(.object(policy.conditions.map { ($0.key, $0.value) })))
        }
        let analytics = AnalyticsConfigRecord(
            configurationId: configuration.id, enabled: configuration.analytics.enabled,
            samplingRate: configuration.analytics.samplingRate, batchSize: configuration.analytics.batchSize,
            flushIntervalSeconds: configuration.analytics.flushIntervalSeconds)
        let storage = StorageConfigRecord(
            configurationId: configuration.id, maxCacheSizeBytes: configuration.storage.maxCacheSizeBytes,
            telemetryRetentionDays: configuration.storage.telemetryRetentionDays,
            autoCleanup: configuration.storage.autoCleanup)
        return (record, policies, analytics, storage)
    }
}

/// Models and their daily usage.
public struct ModelRepository: Sendable {
    public let records = RecordRepository<ModelMetadataRecord>()
    public let usageStats = RecordRepository<ModelUsageStatRecord>()
    public init() {}

    /// Deletes a model; one with generation sessions only with `cascade`
    /// (its sessions, and their generations, go with it). Returns whether
    /// there was one.
    func delete(_ db: Database, _ id: String, cascade: Bool = false) throws -> Bool {
        try delete(StoreDatabase(db), id, cascade: cascade)
    }

    public func delete(_ database: some RepositoryConnection, _ id: String, cascade: Bool = false) throws -> Bool {
        try records.delete(database, id, children: ("generation_sessions", "model_id", "session"), owner: "model", cascade: cascade)
    }

    /// Adds one generation's figures to a model's usage of that UTC day.
    func recordUsage(_ db: Database, model modelId: String, at date: Date = Date(),
                            tokens: Int, cost: Double, latencyMs: Double, failed: Bool = false) throws {
        try recordUsage(StoreDatabase(db), model: modelId, at: date, tokens: tokens, cost: cost, latencyMs: latencyMs, failed: failed)
    }

    /// Adds one generation's figures to the model's usage of that UTC day;
    /// ``StoreError/notFound(table:key:)`` for a model that does not exist.
    public func recordUsage(_ database: some RepositoryConnection, model modelId: String, at date: Date = Date(),
                            tokens: Int, cost: Double, latencyMs: Double, failed: Bool = false) throws {
        guard try database.exists("SELECT 1 FROM model_metadata WHERE id = ?", [.text(modelId)]) else {
            throw StoreError.notFound(table: "model_metadata", key: modelId)
        }
        // The target's columns are named with the table (`excluded.` is the
        // new row's): PostgreSQL would find a bare name ambiguous.
        try database.execute("""
            INSERT INTO model_usage_stats (model_id, day, generation_count, total_tokens, total_cost, total_latency_ms, error_count)
            VALUES (?, ?, 1, ?, ?, ?, ?)
            ON CONFLICT (model_id, day) DO UPDATE SET
                generation_count = model_usage_stats.generation_count + 1,
                total_tokens = model_usage_stats.total_tokens + excluded.total_tokens,
                total_cost = model_usage_stats.total_cost + excluded.total_cost,
                total_latency_ms = model_usage_stats.total_latency_ms + excluded.total_latency_ms,
                error_count = model_usage_stats.error_count + excluded.error_count
            """, [.text(modelId), .text(Self.day(of: date)), .integer(Int64(tokens)), .real(cost), .real(latencyMs),
                  .integer(failed ? 1 : 0)])
    }

    /// A model's usage, one row per day, oldest first.
    func usage(_ db: Database, model modelId: String) throws -> [ModelUsageStatRecord] {
        try usageStats.list(db, Self.usageRequest(model: modelId))
    }

    /// Which rows ``usage(_:model:)`` returns.
    public static func usageRequest(model modelId: String) -> ListRequest {
        ListRequest(filters: [ColumnFilter("model_id", .equal, modelId)], order: [ColumnOrder("day")])
    }

    /// `YYYY-MM-DD` of a date in UTC.
    public static func day(of date: Date) -> String {
        let days = Int((date.timeIntervalSince1970 / 86400).rounded(.down))
        let civil = civilFromDays(days)
        return String(format: "%04d-%02d-%02d", civil.year, civil.month, civil.day)
    }

    /// Howard Hinnant's days → civil date, to stay clear of Calendar costs.
    private static func civilFromDays(_ z: Int) -> (year: Int, month: Int, day: Int) {
        let z = z + 719468
        let era = (z >= 0 ? z : z - 146096) / 146097
        let doe = z - era * 146097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}

/// Generation sessions with their generations.
public struct SessionRepository: Sendable {
    public let records = RecordRepository<GenerationSessionRecord>()
    public let generations = RecordRepository<GenerationRecord>()
    public init() {}

    /// Appends a generation to its session, keeping the session's totals
    /// and the model's daily usage in step, atomically with the caller's
    /// transaction.
    @discardableResult
    func addGeneration(_ db: Database, _ generation: GenerationRecord) throws -> GenerationRecord {
        let fields = try generation.databaseDictionary.mapValues(StoreValue.init)
        try append(StoreDatabase(db), fields, columns: Array(fields.keys))
        return generation
    }

    /// Appends a generation given field by field: its `sequence_number`,
    /// when left out, is the session's next; the rest as
    /// ``RecordTable/newRowFields(_:_:spec:)`` fills a new row. Returns its id.
    public func addGeneration(_ database: some RepositoryConnection, fields given: [String: StoreValue],
                              table: RecordTable<GenerationRecord>, spec: TableSpec) throws -> StoreValue {
        var fields = given
        if fields["sequence_number"] == nil, let session = fields["session_id"] {
            let last = try database.integer("SELECT max(sequence_number) FROM generations WHERE session_id = ?", [session]) ?? 0
            fields["sequence_number"] = .integer(last + 1)
        }
        let complete = try table.newRowFields(database, fields, spec: spec)
        try append(database, complete, columns: spec.names)
        return complete["id"] ?? .null
    }

    /// The rule of a new generation, on either engine: the row, its
    /// session's totals, its model's usage of the day.
    func append(_ database: some RepositoryConnection, _ generation: [String: StoreValue], columns: [String]) throws {
        let sessionId = generation["session_id"] ?? .null
        guard let model = try database.value("SELECT model_id FROM generation_sessions WHERE id = ?", [sessionId]),
              case let .text(modelId) = model else {
            throw StoreError.notFound(table: records.tableName, key: TableSpec.show(sessionId))
        }
        try generations.insertColumns(database, generation, columns: columns)
        func number(_ name: String) -> Double {
            switch generation[name] {
            case let .integer(value)?: Double(value)
            case let .real(value)?: value
            default: 0
            }
        }
        let tokens = Int(number("prompt_tokens") + number("completion_tokens"))
        let createdAt = number("created_at")
        try database.execute("""
            UPDATE generation_sessions SET total_tokens = total_tokens + ?, total_cost = total_cost + ?, updated_at = ?
            WHERE id = ?
            """, [.integer(Int64(tokens)), .real(number("cost")), .real(createdAt), sessionId])
        try ModelRepository().recordUsage(database, model: modelId, at: Date(timeIntervalSince1970: createdAt), tokens: tokens,
                                          cost: number("cost"), latencyMs: number("latency_ms"))
    }

    /// A session's generations in sequence.
    func generations(_ db: Database, session sessionId: String) throws -> [GenerationRecord] {
        try generations.list(db, Self.generationsRequest(session: sessionId))
    }

    /// Which rows ``generations(_:session:)`` returns.
    public static func generationsRequest(session sessionId: String) -> ListRequest {
        ListRequest(filters: [ColumnFilter("session_id", .equal, sessionId)], order: [ColumnOrder("sequence_number")])
    }
}
