import Foundation
import GRDB
import TextCodec

/// `config.save`'s rule, in the core: a partial configuration merged into
/// the stored one. Fields left out keep their values (a new configuration
/// takes the defaults; `base_url` is required); `routingPolicies`, when
/// given, is the complete list (policies not in it are removed), each
/// policy's missing columns taking the schema's defaults; `analytics` and
/// `storage` merge field by field; `updated_at` becomes now unless given.
public struct ConfigurationChanges: Sendable {
    public var id: String
    /// Columns of the `configuration` row.
    public var row: [String: DatabaseValue]
    /// The complete list of routing policies (their columns), or nil to
    /// keep the stored ones.
    public var routingPolicies: [[String: DatabaseValue]]?
    /// Columns of `analytics_config` / `storage_config` to change.
    public var analytics: [String: DatabaseValue]?
    public var storage: [String: DatabaseValue]?

    public init(id: String, row: [String: DatabaseValue], routingPolicies: [[String: DatabaseValue]]? = nil,
                analytics: [String: DatabaseValue]? = nil, storage: [String: DatabaseValue]? = nil) {
        self.id = id
        self.row = row
        self.routingPolicies = routingPolicies
        self.analytics = analytics
        self.storage = storage
    }
}

/// What a merge refuses before anything is written, by field.
public enum ConfigurationMergeError: Error, Equatable, CustomStringConvertible {
    /// A new configuration needs a `base_url`.
    case missingBaseURL
    /// Policy `index` (from 1) lacks a column without a default.
    case missingPolicyField(index: Int, column: String)
    case duplicatePolicyId(String)

    public var description: String {
        switch self {
        case .missingBaseURL: "missing field 'base_url' (a new configuration needs: base_url)"
        case let .missingPolicyField(index, column): "missing field 'routing_policies[\(index)].\(column)'"
        case let .duplicatePolicyId(id): "routing_policies: the id '\(id)' appears twice"
        }
    }
}

/// The configuration as stored, table by table (what `config.get` shows).
public struct StoredConfiguration: Sendable {
    public var record: ConfigurationRecord
    public var policies: [RoutingPolicyRecord]
    public var analytics: AnalyticsConfigRecord?
    public var storage: StorageConfigRecord?
}

extension ConfigurationRepository {
    /// The configuration with this id as stored; nil when there is none.
    public func stored(_ db: Database, id: String) throws -> StoredConfiguration? {
        guard let record = try records.get(db, id) else { return nil }
        let policies = try routingPolicies.list(db, ListRequest(
            filters: [ColumnFilter("configuration_id", .equal, id)],
            order: [ColumnOrder("priority", descending: true), ColumnOrder("name")]))
        return StoredConfiguration(record: record, policies: policies, analytics: try analytics.get(db, id),
                                   storage: try storage.get(db, id))
    }

    /// Merges `changes` into the stored configuration (see
    /// ``ConfigurationChanges``) and saves the whole aggregate in the
    /// caller's transaction; returns it as stored.
    public func merge(_ db: Database, _ changes: ConfigurationChanges) throws -> StoredConfiguration {
        let id = changes.id
        let existing = try stored(db, id: id)

        var row: [String: DatabaseValue] = try existing?.record.databaseDictionary ?? [:]
        for (name, value) in changes.row { row[name] = value }
        row["id"] = id.databaseValue
        let now = Date().timeIntervalSince1970.databaseValue
        if row["created_at"] == nil { row["created_at"] = now }
        if changes.row["updated_at"] == nil { row["updated_at"] = now }
        if row["model_cache_size"] == nil { row["model_cache_size"] = 0.databaseValue }
        guard row["base_url"] != nil else { throw ConfigurationMergeError.missingBaseURL }
        let record = try records.makeRecord(db, fields: row)
        var configuration = SDKConfiguration(
            id: id, apiKey: record.apiKey, baseURL: record.baseUrl, modelCacheSize: record.modelCacheSize,
            createdAt: record.createdAt, updatedAt: record.updatedAt)

        if let given = changes.routingPolicies {
            let columns = try db.columns(in: RoutingPolicyRecord.databaseTableName)
            for (offset, fields) in given.enumerated() {
                var fields = fields
                fields["configuration_id"] = id.databaseValue
                if fields["id"] == nil { fields["id"] = makeIdentifier().databaseValue }
                for column in columns where fields[column.name] == nil {
                    guard let sql = column.defaultValueSQL else {
                        throw ConfigurationMergeError.missingPolicyField(index: offset + 1, column: column.name)
                    }
                    fields[column.name] = try DatabaseValue.fetchOne(db, sql: "SELECT \(sql)")
                }
                configuration.routingPolicies.append(try Self.policy(try routingPolicies.makeRecord(db, fields: fields)))
            }
            let ids = configuration.routingPolicies.map(\.id)
            if let duplicate = ids.first(where: { id in ids.filter { $0 == id }.count > 1 }) {
                throw ConfigurationMergeError.duplicatePolicyId(duplicate)
            }
        } else {
            configuration.routingPolicies = try (existing?.policies ?? []).map(Self.policy)
        }

        var analyticsRecord = existing?.analytics ?? AnalyticsConfigRecord(configurationId: id)
        if let fields = changes.analytics {
            var merged = try analyticsRecord.databaseDictionary
            for (name, value) in fields { merged[name] = value }
            analyticsRecord = try analytics.makeRecord(db, fields: merged)
        }
        configuration.analytics.enabled = analyticsRecord.enabled
        configuration.analytics.samplingRate = analyticsRecord.samplingRate
        configuration.analytics.batchSize = analyticsRecord.batchSize
        configuration.analytics.flushIntervalSeconds = analyticsRecord.flushIntervalSeconds

        var storageRecord = existing?.storage ?? StorageConfigRecord(configurationId: id)
        if let fields = changes.storage {
            var merged = try storageRecord.databaseDictionary
            for (name, value) in fields { merged[name] = value }
            storageRecord = try storage.makeRecord(db, fields: merged)
        }
        configuration.storage.maxCacheSizeBytes = storageRecord.maxCacheSizeBytes
        configuration.storage.telemetryRetentionDays = storageRecord.telemetryRetentionDays
        configuration.storage.autoCleanup = storageRecord.autoCleanup

        try save(db, configuration)
        guard let saved = try stored(db, id: id) else { throw StoreError.notFound(table: "configuration", key: id) }
        return saved
    }

    /// A stored policy as the entity has it; its `conditions` must be a
    /// JSON object.
    static func policy(_ record: RoutingPolicyRecord) throws -> SDKConfiguration.RoutingPolicy {
        let conditions: [String: JSONValue]
        do {
            conditions = try record.conditions.decode([String: JSONValue].self)
        } catch {
            let valid = (try? JSONParser.parse(Array(record.conditions.text.utf8))) != nil
            throw StoreError.invalidValue(table: "routing_policies", column: "conditions",
                                          reason: valid ? "a JSON object expected, got \(record.conditions.text)"
                                                        : "not valid JSON: \(record.conditions.text.prefix(60))")
        }
        return SDKConfiguration.RoutingPolicy(id: record.id, name: record.name, priority: record.priority,
                                              executionTarget: record.executionTarget, conditions: conditions)
    }
}
