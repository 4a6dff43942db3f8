import Foundation
import GRDB

/// Where a generation runs (the analytics store's routing vocabulary).
public enum ExecutionTarget: String, Codable, Sendable, CaseIterable, DatabaseValueConvertible {
    case onDevice, cloud, hybrid
}

/// The SDK's configuration row. The whole configuration (with its routing
/// policies, analytics and storage settings) is the ``Configuration``
/// aggregate.
public struct ConfigurationRecord: SnakeCaseStoreRecord, Hashable {
    public static let databaseTableName = "configuration"
    public static let primaryKeyColumns = ["id"]

    public var id: String
    /// A secret: masked whenever opsh prints it.
    public var apiKey: String?
    public var baseUrl: String
    public var modelCacheSize: Int
    public var createdAt: Date
    public var updatedAt: Date

    public init(id: String = "default", apiKey: String? = nil, baseUrl: String,
                modelCacheSize: Int = 0, createdAt: Date = Date(), updatedAt: Date = Date()) {
        self.id = id
        self.apiKey = apiKey
        self.baseUrl = baseUrl
        self.modelCacheSize = modelCacheSize
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }
}

/// A rule choosing where generations run (1:N under a configuration).
public struct RoutingPolicyRecord: SnakeCaseStoreRecord, Hashable {
    public static let allowedValues = ["execution_target": ExecutionTarget.allCases.map(\.rawValue)]
    public static let databaseTableName = "routing_policies"
    public static let primaryKeyColumns = ["id"]
    public static let jsonColumns = ["conditions"]

    public var id: String
    public var configurationId: String
    public var name: String
    public var priority: Int
    public var executionTarget: ExecutionTarget
    /// A JSON object of conditions (e.g. `{"maxTokens": 512}`).
    public var conditions: JSONText

    public init(id: String = makeIdentifier(), configurationId: String, name: String,
                priority: Int = 0, executionTarget: ExecutionTarget = .onDevice,
                conditions: JSONText = JSONText("{}")) {
        self.id = id
        self.configurationId = configurationId
        self.name = name
        self.priority = priority
        self.executionTarget = executionTarget
        self.conditions = conditions
    }
}

/// Analytics settings of a configuration (1:1).
public struct AnalyticsConfigRecord: SnakeCaseStoreRecord, Hashable {
    public static let databaseTableName = "analytics_config"
    public static let primaryKeyColumns = ["configuration_id"]

    public var configurationId: String
    public var enabled: Bool
    public var samplingRate: Double
    public var batchSize: Int
    public var flushIntervalSeconds: Double

    public init(configurationId: String, enabled: Bool = true, samplingRate: Double = 1,
                batchSize: Int = 100, flushIntervalSeconds: Double = 60) {
        self.configurationId = configurationId
        self.enabled = enabled
        self.samplingRate = samplingRate
        self.batchSize = batchSize
        self.flushIntervalSeconds = flushIntervalSeconds
    }
}

/// Storage settings of a configuration (1:1), including telemetry
/// retention, the default of `telemetry.cleanup`.
public struct StorageConfigRecord: SnakeCaseStoreRecord, Hashable {
    public static let databaseTableName = "storage_config"
    public static let primaryKeyColumns = ["configuration_id"]

    public var configurationId: String
    public var maxCacheSizeBytes: Int64
    public var telemetryRetentionDays: Int
    public var autoCleanup: Bool

    public init(configurationId: String, maxCacheSizeBytes: Int64 = 0,
                telemetryRetentionDays: Int = 30, autoCleanup: Bool = true) {
        self.configurationId = configurationId
        self.maxCacheSizeBytes = maxCacheSizeBytes
        self.telemetryRetentionDays = telemetryRetentionDays
        self.autoCleanup = autoCleanup
    }
}

/// A model the SDK can run.
public struct ModelMetadataRecord: SnakeCaseStoreRecord, Hashable {
    public static let databaseTableName = "model_metadata"
    public static let primaryKeyColumns = ["id"]
    public static let jsonColumns = ["capabilities"]

    public var id: String
    public var name: String
    public var format: String
    public var sizeBytes: Int64
    public var framework: String
    public var quantization: String?
    /// JSON, typically an array such as `["chat", "embeddings"]`.
    public var capabilities: JSONText
    public var createdAt: Date
    public var updatedAt: Date

    public init(id: String, name: String, format: String, sizeBytes: Int64 = 0,
                framework: String, quantization: String? = nil,
                capabilities: JSONText = JSONText("[]"),
                createdAt: Date = Date(), updatedAt: Date = Date()) {
        self.id = id
        self.name = name
        self.format = format
        self.sizeBytes = sizeBytes
        self.framework = framework
        self.quantization = quantization
        self.capabilities = capabilities
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }
}

/// A model's usage on one UTC day (1:N under a model).
public struct ModelUsageStatRecord: SnakeCaseStoreRecord, Hashable {
    public static let databaseTableName = "model_usage_stats"
    public static let primaryKeyColumns = ["id"]

    public var id: Int64?
    public var modelId: String
    /// `YYYY-MM-DD`, UTC.
    public var day: String
    public var generationCount: Int
    public var totalTokens: Int
    public var totalCost: Double
    public var totalLatencyMs: Double
    public var errorCount: Int

    public init(id: Int64? = nil, modelId: String, day: String, generationCount: Int = 0,
                totalTokens: Int = 0, totalCost: Double = 0, totalLatencyMs: Double = 0,
                errorCount: Int = 0) {
        self.id = id
        self.modelId = modelId
        self.day = day
        self.generationCount = generationCount
        self.totalTokens = totalTokens
        self.totalCost = totalCost
        self.totalLatencyMs = totalLatencyMs
        self.errorCount = errorCount
    }

    public mutating func didInsert(_ inserted: InsertionSuccess) {
        id = inserted.rowID
    }
}

/// A conversation or task with a model.
public struct GenerationSessionRecord: SnakeCaseStoreRecord, Hashable {
    public static let databaseTableName = "generation_sessions"
    public static let primaryKeyColumns = ["id"]

    public var id: String
    public var modelId: String
    public var sessionType: String
    public var totalTokens: Int
    public var totalCost: Double
    public var createdAt: Date
    public var updatedAt: Date

    public init(id: String = makeIdentifier(), modelId: String, sessionType: String = "chat",
                totalTokens: Int = 0, totalCost: Double = 0,
                createdAt: Date = Date(), updatedAt: Date = Date()) {
        self.id = id
        self.modelId = modelId
        self.sessionType = sessionType
        self.totalTokens = totalTokens
        self.totalCost = totalCost
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }
}

/// One generation in a session (1:N under a session).
public struct GenerationRecord: SnakeCaseStoreRecord, Hashable {
    public static let allowedValues = ["execution_target": ExecutionTarget.allCases.map(\.rawValue)]
    public static let databaseTableName = "generations"
    public static let primaryKeyColumns = ["id"]

    public var id: String
    public var sessionId: String
    public var sequenceNumber: Int
    public var promptTokens: Int
    public var completionTokens: Int
    public var latencyMs: Double
    public var cost: Double
    public var executionTarget: ExecutionTarget
    public var createdAt: Date

    public init(id: String = makeIdentifier(), sessionId: String, sequenceNumber: Int,
                promptTokens: Int = 0, completionTokens: Int = 0, latencyMs: Double = 0,
                cost: Double = 0, executionTarget: ExecutionTarget = .onDevice,
                createdAt: Date = Date()) {
        self.id = id
        self.sessionId = sessionId
        self.sequenceNumber = sequenceNumber
        self.promptTokens = promptTokens
        self.completionTokens = completionTokens
        self.latencyMs = latencyMs
        self.cost = cost
        self.executionTarget = executionTarget
        self.createdAt = createdAt
    }
}

/// One telemetry event.
public struct TelemetryRecord: SnakeCaseStoreRecord, Hashable {
    public static let databaseTableName = "telemetry"
    public static let primaryKeyColumns = ["id"]
    public static let jsonColumns = ["properties"]

    public var id: Int64?
    public var event: String
    public var properties: JSONText?
    public var sessionId: String?
    public var createdAt: Date

    public init(id: Int64? = nil, event: String, properties: JSONText? = nil,
                sessionId: String? = nil, createdAt: Date = Date()) {
        self.id = id
        self.event = event
        self.properties = properties
        self.sessionId = sessionId
        self.createdAt = createdAt
    }

    public mutating func didInsert(_ inserted: InsertionSuccess) {
        id = inserted.rowID
    }
}
