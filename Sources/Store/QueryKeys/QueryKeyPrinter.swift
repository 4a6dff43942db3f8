/// Prints keys in their canonical textual form: ids bare when they are
/// plain words, quoted otherwise; `parse(print(key)) == key`.
public enum QueryKeyPrinter {
    /// An id as it appears in a key.
    public static func id(_ text: String) -> String {
        isBare(text) ? text : quote(text)
    }

    /// `"text"` with inner quotes doubled: every `"` scalar, as the parser
    /// reads bytes (a `"` followed by a combining mark is one Character, and
    /// was left single).
    public static func quote(_ text: String) -> String {
        var quoted = "\""
        for scalar in text.unicodeScalars {
            if scalar == "\"" { quoted.unicodeScalars.append(scalar) }
            quoted.unicodeScalars.append(scalar)
        }
        quoted.unicodeScalars.append("\"")
        return quoted
    }

    static func isBare(_ text: String) -> Bool {
        !text.isEmpty && text.allSatisfy(QueryKeyParser.isWordCharacter)
    }

    /// A parameter word (`category`) followed by its value: bare words are
    /// glued (`categorybuild`), others quoted (`category"unit tests"`).
    static func parameter(_ word: String, _ value: String) -> String {
        word + id(value)
    }

    /// The key's form in ``QueryKeyGrammar``, its words and values joined by `.`.
    public static func print(_ key: QueryKey) -> String {
        let (form, arguments) = QueryKeyGrammar.form(of: key)
        return form.elements.map { element in
            switch element {
            case let .word(word): return word
            case let .value(slot): return slot.print(arguments)
            }
        }.joined(separator: ".")
    }
}

extension QueryKey: CustomStringConvertible {
    /// The canonical textual form.
    public var description: String { QueryKeyPrinter.print(self) }
}
