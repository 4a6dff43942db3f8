import CLuaShim
import Foundation
import GRDB
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
        let context = RepositoryContext(session: session)
        let runtime = session.runtime
        let store = session.store

        // models
        let models = RecordTableFunctions(context: context, records: store.models.records)
        let usage = RecordTableFunctions(context: context, records: store.models.usageStats)
        var modelFunctions = models.standard
        modelFunctions["delete"] = { [models] call in
            try models.delete(call, options: ["cascade"]) { db, key, flags in
                try store.models.delete(db, String.fromDatabaseValue(key) ?? "", cascade: flags["cascade"] == true)
            }
        }
        modelFunctions["usage"] = { [usage] call in
            let model = try call.string(1)
            let (found, columns) = try context.read("model_usage_stats") { db in
                (try store.models.usage(db, model: model), try usage.spec(db).names)
            }
            return try usage.pushRows(found, columns: columns, call: call)
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
                guard try store.models.records.get(db, model) != nil else {
                    throw StoreError.notFound(table: "model_metadata", key: model)
                }
                try store.models.recordUsage(db, model: model, at: date, tokens: Int(tokens), cost: cost,
                                             latencyMs: latency, failed: failed)
            }
            return 0
        }
        runtime.register(module: "models", modelFunctions)

        // sessions
        var sessions = RecordTableFunctions(context: context, records: store.sessions.records)
        sessions.generatedKey = true
        var generations = RecordTableFunctions(context: context, records: store.sessions.generations)
        generations.generatedKey = true
        var sessionFunctions = sessions.standard
        sessionFunctions["generations"] = { [generations] call in
            let id = try call.string(1)
            let (found, columns) = try context.read("generations") { db in
                (try store.sessions.generations(db, session: id), try generations.spec(db).names)
            }
            return try generations.pushRows(found, columns: columns, call: call)
        }
        sessionFunctions["addGeneration"] = { [generations] call in
            let reader = context.reader(call)
            guard lua_type(call.state, 1) == LUA_TTABLE else { throw call.typeError(1, expected: "table") }
            let (record, columns) = try context.write("generations") { db -> (GenerationRecord, [String]) in
                let spec = try generations.spec(db)
                var fields = try reader.fields(argument: 1, spec: spec)
                if fields["sequence_number"] == nil, let session = fields["session_id"] {
                    let next = (try Int.fetchOne(db, sql: "SELECT max(sequence_number) FROM generations WHERE session_id = ?",
                                                 arguments: [session]) ?? 0) + 1
                    fields["sequence_number"] = next.databaseValue
                }
                let complete = try generations.newRowFields(db, fields, spec: spec, call: call, argument: 1)
                let record = try store.sessions.generations.makeRecord(db, fields: complete)
                return (try store.sessions.addGeneration(db, record), spec.names)
            }
            return try generations.pushRow(record, columns: columns, call: call)
        }
        runtime.register(module: "sessions", sessionFunctions)

        // telemetry
        let telemetry = RecordTableFunctions(context: context, records: store.telemetry.records)
        var telemetryFunctions = telemetry.standard
        telemetryFunctions["insertMany"] = { [telemetry] call in
            try insertMany(call, context: context, telemetry: telemetry, store: store)
        }
        telemetryFunctions["counts"] = { call in
            let since = try call.optionalNumber(1).map { Date(timeIntervalSince1970: $0) }
            let counts = try context.read("telemetry") { db in try store.telemetry.countsByEvent(db, since: since) }
            let rows = StoreValue.array(counts.map { .object([.init("event", .text($0.event)), .init("count", .integer(Int64($0.count)))]) })
            context.pusher(call).push(rows, asRows: true, columns: ["event", "count"])
            return 1
        }
        runtime.register(module: "telemetry", telemetryFunctions)
    }

    /// `telemetry.insertMany(rows)`: one transaction, the core's batched
    /// insert (through GRDB during a dry run, so the rows are counted).
    static func insertMany(_ call: LuaCall, context: RepositoryContext, telemetry: RecordTableFunctions<TelemetryRecord>,
                           store: Store) throws -> Int32 {
        let state = call.state
        guard lua_type(state, 1) == LUA_TTABLE else { throw call.typeError(1, expected: "table") }
        let reader = context.reader(call)
        let count = lua_rawlen(state, 1)
        let inserted = try context.write("telemetry") { db -> Int in
            let spec = try telemetry.spec(db)
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
                if let id = fields["id"], !id.isNull {
                    throw call.argumentError(1, "field '\(prefix)id': ids are given by the database")
                }
                guard let event = fields["event"].flatMap(String.fromDatabaseValue) else {
                    throw call.argumentError(1, "missing field '\(prefix)event' (telemetry needs: event)")
                }
                var item = TelemetryRepository.Event(event: event, properties: fields["properties"].flatMap(String.fromDatabaseValue),
                                                     sessionId: fields["session_id"].flatMap(String.fromDatabaseValue), createdAt: now)
                if let date = fields["created_at"].flatMap(Double.fromDatabaseValue) { item.createdAt = date }
                events.append(item)
            }
            // Counted (a dry run, a chunk): through GRDB, whose observer counts.
            if context.database.isCountingChanges {
                for event in events {
                    var record = TelemetryRecord(event: event.event, properties: event.properties.map(JSONText.init),
                                                 sessionId: event.sessionId, createdAt: Date(timeIntervalSince1970: event.createdAt))
                    try record.insert(db)
                }
            } else {
                try store.telemetry.insertBatch(db, events)
            }
            return events.count
        }
        return call.results(.integer(Int64(inserted)))
    }
}
