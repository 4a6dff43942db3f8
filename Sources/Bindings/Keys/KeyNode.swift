import Store

/// One step of the Lua key builder (`key.project(id).latestBuilds(3)`): a
/// place in ``QueryKeyGrammar``'s tree with the values given so far.
///
/// The builder spells the grammar's forms the Lua way, by rules rather than
/// by a vocabulary of its own:
/// - a word is a field (`.detail`, `.logs`, `.ids`);
/// - an id is a call argument (`key.build(id)`, `key.config("eu")`,
///   `…builds.ids("1.2.0")`), a list of ids a table or several arguments
///   (`key.schemes{a, b}`);
/// - a parameter is a call on the node it follows when it is that node's
///   only way on (`latestBuilds(3)`), otherwise its word is a field and the
///   call follows it (`….ids.debug.category("build")`);
/// - a node that must go on with one word, to a complete key that takes
///   optional words and parameters, may be called with those as a table:
///   `logs{ debug = true, category = "build" }` is
///   `logs.ids.debug.category("build")`.
/// So no script ever concatenates a key, and a key added to the grammar
/// is in the builder at once.
final class KeyNode: Sendable {
    enum Position: Sendable {
        /// At a node of the grammar's tree.
        case node(QueryKeyGrammar.Node)
        /// After a parameter's word used as a field (`.category`), waiting
        /// for its value; `base` is the text before the word.
        case parameter(QueryKeyGrammar.Node, base: String)
    }

    /// An option of a table call: a word taken when true, or a parameter.
    enum Option: Sendable {
        case flag(String)
        case parameter(QueryKeyGrammar.Slot)

        var name: String {
            switch self {
            case let .flag(word): return word
            case let .parameter(slot): return slot.prefix ?? ""
            }
        }
    }

    /// How a call continues this node.
    enum Call: Sendable {
        /// `(id)`, `(n)`, `("build")`, or ids for a list.
        case value(QueryKeyGrammar.Slot)
        /// `{ debug = true, category = "build" }`, after the one word `then`.
        case options(then: String, [Option])
    }

    let position: Position
    let arguments: QueryKeyGrammar.Arguments
    /// The complete key this node names, if it names one.
    let key: QueryKey?
    /// The text so far (`project."com.example.app".latestBuilds`), for
    /// messages and `tostring`: spelled only when asked (a key's value
    /// quoted per call was a third of `query(key.build(id))`'s own time).
    var text: String { spelling.text }
    private let spelling: Spelling

    /// How ``text`` is spelled from what it follows.
    private enum Spelling: Sendable {
        case text(String)
        /// `base` (a node's text, or the text before a parameter's word),
        /// then the value of `slot`.
        case called(KeyNode?, base: String, QueryKeyGrammar.Slot, QueryKeyGrammar.Arguments)

        var text: String {
            switch self {
            case let .text(text): text
            case let .called(node, base, slot, arguments): (node?.text ?? base) + "." + slot.print(arguments)
            }
        }
    }

    convenience init(_ position: Position, arguments: QueryKeyGrammar.Arguments, text: String) {
        self.init(position, arguments: arguments, spelling: .text(text))
    }

    private init(_ position: Position, arguments: QueryKeyGrammar.Arguments, spelling: Spelling) {
        self.position = position
        self.arguments = arguments
        self.spelling = spelling
        if case let .node(node) = position, let form = node.form {
            key = form.make(arguments)
        } else {
            key = nil
        }
    }

    /// The node a root word of `key` leads to (`projects`, `config`, or the
    /// id slot after `project`), with its text.
    static func root(_ word: String) -> KeyNode? {
        guard let node = QueryKeyGrammar.root.next(word) else { return nil }
        return KeyNode(.node(node), arguments: .init(), text: word)
    }

    /// The node of a complete key (`key.parse(text)`), where the builder
    /// would have reached it.
    static func parsed(_ key: QueryKey) -> KeyNode {
        let (form, arguments) = QueryKeyGrammar.form(of: key)
        var node = QueryKeyGrammar.root
        for element in form.elements {
            switch element {
            case let .word(word): node = node.next(word) ?? node
            case .value: node = node.value?.next ?? node
            }
        }
        return KeyNode(.node(node), arguments: arguments, text: key.description)
    }

    /// The field names that continue this node.
    var fieldNames: [String] {
        guard case let .node(node) = position else { return [] }
        var names = node.words.map(\.word)
        if Self.parameterIsField(node), let prefix = node.value?.slot.prefix { names.append(prefix) }
        return names
    }

    /// A parameter is reached by its word as a field when the node could
    /// also end or go on with a word; otherwise the node itself is called.
    private static func parameterIsField(_ node: QueryKeyGrammar.Node) -> Bool {
        guard let slot = node.value?.slot, slot.prefix != nil else { return false }
        return node.form != nil || !node.words.isEmpty
    }

    /// What a call of this node takes, if it can be called.
    var call: Call? {
        switch position {
        case let .parameter(node, _):
            return node.value.map { .value($0.slot) }
        case let .node(node):
            if let slot = node.value?.slot, slot.prefix == nil || !Self.parameterIsField(node) {
                return .value(slot)
            }
            guard node.form == nil, node.value == nil, node.words.count == 1 else { return nil }
            let (word, next) = node.words[0]
            let options = Self.options(after: next)
            guard next.form != nil, !options.isEmpty, !next.takesID else { return nil }
            return .options(then: word, options)
        }
    }

    /// The words and parameters that may follow `node`, each once, in the
    /// grammar's order.
    private static func options(after node: QueryKeyGrammar.Node) -> [Option] {
        var options: [Option] = []
        var pending = [node]
        while let node = pending.popLast() {
            for (word, next) in node.words where !options.contains(where: { $0.name == word }) {
                options.append(.flag(word))
                pending.append(next)
            }
            if let (slot, next) = node.value, slot.prefix != nil, !options.contains(where: { $0.name == slot.prefix }) {
                options.append(.parameter(slot))
                pending.append(next)
            }
        }
        return options
    }

    /// The node a field leads to, nil when `name` does not continue it.
    func field(_ name: String) -> KeyNode? {
        guard case let .node(node) = position else { return nil }
        if let next = node.next(name) {
            return KeyNode(.node(next), arguments: arguments, text: text + "." + name)
        }
        if Self.parameterIsField(node), node.value?.slot.prefix == name {
            return KeyNode(.parameter(node, base: text), arguments: arguments, text: text + "." + name)
        }
        return nil
    }

    /// The node after a call with `value` (checked by the caller against
    /// ``call``'s slot).
    func called(with value: QueryKeyGrammar.Arguments.Value) -> KeyNode {
        let (node, base, before): (QueryKeyGrammar.Node, KeyNode?, String)
        switch position {
        case let .node(at): (node, base, before) = (at, self, "")
        case let .parameter(at, text): (node, base, before) = (at, nil, text)
        }
        guard let (slot, next) = node.value else { preconditionFailure("KeyNode \(text) cannot be called") }
        var arguments = arguments
        arguments.set(slot.argument, to: value)
        return KeyNode(.node(next), arguments: arguments, spelling: .called(base, base: before, slot, arguments))
    }

    /// The node after a table call: `then`, then each flag that is true and
    /// each parameter given, in the grammar's order. Nil when the options
    /// given cannot all be taken together.
    func called(then word: String, flags: Set<String>, parameters: [String: String]) -> KeyNode? {
        guard var node = field(word) else { return nil }
        var flags = flags, parameters = parameters
        while case let .node(at) = node.position {
            if let flag = at.words.first(where: { flags.contains($0.word) })?.word, let next = node.field(flag) {
                flags.remove(flag)
                node = next
            } else if let prefix = at.value?.slot.prefix, let value = parameters.removeValue(forKey: prefix) {
                node = KeyNode(.parameter(at, base: node.text), arguments: node.arguments, text: node.text)
                    .called(with: .text(value))
            } else {
                break
            }
        }
        return flags.isEmpty && parameters.isEmpty ? node : nil
    }

    /// How the rest of an incomplete key can go on, for messages.
    var continuation: String {
        var ways = fieldNames.map { ".\($0)" }
        switch call {
        case let .value(slot)?:
            switch slot.kind {
            case .number:
                let name = String(text.split(separator: ".").last ?? "")
                ways.append("(n), e.g. \(name)(\(slot.examples.first ?? "1"))")
            case .id where slot.examples == ["id"]: ways.append("(id)")
            default: ways.append("(\"\(slot.examples.first ?? "")\")")
            }
        case let .options(_, options)?:
            let fields = options.map { option -> String in
                switch option {
                case let .flag(word): return "\(word) = true"
                case let .parameter(slot): return "\(option.name) = \"\(slot.examples.first ?? "")\""
                }
            }
            ways.append("{ " + fields.joined(separator: ", ") + " }")
        case nil: break
        }
        return ways.joined(separator: " or ")
    }
}
