/// Where the cursor is in a piece of Lua text: in code, or inside a string
/// literal (and which call the string is the argument of).
struct LuaSource {
    enum Position: Equatable {
        case code
        /// Inside a quoted string; `content` is the text typed inside it so
        /// far, `callee` the name before `(` (`db.query`, `query`) if any.
        case string(content: String, callee: String?)
    }

    /// Where the end of `text` is.
    static func position(atEndOf text: String) -> Position {
        let characters = Array(text)
        var index = 0
        var quote: Character?
        var start = 0
        while index < characters.count {
            let character = characters[index]
            if let open = quote {
                if character == "\\" { index += 2; continue }
                if character == open || character == "\n" { quote = nil }
            } else if character == "\"" || character == "'" {
                quote = character
                start = index
            } else if character == "-", index + 1 < characters.count, characters[index + 1] == "-" {
                // A comment to the end of the line.
                while index < characters.count, characters[index] != "\n" { index += 1 }
            }
            index += 1
        }
        guard quote != nil else { return .code }
        let content = String(characters[(start + 1)...])
        return .string(content: content, callee: callee(before: String(characters[..<start])))
    }

    /// `db.query` in `x = db.query(`, `query` in `print(query(`.
    static func callee(before text: String) -> String? {
        var text = Substring(text)
        while text.last == " " { text = text.dropLast() }
        guard text.last == "(" else { return nil }
        text = text.dropLast()
        while text.last == " " { text = text.dropLast() }
        let name = text.reversed().prefix { $0.isLetter || $0.isNumber || $0 == "_" || $0 == "." || $0 == ":" }
        return name.isEmpty ? nil : String(name.reversed())
    }
}
