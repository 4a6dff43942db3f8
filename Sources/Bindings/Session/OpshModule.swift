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
    }
}
