import Foundation
import TextCodec

/// The SDK's configuration as the application sees it: one value holding
/// the configuration row, its routing policies (1:N) and its analytics and
/// storage settings (1:1). ``ConfigurationRepository`` maps it to and from
/// the four tables (the analytics store's record ⇄ entity mapping, ARCHITECTURE.md).
public struct SDKConfiguration: Sendable, Hashable {
    public var id: String
    public var apiKey: String?
    public var baseURL: String
    public var modelCacheSize: Int
    public var routingPolicies: [RoutingPolicy]
    public var analytics: Analytics
    public var storage: Storage
    public var createdAt: Date
    public var updatedAt: Date

    public struct RoutingPolicy: Sendable, Hashable {
        public var id: String
        public var name: String
        public var priority: Int
        public var executionTarget: ExecutionTarget
        /// The JSON column's object, by member name.
        public var conditions: [String: JSON]

        public init(id: String = makeIdentifier(), name: String, priority: Int = 0,
                    executionTarget: ExecutionTarget = .onDevice, conditions: [String: JSON] = [:]) {
            self.id = id
            self.name = name
            self.priority = priority
            self.executionTarget = executionTarget
            self.conditions = conditions
        }
    }

    public struct Analytics: Sendable, Hashable {
        public var enabled = true
        public var samplingRate = 1.0
        public var batchSize = 100
        public var flushIntervalSeconds = 60.0
        public init() {}
    }

    public struct Storage: Sendable, Hashable {
        public var maxCacheSizeBytes: Int64 = 0
        /// Telemetry older than this is removed by the retention cleanup.
        public var telemetryRetentionDays = 30
        public var autoCleanup = true
        public init() {}
    }

    public init(id: String = "default", apiKey: String? = nil, baseURL: String, modelCacheSize: Int = 0,
                routingPolicies: [RoutingPolicy] = [], analytics: Analytics = Analytics(),
                storage: Storage = Storage(), createdAt: Date = Date(), updatedAt: Date = Date()) {
        self.id = id
        self.apiKey = apiKey
        self.baseURL = baseURL
        self.modelCacheSize = modelCacheSize
        self.routingPolicies = routingPolicies
        self.analytics = analytics
        self.storage = storage
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }
}
