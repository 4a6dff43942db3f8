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
    /// The configuration with this id as stored (on SQLite through GRDB's
    /// `Database`; see the ``RepositoryConnection`` version).
    func stored(_ db: Database, id: String) throws -> StoredConfiguration? {
        try stored(StoreDatabase(db), id: id)
    }

    /// Merges `changes` into the stored configuration in the caller's
    /// transaction (see the ``RepositoryConnection`` version).
    func merge(_ db: Database, _ changes: ConfigurationChanges) throws -> StoredConfiguration {
        try merge(StoreDatabase(db), changes)
    }

    /// A stored policy as the entity has it; its `conditions` must be a
    /// JSON object.
    static func policy(_ record: RoutingPolicyRecord) throws -> SDKConfiguration.RoutingPolicy {
        let document: JSON
        do {
            document = try record.conditions.parsed()
        } catch {
            throw StoreError.invalidValue(table: "routing_policies", column: "conditions",
                                          reason: "not valid JSON: \(record.conditions.text.prefix(60))")
        }
        guard let members = document.members else {
            throw StoreError.invalidValue(table: "routing_policies", column: "conditions",
                                          reason: "a JSON object expected, got \(record.conditions.text)")
        }
        // A name given twice keeps its last value.
        let conditions = Dictionary(members, uniquingKeysWith: { _, last in last })
        return SDKConfiguration.RoutingPolicy(id: record.id, name: record.name, priority: record.priority,
                                              executionTarget: record.executionTarget, conditions: conditions)
    }
}
