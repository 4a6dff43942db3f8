import CLuaShim
import Foundation
import Jobs
import LuaRuntime
import Store
import TextCodec

/// The `jobs` module: builds run by this opsh.
///
/// ```lua
/// local b = jobs.start{ scheme = schemeId, version = "1.4.0" }  -- create + start; a build row
/// jobs.follow(b.id)                     -- prints its log until it ends (Ctrl-C stops following)
/// local h = jobs.follow(b.id, { background = true })  -- returns at once; lines appear at the prompt
/// local done = jobs.wait(b.id, 600)     -- the final row; raises after 600 s or on Ctrl-C
/// local q = jobs.create{ scheme = schemeId, version = "main" }; jobs.start(q.id)
/// jobs.enqueue{ scheme = schemeId, version = "1.4.0" }  -- queued for `opsh runner`s; a build row
/// jobs.cancel(id)                       -- true, or false when it had ended already
/// jobs.delete(id)                       -- with its logs, crash logs and workspace
/// jobs.list{ status = "running", scheme = schemeId, project = "com.example.app", limit = 10 }
/// jobs.logs(id, { tail = 20, debug = false })   -- log rows, oldest first (cursor, level, content …)
/// jobs.logs(id, { after = cursor })             -- the lines written after a row's cursor
/// jobs.get(id); jobs.crashLogs(id)
/// for _, s in ipairs(jobs.stale()) do jobs.markStale(s.id, "opsh was killed") end
/// jobs.configure{ concurrency = 2, grace = 5, workspaces = "/srv/opsh/ws", keepWorkspaces = 5 }  -- before the first build
/// ```
///
/// One ``JobManager`` per session, made at the first call that needs it;
/// workspaces go to `workspaces/` next to the database file. Builds run
/// only while this opsh runs (see ``JobsShutdown``). Every function that
/// takes a build id also takes a build row (`jobs.wait(b)`).
///
/// The job manager writes builds in transactions of its own, from its own
/// threads, so the functions that make it write or wait for it are refused
/// inside `db.transaction` (the Lua thread holds the only writer there)
/// and in a dry run (which could not roll them back). Reads (`get`,
/// `list`, `logs`, `crashLogs`) work everywhere and see the transaction's
/// own writes.
final class JobsModule {
    static let followTypeName = "opsh.follow"

    let engine: JobsEngine
    // Lazy: its defaults read the environment and the CPU quota, which a
    // script that starts no build should not pay for at start-up.
    private lazy var configuration = JobManager.Configuration()
    private var createdManager: JobManager?
    /// `function(text) print(text) end`: the global `print` of the moment.
    private let defaultPrinter: LuaReference
    /// Background followers still running.
    private var followers: [ObjectIdentifier: BuildFollower] = [:]

    private init(engine: JobsEngine) throws {
        self.engine = engine
        let made = try engine.runtime.execute("return function(text) print(text) end", chunkName: "=(jobs)")
        guard case let .reference(printer)? = made.first else {
            throw LuaError(kind: .runtime, message: "cannot create the jobs printer")
        }
        defaultPrinter = printer
    }

    deinit {
        for follower in followers.values { follower.stop() }
        if let createdManager { JobsShutdown.shutdown(createdManager) }
    }

    /// The session's job manager, made on first use.
    var manager: JobManager {
        get throws {
            if let createdManager { return createdManager }
            var configuration = self.configuration
            // An absolute folder: a database opened as `--db ./x.sqlite` must
            // not put builds in a path relative to wherever they run.
            if let root = configuration.workspaceRoot ?? engine.defaultWorkspaceRoot {
                configuration.workspaceRoot = URL(fileURLWithPath: root).standardizedFileURL.path
            }
            let manager = try engine.makeManager(configuration)
            createdManager = manager
            JobsShutdown.register(manager)
            return manager
        }
    }

    /// On SQLite.
    static func install(in session: OpshSession) throws {
        try install(engine: JobsEngine(session: session))
    }

    static func install(engine: JobsEngine) throws {
        let module = try JobsModule(engine: engine)
        let runtime = engine.runtime
        runtime.register(module: "jobs", [
            "create": { call in try module.create(call) },
            "enqueue": { call in try module.enqueue(call) },
            "start": { call in try module.start(call) },
            "cancel": { call in try module.cancel(call) },
            "delete": { call in try module.delete(call) },
            "wait": { call in try module.wait(call) },
            "follow": { call in try module.follow(call) },
            "get": { call in try module.get(call) },
            "list": { call in try module.list(call) },
            "logs": { call in try module.logs(call) },
            "crashLogs": { call in try module.crashLogs(call) },
            "stale": { call in try module.stale(call) },
            "markStale": { call in try module.markStale(call) },
            "configure": { call in try module.configure(call) },
        ])
        // The follow handle's metatable, created once per state.
        let probe = BuildFollower(buildId: "", includeDebug: false)
        runtime.pushObject(probe, type: followTypeName, methods: [
            "cancel": { call in
                let follower = try call.object(1, as: BuildFollower.self, typeName: followTypeName)
                module.finish(follower)
                return 0
            },
            "active": { call in
                call.results(.boolean(try call.object(1, as: BuildFollower.self, typeName: followTypeName).isActive))
            },
        ], metamethods: [
            "__tostring": { call in
                let follower = try call.object(1, as: BuildFollower.self, typeName: followTypeName)
                return call.results(.string("follow(build \(follower.buildId))\(follower.isActive ? "" : " ended")"))
            },
        ])
        runtime.stack.pop()
    }

    // MARK: - Changing builds

    private func create(_ call: LuaCall) throws -> Int32 {
        let (scheme, version) = try Self.spec(call, 1)
        try refuseInTransaction("create")
        let build = try manager.create(scheme: scheme, version: version)
        return try pushBuild(build.id, call)
    }

    /// A queued build for the runners (`opsh runner`): what `create` does,
    /// under the name that says who runs it. The checks are the same (a
    /// scheme with a build command, a project with a repository).
    private func enqueue(_ call: LuaCall) throws -> Int32 {
        let (scheme, version) = try Self.spec(call, 1)
        try refuseInTransaction("enqueue")
        let build = try manager.create(scheme: scheme, version: version)
        return try pushBuild(build.id, call)
    }

    private func start(_ call: LuaCall) throws -> Int32 {
        let id: String
        if call.type(1) == .table, try Self.isSpec(call, 1) {
            let (scheme, version) = try Self.spec(call, 1)
            try refuseInTransaction("start")
            id = try manager.run(scheme: scheme, version: version).id
        } else {
            id = try Self.buildId(call, 1, expected: "build id, build row or {scheme=, version=}")
            try refuseInTransaction("start")
            try manager.start(id)
        }
        let results = try pushBuild(id, call)
        let shownId = Self.luaLiteral(id)
        PromptSummary.attach(to: call.state) { number in
            "build #\(number) started — jobs.follow(\(shownId)) shows its output, jobs.cancel(\(shownId)) stops it"
        }
        return results
    }

    /// A build id as Lua source the operator can type again.
    static func luaLiteral(_ id: String) -> String {
        "\"" + VisibleText.of(id).replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
    }

    private func cancel(_ call: LuaCall) throws -> Int32 {
        let id = try Self.buildId(call, 1)
        try refuseInTransaction("cancel")
        return call.results(.boolean(try manager.cancel(id)))
    }

    private func delete(_ call: LuaCall) throws -> Int32 {
        let id = try Self.buildId(call, 1)
        try refuseInTransaction("delete")
        try manager.delete(id)
        return call.results(true)
    }

    private func markStale(_ call: LuaCall) throws -> Int32 {
        let id = try Self.buildId(call, 1)
        let reason = try call.string(2)
        let options = try Self.options(call, 3, allowed: ["force"])
        let force = try Self.flag(call, 3, options, "force")
        try refuseInTransaction("markStale")
        let build = try manager.markStale(id, reason: reason, force: force)
        return try pushBuild(build.id, call)
    }

    private func configure(_ call: LuaCall) throws -> Int32 {
        let options = try Self.options(call, 1, allowed: ["concurrency", "grace", "workspaces", "keepWorkspaces"], required: true)
        var configuration = self.configuration
        if let concurrency = try Self.integer(call, 1, options, "concurrency", minimum: 1) {
            configuration.maxConcurrentJobs = Int(concurrency)
        }
        if let kept = try Self.integer(call, 1, options, "keepWorkspaces", minimum: 0) {
            configuration.keepWorkspaces = Int(clamping: kept)
        }
        if let grace = try Self.seconds(call, 1, options, "grace") {
            configuration.cancelGracePeriod = grace
        }
        switch options["workspaces"] {
        case nil: break
        case let .string(path)? where !path.isEmpty: configuration.workspaceRoot = path
        case let value?: throw call.argumentError(1, "option 'workspaces' must be a folder path, got \(value.typeName)")
        }
        guard createdManager == nil else {
            throw LuaCallError.message("jobs.configure must come before the session's first build: its job manager exists already")
        }
        self.configuration = configuration
        return 0
    }

    // MARK: - Waiting

    private func wait(_ call: LuaCall) throws -> Int32 {
        let id = try Self.buildId(call, 1)
        let timeout = try call.optionalNumber(2)
        if let timeout, !(timeout >= 0) { throw call.argumentError(2, "a number of seconds >= 0 expected") }
        try refuseInTransaction("wait")
        let manager = try self.manager
        let deadline = timeout.map { Date().addingTimeInterval($0) }
        while true {
            try checkInterrupt()
            var slice = 0.05
            if let deadline {
                slice = min(slice, deadline.timeIntervalSinceNow)
                if slice <= 0 { throw JobError.timedOut(id: id, seconds: timeout ?? 0) }
            }
            do {
                let build = try manager.wait(id, timeout: slice)
                return try pushBuild(build.id, call)
            } catch let error as JobError {
                guard case .timedOut = error else { throw error }
            }
        }
    }

    /// `jobs.follow(id [, {background=, debug=, tail=, print=}])`.
    private func follow(_ call: LuaCall) throws -> Int32 {
        let id = try Self.buildId(call, 1)
        let options = try Self.options(call, 2, allowed: ["background", "debug", "tail", "print"])
        let background = try Self.flag(call, 2, options, "background")
        let includeDebug = try Self.flag(call, 2, options, "debug")
        let tail = try Self.integer(call, 2, options, "tail", minimum: 0)
        var printer = defaultPrinter
        switch options["print"] {
        case nil: break
        case let .reference(function)? where function.typeName == "function": printer = function
        case let value?: throw call.argumentError(2, "option 'print' must be a function, got \(value.typeName)")
        }
        try refuseInTransaction("follow")

        // Where to start, and whether there is anything to follow.
        let (build, start) = try engine.followStart(id, tail: tail.map { Int(clamping: $0) }, includeDebug: includeDebug)
        guard let build else { throw JobError.unknownBuild(id) }
        let manager = try self.manager
        if build.status == .queued, !manager.isHandling(id) { throw JobError.notStarted(id) }

        let follower = BuildFollower(buildId: id, includeDebug: includeDebug)
        follower.last = start
        follower.printer = printer
        if !background {
            return try followHere(follower, number: build.buildNumber, call)
        }
        let subscription = engine.subscribe { [unowned self] event in
            try self.deliver(event as? FollowEvent, to: follower)
        }
        follower.subscription = subscription
        followers[ObjectIdentifier(follower)] = follower
        follower.startPolling(read: engine.pageReader(manager), events: engine.events, subscription: subscription)
        call.host.pushObject(follower, type: Self.followTypeName, methods: [:], on: call.state)
        return 1
    }

    /// Prints the log on the calling thread until the build ends; returns
    /// its final row.
    private func followHere(_ follower: BuildFollower, number: Int, _ call: LuaCall) throws -> Int32 {
        // An interrupt while following (here, or in the printer's Lua) stops
        // only the printing: the build is the job manager's and goes on.
        let id = VisibleText.of(follower.buildId)
        engine.runtime.interruptNote = "stopped following; build #\(number) still runs (jobs.cancel(\"\(id)\") stops it)"
        do {
            let results = try printUntilTheEnd(follower, call)
            engine.runtime.interruptNote = nil
            return results
        } catch {
            if engine.runtime.interruptRequested == nil { engine.runtime.interruptNote = nil }
            throw error
        }
    }

    private func printUntilTheEnd(_ follower: BuildFollower, _ call: LuaCall) throws -> Int32 {
        let manager = try self.manager
        while true {
            try checkInterrupt()
            let page = try follower.nextPage { after, limit in
                try engine.logPage(manager, build: follower.buildId, after: after, limit: limit,
                                   includeDebug: follower.includeDebug)
            }
            for text in page.texts {
                _ = try call.call(follower.printer!, [.string(text)])
            }
            if page.deleted { throw LuaCallError.message("build \(follower.buildId) was deleted while it was followed") }
            if let ended = page.ended {
                _ = try call.call(follower.printer!, [.string(ended)])
                let results = try pushBuild(follower.buildId, call)
                // The prompt shows the closing line once: printed above,
                // or shown now when a print function of the script's took it.
                let printedHere = follower.printer === defaultPrinter
                PromptSummary.attach(to: call.state) { _ in printedHere ? "" : ended }
                return results
            }
            if page.texts.isEmpty {
                for _ in 0..<2 {
                    try checkInterrupt()
                    usleep(25_000)
                }
            }
        }
    }

    /// A background follower's event, on the Lua thread.
    private func deliver(_ event: FollowEvent?, to follower: BuildFollower) throws {
        guard let event, follower.isActive, let printer = follower.printer else { return }
        switch event {
        case let .lines(texts):
            for text in texts { try engine.runtime.call(printer, [.string(text)]) }
        case let .ended(text):
            finish(follower)
            try engine.runtime.call(printer, [.string(text)])
        case let .failed(message):
            finish(follower)
            throw LuaCallError.message("jobs.follow(\(follower.buildId)): \(message)")
        }
    }

    /// Stops a background follower: no more lines are printed.
    fileprivate func finish(_ follower: BuildFollower) {
        follower.stop()
        if let subscription = follower.subscription { engine.unsubscribe(subscription) }
        follower.subscription = nil
        followers[ObjectIdentifier(follower)] = nil
    }

    // MARK: - Reading

    private func get(_ call: LuaCall) throws -> Int32 {
        try pushBuild(try Self.buildId(call, 1), call)
    }

    private func list(_ call: LuaCall) throws -> Int32 {
        let options = try Self.options(call, 1, allowed: ["status", "scheme", "project", "limit"])
        var status: BuildStatus?
        switch options["status"] {
        case nil: break
        case let .string(text)? where BuildStatus(rawValue: text) != nil:
            status = BuildStatus(rawValue: text)
        case let value?:
            let shown = value.stringValue.map { "'\($0)'" } ?? value.typeName
            throw call.argumentError(1, "option 'status' must be one of \(BuildStatus.allCases.map(\.rawValue).joined(separator: ", ")), got \(shown)")
        }
        var named: [String: String] = [:]
        for option in ["scheme", "project"] {
            switch options[option] {
            case nil: break
            case let .string(text)?: named[option] = text
            case let value?:
                throw call.argumentError(1, "option '\(option)' must be a string, got \(value.typeName)")
            }
        }
        let limit = try Self.integer(call, 1, options, "limit", minimum: 0) ?? 100
        return try engine.run({ _ in
            BuildJobStatements.list(status: status, schemeId: named["scheme"], projectId: named["project"], limit: Int(clamping: limit))
        }, call: call)
    }

    private func logs(_ call: LuaCall) throws -> Int32 {
        let id = try Self.buildId(call, 1)
        let options = try Self.options(call, 2, allowed: ["tail", "debug", "after", "limit"])
        let includeDebug = try Self.flag(call, 2, options, "debug")
        let tail = try Self.integer(call, 2, options, "tail", minimum: 0)
        let after = try Self.integer(call, 2, options, "after", minimum: 0)
        let limit = try Self.integer(call, 2, options, "limit", minimum: 0)
        if tail != nil, after != nil || limit != nil {
            throw call.argumentError(2, "give either tail, or after and limit")
        }
        let lines = try engine.logs(id, tail: tail.map { Int(clamping: $0) }, after: after,
                                    limit: limit.map { Int(clamping: $0) }, includeDebug: includeDebug)
        push(.array(lines.map(Self.logRow)), call, columns: Self.logColumns)
        return 1
    }

    static let logColumns = ["cursor", "id", "buildId", "level", "category", "content", "createdAt"]

    static func logRow(_ line: BuildLogLine) -> StoreValue {
        let record = line.record
        return .object([
            .init("cursor", .integer(line.cursor)), .init("id", .text(record.id)), .init("buildId", .text(record.buildId)),
            .init("level", .text(record.level.rawValue)), .init("category", .text(record.category)),
            .init("content", .text(record.content)), .init("createdAt", .real(record.createdAt.timeIntervalSince1970)),
        ])
    }

    private func crashLogs(_ call: LuaCall) throws -> Int32 {
        let id = try Self.buildId(call, 1)
        try requireBuild(id, call)
        return try engine.run({ _ in BuildJobStatements.crashLogs(build: id) }, call: call)
    }

    private func stale(_ call: LuaCall) throws -> Int32 {
        try refuseInTransaction("stale")
        let ids = try manager.staleBuilds().map(\.id)
        return try engine.run({ BuildJobStatements.builds(ids: ids, dialect: $0) }, call: call)
    }

    // MARK: - Helpers

    private func push(_ value: StoreValue, _ call: LuaCall, columns: [String]? = nil) {
        StoreValuePusher(rowShapes: engine.rowShapes, state: call.state).push(value, asRows: true, columns: columns)
    }

    /// Refuses an id without a build.
    private func requireBuild(_ id: String, _ call: LuaCall) throws {
        _ = try engine.run({ _ in BuildJobStatements.build(id) }, call: call)
        defer { lua_settop(call.state, 0) }
        if lua_type(call.state, -1) == LUA_TNIL { throw JobError.unknownBuild(id) }
    }

    /// Pushes a build's row as `query(key.build(id))` gives it.
    private func pushBuild(_ id: String, _ call: LuaCall) throws -> Int32 {
        let results = try engine.run({ _ in BuildJobStatements.build(id) }, call: call)
        if lua_type(call.state, -1) == LUA_TNIL { throw JobError.unknownBuild(id) }
        return results
    }

    private func checkInterrupt() throws {
        if let reason = engine.runtime.interruptRequested {
            throw LuaCallError.message(reason == .timeout ? "timed out" : "interrupted")
        }
    }

    /// Functions that make the job manager write or wait for it cannot run
    /// while the Lua thread holds the writer.
    private func refuseInTransaction(_ name: String) throws {
        if let refusal = try engine.transactionRefusal(name) { throw LuaCallError.message(refusal) }
    }

    // MARK: Arguments

    /// A build id: a string, or a row with an `id` field. One with a NUL
    /// byte is refused: the job manager's SQLite statements would end it
    /// there and reach another build (issue 24).
    static func buildId(_ call: LuaCall, _ index: Int32, expected: String = "build id or build row") throws -> String {
        let id: String
        switch call.type(index) {
        case .string:
            id = try call.string(index)
        case .table:
            // Raw reads: no row metatable runs in this Swift frame.
            guard case let .string(given)? = try call.table(index)["id"] else {
                throw call.argumentError(index, "\(expected) expected, got a table without an id")
            }
            id = given
        default:
            throw call.typeError(index, expected: expected)
        }
        if let offset = TextBytes.firstNUL(id.utf8) {
            throw call.argumentError(index, "build id '\(TextBytes.visible(id))' contains a NUL byte (byte \(offset + 1)); no build's id has one")
        }
        return id
    }

    static func isSpec(_ call: LuaCall, _ index: Int32) throws -> Bool {
        let fields = try call.table(index)
        return fields["scheme"] != nil || fields["version"] != nil || fields["id"] == nil
    }

    /// `{scheme = id, version = "1.4.0"}`.
    static func spec(_ call: LuaCall, _ index: Int32) throws -> (scheme: String, version: String) {
        let fields = try call.table(index)
        for name in fields.keys.sorted() where name != "scheme" && name != "version" {
            throw call.argumentError(index, "unknown field '\(name)' (fields: scheme, version)")
        }
        guard case let .string(scheme)? = fields["scheme"] else {
            throw call.argumentError(index, "field 'scheme' must be a scheme id, got \(fields["scheme"]?.typeName ?? "nil")")
        }
        guard case let .string(version)? = fields["version"] else {
            throw call.argumentError(index, "field 'version' must be a tag, branch or commit name, got \(fields["version"]?.typeName ?? "nil")")
        }
        return (scheme, version)
    }

    /// An options table (absent: none); unknown names are refused.
    static func options(_ call: LuaCall, _ index: Int32, allowed: [String], required: Bool = false) throws -> [String: LuaValue] {
        if !required, call.isNoneOrNil(index) { return [:] }
        let options = try call.table(index)
        for name in options.keys.sorted() where !allowed.contains(name) {
            throw call.argumentError(index, "unknown option '\(name)' (options: \(allowed.joined(separator: ", ")))")
        }
        return options
    }

    static func flag(_ call: LuaCall, _ index: Int32, _ options: [String: LuaValue], _ name: String) throws -> Bool {
        switch options[name] {
        case nil: return false
        case let .boolean(flag)?: return flag
        case let value?: throw call.argumentError(index, "option '\(name)' must be a boolean, got \(value.typeName)")
        }
    }

    static func integer(_ call: LuaCall, _ index: Int32, _ options: [String: LuaValue], _ name: String,
                        minimum: Int64) throws -> Int64? {
        switch options[name] {
        case nil: return nil
        case let .integer(number)? where number >= minimum: return number
        case let .number(number)? where number == number.rounded() && number >= Double(minimum) && number < 1e15:
            return Int64(number)
        case let value?:
            throw call.argumentError(index, "option '\(name)' must be an integer >= \(minimum), got \(Self.show(value))")
        }
    }

    static func seconds(_ call: LuaCall, _ index: Int32, _ options: [String: LuaValue], _ name: String) throws -> Double? {
        switch options[name] {
        case nil: return nil
        case let .integer(number)? where number >= 0: return Double(number)
        case let .number(number)? where number >= 0 && number.isFinite: return number
        case let value?:
            throw call.argumentError(index, "option '\(name)' must be a number of seconds >= 0, got \(Self.show(value))")
        }
    }

    private static func show(_ value: LuaValue) -> String {
        switch value {
        case let .integer(number): return String(number)
        case let .number(number): return String(number)
        default: return value.typeName
        }
    }
}
