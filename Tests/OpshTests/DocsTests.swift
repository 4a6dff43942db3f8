import Foundation
import Testing

/// The documents stay true to the code: the README's first session works
/// when typed, docs/lua-api.md is what `scripts/docs` writes from the help
/// entries, and every section or decision the code cites exists
/// (ARCHITECTURE.md, "Tests").
@Suite struct DocsTests {
    /// This checkout.
    static let root: String = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    static func read(_ path: String) throws -> String {
        try String(contentsOfFile: root + "/" + path, encoding: .utf8)
    }

    /// The lines of the first fenced block after `heading` whose fence is
    /// `fence` (```` ```sh ````, or ```` ``` ```` alone).
    static func block(after heading: String, fence: String, in text: String) -> [String] {
        guard let section = text.range(of: "\n" + heading + "\n") else { return [] }
        var lines: [String] = []
        var inside = false, insideAnother = false
        for line in text[section.upperBound...].split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            if inside {
                if line == "```" { return lines }
                lines.append(line)
            } else if insideAnother {
                insideAnother = line != "```"
            } else if line == fence {
                inside = true
            } else if line.hasPrefix("```") {
                insideAnother = true
            } else if line.hasPrefix("## ") {
                return []
            }
        }
        return []
    }

    /// The README's "A first session", as a reader follows it: the `sh`
    /// commands (with `./scripts/opsh` the built opsh, the demo database in
    /// the test's folder), then every line after a prompt typed into the
    /// shell on a real terminal, and every other line of the transcript
    /// looked for in what the shell shows, in order (numbers vary from run
    /// to run: each run of digits matches any). A line that ends with one
    /// of the shell's questions has its answer after it: that is typed.
    /// SQLite only: it is the session the README gives, on the file it
    /// names (docs/postgresql.md has PostgreSQL's).
    @Test func theREADMEsFirstSessionWorksTypedLineByLine() throws {
        let readme = try Self.read("README.md")
        let commands = Self.block(after: "## A first session", fence: "```sh", in: readme)
        let transcript = Self.block(after: "## A first session", fence: "```", in: readme)
        #expect(commands.count == 2 && transcript.count > 10, "README's first session: \(commands) \(transcript)")

        let sandbox = try Sandbox()
        let database = sandbox.root + "/data/demo.sqlite"
        func words(_ line: String) -> [String] {
            let command = line.components(separatedBy: "   #").first ?? line
            return command.split(separator: " ").map(String.init).map { word in
                word.replacingOccurrences(of: "/tmp/demo.sqlite", with: database)
                    .replacingOccurrences(of: "examples/", with: Self.root + "/examples/")
            }
        }
        let run = words(commands[0])
        #expect(run.first == "./scripts/opsh" && run.dropFirst().first == "run", "\(run)")
        let made = try sandbox.run(opshExecutable, Array(run.dropFirst()))
        #expect(made.status == 0, "\(made.stdout) \(made.stderr)")
        let shell = words(commands[1])
        #expect(shell.first == "./scripts/opsh" && !shell.contains("run"), "\(shell)")

        let terminal = try PseudoTerminal(arguments: Array(shell.dropFirst()), environment: sandbox.environment)
        let questions = ["anything else rolls back: ", "commit? [y/N] "]
        for line in transcript {
            if let prompt = line.range(of: "opsh> "), !line[..<prompt.lowerBound].dropLast().contains(" ") {
                terminal.expect(String(line[..<prompt.upperBound]), timeout: 60)
                terminal.send(String(line[prompt.upperBound...]) + "\r")
                terminal.expect(String(line[prompt.upperBound...]), timeout: 60)
            } else if let question = questions.lazy.compactMap({ line.range(of: $0) }).first {
                for piece in Self.pieces(String(line[..<question.upperBound])) { terminal.expect(piece, timeout: 60) }
                terminal.send(String(line[question.upperBound...]) + "\r")
            } else {
                for piece in Self.pieces(line) { terminal.expect(piece, timeout: 60) }
            }
        }
        terminal.expect("opsh> ", timeout: 60)
        terminal.send("\u{4}")
        #expect(terminal.waitForExit(timeout: 60) == 0)
        for failure in ["opsh: error", "stdin:", "SQL error"] {
            #expect(!terminal.transcript.contains(failure), "the first session printed \(failure):\n\(terminal.transcript)")
        }
    }

    /// A transcript line without its numbers: the text between them.
    static func pieces(_ line: String) -> [String] {
        line.split(whereSeparator: \.isNumber).map(String.init).filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty }
    }

    /// docs/lua-api.md is what `scripts/docs` writes from
    /// scripts/lua-api-template.md and the help entries (`help{ markdown =
    /// … }` of this build): a help entry or template changed without the
    /// page, or the page edited by hand, fails here with the difference.
    @Test func theLuaAPIPageIsWhatScriptsDocsWrites() throws {
        let sandbox = try Sandbox()
        let check = try sandbox.run("/bin/bash", [Self.root + "/scripts/docs", "--check", "--opsh", opshExecutable])
        #expect(check.status == 0, "\(check.stderr)")
        // Control: a page that differs is refused, saying what to run.
        let page = try Self.read("docs/lua-api.md")
        let copy = sandbox.root + "/copy"
        try FileManager.default.createDirectory(atPath: copy + "/docs", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: copy + "/scripts", withIntermediateDirectories: true)
        for file in ["scripts/docs", "scripts/lua-api.lua", "scripts/lua-api-template.md"] {
            try FileManager.default.copyItem(atPath: Self.root + "/" + file, toPath: copy + "/" + file)
        }
        try page.replacingOccurrences(of: "db.query(sql, ...) → rows", with: "db.query(sql) → rows")
            .write(toFile: copy + "/docs/lua-api.md", atomically: true, encoding: .utf8)
        let stale = try sandbox.run("/bin/bash", [copy + "/scripts/docs", "--check", "--opsh", opshExecutable])
        #expect(stale.status == 1, "\(stale.stderr)")
        #expect(stale.stderr.contains("docs/lua-api.md is not what scripts/docs writes"), "\(stale.stderr)")
        #expect(stale.stderr.contains("+- `db.query(sql, ...) → rows`"), "\(stale.stderr)")
    }

    /// Where the code cites a document's section or decision
    /// (`ARCHITECTURE.md, decision 5`, `ARCHITECTURE.md, "The session
    /// seam"`, `README, "A chunk is a transaction"`, `docs/operations.md,
    /// "The audit trail"`), the document has it: a heading (or a bold
    /// paragraph lead) that holds the quoted words, a numbered decision of
    /// ARCHITECTURE.md. Comments are read with their lines joined, so a
    /// citation may wrap.
    @Test func everyCitedSectionExists() throws {
        var missing: [String] = []
        var found = 0
        for (file, text) in try Self.sources() {
            for citation in Self.citations(in: text) {
                found += 1
                if let problem = try Self.problem(with: citation) { missing.append("\(file): \(problem)") }
            }
        }
        #expect(found > 60, "only \(found) citations found: the pattern no longer matches the code's")
        #expect(missing == [], "\(missing.joined(separator: "\n"))")
        // Control: a citation of something no document has is named.
        #expect(try Self.problem(with: Self.citations(in: "/// (ARCHITECTURE.md, \"No such section\")")[0]) != nil)
        #expect(try Self.problem(with: Self.citations(in: "// (ARCHITECTURE.md, decision 99)")[0]) != nil)
        #expect(try Self.problem(with: Self.citations(in: "/// (README, \"The audit trail\")")[0]) != nil)
    }

    /// RELIABILITY.md's list of issue 24's attacks
    /// (`scripts/reliability-attacks.md`) names tests that exist, and an
    /// attack it says holds on both engines has a test that takes the
    /// engine as its argument: the list cannot name a test that was
    /// renamed or removed, nor claim an engine no test runs.
    @Test func theAttackListNamesTestsThatExist() throws {
        var tests: [String] = []
        for folder in ["Tests"] {
            let walker = FileManager.default.enumerator(atPath: Self.root + "/" + folder)
            while let path = walker?.nextObject() as? String {
                guard path.hasSuffix(".swift") else { continue }
                tests.append(try String(contentsOfFile: Self.root + "/" + folder + "/" + path, encoding: .utf8))
            }
        }
        /// Whether `Suite.name` is a test, and whether it takes the engine.
        func find(_ qualified: String) -> (exists: Bool, takesEngine: Bool) {
            let parts = qualified.split(separator: ".").map(String.init)
            guard parts.count == 2 else { return (false, false) }
            for text in tests where text.contains("struct \(parts[0])") || text.contains("class \(parts[0])") {
                guard let function = text.range(of: "func \(parts[1])(") else { continue }
                let start = text.index(function.lowerBound, offsetBy: -200, limitedBy: text.startIndex) ?? text.startIndex
                let before = String(text[start..<function.lowerBound])
                guard let attribute = before.range(of: "@Test", options: .backwards) else { continue }
                return (true, before[attribute.lowerBound...].contains("Engine.allCases"))
            }
            return (false, false)
        }
        let list = try Self.read("scripts/reliability-attacks.md")
            .replacingOccurrences(of: #"(?s)<!--.*?-->"#, with: "", options: .regularExpression)
        var problems: [String] = []
        var attacks = 0, named = 0
        for line in list.split(separator: "\n").map(String.init) where line.hasPrefix("- ") {
            let fields = line.dropFirst(2).components(separatedBy: " | ")
            guard fields.count == 4 else { problems.append("not ITEM | ATTACK | TESTS | ENGINES: \(line)"); continue }
            attacks += 1
            if fields[2].hasPrefix("no test") { continue }
            let names = fields[2].components(separatedBy: ", ")
            named += names.count
            let found = names.map(find)
            for (name, result) in zip(names, found) where !result.exists { problems.append("item \(fields[0]): no test \(name)") }
            if fields[3].hasPrefix("SQLite and PostgreSQL") && !found.contains(where: \.takesEngine) {
                problems.append("item \(fields[0]) says SQLite and PostgreSQL, but none of its tests takes the engine")
            }
        }
        #expect(attacks >= 40 && named > attacks, "\(attacks) attacks, \(named) tests named")
        #expect(problems == [], "\(problems.joined(separator: "\n"))")
        // Control: a name no test has is found missing.
        #expect(find("ExitPathTests.osExitLeavesItsAuditRowAndStatus") == (true, true))
        #expect(find("ExitPathTests.noSuchTest").exists == false)
        #expect(find("ChunkSafetyTests.ctrlCAtTheQuestionRollsBack") == (true, false))
    }

    struct Citation {
        var document: String
        /// A section's words, or nil for a decision.
        var section: String?
        var decision: Int?
    }

    /// The code's own files: Sources, scripts, fuzz, bench, examples, the
    /// manifest. (Tests cite documents too; they are another lane's to fix.)
    static func sources() throws -> [(String, String)] {
        var files: [(String, String)] = [("Package.swift", try read("Package.swift"))]
        for folder in ["Sources", "scripts", "fuzz", "bench", "examples", ".ci"] {
            guard let walker = FileManager.default.enumerator(atPath: root + "/" + folder) else { continue }
            for case let path as String in walker {
                let full = root + "/" + folder + "/" + path
                var isFolder: ObjCBool = false
                guard FileManager.default.fileExists(atPath: full, isDirectory: &isFolder), !isFolder.boolValue,
                      let text = try? String(contentsOfFile: full, encoding: .utf8) else { continue }
                files.append((folder + "/" + path, text))
            }
        }
        return files
    }

    /// The citations in `text`, its comment lines joined.
    static func citations(in text: String) -> [Citation] {
        let joined = text.replacingOccurrences(of: #"\n[ \t]*(///|//|--|#|\*)?[ \t]*"#, with: " ", options: .regularExpression)
        var result: [Citation] = []
        let pattern = #"(ARCHITECTURE\.md|README(?:\.md)?|docs/[a-z-]+\.md)(?:'s|,)\s+(?:decision (\d+)|section "([^"]+)"|"([^"]+)")"#
        let expression = try! NSRegularExpression(pattern: pattern)
        let range = NSRange(joined.startIndex..., in: joined)
        for match in expression.matches(in: joined, range: range) {
            func group(_ index: Int) -> String? {
                Range(match.range(at: index), in: joined).map { String(joined[$0]) }
            }
            var document = group(1) ?? ""
            if document == "README" { document = "README.md" }
            result.append(Citation(document: document, section: group(3) ?? group(4), decision: group(2).flatMap { Int($0) }))
        }
        return result
    }

    /// Why a citation does not resolve, or nil when it does.
    static func problem(with citation: Citation) throws -> String? {
        guard let text = try? read(citation.document) else { return "\(citation.document) does not exist" }
        let lines = text.split(separator: "\n").map(String.init)
        if let decision = citation.decision {
            return lines.contains { $0.hasPrefix("\(decision). **") } ? nil
                : "\(citation.document) has no decision \(decision)"
        }
        let section = citation.section ?? ""
        let titles = lines.compactMap { line -> String? in
            if line.hasPrefix("#") { return line.drop { $0 == "#" }.trimmingCharacters(in: .whitespaces) }
            if line.hasPrefix("**"), let end = line.dropFirst(2).range(of: "**") { return String(line[line.index(line.startIndex, offsetBy: 2)..<end.lowerBound]) }
            return nil
        }
        return titles.contains { $0.contains(section) } ? nil : "\(citation.document) has no section \"\(section)\""
    }
}
