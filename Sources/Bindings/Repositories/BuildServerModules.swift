import CLuaShim
import Foundation
import LuaRuntime
import Store

/// The build server's repositories in Lua: `projects`, `schemes`,
/// `builds`, `logs` (build logs) and `crashes` (crash logs).
///
/// ```lua
/// projects.insert{ bundleIdentifier = "com.example.app", name = "App", gitRepositoryURL = "/srv/repos/app" }
/// local s = schemes.insert{ projectBundleIdentifier = "com.example.app", name = "Release", platforms = {"ios"} }
/// local b = builds.create(s.id, "1.4.0")                 -- queued, next build number
/// builds.update(b.id, { status = "running", startDate = os.time() })
/// for _, b in ipairs(builds.list{ where = { status = "running" }, order = "createdAt desc", limit = 10 }) do … end
/// builds.latest("com.example.app", 3)
/// schemes.list("com.example.app")                        -- a project's schemes in order
/// logs.tail(b.id, 20)                                    -- the last 20 lines, oldest first
/// projects.delete("com.example.app", { cascade = true }) -- with its builds
/// ```
///
/// The functions are the same on SQLite and PostgreSQL: they are written
/// once over a ``RepositoryEngine`` and Store's rules.
enum BuildServerModules {
    static func install(in session: OpshSession) {
        install(engine: SessionRepositories(session: session), runtime: session.runtime)
    }

    static func install<Engine: RepositoryEngine>(engine context: Engine, runtime: LuaRuntime) {
        // projects
        var projects = RecordTableFunctions(context: context, records: RecordRepository<ProjectRecord>())
        projects.table.derive = { fields in
            if fields["displayName"] == nil, let name = fields["name"] { fields["displayName"] = name }
        }
        var projectFunctions = projects.standard
        projectFunctions["delete"] = { [projects] call in
            try projects.delete(call, options: ["cascade"]) { db, key, flags in
                try ProjectRepository().delete(db, key.textValue ?? "", cascade: flags["cascade"] == true)
            }
        }
        runtime.register(module: "projects", projectFunctions)

        // schemes
        var schemes = RecordTableFunctions(context: context, records: RecordRepository<SchemeRecord>())
        schemes.table.generatedKey = true
        var schemeFunctions = schemes.standard
        schemeFunctions["list"] = { [schemes] call in
            guard lua_type(call.state, 1) == LUA_TSTRING else { return try schemes.list(call) }
            let project = try call.string(1)
            return try schemes.pushList(SchemeRepository.listRequest(project: project), call: call)
        }
        schemeFunctions["delete"] = { [schemes] call in
            try schemes.delete(call, options: ["cascade"]) { db, key, flags in
                try SchemeRepository().delete(db, key.textValue ?? "", cascade: flags["cascade"] == true)
            }
        }
        runtime.register(module: "schemes", schemeFunctions)

        // builds
        var builds = RecordTableFunctions(context: context, records: RecordRepository<BuildRecord>())
        builds.table.generatedKey = true
        var buildFunctions = builds.standard
        buildFunctions["create"] = { [builds] call in
            let scheme = try call.string(1)
            let version = try call.string(2)
            let id = try context.write("builds") { db in try BuildRepository().create(db, scheme: scheme, version: version) }
            return try builds.pushRow(key: .text(id), call: call)
        }
        buildFunctions["latest"] = { call in
            let project = try call.string(1)
            let limit = try call.optionalInteger(2) ?? 10
            guard limit >= 0 else { throw call.argumentError(2, "a count of 0 or more expected, got \(limit)") }
            let (sql, arguments) = BuildRepository.latestSQL(project: project, limit: Int(clamping: limit))
            return try context.run(sql, arguments, shape: .rows, call: call)
        }
        buildFunctions["delete"] = { [builds] call in
            try builds.delete(call, options: []) { db, key, _ in
                try BuildRepository().delete(db, key.textValue ?? "")
            }
        }
        runtime.register(module: "builds", buildFunctions)

        // logs
        var logs = RecordTableFunctions(context: context, records: RecordRepository<BuildLogRecord>())
        logs.table.generatedKey = true
        var logFunctions = logs.standard
        logFunctions["tail"] = { call in
            let build = try call.string(1)
            let count = try call.optionalInteger(2) ?? 20
            guard count >= 0 else { throw call.argumentError(2, "a count of 0 or more expected, got \(count)") }
            let flags = try context.reader(call).flags(argument: 3, allowed: ["debug"])
            let (sql, arguments) = BuildLogRepository.tailSQL(context.dialect, build: build, count: Int(clamping: count),
                                                              includeDebug: flags["debug"] ?? true)
            return try context.run(sql, arguments, shape: .rows, call: call)
        }
        runtime.register(module: "logs", logFunctions)

        // crashes
        var crashes = RecordTableFunctions(context: context, records: RecordRepository<CrashLogRecord>())
        crashes.table.generatedKey = true
        runtime.register(module: "crashes", crashes.standard)
    }
}
