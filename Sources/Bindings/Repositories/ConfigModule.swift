import CLuaShim
import Foundation
import GRDB
import LuaRuntime
import Store
import TextCodec

/// `config`: the SDK configuration aggregate (the `configuration` row, its
/// routing policies, analytics and storage settings) as one Lua table.
///
/// ```lua
/// local c = config.get()                 -- id "default"; nil when there is none
/// print(c.base_url, c.analytics.sampling_rate, #c.routing_policies)
/// c.analytics.sampling_rate = 0.25
/// c.routing_policies[#c.routing_policies + 1] =
///   { name = "long prompts", priority = 10, execution_target = "cloud", conditions = { minTokens = 2048 } }
/// config.save(c)                         -- atomic; returns the stored aggregate
/// config.save{ id = "staging", base_url = "https://staging.example.com" }
/// ```
///
/// `config.save` merges into the stored configuration: fields left out
/// keep their values (a new configuration takes the defaults; `base_url`
/// is required). `routing_policies`, when given, is the complete list:
/// policies not in it are removed. `analytics` and `storage` merge field
/// by field. `updated_at` becomes now unless given. Booleans
/// (`analytics.enabled`, `storage.auto_cleanup`) are Lua booleans;
/// `conditions` is a table (or JSON text of an object).
enum ConfigModule {
    static let nested = ["routing_policies", "analytics", "storage"]

    static func install(in session: OpshSession) {
        let context = RepositoryContext(session: session)
        let repository = session.store.configuration
        let rows = RecordTableFunctions(context: context, records: repository.records)
        session.runtime.register(module: "config", [
            "get": { call in
                let id = try call.optionalString(1) ?? "default"
                let found = try context.read("configuration") { db in try load(db, id: id, repository: repository) }
                guard let found else { return call.results(nil) }
                push(found, state: call.state)
                return 1
            },
            "save": { call in try save(call, context: context, repository: repository) },
            "list": { call in try rows.list(call) },
            "delete": { call in try rows.delete(call) },
        ])
    }

    struct Loaded {
        var record: ConfigurationRecord
        var policies: [RoutingPolicyRecord]
        var analytics: AnalyticsConfigRecord?
        var storage: StorageConfigRecord?
    }

    static func load(_ db: Database, id: String, repository: ConfigurationRepository) throws -> Loaded? {
        guard let record = try repository.records.get(db, id) else { return nil }
        let policies = try repository.routingPolicies.list(db, ListRequest(
            filters: [ColumnFilter("configuration_id", .equal, id)],
            order: [ColumnOrder("priority", descending: true), ColumnOrder("name")]))
        return Loaded(record: record, policies: policies, analytics: try repository.analytics.get(db, id),
                      storage: try repository.storage.get(db, id))
    }

    // MARK: Out

    static func push(_ loaded: Loaded, state: OpaquePointer) {
        let stack = LuaStack(state)
        _ = lua_checkstack(state, 8)
        let record = loaded.record
        lua_createtable(state, 0, 9)
        func set(_ name: String, _ value: LuaValue) {
            stack.push(value)
            stack.setField(name, at: -2)
        }
        set("id", .string(record.id))
        if let key = record.apiKey { set("api_key", .string(key)) }
        set("base_url", .string(record.baseUrl))
        set("model_cache_size", .integer(Int64(record.modelCacheSize)))
        set("created_at", .number(record.createdAt.timeIntervalSince1970))
        set("updated_at", .number(record.updatedAt.timeIntervalSince1970))
        lua_createtable(state, Int32(loaded.policies.count), 0)
        for (offset, policy) in loaded.policies.enumerated() {
            lua_createtable(state, 0, 5)
            set("id", .string(policy.id))
            set("name", .string(policy.name))
            set("priority", .integer(Int64(policy.priority)))
            set("execution_target", .string(policy.executionTarget.rawValue))
            if let node = try? JSONParser.parse(Array(policy.conditions.text.utf8)) {
                JSONModule.push(node, state: state)
            } else {
                stack.push(policy.conditions.text)  // damaged: shown as stored
            }
            stack.setField("conditions", at: -2)
            lua_rawseti(state, -2, lua_Integer(offset + 1))
        }
        stack.setField("routing_policies", at: -2)
        if let analytics = loaded.analytics {
            lua_createtable(state, 0, 4)
            set("enabled", .boolean(analytics.enabled))
            set("sampling_rate", .number(analytics.samplingRate))
            set("batch_size", .integer(Int64(analytics.batchSize)))
            set("flush_interval_seconds", .number(analytics.flushIntervalSeconds))
            stack.setField("analytics", at: -2)
        }
        if let storage = loaded.storage {
            lua_createtable(state, 0, 3)
            set("max_cache_size_bytes", .integer(storage.maxCacheSizeBytes))
            set("telemetry_retention_days", .integer(Int64(storage.telemetryRetentionDays)))
            set("auto_cleanup", .boolean(storage.autoCleanup))
            stack.setField("storage", at: -2)
        }
    }

    // MARK: In

    static func save(_ call: LuaCall, context: RepositoryContext, repository: ConfigurationRepository) throws -> Int32 {
        let state = call.state
        let reader = context.reader(call)
        guard lua_type(state, 1) == LUA_TTABLE, !context.markers.isNull(state, 1) else {
            throw call.typeError(1, expected: "table")
        }
        let loaded = try context.write("configuration") { db -> Loaded in
            let spec = try TableSpec.load(db, table: "configuration", primaryKey: "id", jsonColumns: [])
            for name in try reader.fieldNames(at: 1, argument: 1) where spec.column(name) == nil && !nested.contains(name) {
                throw StoreError.unknownColumn(table: "configuration", column: name, known: spec.names + nested)
            }
            let fields = try reader.fields(argument: 1, spec: spec, skipping: Set(nested))
            let id = fields["id"].flatMap(String.fromDatabaseValue) ?? "default"
            let existing = try load(db, id: id, repository: repository)

            // The configuration row.
            var row: [String: DatabaseValue] = try existing?.record.databaseDictionary ?? [:]
            for (name, value) in fields { row[name] = value }
            row["id"] = id.databaseValue
            let now = Date().timeIntervalSince1970.databaseValue
            if row["created_at"] == nil { row["created_at"] = now }
            if fields["updated_at"] == nil { row["updated_at"] = now }
            if row["model_cache_size"] == nil { row["model_cache_size"] = 0.databaseValue }
            guard row["base_url"] != nil else {
                throw call.argumentError(1, "missing field 'base_url' (a new configuration needs: base_url)")
            }
            let record = try repository.records.makeRecord(db, fields: row)
            var configuration = SDKConfiguration(
                id: id, apiKey: record.apiKey, baseURL: record.baseUrl, modelCacheSize: record.modelCacheSize,
                createdAt: record.createdAt, updatedAt: record.updatedAt)

            // Routing policies: the given list, or the stored one.
            let policySpec = try TableSpec.load(db, table: "routing_policies", primaryKey: "id", jsonColumns: ["conditions"])
            reader.pushField("routing_policies", of: 1)
            defer { opsh_pop(state, 1) }
            let policiesIndex = lua_gettop(state)
            if lua_type(state, policiesIndex) == LUA_TNIL {
                configuration.routingPolicies = try (existing?.policies ?? []).map { try policy($0) }
            } else {
                guard lua_type(state, policiesIndex) == LUA_TTABLE else {
                    throw call.argumentError(1, "field 'routing_policies': table expected, got \(LuaStack(state).typeName(at: policiesIndex))")
                }
                let count = lua_rawlen(state, policiesIndex)
                for position in 0..<Int64(count) {
                    lua_rawgeti(state, policiesIndex, position + 1)
                    defer { opsh_pop(state, 1) }
                    let prefix = "routing_policies[\(position + 1)]."
                    guard lua_type(state, -1) == LUA_TTABLE else {
                        throw call.argumentError(1, "field '\(prefix.dropLast())': table expected, got \(LuaStack(state).typeName(at: -1))")
                    }
                    var fields = try reader.fields(at: -1, argument: 1, spec: policySpec, skipping: ["configuration_id"], prefix: prefix)
                    fields["configuration_id"] = id.databaseValue
                    if fields["id"] == nil { fields["id"] = makeIdentifier().databaseValue }
                    for column in policySpec.columns where fields[column.name] == nil {
                        if let sql = column.defaultSQL {
                            fields[column.name] = try DatabaseValue.fetchOne(db, sql: "SELECT \(sql)")
                        } else {
                            throw call.argumentError(1, "missing field '\(prefix)\(column.name)'")
                        }
                    }
                    let record = try repository.routingPolicies.makeRecord(db, fields: fields)
                    configuration.routingPolicies.append(try policy(record))
                }
                let ids = configuration.routingPolicies.map(\.id)
                if let duplicate = ids.first(where: { id in ids.filter { $0 == id }.count > 1 }) {
                    throw call.argumentError(1, "routing_policies: the id '\(duplicate)' appears twice")
                }
            }

            // Analytics and storage settings, merged field by field.
            let analyticsSpec = try TableSpec.load(db, table: "analytics_config", primaryKey: "configuration_id",
                                                   jsonColumns: [], booleans: ["enabled"])
            var analytics = existing?.analytics ?? AnalyticsConfigRecord(configurationId: id)
            if let fields = try nestedFields("analytics", spec: analyticsSpec, reader: reader, call: call) {
                var row = try analytics.databaseDictionary
                for (name, value) in fields { row[name] = value }
                analytics = try repository.analytics.makeRecord(db, fields: row)
            }
            configuration.analytics.enabled = analytics.enabled
            configuration.analytics.samplingRate = analytics.samplingRate
            configuration.analytics.batchSize = analytics.batchSize
            configuration.analytics.flushIntervalSeconds = analytics.flushIntervalSeconds

            let storageSpec = try TableSpec.load(db, table: "storage_config", primaryKey: "configuration_id",
                                                 jsonColumns: [], booleans: ["auto_cleanup"])
            var storage = existing?.storage ?? StorageConfigRecord(configurationId: id)
            if let fields = try nestedFields("storage", spec: storageSpec, reader: reader, call: call) {
                var row = try storage.databaseDictionary
                for (name, value) in fields { row[name] = value }
                storage = try repository.storage.makeRecord(db, fields: row)
            }
            configuration.storage.maxCacheSizeBytes = storage.maxCacheSizeBytes
            configuration.storage.telemetryRetentionDays = storage.telemetryRetentionDays
            configuration.storage.autoCleanup = storage.autoCleanup

            try repository.save(db, configuration)
            guard let stored = try load(db, id: id, repository: repository) else {
                throw StoreError.notFound(table: "configuration", key: id)
            }
            return stored
        }
        push(loaded, state: state)
        return 1
    }

    /// The fields of `analytics` / `storage` in the argument, nil when absent.
    private static func nestedFields(_ name: String, spec: TableSpec, reader: LuaRowReader,
                                     call: LuaCall) throws -> [String: DatabaseValue]? {
        let state = call.state
        reader.pushField(name, of: 1)
        defer { opsh_pop(state, 1) }
        if lua_type(state, -1) == LUA_TNIL { return nil }
        guard lua_type(state, -1) == LUA_TTABLE else {
            throw call.argumentError(1, "field '\(name)': table expected, got \(LuaStack(state).typeName(at: -1))")
        }
        return try reader.fields(at: -1, argument: 1, spec: spec, skipping: ["configuration_id"], prefix: "\(name).")
    }

    private static func policy(_ record: RoutingPolicyRecord) throws -> SDKConfiguration.RoutingPolicy {
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
