import Foundation
import Testing
import LuaRuntime
@testable import Bindings

/// `help()`: every binding described, one found by identity or name.
@Suite struct HelpTests {
    let test = try! TestSession()

    /// What `help(...)` prints, captured by replacing `print`.
    func help(_ arguments: String = "") throws -> String {
        let result = try test.run("""
            local out = {}
            local saved = print
            print = function(s) out[#out + 1] = s end
            local ok, err = pcall(help\(arguments.isEmpty ? "" : ", " + arguments))
            print = saved
            if not ok then error(err, 0) end
            return table.concat(out, "\\n")
            """)
        return result.first?.stringValue ?? ""
    }

    @Test func describesOneFunctionByIdentityOrName() throws {
        let expected = "db.query(sql, ...) → rows\n  Runs SQL with ? or :name parameters; an array of rows keyed by column (NULL is an absent field)."
        #expect(try help("db.query") == expected)
        #expect(try help("'db.query'") == expected)
        #expect(try help("builds.create").hasPrefix("builds.create(schemeId, version) → row"))
        #expect(try help("backup").hasPrefix("backup(path [, {keep=N, overwrite=bool}])"))
        #expect(try help("'json.null'").hasPrefix("json.null\n"))
        // json.null is db.NULL: the value is described as db.NULL.
        #expect(try help("json.null").hasPrefix("db.NULL\n"))
        // A copy of the function is still found: identity, not name.
        #expect(try test.run("local f = builds.latest local out print = function(s) out = s end help(f) return out")
            .first?.stringValue?.hasPrefix("builds.latest(") == true)
    }

    @Test func listsModules() throws {
        let text = try help("builds")
        #expect(text.hasPrefix("builds — builds of schemes (table builds)\n"))
        for name in ["get", "list", "count", "insert", "update", "upsert", "delete", "create", "latest"] {
            #expect(text.contains("  builds.\(name)(") || text.contains("  builds.\(name){"))
        }
        #expect(try help("json") == help("'json'"))
        let overview = try help()
        for module in ["globals —", "db —", "json —", "projects —", "config —", "telemetry —", "key —", "migrate —"] {
            #expect(overview.contains("\n\(module)") || overview.hasPrefix(module))
        }
        #expect(overview.contains("watch(keyOrSql, fn [, ...]) → handle"))
        #expect(overview.contains("opsh.wait([timeout])"))
    }

    /// Every function in the modules `help` knows has a description: a new
    /// binding without one fails here.
    @Test func everyFunctionIsDescribed() throws {
        let described = Set(HelpEntries.all.map(\.qualifiedName))
        let modules = HelpEntries.modules.map(\.name).filter { !$0.isEmpty }
        let found = try test.run("""
            local modules = ...
            local names = {}
            for _, m in ipairs(modules) do
              local t = rawget(_G, m)
              if type(t) == "table" then
                for k, v in next, t do
                  if type(v) == "function" then names[#names + 1] = m .. "." .. k end
                end
              end
            end
            return names
            """, [.array(modules.map(LuaValue.string))])
        guard case let .array(names)? = found.first else { Issue.record("no names"); return }
        let missing = names.compactMap(\.stringValue).filter { !described.contains($0) }.sorted()
        #expect(missing == [])
        #expect(names.count > 60)
        // The globals of opsh (not Lua's own).
        for global in ["help", "backup", "vacuum", "check", "stats", "query", "watch"] {
            #expect(described.contains(global))
            #expect(try test.run("return type(\(global))") == ["function"])
        }
    }

    /// `help{ markdown = … }`: every entry, present or not, as a Markdown
    /// list (what `scripts/docs` puts into docs/lua-api.md), whole or one
    /// module's.
    @Test func markdownListsEveryEntry() throws {
        let all = try help("{ markdown = true }")
        for entry in HelpEntries.all {
            #expect(all.contains("- `\(entry.signature)`: \(entry.summary)\n") || all.hasSuffix("- `\(entry.signature)`: \(entry.summary)"))
        }
        #expect(all.hasPrefix("### Global functions\n\n- `help("))
        #expect(all.contains("\n\n### `db`: SQL on the database\n\n- `db.query(sql, ...) → rows`: "))
        let db = try help("{ markdown = 'db' }")
        #expect(db.hasPrefix("- `db.query(sql, ...) → rows`: Runs SQL"))
        #expect(db.split(separator: "\n").count == HelpEntries.all.filter { $0.module == "db" }.count)
        #expect(try help("{ markdown = '' }").hasPrefix("- `help("))
    }

    static let badInput: [(String, String)] = [
        ("help('nope.nothing')", "test:1: help: nothing is called 'nope.nothing' (help() lists everything)"),
        ("help(print)", "test:1: help: no description of this function (help() lists everything; Lua's own functions are in the Lua manual)"),
        ("help(42)", "test:1: bad argument #1 to 'help' (function, module or name expected, got number)"),
        ("help({})", "test:1: help: no description of this table (help() lists everything)"),
        ("help{ markdown = 'nope' }", "test:1: help: no module is called 'nope' (help() lists them; \"\" is the globals)"),
        ("help{ markdown = 3 }", "test:1: help: markdown must be true or a module's name (\"\" for the globals), got number"),
    ]

    @Test(arguments: badInput)
    func badInputIsRefused(_ code: String, _ message: String) {
        #expect(test.failure(code) == message)
    }
}
