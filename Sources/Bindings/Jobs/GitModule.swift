import CLuaShim
import Git
import LuaRuntime

/// The `git` module: what a repository offers to build.
///
/// ```lua
/// local versions, skipped = git.versions("/srv/repos/app")   -- or a URL (ls-remote)
/// for _, v in ipairs(versions) do print(v.tag, v.version, v.commit, v.prerelease) end
/// print(table.concat(skipped, ", "))                          --> latest, release-foo
/// for _, b in ipairs(git.branches("/srv/repos/app")) do print(b.name, b.commit, b.remote, b.current) end
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
enum GitModule {
    static func install(in session: OpshSession) {
        install(runtime: session.runtime, rowShapes: session.sql.rowShapes)
    }

    /// Git needs nothing of the database: the same module on every engine.
    static func install(runtime: LuaRuntime, rowShapes: RowShapes) {
        runtime.register(module: "git", [
            "versions": { call in
                let location = try call.string(1)
                let git = Git()
                let (versions, skipped) = try git.versions(location)
                LuaRows(rowShapes: rowShapes, state: call.state).push(
                    columns: ["tag", "version", "commit", "prerelease"], key: "git.versions",
                    rows: versions.map { tag in
                        [.string(tag.name), .string(tag.version.description), .string(tag.commit),
                         .boolean(tag.version.isPrerelease)]
                    })
                call.stack.push(.array(skipped.map { .string($0) }))
                return 2
            },
            "branches": { call in
                let location = try call.string(1)
                let branches = try Git().branches(location)
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
