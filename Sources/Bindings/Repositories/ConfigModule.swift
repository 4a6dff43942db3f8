import CLuaShim
import Foundation
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
        install(engine: SessionRepositories(session: session), runtime: session.runtime)
    }

    static func install<Engine: RepositoryEngine>(engine context: Engine, runtime: LuaRuntime) {
        let repository = ConfigurationRepository()
        let rows = RecordTableFunctions(context: context, records: repository.records)
        runtime.register(module: "config", [
            "get": { call in
                let id = try call.optionalString(1) ?? "default"
                let found = try context.read("configuration") { db in try repository.stored(db, id: id) }
                guard let found else { return call.results(nil) }
                push(found, state: call.state)
                return 1
            },
            "save": { call in try save(call, context: context, repository: repository) },
            "list": { call in try rows.list(call) },
            "delete": { call in try rows.delete(call) },
        ])
    }

    // MARK: Out

    static func push(_ loaded: StoredConfiguration, state: OpaquePointer) {
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
        RowShapes.markDates(state, at: -1, table: "configuration", fields: ["created_at", "updated_at"])
    }

    // MARK: In

    static func save<Engine: RepositoryEngine>(_ call: LuaCall, context: Engine, repository: ConfigurationRepository) throws -> Int32 {
        let state = call.state
        let reader = context.reader(call)
        guard lua_type(state, 1) == LUA_TTABLE, !context.markers.isNull(state, 1) else {
            throw call.typeError(1, expected: "table")
        }
        // The Lua table read into changes here; the merge rule is Store's.
        let loaded = try context.write("configuration") { db -> StoredConfiguration in
            let spec = try db.tableSpec("configuration", primaryKey: "id", jsonColumns: [], booleans: [])
            for name in try reader.fieldNames(at: 1, argument: 1) where spec.column(name) == nil && !nested.contains(name) {
                throw StoreError.unknownColumn(table: "configuration", column: name, known: spec.names + nested)
            }
            let fields = try reader.fields(argument: 1, spec: spec, skipping: Set(nested))
            let changes = ConfigurationChanges(
                id: fields["id"]?.textValue ?? "default", fields: fields,
                routingPolicies: try policies(reader: reader, call: call, spec: try db.tableSpec(
                    "routing_policies", primaryKey: "id", jsonColumns: ["conditions"], booleans: [])),
                analytics: try nestedFields("analytics", spec: try db.tableSpec(
                    "analytics_config", primaryKey: "configuration_id", jsonColumns: [], booleans: ["enabled"]),
                    reader: reader, call: call),
                storage: try nestedFields("storage", spec: try db.tableSpec(
                    "storage_config", primaryKey: "configuration_id", jsonColumns: [], booleans: ["auto_cleanup"]),
                    reader: reader, call: call))
            do {
                return try repository.merge(db, changes)
            } catch let error as ConfigurationMergeError {
                throw call.argumentError(1, error.description)
            }
        }
        push(loaded, state: state)
        return 1
    }

    /// The `routing_policies` list of the argument (each policy's fields),
    /// nil when absent.
    private static func policies(reader: LuaRowReader, call: LuaCall, spec: TableSpec) throws -> [[String: StoreValue]]? {
        let state = call.state
        reader.pushField("routing_policies", of: 1)
        defer { opsh_pop(state, 1) }
        let policiesIndex = lua_gettop(state)
        if lua_type(state, policiesIndex) == LUA_TNIL { return nil }
        guard lua_type(state, policiesIndex) == LUA_TTABLE else {
            throw call.argumentError(1, "field 'routing_policies': table expected, got \(LuaStack(state).typeName(at: policiesIndex))")
        }
        var policies: [[String: StoreValue]] = []
        for position in 0..<Int64(lua_rawlen(state, policiesIndex)) {
            lua_rawgeti(state, policiesIndex, position + 1)
            defer { opsh_pop(state, 1) }
            let prefix = "routing_policies[\(position + 1)]."
            guard lua_type(state, -1) == LUA_TTABLE else {
                throw call.argumentError(1, "field '\(prefix.dropLast())': table expected, got \(LuaStack(state).typeName(at: -1))")
            }
            policies.append(try reader.fields(at: -1, argument: 1, spec: spec, skipping: ["configuration_id"], prefix: prefix))
        }
        return policies
    }

    /// The fields of `analytics` / `storage` in the argument, nil when absent.
    private static func nestedFields(_ name: String, spec: TableSpec, reader: LuaRowReader,
                                     call: LuaCall) throws -> [String: StoreValue]? {
        let state = call.state
        reader.pushField(name, of: 1)
        defer { opsh_pop(state, 1) }
        if lua_type(state, -1) == LUA_TNIL { return nil }
        guard lua_type(state, -1) == LUA_TTABLE else {
            throw call.argumentError(1, "field '\(name)': table expected, got \(LuaStack(state).typeName(at: -1))")
        }
        return try reader.fields(at: -1, argument: 1, spec: spec, skipping: ["configuration_id"], prefix: "\(name).")
    }


}
