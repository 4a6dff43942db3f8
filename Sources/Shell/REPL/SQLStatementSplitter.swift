/// Cuts SQL typed at the prompt into statements at each `;` outside
/// quotes, comments and dollar quotes, and says whether the text ends with
/// a complete statement, as sqlite3's `sqlite3_complete` and psql's lexer
/// do: the prompt reads lines until then.
///
/// The text is only cut where the engines themselves would cut it; what a
/// statement does is decided by the engine when it runs.
struct SQLStatementSplitter {
    /// The statements, each without its `;`, empty ones left out.
    let statements: [String]
    /// Whether the text ends with a `;` that ends a statement (then only
    /// space and comments).
    let isComplete: Bool

    init(_ text: String) {
        let characters = Array(text.unicodeScalars)
        var statements: [String] = []
        var current = String.UnicodeScalarView()
        var words: [String] = []      // the statement's words so far, upper-cased
        var word = ""
        var index = 0
        var complete = false
        var unterminated = false

        func endWord() {
            if !word.isEmpty { words.append(word.uppercased()) }
            word = ""
        }
        /// A trigger's body (`CREATE TRIGGER … BEGIN … END;`) holds `;`
        /// that do not end the statement, as `sqlite3_complete` knows.
        func insideTriggerBody() -> Bool {
            let head = words.prefix(3)
            let isTrigger = head.first == "CREATE" && head.dropFirst().prefix(2).contains("TRIGGER")
            guard isTrigger, let begin = words.lastIndex(of: "BEGIN") else { return false }
            return words.last != "END" || begin == words.count - 1
        }

        while index < characters.count {
            let character = characters[index]
            let next = index + 1 < characters.count ? characters[index + 1] : nil
            switch character {
            case "'", "\"", "`":
                endWord()
                complete = false
                // A quote ends at its twin; a doubled twin is part of it.
                var end = index + 1
                var closed = false
                while end < characters.count {
                    if characters[end] == character {
                        if end + 1 < characters.count, characters[end + 1] == character {
                            end += 2
                            continue
                        }
                        closed = true
                        break
                    }
                    end += 1
                }
                current.append(contentsOf: characters[index..<min(end + 1, characters.count)])
                if !closed { unterminated = true }
                index = end + 1
                continue
            case "-" where next == "-":
                endWord()
                var end = index
                while end < characters.count, characters[end] != "\n" { end += 1 }
                current.append(contentsOf: characters[index..<end])
                index = end
                continue
            case "/" where next == "*":
                endWord()
                var end = index + 2
                while end + 1 < characters.count, !(characters[end] == "*" && characters[end + 1] == "/") { end += 1 }
                if end + 1 >= characters.count { unterminated = true }
                let stop = min(end + 2, characters.count)
                current.append(contentsOf: characters[index..<stop])
                index = stop
                continue
            case "$" where word.isEmpty:
                // PostgreSQL's $tag$ … $tag$ (a function's body); `$1` is a
                // parameter.
                var tagEnd = index + 1
                while tagEnd < characters.count, characters[tagEnd] == "_" || characters[tagEnd].properties.isAlphabetic
                        || (tagEnd > index + 1 && characters[tagEnd].properties.numericType != nil) {
                    tagEnd += 1
                }
                if tagEnd < characters.count, characters[tagEnd] == "$" {
                    complete = false
                    let tag = Array(characters[index...tagEnd])
                    var end = tagEnd + 1
                    var closed = false
                    while end + tag.count <= characters.count {
                        if Array(characters[end..<(end + tag.count)]) == tag {
                            closed = true
                            break
                        }
                        end += 1
                    }
                    let stop = closed ? end + tag.count : characters.count
                    current.append(contentsOf: characters[index..<stop])
                    if !closed { unterminated = true }
                    index = stop
                    continue
                }
            case ";":
                endWord()
                if insideTriggerBody() { break }
                let statement = String(current).trimmingSpace()
                if !statement.isEmpty { statements.append(statement) }
                current = String.UnicodeScalarView()
                words = []
                complete = true
                index += 1
                continue
            default:
                break
            }
            if character.properties.isWhitespace {
                endWord()
            } else if character == "_" || character.properties.isAlphabetic || character.properties.numericType != nil {
                word.unicodeScalars.append(character)
                complete = false
            } else {
                endWord()
                complete = false
            }
            current.append(character)
            index += 1
        }
        endWord()
        let rest = String(current).trimmingSpace()
        if !rest.isEmpty, !complete { statements.append(rest) }
        self.statements = statements
        isComplete = complete && !unterminated
    }
}

private extension String {
    func trimmingSpace() -> String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !$0.properties.isWhitespace }),
              let last = scalars.lastIndex(where: { !$0.properties.isWhitespace }) else { return "" }
        return String(scalars[first...last])
    }
}
