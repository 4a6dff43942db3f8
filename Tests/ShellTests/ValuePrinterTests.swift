import Foundation
import Bindings
import LuaRuntime
import Store
import Testing
@testable import Shell

/// Printing values with their metatables, on a real session.
@Suite struct ValuePrinterTests {
    let session: OpshSession

    init() throws {
        session = try OpshSession(store: try Store.inMemory())
    }

    func show(_ code: String, mode: OutputMode = .table) throws -> String? {
        var printer = ValuePrinter(mode: mode, unicode: true)
        printer.totalWidth = nil
        return try session.runtime.execute(code, chunkName: "=test") { stack, first, count in
            try printer.render(stack.state, first: first, count: count)
        }
    }

    /// A date is a column the schema declares as seconds since 1970
    /// (telemetry.created_at), under any name; a number named like a date
    /// is a number.
    @Test func rowSetsPrintAsTablesInSelectOrderWithNullAndDates() throws {
        let text = try show("""
            db.exec("INSERT INTO telemetry (event, created_at) VALUES ('x', 86400.5)")
            return db.query("SELECT 2 AS id, NULL AS note, created_at AS latest, 86400.5 AS createdAt, 'sk-abcdefgh12345678' AS apiKey FROM telemetry")
            """)
        #expect(text == """
            ┌────┬──────┬──────────────────────┬───────────┬──────────┐
            │ id │ note │ latest               │ createdAt │ apiKey   │
            ├────┼──────┼──────────────────────┼───────────┼──────────┤
            │  2 │ ∅    │ 1970-01-02 00:00:00Z │   86400.5 │ ••••5678 │
            └────┴──────┴──────────────────────┴───────────┴──────────┘
            (1 row)
            """)
    }

    @Test func tablesPrintAsSortedLuaLiteralsWithCyclesAndSecrets() throws {
        #expect(try show("return {3, 4, z = true, a = 'x', ['not id'] = 1}") == "{ 3, 4, a = \"x\", [\"not id\"] = 1, z = true }")
        #expect(try show("local t = {name = 'loop'} t.self = t return t") == "{ name = \"loop\", self = <cycle> }")
        #expect(try show("return {token = 'abcdefghijklmnop', total_tokens = 12}") == "{ token = \"••••mnop\", total_tokens = 12 }")
        #expect(try show("return 1, 'two', nil, 2.5") == "1\ttwo\tnil\t2.5")
        #expect(try show("return db.NULL") == "∅")
        #expect(try show("local x = 1") == nil)
    }

    /// `.mode line`: long values whole, a multi-line value on lines of its
    /// own under the first, NULL, dates and secrets as in tables.
    @Test func lineModeShowsEachRecordWhole() throws {
        let long = String(repeating: "build failed ", count: 8)
        let text = try show("""
            db.exec("INSERT INTO telemetry (event, created_at) VALUES ('x', 86400)")
            return db.query([[SELECT 1 AS id, '\(long)' AS message, 'first
            second' AS log, NULL AS exit_code, created_at, 'sk-abcdefgh12345678' AS api_key FROM telemetry
            UNION ALL SELECT 2, 'ok', '', 0, NULL, NULL]])
            """, mode: .line)
        #expect(text == """
            -[ RECORD 1 ]\(String(repeating: "-", count: 67))
            id         | 1
            message    | \(long)
            log        | first
                       | second
            exit_code  | ∅
            created_at | 1970-01-02 00:00:00Z
            api_key    | ••••5678
            -[ RECORD 2 ]\(String(repeating: "-", count: 67))
            id         | 2
            message    | ok
            log        |
            exit_code  | 0
            created_at | ∅
            api_key    | ∅
            (2 rows)
            """)
    }

    @Test func csvAndJSON() throws {
        let rows = "return db.query(\"SELECT 1 AS a, 'x,y' AS b UNION ALL SELECT 2, NULL\")"
        #expect(try show(rows, mode: .csv) == "a,b\n1,\"x,y\"\n2,")
        #expect(try show(rows, mode: .json) == "[{\"a\":1,\"b\":\"x,y\"},{\"a\":2,\"b\":null}]")
        #expect(try show("return {1, {x = 'q\"'}}", mode: .json) == "[1,{\"x\":\"q\\\"\"}]")
        #expect(throws: PrintError.self) { try show("local t = {} t[1] = t return t", mode: .json) }
    }
}

@Suite struct CompletionTests {
    @Test func queryKeyWords() {
        #expect(QueryKeyVocabulary.complete("projects.al") == ["projects.all"])
        #expect(QueryKeyVocabulary.complete("project.\"com.example.app\".late") == ["project.\"com.example.app\".latestBuilds"])
        #expect(QueryKeyVocabulary.complete("bu") == ["build", "buildLog"])
    }

    @Test func dotCommandsAndTheirArguments() throws {
        let completer = Completer(schema: { ["projects": ["bundleIdentifier"], "schemes": ["projectId"]] })
        #expect(completer.dotCommandCandidates(word: ".s", before: ".s") == [".schema"])
        #expect(completer.dotCommandCandidates(word: ".ou", before: ".ou") == [".output"])
        #expect(completer.dotCommandCandidates(word: ".o", before: ".o") == [".output", ".once"])
        #expect(completer.dotCommandCandidates(word: ".t", before: "  .t") == [".tables", ".timer", ".traceback"])
        // psql's names are in the same registry.
        #expect(completer.dotCommandCandidates(word: "\\ti", before: "\\ti") == ["\\timing"])
        #expect(completer.dotCommandCandidates(word: "o", before: "\\timing o") == ["on", "off"])
        #expect(completer.dotCommandCandidates(word: "pro", before: ".schema pro") == ["projects"])
        #expect(completer.dotCommandCandidates(word: "", before: ".mode ") == ["table", "line", "json", "csv", "tsv", "lua"])
        #expect(completer.dotCommandCandidates(word: "o", before: ".timer o") == ["on", "off"])
        #expect(completer.dotCommandCandidates(word: "x", before: ".quit x").isEmpty)

        let folder = NSTemporaryDirectory() + "opsh-completion-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: folder + "/repairs", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        _ = FileManager.default.createFile(atPath: folder + "/repairs/purge.lua", contents: Data())
        _ = FileManager.default.createFile(atPath: folder + "/report.lua", contents: Data())
        _ = FileManager.default.createFile(atPath: folder + "/.hidden.lua", contents: Data())
        // readline's word ends at the last `/`: the candidates replace only it.
        #expect(completer.dotCommandCandidates(word: "re", before: ".read \(folder)/re") == ["repairs/", "report.lua"])
        #expect(completer.dotCommandCandidates(word: "", before: ".read \(folder)/repairs/") == ["purge.lua"])
    }

    @Test func whereTheCursorIs() {
        #expect(LuaSource.position(atEndOf: "x = db.query(\"SELECT * FR") == .string(content: "SELECT * FR", callee: "db.query"))
        #expect(LuaSource.position(atEndOf: "print('a') x") == .code)
        #expect(LuaSource.position(atEndOf: "query( 'proj") == .string(content: "proj", callee: "query"))
    }

    @Test func globalsAndFields() throws {
        let session = try OpshSession(store: try Store.inMemory())
        let completer = Completer(schema: { ["projects": ["bundleIdentifier", "name"], "schemes": ["projectId"]] })
        let runtime = session.runtime
        #expect(completer.candidates(word: "db.qu", before: "db.qu", runtime: runtime) == ["db.query"])
        #expect(completer.candidates(word: "s:up", before: "local s = 'x'; s:up", runtime: runtime).isEmpty)
        #expect(completer.candidates(word: "string.up", before: "string.up", runtime: runtime) == ["string.upper"])
        #expect(completer.candidates(word: "whi", before: "whi", runtime: runtime) == ["while"])
        #expect(completer.candidates(word: "proj", before: "db.query(\"SELECT * FROM proj", runtime: runtime) == ["projects"])
        #expect(completer.candidates(word: "na", before: "db.query(\"SELECT na", runtime: runtime) == ["name"])
        #expect(completer.candidates(word: ".al", before: "query(\"projects.al", runtime: runtime) == [".all"])
    }
}

@Suite struct HistoryAndSecretsTests {
    @Test func historyEntriesRoundTrip() {
        for entry in ["a", "function f()\n  return '\\\\n'\nend", "x\\ny"] {
            #expect(History.decode(History.encode(entry)) == entry)
            #expect(!History.encode(entry).contains("\n"))
        }
    }

    @Test func secretNames() {
        for name in ["api_key", "apiKey", "token", "accessToken", "client_secret", "password", "API_KEY"] {
            #expect(SecretMask.isSecret(name), "\(name)")
        }
        for name in ["total_tokens", "prompt_tokens", "name", "keyboard"] {
            #expect(!SecretMask.isSecret(name), "\(name)")
        }
        #expect(SecretMask.mask("short") == "••••")
    }
}

/// Text from the database never drives the terminal in any mode: control
/// characters show visibly (TextCodec's VisibleText), a row's newlines
/// keep each mode's own form (issue "Every hole found by attack", item 29).
@Suite struct ControlCharacterPrintingTests {
    let session: OpshSession

    init() throws {
        session = try OpshSession(store: try Store.inMemory())
    }

    func show(_ code: String, mode: OutputMode) throws -> String {
        var printer = ValuePrinter(mode: mode, unicode: true)
        printer.totalWidth = nil
        return try session.runtime.execute(code, chunkName: "=test") { stack, first, count in
            try printer.render(stack.state, first: first, count: count)
        } ?? ""
    }

    static func controls(_ text: String) -> [UInt32] {
        text.unicodeScalars.map(\.value).filter { ($0 < 0x20 && $0 != 0x0A && $0 != 0x09) || $0 == 0x7F || (0x80...0x9F).contains($0) }
    }

    static let rows = #"return db.query("SELECT ? AS content UNION ALL SELECT ?", "\27]52;c;ZXZpbA==\7osc", "\27[1Aup\194\155c1\rcr")"#

    @Test(arguments: [OutputMode.table, .line, .csv, .lua])
    func rowsShowControlCharactersVisibly(_ mode: OutputMode) throws {
        let text = try show(Self.rows, mode: mode)
        #expect(Self.controls(text) == [], "\(mode): \(text)")
        if mode != .lua {
            #expect(text.contains("␛]52;c;ZXZpbA==␇osc") && text.contains("␛[1Aup<U+009B>c1␍cr"), "\(mode): \(text)")
        }
    }

    @Test func aReturnedStringShowsItsControlCharactersButKeepsItsLines() throws {
        let text = try show(#"return "title\27]0;x\7\nsecond\tline""#, mode: .table)
        #expect(text == "title␛]0;x␇\nsecond\tline")
    }
}
