import Foundation
import GRDB

/// The configuration aggregate: four tables mapped to one ``SDKConfiguration``.
public struct ConfigurationRepository: Sendable {
    public let records = RecordRepository<ConfigurationRecord>()
    public let routingPolicies = RecordRepository<RoutingPolicyRecord>()
    public let analytics = RecordRepository<AnalyticsConfigRecord>()
    public let storage = RecordRepository<StorageConfigRecord>()
    public init() {}

    /// The configuration with this id, with its policies and settings.
    public func get(_ db: Database, id: String = "default") throws -> SDKConfiguration? {
        guard let record = try records.get(db, id) else { return nil }
        let policies = try routingPolicies.list(db, ListRequest(
            filters: [ColumnFilter("configuration_id", .equal, id)], order: [ColumnOrder("priority", descending: true)]))
        return try mapToEntity(record, policies: policies,
                               analytics: try analytics.get(db, id), storage: try storage.get(db, id))
    }

    /// Stores the whole aggregate: the row, its settings, and exactly its
    /// policies (policies no longer listed are removed).
    public func save(_ db: Database, _ configuration: SDKConfiguration) throws {
        let (record, policies, analyticsRecord, storageRecord) = try mapToRecords(configuration)
        try records.upsert(db, record)
        try analytics.upsert(db, analyticsRecord)
        try storage.upsert(db, storageRecord)
        let keep = policies.map(\.id)
        try db.execute(sql: """
            DELETE FROM routing_policies WHERE configuration_id = ? AND id NOT IN (SELECT value FROM json_each(?))
            """, arguments: [configuration.id, try JSONText(encoding: keep).text])
        for policy in policies { try routingPolicies.upsert(db, policy) }
    }

    /// Days of telemetry to keep: the storage configuration's retention,
    /// or 30 days when no configuration exists.
    public func telemetryRetentionDays(_ db: Database) throws -> Int {
        try Int.fetchOne(db, sql: "SELECT telemetry_retention_days FROM storage_config ORDER BY configuration_id = 'default' DESC LIMIT 1") ?? 30
    }

    // MARK: Mapping

    func mapToEntity(_ record: ConfigurationRecord, policies: [RoutingPolicyRecord],
                     analytics: AnalyticsConfigRecord?, storage: StorageConfigRecord?) throws -> SDKConfiguration {
        var configuration = SDKConfiguration(
            id: record.id, apiKey: record.apiKey, baseURL: record.baseUrl, modelCacheSize: record.modelCacheSize,
            createdAt: record.createdAt, updatedAt: record.updatedAt)
        configuration.routingPolicies = try policies.map { policy in
            SDKConfiguration.RoutingPolicy(
                id: policy.id, name: policy.name, priority: policy.priority,
                executionTarget: policy.executionTarget,
                conditions: try policy.conditions.decode([String: JSONValue].self))
        }
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
                executionTarget: policy.executionTarget, conditions: try JSONText(encoding: policy.conditions))
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
    public func delete(_ db: Database, _ id: String, cascade: Bool = false) throws -> Bool {
        let sessions = try Int.fetchOne(db, sql: "SELECT count(*) FROM generation_sessions WHERE model_id = ?", arguments: [id]) ?? 0
        if sessions > 0 {
            guard cascade else {
                throw StoreError.refused(reason: "model \(id) has \(sessions) session(s); delete them first or pass cascade = true")
            }
            try db.execute(sql: "DELETE FROM generation_sessions WHERE model_id = ?", arguments: [id])
        }
        return try records.delete(db, id)
    }

    /// Adds one generation's figures to a model's usage of that UTC day.
    public func recordUsage(_ db: Database, model modelId: String, at date: Date = Date(),
                            tokens: Int, cost: Double, latencyMs: Double, failed: Bool = false) throws {
        try db.execute(sql: """
            INSERT INTO model_usage_stats (model_id, day, generation_count, total_tokens, total_cost, total_latency_ms, error_count)
            VALUES (?, ?, 1, ?, ?, ?, ?)
            ON CONFLICT (model_id, day) DO UPDATE SET
                generation_count = generation_count + 1,
                total_tokens = total_tokens + excluded.total_tokens,
                total_cost = total_cost + excluded.total_cost,
                total_latency_ms = total_latency_ms + excluded.total_latency_ms,
                error_count = error_count + excluded.error_count
            """, arguments: [modelId, Self.day(of: date), tokens, cost, latencyMs, failed ? 1 : 0])
    }

    /// A model's usage, one row per day, oldest first.
    public func usage(_ db: Database, model modelId: String) throws -> [ModelUsageStatRecord] {
        try usageStats.list(db, ListRequest(filters: [ColumnFilter("model_id", .equal, modelId)], order: [ColumnOrder("day")]))
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
    public func addGeneration(_ db: Database, _ generation: GenerationRecord) throws -> GenerationRecord {
        let session = try records.require(db, generation.sessionId)
        let inserted = try generations.insert(db, generation)
        let tokens = generation.promptTokens + generation.completionTokens
        try db.execute(sql: """
            UPDATE generation_sessions SET total_tokens = total_tokens + ?, total_cost = total_cost + ?, updated_at = ?
            WHERE id = ?
            """, arguments: [tokens, generation.cost, generation.createdAt.timeIntervalSince1970, session.id])
        try ModelRepository().recordUsage(db, model: session.modelId, at: generation.createdAt, tokens: tokens,
                                          cost: generation.cost, latencyMs: generation.latencyMs)
        return inserted
    }

    /// A session's generations in sequence.
    public func generations(_ db: Database, session sessionId: String) throws -> [GenerationRecord] {
        try generations.list(db, ListRequest(filters: [ColumnFilter("session_id", .equal, sessionId)],
                                             order: [ColumnOrder("sequence_number")]))
    }
}
