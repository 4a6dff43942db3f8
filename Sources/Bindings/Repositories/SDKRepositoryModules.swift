import CLuaShim
import Foundation
import LuaRuntime
import Store

/// The AI SDK's repositories in Lua: `models` (metadata and daily usage),
/// `sessions` (generation sessions and their generations) and `telemetry`
/// (events). Their columns are snake_case, as in the schema.
///
/// ```lua
/// models.insert{ id = "llama-3-8b", name = "Llama 3 8B", format = "gguf", framework = "llama.cpp",
///                capabilities = {"chat", "embeddings"} }
/// models.recordUsage("llama-3-8b", { tokens = 512, cost = 0.002, latencyMs = 840 })
/// models.usage("llama-3-8b")                       -- one row per UTC day
/// local s = sessions.insert{ model_id = "llama-3-8b" }
/// sessions.addGeneration{ session_id = s.id, prompt_tokens = 20, completion_tokens = 80 }
/// sessions.generations(s.id)
/// telemetry.insert{ event = "app.start", properties = { build = 42 } }
/// telemetry.insertMany{ { event = "a" }, { event = "b", properties = '{"x":1}' } }  --> 2
/// telemetry.counts(os.time() - 86400)              -- events by name since a date
/// ```
enum SDKRepositoryModules {
    static func install(in session: OpshSession) {
        install(engine: SessionRepositories(session: session), runtime: session.runtime)
    }

    static func install<Engine: RepositoryEngine>(engine context: Engine, runtime: LuaRuntime) {

        // models
        let models = RecordTableFunctions(context: context, records: RecordRepository<ModelMetadataRecord>())
        let usage = RecordTableFunctions(context: context, records: RecordRepository<ModelUsageStatRecord>())
        var modelFunctions = models.standard
        modelFunctions["delete"] = { [models] call in
            try models.delete(call, options: ["cascade"]) { db, key, flags in
                try ModelRepository().delete(db, key.textValue ?? "", cascade: flags["cascade"] == true)
            }
        }
        modelFunctions["usage"] = { [usage] call in
            let model = try call.string(1)
            return try usage.pushList(ModelRepository.usageRequest(model: model), call: call)
        }
        modelFunctions["recordUsage"] = { call in
            let model = try call.string(1)
            let fields = try call.table(2)
            let allowed = ["tokens", "cost", "latencyMs", "failed", "at"]
            for name in fields.keys.sorted() where !allowed.contains(name) {
                throw call.argumentError(2, "unknown option '\(name)' (options: \(allowed.joined(separator: ", ")))")
            }
            func number(_ name: String) throws -> Double? {
                switch fields[name] ?? .nil {
                case .nil: return nil
                case let .integer(value): return Double(value)
                case let .number(value) where value.isFinite: return value
                case let value: throw call.argumentError(2, "\(name): number expected, got \(value.typeName)")
                }
            }
            guard let tokens = try number("tokens") else { throw call.argumentError(2, "missing field 'tokens'") }
            guard tokens == tokens.rounded() else { throw call.argumentError(2, "tokens: number has no integer representation") }
            var failed = false
            switch fields["failed"] ?? .nil {
            case .nil: break
            case let .boolean(flag): failed = flag
            case let value: throw call.argumentError(2, "failed: boolean expected, got \(value.typeName)")
            }
            let date = try number("at").map { Date(timeIntervalSince1970: $0) } ?? Date()
            let cost = try number("cost") ?? 0
            let latency = try number("latencyMs") ?? 0
            try context.write("model_usage_stats") { db in
                try ModelRepository().recordUsage(db, model: model, at: date, tokens: Int(tokens), cost: cost,
                                             latencyMs: latency, failed: failed)
            }
            return 0
        }
        runtime.register(module: "models", modelFunctions)

        // sessions
        var sessions = RecordTableFunctions(context: context, records: RecordRepository<GenerationSessionRecord>())
        sessions.table.generatedKey = true
        var generations = RecordTableFunctions(context: context, records: RecordRepository<GenerationRecord>())
        generations.table.generatedKey = true
        var sessionFunctions = sessions.standard
        sessionFunctions["generations"] = { [generations] call in
            let id = try call.string(1)
            return try generations.pushList(SessionRepository.generationsRequest(session: id), call: call)
        }
        sessionFunctions["addGeneration"] = { [generations] call in
            let reader = context.reader(call)
            guard lua_type(call.state, 1) == LUA_TTABLE else { throw call.typeError(1, expected: "table") }
            let spec = try generations.cachedSpec()
            let fields = try reader.fields(argument: 1, spec: spec)
            let added = try call.naming(argument: 1) {
                try context.write("generations") { db in
                    try SessionRepository().addGeneration(db, fields: fields, table: generations.table, spec: spec)
                }
            }
            return try generations.pushRow(key: added, call: call)
        }
        runtime.register(module: "sessions", sessionFunctions)

        // telemetry
        let telemetry = RecordTableFunctions(context: context, records: RecordRepository<TelemetryRecord>())
        var telemetryFunctions = telemetry.standard
        telemetryFunctions["insertMany"] = { [telemetry] call in
            try insertMany(call, context: context, telemetry: telemetry)
        }
        telemetryFunctions["counts"] = { call in
            let since = try call.optionalNumber(1).map { Date(timeIntervalSince1970: $0) }
            let counts = try context.read("telemetry") { db in try TelemetryRepository().countsByEvent(db, since: since) }
            let rows = StoreValue.array(counts.map { .object([.init("event", .text($0.event)), .init("count", .integer(Int64($0.count)))]) })
            context.pusher(call).push(rows, asRows: true, columns: ["event", "count"])
            return 1
        }
        runtime.register(module: "telemetry", telemetryFunctions)
    }

    /// `telemetry.insertMany(rows)`: the rows read and checked first, then
    /// one transaction with the core's batched insert (row by row while a
    /// dry run or a shell chunk counts changes).
    static func insertMany<Engine: RepositoryEngine>(_ call: LuaCall, context: Engine,
                                                     telemetry: RecordTableFunctions<TelemetryRecord, Engine>) throws -> Int32 {
        let state = call.state
        guard lua_type(state, 1) == LUA_TTABLE else { throw call.typeError(1, expected: "table") }
        let reader = context.reader(call)
        let count = lua_rawlen(state, 1)
        let spec = try telemetry.cachedSpec()
        var events: [TelemetryRepository.Event] = []
        events.reserveCapacity(Int(count))
        let now = Date()
        for position in 0..<Int64(count) {
            lua_rawgeti(state, 1, position + 1)
            defer { opsh_pop(state, 1) }
            let prefix = "[\(position + 1)]."
            guard lua_type(state, -1) == LUA_TTABLE, !context.markers.isNull(state, -1) else {
                throw call.argumentError(1, "element \(position + 1): table expected, got \(LuaStack(state).typeName(at: -1))")
            }
            let fields = try reader.fields(at: -1, argument: 1, spec: spec, prefix: prefix)
            if let id = fields["id"], id != .null {
                throw call.argumentError(1, "field '\(prefix)id': ids are given by the database")
            }
            guard let event = fields["event"]?.textValue else {
                throw call.argumentError(1, "missing field '\(prefix)event' (telemetry needs: event)")
            }
            var item = TelemetryRepository.Event(event: event, properties: fields["properties"]?.textValue,
                                                 sessionId: fields["session_id"]?.textValue, createdAt: now)
            switch fields["created_at"] {
            case let .real(date)?: item.createdAt = date
            case let .integer(date)?: item.createdAt = Double(date)
            default: break
            }
            events.append(item)
        }
        try context.insertTelemetry(events)
        let inserted = events.count
        return call.results(.integer(Int64(inserted)))
    }
}
