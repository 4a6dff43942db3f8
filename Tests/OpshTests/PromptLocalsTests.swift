import Foundation
import Testing

/// Locals that live across prompt lines (issue 26): a top-level `local` of
/// one chunk is seen by the chunks typed after it, as in the Node and
/// Rails consoles; locals in blocks stay the block's; `<const>` and
/// `<close>` stay the chunk's, with a note; a local that hides a global
/// says so. One body, both engines.
@Suite struct PromptLocalsTests {
    /// docs/lua-api.md's repositories block, typed a line at a time as a
    /// reader copies it, up to the project's delete: `local s` and `local
    /// b` are used on later lines.
    @Test(arguments: Engine.allCases) func theAPIBlockWorksTypedLineByLine(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let lines = DocsTests.block(after: "## The backend's data: repositories", fence: "```lua",
                                    in: try DocsTests.read("docs/lua-api.md"))
        let typed = Array(lines.prefix { !$0.hasPrefix("projects.delete") })
        #expect(typed.count >= 6 && typed.contains { $0.hasPrefix("local s =") }, "\(lines)")
        let terminal = try sandbox.shell(database)
        for line in typed {
            terminal.send(line + "\r")
            terminal.expect(line.hasSuffix(",") ? "  ... " : "> ")
        }
        terminal.send("return b.versionString, s.name\r")
        terminal.expect("1.4.0\tRelease")
        terminal.expect("> ")
        #expect(!terminal.transcript.contains("error"), "\(terminal.transcript)")
        #expect(try database.count("builds", where: "status = 'failed'") == 1)
        terminal.send("\u{4}")
        #expect(terminal.waitForExit() == 0)
    }

    @Test(arguments: Engine.allCases) func topLevelLocalsLiveOnAndBlocksKeepTheirs(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let terminal = try sandbox.shell(database)
        let steps: [(String, String)] = [
            ("local a, b = 40, 2", "> "),
            ("a + b", "42"),
            ("local n", "> "),
            ("n == nil", "true"),
            ("local function fact(k) if k <= 1 then return 1 end return k * fact(k - 1) end", "> "),
            ("fact(5)", "120"),
            // A function defined at the prompt sees the prompt's locals.
            ("function total() return a + b end", "> "),
            ("a = 100", "> "),
            ("total()", "102"),
            // …and a global assignment of another name stays a global.
            ("g = 'global'", "> "),
            ("_G.g", "global"),
            // Locals in a block are the block's.
            ("for i = 1, 2 do local inner = i end", "> "),
            ("inner == nil", "true"),
            // A string that looks like a local is a string.
            ("local text = 'local hidden = 1'", "> "),
            ("hidden == nil", "true"),
            // A local that hides a global says so; _G still reaches it.
            ("local print = 'mine'", "the local print hides the global print at this prompt"),
            ("print", "mine"),
            ("_G.print('the global print')", "the global print"),
            // A prompt local named like an SQL keyword is Lua, as a global is.
            ("local values = 'kept'", "> "),
            ("values", "kept"),
            // <const> stays the chunk's own, with a note.
            ("local c <const> = 5", "c: a local with <const> or <close> stays local to its chunk"),
            ("c == nil", "true"),
        ]
        for (line, shown) in steps {
            terminal.send(line + "\r")
            terminal.expect(shown)
            if shown != "> " { terminal.expect("> ") }
        }
        #expect(!terminal.transcript.contains("error"), "\(terminal.transcript)")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit() == 0)
    }
}
