import Foundation

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
        /// Decoded from the JSON column.
        public var conditions: [String: JSONValue]

        public init(id: String = makeIdentifier(), name: String, priority: Int = 0,
                    executionTarget: ExecutionTarget = .onDevice, conditions: [String: JSONValue] = [:]) {
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

/// A JSON document as a Swift value, for JSON columns decoded by entities.
public enum JSONValue: Sendable, Hashable, Codable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() { self = .null }
        else if let value = try? container.decode(Bool.self) { self = .bool(value) }
        else if let value = try? container.decode(Double.self) { self = .number(value) }
        else if let value = try? container.decode(String.self) { self = .string(value) }
        else if let value = try? container.decode([JSONValue].self) { self = .array(value) }
        else { self = .object(try container.decode([String: JSONValue].self)) }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .number(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }
}
