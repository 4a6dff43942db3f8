import CLuaShim
import Git
import LuaRuntime
import Store

/// The `git` module: what a repository offers to build.
///
/// ```lua
/// local versions, skipped = git.versions("/srv/repos/app")   -- or a URL (ls-remote)
/// for _, v in ipairs(versions) do print(v.tag, v.version, v.commit, v.prerelease) end
/// print(table.concat(skipped, ", "))                          --> latest, release-foo
/// for _, b in ipairs(git.branches("/srv/repos/app")) do print(b.name, b.commit, b.remote, b.current) end
/// git.versions("https://git.example.com/app.git", { timeout = 10 })  -- seconds a remote may take (60)
/// ```
///
/// `git.versions` lists the tags that are semantic versions (an optional
/// `v` prefix), oldest first by semver precedence (`1.9.0` < `1.10.0`,
/// `2.0.0-beta.1` < `2.0.0`); its second result names the tags that are not
/// versions. `version` is the normalized text (no `v`). `git.branches` lists
/// local and remote-tracking branches (a remote location: its branches, its
/// HEAD branch current). Both return `opsh.rows`, so the shell prints
/// them as tables. A missing path, a folder that is not a repository or a
/// failing git raises an error with git's own message.
///
/// Git can always be stopped: Ctrl-C, SIGTERM and `--timeout` stop it at
/// once (with every process it started), and a remote that does not
/// answer within `timeout` seconds is given up, saying so.
enum GitModule {
    static func install(in session: OpshSession) {
        install(runtime: session.runtime, rowShapes: session.rowShapes)
    }

    /// Git needs nothing of the database: the same module on every engine.
    static func install(runtime: LuaRuntime, rowShapes: RowShapes) {
        runtime.register(module: "git", [
            // Unowned: the runtime holds these closures.
            "versions": { [unowned runtime] call in
                let location = try call.string(1)
                let git = try git(call, runtime: runtime)
                let (versions, skipped) = try masked { () throws(GitError) in try git.versions(location) }
                LuaRows(rowShapes: rowShapes, state: call.state).push(
                    columns: ["tag", "version", "commit", "prerelease"], key: "git.versions",
                    rows: versions.map { tag in
                        [.string(tag.name), .string(tag.version.description), .string(tag.commit),
                         .boolean(tag.version.isPrerelease)]
                    })
                call.stack.push(.array(skipped.map { .string($0) }))
                return 2
            },
            "branches": { [unowned runtime] call in
                let location = try call.string(1)
                let git = try git(call, runtime: runtime)
                let branches = try masked { () throws(GitError) in try git.branches(location) }
                LuaRows(rowShapes: rowShapes, state: call.state).push(
                    columns: ["name", "commit", "remote", "current"], key: "git.branches",
                    rows: branches.map { branch in
                        [.string(branch.name), .string(branch.commit), .boolean(branch.isRemote),
                         .boolean(branch.isCurrent)]
                    })
                return 1
            },
        ])
    }

    /// `body`, its git errors with a URL's credentials masked (they name
    /// the location and git's command line).
    private static func masked<T>(_ body: () throws(GitError) -> T) throws -> T {
        do {
            return try body()
        } catch {
            throw LuaCallError.message(SecretMask.maskingURLCredentials(in: error.description))
        }
    }

    /// Git for one call: stopped by the runtime's interrupts, with the
    /// network timeout of the call's options (`{ timeout = seconds }`).
    private static func git(_ call: LuaCall, runtime: LuaRuntime) throws -> Git {
        var git = Git()
        if !call.isNoneOrNil(2) {
            let options = try call.table(2)
            for name in options.keys.sorted() where name != "timeout" {
                throw call.argumentError(2, "unknown option '\(name)' (options: timeout)")
            }
            switch options["timeout"] {
            case nil: break
            case let .integer(seconds)? where seconds > 0: git.networkTimeout = Double(seconds)
            case let .number(seconds)? where seconds > 0 && seconds.isFinite: git.networkTimeout = seconds
            case let .integer(seconds)?: throw call.argumentError(2, "option 'timeout' must be a number of seconds > 0, got \(seconds)")
            case let .number(seconds)?: throw call.argumentError(2, "option 'timeout' must be a number of seconds > 0, got \(seconds)")
            case let value?: throw call.argumentError(2, "option 'timeout' must be a number of seconds > 0, got \(value.typeName)")
            }
        }
        let interrupts = InterruptProbe(runtime: runtime)
        git.stopRequest = { interrupts.reason }
        return git
    }
}

/// Whether the runtime was interrupted, asked from the Lua thread while
/// git runs there (Git's stop request is `@Sendable`; it is only ever
/// called on the thread that runs git, which is the Lua thread).
private final class InterruptProbe: @unchecked Sendable {
    let runtime: LuaRuntime

    init(runtime: LuaRuntime) {
        self.runtime = runtime
    }

    var reason: String? {
        switch runtime.interruptRequested {
        case nil: nil
        case .interrupted?: "interrupted"
        case .timeout?: "timed out"
        case .terminated?: "terminated"
        case .exit?: "stopped by os.exit"
        }
    }
}

/// Pushes rows that do not come from SQL (git's tags, branches) with the
/// `db` module's row metatables, so they print as tables and a typo in a
/// field name raises.
struct LuaRows {
    let rowShapes: RowShapes
    let state: OpaquePointer

    /// Pushes one `opsh.rows` array; `rows` hold one value per column
    /// (nil: the field is absent).
    func push(columns: [String], key: String, rows: [[LuaValue]]) {
        _ = lua_checkstack(state, 8)
        let stack = LuaStack(state)
        let holder = rowShapes.push(columns: columns, key: key, state: state)
        lua_createtable(state, Int32(clamping: rows.count), 0)
        for (offset, row) in rows.enumerated() {
            lua_createtable(state, 0, Int32(columns.count))
            for (name, value) in zip(columns, row) where !value.isNil {
                stack.push(value)
                stack.setField(name, at: -2)
            }
            lua_pushvalue(state, holder + 1)
            lua_setmetatable(state, -2)
            lua_rawseti(state, -2, lua_Integer(offset + 1))
        }
        lua_pushvalue(state, holder + 2)
        lua_setmetatable(state, -2)
        // The array in place of the shape's three values.
        lua_rotate(state, holder, 1)
        lua_settop(state, holder)
    }
}
