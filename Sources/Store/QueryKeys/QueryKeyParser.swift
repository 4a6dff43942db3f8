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
/// `schemes.a,b.builds.ids."1.2.0"`. Parameters are glued to their word:
/// `limit{N}`, `category{c}` (`categorybuild`, `category"unit tests"`).
///
/// This type reads the text into segments and atoms; which words and values
/// may follow which is ``QueryKeyGrammar``'s table.
public struct QueryKeyParser {
    /// One atom: an optional bare word, an optional quoted text, and where
    /// it starts (a byte offset into the key's UTF-8).
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

    /// A segment's atoms and where it starts (a struct, not a tuple: an
    /// array of tuples made Swift look up the tuple's metadata at run time
    /// on every parse).
    struct Segment {
        var atoms: [Atom]
        var position: Int
    }

    let key: String
    /// The key's UTF-8: the lexer reads bytes, not `Character`s (a key is
    /// parsed on every lookup; grapheme breaking was most of its cost).
    /// Every byte the grammar gives a meaning is ASCII, so no multi-byte
    /// character is ever split; positions are turned into characters only
    /// for an error's message.
    private let bytes: [UInt8]
    private var index = 0

    private static let dot = UInt8(ascii: "."), comma = UInt8(ascii: ","), quote = UInt8(ascii: "\"")

    init(_ key: String) {
        self.key = key
        self.bytes = Array(key.utf8)
    }

    /// Parses a key, or throws a ``QueryKeyError``.
    public static func parse(_ text: String) throws -> QueryKey {
        var parser = QueryKeyParser(text)
        let segments = try parser.segments()
        return try parser.interpret(segments)
    }

    // MARK: Lexing

    private mutating func segments() throws -> [Segment] {
        if bytes.isEmpty { throw error(at: 0, "a key such as projects.all.ids") }
        var segments: [Segment] = []
        while true {
            let start = index
            var atoms = [try atom()]
            while index < bytes.count, bytes[index] == Self.comma {
                index += 1
                atoms.append(try atom())
            }
            segments.append(Segment(atoms: atoms, position: start))
            if index == bytes.count { return segments }
            guard bytes[index] == Self.dot else {
                throw error(at: index, "'.' between segments, found '\(character(at: index))'")
            }
            index += 1
        }
    }

    private mutating func atom() throws -> Atom {
        let start = index
        while index < bytes.count, Self.isWordByte(bytes[index]) { index += 1 }
        let word = index > start ? String(decoding: bytes[start..<index], as: UTF8.self) : nil
        var quoted: String?
        if index < bytes.count, bytes[index] == Self.quote {
            quoted = try quotedText()
        }
        if word == nil && quoted == nil {
            if index == bytes.count {
                throw error(at: index, "a name, an id or a quoted \"text\" after '\(key.last.map(String.init) ?? "")'")
            }
            throw error(at: index, "a name, an id or a quoted \"text\", found '\(character(at: index))'")
        }
        return Atom(word: word, quoted: quoted, position: start)
    }

    private mutating func quotedText() throws -> String {
        let open = index
        index += 1
        var text: [UInt8] = []
        while index < bytes.count {
            let byte = bytes[index]
            index += 1
            if byte == Self.quote {
                if index < bytes.count, bytes[index] == Self.quote {
                    text.append(Self.quote)
                    index += 1
                } else {
                    return String(decoding: text, as: UTF8.self)
                }
            } else {
                text.append(byte)
            }
        }
        throw error(at: open, "a closing '\"' for the quote opened here")
    }

    static func isWordByte(_ ascii: UInt8) -> Bool {
        (ascii >= 48 && ascii <= 57) || (ascii >= 65 && ascii <= 90) || (ascii >= 97 && ascii <= 122)
            || ascii == 95 || ascii == 45
    }

    static func isWordCharacter(_ character: Character) -> Bool {
        guard character.isASCII, let ascii = character.asciiValue else { return false }
        return isWordByte(ascii)
    }

    /// The character that starts at byte `offset` (always a character's
    /// start: the lexer stops only at ASCII bytes or a character's start).
    private func character(at offset: Int) -> String {
        String(decoding: bytes[offset...], as: UTF8.self).first.map(String.init) ?? ""
    }

    /// An error at byte `offset`, its position counted in characters from 1.
    func error(at offset: Int, _ expected: String) -> QueryKeyError {
        let characters = String(decoding: bytes[..<min(offset, bytes.count)], as: UTF8.self).count
        return QueryKeyError(key: key, position: characters + 1, expected: expected)
    }

    // MARK: Interpreting the vocabulary

    /// Walks the segments down ``QueryKeyGrammar/root``; an error points at
    /// the segment that leaves it and says what the grammar has there.
    private func interpret(_ segments: [Segment]) throws -> QueryKey {
        var node = QueryKeyGrammar.root
        var arguments = QueryKeyGrammar.Arguments()
        // Set after an id: a stray word next is likely the rest of an
        // unquoted id with dots, worth a hint.
        var afterID = false
        for segment in segments {
            guard node.continues else {
                throw error(at: segment.position - 1, "the end of the key, found '.\(describe(segment.atoms[0]))'")
            }
            if let (slot, next) = node.value, slot.prefix == nil {
                try arguments.set(slot.argument, to: idValue(segment, slot))
                node = next
                afterID = true
                continue
            }
            // What the grammar has here, made only for an error's message.
            guard segment.atoms.count == 1 else {
                throw error(at: segment.atoms[1].position - 1, "\(node.expected), not a ',' list")
            }
            let atom = segment.atoms[0]
            if atom.quoted == nil, let word = atom.word, let next = node.next(word) {
                node = next
            } else if let (slot, next) = node.value, let value = try parameterValue(atom, slot) {
                arguments.set(slot.argument, to: value)
                node = next
            } else {
                let hint = afterID ? " (quote an id that holds '.', e.g. project.\"com.example.app\")" : ""
                throw error(at: atom.position, "\(node.expected), found '\(describe(atom))'\(hint)")
            }
            afterID = false
        }
        guard let form = node.form else {
            throw error(at: bytes.count, "'.' and \(node.expected) after the end of the key")
        }
        return form.make(arguments)
    }

    /// An id (`scheme.a`, `project."com.example.app"`) or a `,` list of ids.
    private func idValue(_ segment: Segment, _ slot: QueryKeyGrammar.Slot) throws -> QueryKeyGrammar.Arguments.Value {
        if slot.kind == .idList {
            return .texts(try segment.atoms.map { atom in
                guard let text = atom.text else {
                    throw error(at: atom.position, "\(slot.expected), found '\(describe(atom))'")
                }
                return text
            })
        }
        guard segment.atoms.count == 1 else {
            throw error(at: segment.atoms[1].position - 1, "\(slot.what), not a ',' list")
        }
        let atom = segment.atoms[0]
        guard let text = atom.text else {
            throw error(at: atom.position, "\(slot.what) as one word or one \"quoted text\", found '\(describe(atom))'")
        }
        return .text(text)
    }

    /// A parameter glued to its word (`limit5`, `categorybuild`,
    /// `category"unit tests"`); nil when the atom does not start with the
    /// word (a number takes no quotes), an error when what follows it is wrong.
    private func parameterValue(_ atom: Atom, _ slot: QueryKeyGrammar.Slot) throws -> QueryKeyGrammar.Arguments.Value? {
        guard let prefix = slot.prefix, let word = atom.word, word.hasPrefix(prefix) else { return nil }
        let rest = word.dropFirst(prefix.count)
        let valuePosition = atom.position + prefix.count
        switch slot.kind {
        case .number(let range):
            guard atom.quoted == nil else { return nil }
            guard !rest.isEmpty, rest.allSatisfy(\.isASCII), rest.allSatisfy(\.isNumber),
                  let number = Int(rest), range.contains(number) else {
                throw error(at: valuePosition, "\(slot.what) after '\(prefix)'")
            }
            return .number(number)
        default:
            switch (rest.isEmpty, atom.quoted) {
            case (false, nil): return .text(String(rest))
            case (true, let quoted?): return .text(quoted)
            default:
                throw error(at: valuePosition, "\(slot.what) right after '\(prefix)' (a word, or a \"quoted text\")")
            }
        }
    }

    private func describe(_ atom: Atom) -> String {
        (atom.word ?? "") + (atom.quoted.map { QueryKeyPrinter.quote($0) } ?? "")
    }
}

extension QueryKey {
    /// Parses a textual key; see ``QueryKeyParser`` for the grammar.
    public init(parsing text: String) throws {
        self = try QueryKeyParser.parse(text)
    }
}
