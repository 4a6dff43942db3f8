/// The text of a chunk or `-e` as the audit trail keeps it: secrets
/// masked as the shell masks them on screen (``SecretMask``: `••••` and
/// the last four characters).
///
/// What counts as a secret in Lua source:
/// - every occurrence of a known secret value (the configuration's API
///   keys, read from the database after the run, so a key the chunk set
///   is known too);
/// - a string literal assigned to a field whose name is a secret
///   (`api_key = "…"`, `c.apiKey = "…"`, `["token"] = "…"`);
/// - string literals that follow, on the same line, a string that names a
///   secret column (`db.exec("UPDATE configuration SET api_key = ?", "sk-…")`).
public enum CodeMask {
    public static func mask(_ code: String, knownSecrets: [String] = []) -> String {
        var text = maskLiterals(code)
        for secret in Set(knownSecrets) where secret.count >= 4 {
            text = text.replacingOccurrences(of: secret, with: SecretMask.mask(secret))
        }
        return text
    }

    /// A string literal's place: the bytes between its delimiters.
    private struct Literal {
        var contentStart: Int
        var contentEnd: Int
        var text: String
    }

    private static func maskLiterals(_ code: String) -> String {
        let bytes = Array(code.utf8)
        var replacements: [(Range<Int>, String)] = []
        var index = 0
        // The last identifier and whether `=`/`:` followed it, for
        // `name = "…"`; whether this line named a secret in a string.
        var lastName: String?
        var assigning = false
        var lineNamesSecret = false
        func isNameByte(_ byte: UInt8) -> Bool {
            (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || byte == 0x5F
        }
        while index < bytes.count {
            let byte = bytes[index]
            if byte == 0x0A {
                lineNamesSecret = false
                index += 1
                continue
            }
            // Comments: -- to the end of the line, or a long comment.
            if byte == 0x2D, index + 1 < bytes.count, bytes[index + 1] == 0x2D {
                if let (_, end) = longBracket(bytes, at: index + 2) {
                    index = end
                } else {
                    while index < bytes.count, bytes[index] != 0x0A { index += 1 }
                }
                continue
            }
            var literal: Literal?
            if byte == 0x22 || byte == 0x27 {
                var end = index + 1
                while end < bytes.count, bytes[end] != byte, bytes[end] != 0x0A {
                    end += bytes[end] == 0x5C ? 2 : 1
                }
                let stop = min(end, bytes.count)
                literal = Literal(contentStart: index + 1, contentEnd: stop,
                                  text: String(decoding: bytes[(index + 1)..<stop], as: UTF8.self))
                index = min(stop + 1, bytes.count)
            } else if byte == 0x5B, let (contentStart, end) = longBracket(bytes, at: index) {
                let level = contentStart - index - 2
                let contentEnd = max(contentStart, end - level - 2)
                literal = Literal(contentStart: contentStart, contentEnd: contentEnd,
                                  text: String(decoding: bytes[contentStart..<contentEnd], as: UTF8.self))
                index = end
            }
            if let literal {
                let secretField = assigning && lastName.map(SecretMask.isSecret) == true
                if (secretField || lineNamesSecret) && !literal.text.isEmpty {
                    replacements.append((literal.contentStart..<literal.contentEnd, SecretMask.mask(literal.text)))
                } else if namesSecret(literal.text) {
                    lineNamesSecret = true
                }
                // `["api_key"] = "…"`: the literal is the field's name.
                lastName = literal.text
                assigning = false
                continue
            }
            if isNameByte(byte) {
                var end = index
                while end < bytes.count, isNameByte(bytes[end]) { end += 1 }
                lastName = String(decoding: bytes[index..<end], as: UTF8.self)
                assigning = false
                index = end
                continue
            }
            if byte == 0x3D, index + 1 < bytes.count, bytes[index + 1] == 0x3D {
                assigning = false
                index += 2
                continue
            }
            if byte == 0x3D || byte == 0x3A { assigning = true }
            else if byte == 0x5D { /* keeps the name of ["name"] */ }
            else if byte != 0x20 && byte != 0x09 && byte != 0x0D { assigning = false; lastName = nil }
            index += 1
        }
        guard !replacements.isEmpty else { return code }
        var result: [UInt8] = []
        var position = 0
        for (range, text) in replacements {
            result += bytes[position..<range.lowerBound]
            result += Array(text.utf8)
            position = range.upperBound
        }
        result += bytes[position...]
        return String(decoding: result, as: UTF8.self)
    }

    /// `[[`, `[==[`: the index after the opening bracket and after the
    /// closing one (or the end), or nil when this is no long bracket.
    private static func longBracket(_ bytes: [UInt8], at start: Int) -> (Int, Int)? {
        guard start < bytes.count, bytes[start] == 0x5B else { return nil }
        var index = start + 1
        var level = 0
        while index < bytes.count, bytes[index] == 0x3D { level += 1; index += 1 }
        guard index < bytes.count, bytes[index] == 0x5B else { return nil }
        let contentStart = index + 1
        let closing = [0x5D] + Array(repeating: UInt8(0x3D), count: level) + [0x5D]
        var search = contentStart
        while search + closing.count <= bytes.count {
            if Array(bytes[search..<(search + closing.count)]) == closing { return (contentStart, search + closing.count) }
            search += 1
        }
        return (contentStart, bytes.count + closing.count)
    }

    /// Whether SQL (or any text) names a secret column, as a word.
    private static func namesSecret(_ text: String) -> Bool {
        var word = ""
        for character in text + " " {
            if character.isLetter || character.isNumber || character == "_" {
                word.append(character)
            } else {
                if !word.isEmpty, SecretMask.isSecret(word) { return true }
                word = ""
            }
        }
        return false
    }
}
