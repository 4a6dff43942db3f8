import CLuaShim
import Foundation
import LuaRuntime
import Store

/// `migrate`: the schema's migrations, built-in and written in Lua.
///
/// ```lua
/// for _, m in ipairs(migrate.status()) do print(m.id, m.kind, m.state) end
/// migrate.up()                                   -- everything pending
/// migrate.up("003_add_owner")                    -- up to (and with) a target
/// migrate.up{ folder = "db/migrations", target = "003_add_owner" }
/// migrate.folder("db/migrations")                -- the default from now on
/// ```
///
/// A Lua migration is a file of the folder (default: `migrations/` next to
/// the running script) that returns `{ id = "003_add_owner", up =
/// function(db) db.exec(…) end }`. They run after the built-in ones in the
/// order of their ids, each in a transaction of its own (an error rolls it
/// back and stops), and are recorded in `grdb_migrations` as
/// `lua:003_add_owner`, with a checksum of the file in
/// `opsh_lua_migrations`: a file changed after it was applied is refused.
final class MigrationModule {
    unowned let session: any MigrationHost
    /// Set by `migrate.folder(path)`.
    private var folder: String?

    private init(session: any MigrationHost) {
        self.session = session
    }

    static func install(in session: any MigrationHost) {
        let module = MigrationModule(session: session)
        session.runtime.register(module: "migrate", [
            "status": { call in try module.status(call) },
            "up": { call in try module.up(call) },
            "folder": { call in
                if !call.isNoneOrNil(1) { module.folder = try call.string(1) }
                let folder = module.folder ?? module.defaultFolder(call)
                return call.results(folder.map(LuaValue.string) ?? .nil)
            },
        ])
    }

    // MARK: Functions

    private func status(_ call: LuaCall) throws -> Int32 {
        let options = try Options(call, function: "status", allowTarget: false)
        let migrations = try load(folder: options.folder, call: call)
        let statuses = try session.migrationStatus(migrations.map(\.migration))
        let rows = StoreValue.array(statuses.map { status in
            .object([
                .init("id", .text(status.name)),
                .init("kind", .text(status.isBuiltIn ? "builtin" : "lua")),
                .init("state", .text(status.state.rawValue)),
                .init("file", status.source.map(StoreValue.text) ?? .null),
                .init("applied_at", status.appliedAt.map(StoreValue.real) ?? .null),
            ])
        })
        StoreValuePusher(rowShapes: session.rowShapes, state: call.state).push(rows, asRows: true)
        return 1
    }

    private func up(_ call: LuaCall) throws -> Int32 {
        let options = try Options(call, function: "up", allowTarget: true)
        if let transaction = session.openTransactionForMigration {
            throw LuaCallError.message("migrate.up cannot run inside \(transaction): each migration runs in a transaction of its own")
        }
        if session.isReadOnly {
            throw LuaCallError.message("migrate.up cannot migrate a database opened read-only")
        }
        let migrations = try load(folder: options.folder, call: call)
        do {
            let applied = try session.migrate(migrations.map(\.migration), upTo: options.target)
            return call.results(.array(applied.map { .string(Self.display($0)) }))
        } catch let error as ExternalMigrationError {
            throw LuaCallError.message(error.message)
        }
    }

    static func display(_ identifier: String) -> String {
        identifier.hasPrefix(ExternalMigrations.prefix)
            ? String(identifier.dropFirst(ExternalMigrations.prefix.count)) : identifier
    }

    // MARK: Options

    private struct Options {
        var folder: String?
        var target: String?

        /// `()`, `(target)` (up only) or `{ folder = …, target = … }`.
        init(_ call: LuaCall, function: String, allowTarget: Bool) throws {
            switch call.type(1) {
            case .none, .nil: break
            case .string where allowTarget: target = try call.string(1)
            case .table:
                for (name, value) in try call.table(1) {
                    switch (name, value) {
                    case let ("folder", .string(text)): folder = text
                    case let ("target", .string(text)) where allowTarget: target = text
                    case ("folder", _):
                        throw call.argumentError(1, "'\(name)' must be a string, got \(value.typeName)")
                    case ("target", _) where allowTarget:
                        throw call.argumentError(1, "'\(name)' must be a string, got \(value.typeName)")
                    default:
                        throw call.argumentError(1, "unknown field '\(name)' (expected \(allowTarget ? "folder, target" : "folder"))")
                    }
                }
            default:
                throw call.typeError(1, expected: allowTarget ? "table or string" : "table")
            }
        }
    }

    // MARK: Loading the folder

    struct Loaded {
        let migration: ExternalMigration
    }

    /// `migrations/` next to the running script (the outermost chunk
    /// loaded from a file), if it exists.
    func defaultFolder(_ call: LuaCall) -> String? {
        var level: Int32 = 0
        var script: String?
        var record = lua_Debug()
        while lua_getstack(call.state, level, &record) != 0 {
            if lua_getinfo(call.state, "S", &record) != 0, let source = record.source,
               source.pointee == CChar(UInt8(ascii: "@")) {
                script = String(cString: source + 1)
            }
            level += 1
        }
        guard let script else { return nil }
        let directory = (script as NSString).deletingLastPathComponent
        let folder = directory.isEmpty ? "migrations" : directory + "/migrations"
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: folder, isDirectory: &isDirectory), isDirectory.boolValue else {
            return nil
        }
        return folder
    }

    /// Loads every `*.lua` file of the folder: runs it and checks that it
    /// returns `{ id = "…", up = function(db) … end }`.
    private func load(folder explicit: String?, call: LuaCall) throws -> [Loaded] {
        // `--sandbox`: no files, so only the built-in migrations.
        if session.isSandboxed {
            if explicit != nil { throw LuaCallError.message("migrations from files are not available in --sandbox") }
            return []
        }
        guard let folder = explicit ?? folder ?? defaultFolder(call) else { return [] }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: folder, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw LuaCallError.message("no migrations folder at \(folder)")
        }
        let names = try FileManager.default.contentsOfDirectory(atPath: folder)
            .filter { $0.hasSuffix(".lua") }
            .sorted()
        // The `db` module, handed to each `up`.
        call.stack.pushGlobal("db")
        let dbModule = call.stack.reference(at: -1)
        call.stack.pop()
        let host = UncheckedSendable(session)
        var loaded: [Loaded] = []
        for name in names {
            let path = folder.hasSuffix("/") ? folder + name : folder + "/" + name
            guard let data = FileManager.default.contents(atPath: path) else {
                throw LuaCallError.message("cannot read \(path)")
            }
            let bytes = [UInt8](data)
            let (id, up) = try Self.run(path: path, bytes: bytes, call: call)
            let context = UncheckedSendable((call, up, dbModule))
            let migration = ExternalMigration(
                name: id, checksum: ExternalMigrations.checksum(bytes), source: path,
                migrate: { db in
                    let (call, up, dbModule) = context.value
                    do {
                        try host.value.runMigration(on: db) {
                            _ = try call.call(up, [.reference(dbModule)])
                        }
                    } catch let error as LuaError {
                        if error.endsTheRun { throw error }
                        throw ExternalMigrationError("migration '\(id)' failed and was rolled back: \(error.message)")
                    }
                })
            loaded.append(Loaded(migration: migration))
        }
        return loaded
    }

    /// Compiles and runs a migration file on the calling Lua thread.
    private static func run(path: String, bytes: [UInt8], call: LuaCall) throws -> (String, LuaReference) {
        let status = bytes.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { chars in
                opsh_load(call.state, chars.baseAddress, chars.count, "@" + path, "t")
            }
        }
        guard status == LUA_OK else {
            let message = call.stack.string(at: -1) ?? "cannot load \(path)"
            call.stack.pop()
            throw LuaCallError.message(message)
        }
        let chunk = call.stack.reference(at: -1)
        call.stack.pop()
        let results = try call.call(chunk, [], results: 1)
        let shape = "\(path) must return { id = \"…\", up = function(db) … end }"
        guard case let .table(fields)? = results.first else {
            throw LuaCallError.message("\(shape), not \(results.first?.typeName ?? "nothing")")
        }
        var id: String?
        var up: LuaReference?
        for (key, value) in fields {
            switch (key.stringValue, value) {
            case let ("id", .string(text)): id = text
            case let ("up", .reference(function)) where function.typeName == "function": up = function
            case ("id", _), ("up", _):
                throw LuaCallError.message("\(shape): '\(key.stringValue ?? "")' is a \(value.typeName)")
            default:
                throw LuaCallError.message("\(shape): unknown field '\(key.stringValue ?? key.typeName)'")
            }
        }
        guard let id, let up else {
            throw LuaCallError.message("\(shape): '\(id == nil ? "id" : "up")' is missing")
        }
        return (id, up)
    }
}

/// What `migrate` needs of a session, whatever its engine.
protocol MigrationHost: AnyObject {
    var runtime: LuaRuntime { get }
    var rowShapes: RowShapes { get }
    var isSandboxed: Bool { get }
    var isReadOnly: Bool { get }
    /// The open transaction's name, when one is (migrations run in their own).
    var openTransactionForMigration: String? { get }
    func migrationStatus(_ external: [ExternalMigration]) throws -> [ExternalMigrations.Status]
    func migrate(_ external: [ExternalMigration], upTo target: String?) throws -> [String]
    /// Runs a Lua migration's `up` with the session's `db` calls on the
    /// migrating connection (`database`: SQLite's migrator's; nil where the
    /// session's own connection migrates).
    func runMigration(on database: StoreDatabase?, _ body: () throws -> Void) throws
}

extension OpshSession: MigrationHost {
    var isReadOnly: Bool { database.isReadOnly }
    var openTransactionForMigration: String? { database.transactionRefusingMigrations }

    func migrationStatus(_ external: [ExternalMigration]) throws -> [ExternalMigrations.Status] {
        try database.migrationStatus(external)
    }

    func migrate(_ external: [ExternalMigration], upTo target: String?) throws -> [String] {
        try database.migrate(external, upTo: target)
    }

    func runMigration(on migrating: StoreDatabase?, _ body: () throws -> Void) throws {
        try database.runMigration(on: migrating, body)
    }
}
