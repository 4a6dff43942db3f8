import LuaRuntime

/// `opsh.*` about the run itself (the event functions `opsh.wait` and
/// `opsh.watches` come with `watch`).
enum OpshModule {
    static func install(in session: OpshSession) {
        let database = session.database
        session.runtime.register(module: "opsh", [
            // Scripts say "would delete" rather than "deleted" under
            // `opsh run --dry-run`, and skip work that cannot be rolled back.
            "dryRun": { call in call.results(.boolean(database.isDryRun)) },
        ])
        // The shell replaces it with the real one (its chunks keep changesets).
        session.runtime.register("undo") { _ in
            if let why = database.undoUnavailable { throw LuaCallError.message(why) }
            throw LuaCallError.message("undo() takes back chunks typed at the interactive shell's prompt; a script's changes cannot be undone: try it with --dry-run first, and cap it with --max-changes")
        }
    }
}
