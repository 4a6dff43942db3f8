/// The one vocabulary of query keys: every key form, word by word, and the
/// ``QueryKey`` it makes.
///
/// Everything that knows a key's words reads this table: the parser
/// (``QueryKeyParser``), the printer (``QueryKeyPrinter``), the Lua builder
/// (`key.project(id).latestBuilds(3)`, Bindings' `KeyNode`), the shell's
/// completion and the messages that list what may come next. Adding a key
/// is one ``Form`` here (and its case, fetch and tables in ``QueryKey``).
///
/// Forms that share a beginning share it in ``root``, a tree built from the
/// table: `project.{id}` and `project.{id}.detail` meet at `project`, then at
/// the id. An optional part is written as two forms, one with and one
/// without it, so that every form is one complete key.
public enum QueryKeyGrammar {
    /// One step of a form: a fixed word, or a value the user supplies.
    public enum Element: Hashable, Sendable, ExpressibleByStringLiteral {
        case word(String)
        case value(Slot)

        public init(stringLiteral word: String) { self = .word(word) }
    }

    /// Where a value goes in ``Arguments``.
    public enum Argument: Hashable, Sendable {
        case id, ids, version, limit, category
    }

    /// A value in a key: a bare or quoted id (`project."com.example.app"`),
    /// a `,` list of ids, or a parameter glued to its word (`limit5`,
    /// `categorybuild`, `category"unit tests"`).
    public struct Slot: Hashable, Sendable {
        public enum Kind: Hashable, Sendable {
            /// One id: a plain word or a quoted text.
            case id
            /// Ids separated by `,`.
            case idList
            /// A whole number in the range, right after ``Slot/prefix``.
            case number(ClosedRange<Int>)
            /// A word or a quoted text, right after ``Slot/prefix``.
            case text
        }

        public let kind: Kind
        /// The word a parameter is glued to (`limit`, `category`); nil for ids.
        public let prefix: String?
        /// What the value is, for messages: "a project's bundle identifier",
        /// "scheme id" (a list's item), "a category name".
        public let what: String
        public let argument: Argument
        /// Values that messages and the Lua builder's hints show.
        public let examples: [String]
        /// What the shell's completion offers for a parameter (ids are never
        /// completed).
        public let completions: [String]

        static func id(_ what: String, into argument: Argument = .id, example: String = "id") -> Slot {
            Slot(kind: .id, prefix: nil, what: what, argument: argument, examples: [example], completions: [])
        }

        /// How the value is announced in "expected …" messages.
        public var expected: String {
            switch kind {
            case .id: return what
            case .idList: return "\(what)s separated by ','"
            case .number, .text:
                let placeholder = if case .number = kind { "{N}" } else { "{c}" }
                let examples = examples.map { QueryKeyPrinter.parameter(prefix ?? "", $0) }
                return "\(prefix ?? "")\(placeholder), e.g. " + examples.joined(separator: " or ")
            }
        }

        /// The value as it appears in a key.
        public func print(_ arguments: Arguments) -> String {
            switch argument {
            case .id: return QueryKeyPrinter.id(arguments.id)
            case .ids: return arguments.ids.map(QueryKeyPrinter.id).joined(separator: ",")
            case .version: return QueryKeyPrinter.id(arguments.version ?? "")
            case .limit: return (prefix ?? "") + String(arguments.limit)
            case .category: return QueryKeyPrinter.parameter(prefix ?? "", arguments.category ?? "")
            }
        }
    }

    /// The values a key carries, gathered while its text is read or its
    /// Lua builder is called.
    public struct Arguments: Hashable, Sendable {
        public var id = ""
        public var ids: [String] = []
        public var version: String?
        public var limit = 0
        public var category: String?

        public init(id: String = "", ids: [String] = [], version: String? = nil, limit: Int = 0, category: String? = nil) {
            self.id = id
            self.ids = ids
            self.version = version
            self.limit = limit
            self.category = category
        }

        /// A value read for `argument`: ids are texts, a list is texts, a
        /// limit is a number.
        public enum Value: Hashable, Sendable {
            case text(String), texts([String]), number(Int)
        }

        public mutating func set(_ argument: Argument, to value: Value) {
            switch (argument, value) {
            case let (.id, .text(text)): id = text
            case let (.ids, .texts(texts)): ids = texts
            case let (.version, .text(text)): version = text
            case let (.limit, .number(number)): limit = number
            case let (.category, .text(text)): category = text
            default: preconditionFailure("query key argument \(argument) cannot take \(value)")
            }
        }
    }

    /// One complete key: its elements in order and the key they make.
    public struct Form: Sendable {
        public let elements: [Element]
        public let make: @Sendable (Arguments) -> QueryKey

        init(_ elements: Element..., make: @escaping @Sendable (Arguments) -> QueryKey) {
            self.elements = elements
            self.make = make
        }

        /// The form's text: `project.{id}.latestBuilds.limit{N}`.
        public var pattern: String {
            elements.map { element in
                switch element {
                case let .word(word): return word
                case let .value(slot):
                    switch slot.kind {
                    case .id: return "{id}"
                    case .idList: return "{id},…"
                    case .number: return (slot.prefix ?? "") + "{N}"
                    case .text: return (slot.prefix ?? "") + "{c}"
                    }
                }
            }.joined(separator: ".")
        }
    }

    // MARK: The vocabulary

    static let projectID = Element.value(.id("a project's bundle identifier"))
    static let schemeID = Element.value(.id("a scheme id"))
    static let schemeIDs = Element.value(Slot(kind: .idList, prefix: nil, what: "scheme id", argument: .ids,
                                              examples: ["id"], completions: []))
    static let version = Element.value(.id("a version string (quote it: \"1.2.0\")", into: .version, example: "1.2.0"))
    static let buildID = Element.value(.id("a build id"))
    static let buildLogID = Element.value(.id("a build log id"))
    static let crashLogID = Element.value(.id("a crash log's incident identifier"))
    static let modelID = Element.value(.id("a model id"))
    static let sessionID = Element.value(.id("a session id"))
    static let configurationID = Element.value(.id("a configuration id"))
    static let limit = Element.value(Slot(
        kind: .number(QueryKey.latestBuildsLimits), prefix: "limit",
        what: "a whole number from \(QueryKey.latestBuildsLimits.lowerBound) to \(QueryKey.latestBuildsLimits.upperBound)",
        argument: .limit, examples: ["5"], completions: ["limit5", "limit10", "limit20"]))
    static let category = Element.value(Slot(
        kind: .text, prefix: "category", what: "a category name", argument: .category,
        examples: ["build", "unit tests"], completions: ["category"]))

    /// Every key form. The order is the order messages and completion list
    /// words in; where two forms make the same key (`config` and
    /// `config."default"`), the first is the canonical print.
    public static let forms: [Form] = [
        Form("projects", "all", "ids") { _ in .allProjectIds },
        Form("projects", "versionStrings") { _ in .projectVersionStrings },
        Form("project", projectID) { .project($0.id) },
        Form("project", projectID, "detail") { .projectDetail($0.id) },
        Form("project", projectID, "schemes", "ids") { .projectSchemeIds($0.id) },
        Form("project", projectID, "buildVersionStrings") { .projectBuildVersionStrings($0.id) },
        Form("project", projectID, "latestBuilds", limit) { .projectLatestBuilds($0.id, limit: $0.limit) },
        Form("scheme", schemeID) { .scheme($0.id) },
        Form("schemes", schemeIDs, "builds", "ids") { .schemeBuildIds($0.ids, version: nil) },
        Form("schemes", schemeIDs, "builds", "ids", version) { .schemeBuildIds($0.ids, version: $0.version) },
        Form("build", buildID) { .build($0.id) },
        Form("build", buildID, "logs", "ids") { .buildLogIds($0.id, includeDebug: false, category: nil) },
        Form("build", buildID, "logs", "ids", "debug") { .buildLogIds($0.id, includeDebug: true, category: nil) },
        Form("build", buildID, "logs", "ids", category) { .buildLogIds($0.id, includeDebug: false, category: $0.category) },
        Form("build", buildID, "logs", "ids", "debug", category) { .buildLogIds($0.id, includeDebug: true, category: $0.category) },
        Form("build", buildID, "crashLogs", "ids") { .buildCrashLogIds($0.id) },
        Form("buildLog", buildLogID) { .buildLog($0.id) },
        Form("crashLog", crashLogID) { .crashLog($0.id) },
        Form("models", "all", "ids") { _ in .allModelIds },
        Form("model", modelID) { .model($0.id) },
        Form("model", modelID, "usage") { .modelUsage($0.id) },
        Form("session", sessionID) { .session($0.id) },
        Form("session", sessionID, "generations") { .sessionGenerations($0.id) },
        Form("telemetry", "counts") { _ in .telemetryCounts },
        Form("config") { _ in .configuration("default") },
        Form("config", configurationID) { .configuration($0.id) },
    ]

    /// The forms as a tree: where a key may start.
    public static let root = Node(forms, depth: 0)

    /// The first words of keys, in the table's order.
    public static var rootWords: [String] { root.words.map(\.word) }

    /// The form that prints `key`: the first whose `make` rebuilds it from
    /// the key's own arguments.
    public static func form(of key: QueryKey) -> (form: Form, arguments: Arguments) {
        let arguments = key.arguments
        guard let form = forms.first(where: { $0.make(arguments) == key }) else {
            preconditionFailure("QueryKeyGrammar.forms has no form for \(key)")
        }
        return (form, arguments)
    }

    // MARK: The tree

    /// A point in a key after some of its elements: the words and the value
    /// that may follow, and the form that ends here, if one does.
    public final class Node: Sendable {
        /// Words that continue the key, in the table's order.
        public let words: [(word: String, next: Node)]
        /// The value that continues the key (at most one: a bare id beside a
        /// word could not be told apart from it).
        public let value: (slot: Slot, next: Node)?
        /// The form that ends here: the key is complete.
        public let form: Form?

        init(_ forms: [Form], depth: Int) {
            let ending = forms.filter { $0.elements.count == depth }
            precondition(ending.count <= 1, "two query key forms end at the same place: \(ending.map(\.pattern))")
            form = ending.first
            var order: [Element] = []
            var following: [Element: [Form]] = [:]
            for form in forms where form.elements.count > depth {
                let element = form.elements[depth]
                if following[element] == nil { order.append(element) }
                following[element, default: []].append(form)
            }
            var words: [(String, Node)] = []
            var values: [(Slot, Node)] = []
            for element in order {
                let next = Node(following[element] ?? [], depth: depth + 1)
                switch element {
                case let .word(word): words.append((word, next))
                case let .value(slot): values.append((slot, next))
                }
            }
            precondition(values.count <= 1, "two different values may follow the same words in query key forms")
            if let slot = values.first?.0 {
                precondition(slot.prefix != nil || words.isEmpty, "a bare id cannot follow the same words as a word")
                precondition(!words.contains { slot.prefix.map($0.0.hasPrefix) ?? false }, "a word starts like a parameter")
            }
            self.words = words
            self.value = values.first
        }

        /// The node after `word`, nil when the word does not continue here.
        public func next(_ word: String) -> Node? {
            words.first { $0.word == word }?.next
        }

        /// Whether anything may follow.
        public var continues: Bool { !words.isEmpty || value != nil }

        /// The value here is an id or a list of ids (not a parameter word).
        public var takesID: Bool {
            guard let slot = value?.slot else { return false }
            return slot.prefix == nil
        }

        /// What may come next, as "expected …" messages say it:
        /// `'ids'`, `one of 'all', 'versionStrings'`, `'debug' or category{c}, …`.
        public var expected: String {
            if let slot = value?.slot, slot.prefix == nil { return slot.expected }
            var parts: [String] = []
            if words.count == 1 {
                parts.append("'\(words[0].word)'")
            } else if !words.isEmpty {
                parts.append("one of " + words.map { "'\($0.word)'" }.joined(separator: ", "))
            }
            if let slot = value?.slot { parts.append(slot.expected) }
            return parts.joined(separator: " or ")
        }

        /// The node after `segments`, read as the shell's completion sees
        /// them (the text of each segment, ids in any form): nil when they
        /// leave the grammar.
        public func following(_ segments: [String]) -> Node? {
            var node = self
            for segment in segments {
                if let next = node.next(segment) {
                    node = next
                } else if let (slot, next) = node.value, segment.hasPrefix(slot.prefix ?? "") {
                    node = next
                } else {
                    return nil
                }
            }
            return node
        }

        /// The words completion offers here: the words, then a parameter's
        /// suggestions (ids are not completed).
        public var completions: [String] {
            words.map(\.word) + (value?.slot.completions ?? [])
        }
    }
}

extension QueryKey {
    /// The values this key carries, as the grammar's forms take them.
    public var arguments: QueryKeyGrammar.Arguments {
        switch self {
        case .allProjectIds, .projectVersionStrings, .allModelIds, .telemetryCounts:
            return .init()
        case .project(let id), .projectDetail(let id), .projectSchemeIds(let id), .projectBuildVersionStrings(let id),
             .scheme(let id), .build(let id), .buildCrashLogIds(let id), .buildLog(let id), .crashLog(let id),
             .model(let id), .modelUsage(let id), .session(let id), .sessionGenerations(let id), .configuration(let id):
            return .init(id: id)
        case let .projectLatestBuilds(id, limit):
            return .init(id: id, limit: limit)
        case let .schemeBuildIds(ids, version):
            return .init(ids: ids, version: version)
        case let .buildLogIds(id, _, category):
            return .init(id: id, category: category)
        }
    }
}
