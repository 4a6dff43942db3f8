/// Parses the textual form of ``QueryKey``.
///
/// Grammar:
/// ```
/// key      = segment *( "." segment )
/// segment  = atom *( "," atom )              ; lists only in schemes.{ids}
/// atom     = word | quoted | word quoted     ; e.g. limit5, category"a.b"
/// word     = 1*( ALPHA / DIGIT / "_" / "-" )
/// quoted   = DQUOTE *( any-but-DQUOTE / DQUOTE DQUOTE ) DQUOTE
/// ```
/// An id or version that is a plain word may stand bare (`build.3f2a…`);
/// anything else is quoted, with `"` doubled inside:
/// `project."com.example.app".latestBuilds.limit3`,
/// `schemes.a,b.builds.ids."1.2.0"`. The seed's parameter words keep their
/// form: `limit{N}`, `category{c}` (`categorybuild`, `category"unit tests"`).
public struct QueryKeyParser {
    /// One atom: an optional bare word, an optional quoted text, and where
    /// it starts.
    struct Atom {
        var word: String?
        var quoted: String?
        var position: Int

        /// The atom as an id: the bare word or the quoted text.
        var text: String? {
            if let word, quoted == nil { return word }
            if word == nil { return quoted }
            return nil
        }
    }

    typealias Segment = (atoms: [Atom], position: Int)

    let key: String
    private let characters: [Character]
    private var index = 0

    init(_ key: String) {
        self.key = key
        self.characters = Array(key)
    }

    /// Parses a key, or throws a ``QueryKeyError``.
    public static func parse(_ text: String) throws -> QueryKey {
        var parser = QueryKeyParser(text)
        let segments = try parser.segments()
        return try parser.interpret(segments)
    }

    // MARK: Lexing

    private mutating func segments() throws -> [Segment] {
        if characters.isEmpty { throw error(at: 0, "a key such as projects.all.ids") }
        var segments: [Segment] = []
        while true {
            let start = index
            var atoms = [try atom()]
            while index < characters.count, characters[index] == "," {
                index += 1
                atoms.append(try atom())
            }
            segments.append((atoms, start))
            if index == characters.count { return segments }
            guard characters[index] == "." else {
                throw error(at: index, "'.' between segments, found '\(characters[index])'")
            }
            index += 1
        }
    }

    private mutating func atom() throws -> Atom {
        let start = index
        var word = ""
        while index < characters.count, Self.isWordCharacter(characters[index]) {
            word.append(characters[index])
            index += 1
        }
        var quoted: String?
        if index < characters.count, characters[index] == "\"" {
            quoted = try quotedText()
        }
        if word.isEmpty && quoted == nil {
            if index == characters.count {
                throw error(at: index, "a name, an id or a quoted \"text\" after '\(characters.last.map(String.init) ?? "")'")
            }
            throw error(at: index, "a name, an id or a quoted \"text\", found '\(characters[index])'")
        }
        return Atom(word: word.isEmpty ? nil : word, quoted: quoted, position: start)
    }

    private mutating func quotedText() throws -> String {
        let open = index
        index += 1
        var text = ""
        while index < characters.count {
            let character = characters[index]
            index += 1
            if character == "\"" {
                if index < characters.count, characters[index] == "\"" {
                    text.append("\"")
                    index += 1
                } else {
                    return text
                }
            } else {
                text.append(character)
            }
        }
        throw error(at: open, "a closing '\"' for the quote opened here")
    }

    static func isWordCharacter(_ character: Character) -> Bool {
        guard character.isASCII, let ascii = character.asciiValue else { return false }
        return (ascii >= 48 && ascii <= 57) || (ascii >= 65 && ascii <= 90) || (ascii >= 97 && ascii <= 122)
            || ascii == 95 || ascii == 45
    }

    func error(at index: Int, _ expected: String) -> QueryKeyError {
        QueryKeyError(key: key, position: index + 1, expected: expected)
    }

    // MARK: Interpreting the vocabulary

    private func interpret(_ segments: [Segment]) throws -> QueryKey {
        var cursor = Cursor(parser: self, segments: segments)
        let root = try cursor.keyword(["projects", "project", "scheme", "schemes", "build", "buildLog", "crashLog",
                                       "models", "model", "session", "telemetry", "config"])
        let key: QueryKey
        switch root {
        case "projects":
            switch try cursor.keyword(["all", "versionStrings"]) {
            case "all":
                try cursor.expect("ids")
                key = .allProjectIds
            default:
                key = .projectVersionStrings
            }
        case "project":
            let id = try cursor.id("a project's bundle identifier")
            if cursor.atEnd { key = .project(id); break }
            switch try cursor.keyword(["detail", "schemes", "buildVersionStrings", "latestBuilds"]) {
            case "detail": key = .projectDetail(id)
            case "schemes":
                try cursor.expect("ids")
                key = .projectSchemeIds(id)
            case "buildVersionStrings": key = .projectBuildVersionStrings(id)
            default:
                key = .projectLatestBuilds(id, limit: try cursor.limit())
            }
        case "scheme":
            key = .scheme(try cursor.id("a scheme id"))
        case "schemes":
            let ids = try cursor.idList("scheme ids separated by ','")
            try cursor.expect("builds")
            try cursor.expect("ids")
            let version = cursor.atEnd ? nil : try cursor.id("a version string (quote it: \"1.2.0\")")
            key = .schemeBuildIds(ids, version: version)
        case "build":
            let id = try cursor.id("a build id")
            if cursor.atEnd { key = .build(id); break }
            switch try cursor.keyword(["logs", "crashLogs"]) {
            case "logs":
                try cursor.expect("ids")
                var includeDebug = false
                var category: String?
                if !cursor.atEnd, cursor.peekWord == "debug" {
                    _ = try cursor.keyword(["debug"])
                    includeDebug = true
                }
                if !cursor.atEnd {
                    category = try cursor.category()
                }
                key = .buildLogIds(id, includeDebug: includeDebug, category: category)
            default:
                try cursor.expect("ids")
                key = .buildCrashLogIds(id)
            }
        case "buildLog":
            key = .buildLog(try cursor.id("a build log id"))
        case "crashLog":
            key = .crashLog(try cursor.id("a crash log's incident identifier"))
        case "models":
            try cursor.expect("all")
            try cursor.expect("ids")
            key = .allModelIds
        case "model":
            let id = try cursor.id("a model id")
            if cursor.atEnd { key = .model(id); break }
            try cursor.expect("usage")
            key = .modelUsage(id)
        case "session":
            let id = try cursor.id("a session id")
            if cursor.atEnd { key = .session(id); break }
            try cursor.expect("generations")
            key = .sessionGenerations(id)
        case "telemetry":
            try cursor.expect("counts")
            key = .telemetryCounts
        default: // config
            key = .configuration(cursor.atEnd ? "default" : try cursor.id("a configuration id"))
        }
        try cursor.expectEnd()
        return key
    }

    /// Walks the segments, producing errors that point at them.
    private struct Cursor {
        let parser: QueryKeyParser
        let segments: [Segment]
        var next = 0
        /// Set after an id: a stray word next is likely the rest of an
        /// unquoted id with dots, worth a hint.
        var afterID = false

        var atEnd: Bool { next == segments.count }

        var peekWord: String? {
            guard next < segments.count, segments[next].atoms.count == 1 else { return nil }
            let atom = segments[next].atoms[0]
            return atom.quoted == nil ? atom.word : nil
        }

        private func endPosition() -> Int { parser.characters.count }

        private mutating func single(_ expected: String) throws -> Atom {
            guard next < segments.count else {
                throw parser.error(at: endPosition(), "'.' and \(expected) after the end of the key")
            }
            let segment = segments[next]
            guard segment.atoms.count == 1 else {
                throw parser.error(at: segment.atoms[1].position - 1, "\(expected), not a ',' list")
            }
            next += 1
            return segment.atoms[0]
        }

        mutating func keyword(_ choices: [String]) throws -> String {
            let described = choices.count == 1 ? "'\(choices[0])'" : "one of " + choices.map { "'\($0)'" }.joined(separator: ", ")
            let atom = try single(described)
            guard atom.quoted == nil, let word = atom.word, choices.contains(word) else {
                let hint = afterID ? " (quote an id that holds '.', e.g. project.\"com.example.app\")" : ""
                throw parser.error(at: atom.position, "\(described), found '\(describe(atom))'\(hint)")
            }
            afterID = false
            return word
        }

        mutating func expect(_ word: String) throws {
            _ = try keyword([word])
        }

        mutating func id(_ expected: String) throws -> String {
            let atom = try single(expected)
            guard let text = atom.text else {
                throw parser.error(at: atom.position, "\(expected) as one word or one \"quoted text\", found '\(describe(atom))'")
            }
            afterID = true
            return text
        }

        mutating func idList(_ expected: String) throws -> [String] {
            guard next < segments.count else {
                throw parser.error(at: endPosition(), "'.' and \(expected)")
            }
            let segment = segments[next]
            next += 1
            return try segment.atoms.map { atom in
                guard let text = atom.text else {
                    throw parser.error(at: atom.position, "\(expected), found '\(describe(atom))'")
                }
                return text
            }
        }

        mutating func limit() throws -> Int {
            let atom = try single("limit{N}, e.g. limit5")
            guard atom.quoted == nil, let word = atom.word, word.hasPrefix("limit") else {
                throw parser.error(at: atom.position, "limit{N}, e.g. limit5, found '\(describe(atom))'")
            }
            let digits = word.dropFirst("limit".count)
            guard !digits.isEmpty, digits.allSatisfy(\.isASCII), digits.allSatisfy(\.isNumber),
                  let limit = Int(digits), QueryKey.latestBuildsLimits.contains(limit) else {
                throw parser.error(at: atom.position + 5, QueryKey.latestBuildsLimitExpectation)
            }
            return limit
        }

        mutating func category() throws -> String {
            let atom = try single("'debug' or category{c}")
            guard let word = atom.word, word.hasPrefix("category") else {
                throw parser.error(at: atom.position, "'debug' or category{c}, e.g. categorybuild or category\"unit tests\", found '\(describe(atom))'")
            }
            let rest = String(word.dropFirst("category".count))
            switch (rest.isEmpty, atom.quoted) {
            case (false, nil): return rest
            case (true, let quoted?): return quoted
            default:
                throw parser.error(at: atom.position + 8, "a category name right after 'category' (a word, or a \"quoted text\")")
            }
        }

        func expectEnd() throws {
            guard next < segments.count else { return }
            let segment = segments[next]
            throw parser.error(at: segment.position - 1, "the end of the key, found '.\(describe(segment.atoms[0]))'")
        }

        private func describe(_ atom: Atom) -> String {
            (atom.word ?? "") + (atom.quoted.map { QueryKeyPrinter.quote($0) } ?? "")
        }
    }
}

extension QueryKey {
    /// Parses a textual key; see ``QueryKeyParser`` for the grammar.
    public init(parsing text: String) throws {
        self = try QueryKeyParser.parse(text)
    }
}
