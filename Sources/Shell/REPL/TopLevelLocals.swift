/// Rewrites the top-level `local` declarations of a chunk typed at the
/// prompt into assignments, so that the names live on in the prompt's
/// environment (``PromptLocals``) for the chunks typed after it, as the
/// Node and Rails consoles keep them:
///
/// - `local a, b = f()` → `a, b = f()`; `local a` → `a = nil`;
/// - `local function f` → `function f` (f is declared before its body
///   runs, so it can call itself);
/// - a declaration with an attribute (`<const>`, `<close>`) is left a local
///   of its chunk: a constant or a to-be-closed value cannot outlive it.
///
/// Locals inside a block (`do`, `if`, a loop, a function) are untouched:
/// only the chunk's own level is the prompt's.
struct TopLevelLocals {
    /// The chunk with its top-level locals made assignments.
    let code: String
    /// The names those assignments declare, in order.
    let declared: [String]
    /// Names left locals of their chunk (with an attribute).
    let keptLocal: [String]

    init(_ code: String) {
        let bytes = Array(code.utf8)
        var edits: [(range: Range<Int>, replacement: String)] = []
        var declared: [String] = []
        var keptLocal: [String] = []
        var lexer = LuaLexer(bytes: bytes)
        var depth = 0
        while let token = lexer.next() {
            guard case let .name(word, range) = token else { continue }
            switch word {
            case "function", "do", "if", "repeat": depth += 1
            case "end", "until": depth = max(0, depth - 1)
            case "local" where depth == 0:
                var ahead = lexer
                guard case let .name(first, firstRange)? = ahead.next() else { continue }
                if first == "function" {
                    if case let .name(name, _)? = ahead.next() { declared.append(name) }
                    edits.append((range.lowerBound..<firstRange.lowerBound, ""))
                    continue
                }
                // NAME [attrib] {, NAME [attrib]}
                var names = [first]
                var lastEnd = firstRange.upperBound
                var hasAttribute = false
                var after = ahead.next()
                while true {
                    if case .symbol("<", _)? = after {
                        hasAttribute = true
                        _ = ahead.next()                      // the attribute's name
                        if case let .symbol(">", closing)? = ahead.next() { lastEnd = closing.upperBound }
                        after = ahead.next()
                    }
                    guard case .symbol(",", _)? = after, case let .name(name, nameRange)? = ahead.next() else { break }
                    names.append(name)
                    lastEnd = nameRange.upperBound
                    after = ahead.next()
                }
                if hasAttribute {
                    keptLocal += names
                    continue
                }
                declared += names
                edits.append((range.lowerBound..<firstRange.lowerBound, ""))
                if case .symbol("=", _)? = after {} else {
                    edits.append((lastEnd..<lastEnd, " = nil"))
                }
            default:
                break
            }
        }
        var result = [UInt8]()
        var position = 0
        for edit in edits {
            result += bytes[position..<edit.range.lowerBound]
            result += Array(edit.replacement.utf8)
            position = edit.range.upperBound
        }
        result += bytes[position...]
        self.code = String(decoding: result, as: UTF8.self)
        self.declared = declared
        self.keptLocal = keptLocal
    }
}

/// Lua's tokens as far as ``TopLevelLocals`` needs them: names (keywords
/// among them) and single-character symbols, with strings, long strings,
/// comments and numbers skipped whole.
struct LuaLexer {
    enum Token {
        case name(String, Range<Int>)
        case symbol(Character, Range<Int>)
    }

    let bytes: [UInt8]
    var index = 0

    init(bytes: [UInt8]) {
        self.bytes = bytes
    }

    private func byte(_ offset: Int) -> UInt8? {
        index + offset < bytes.count ? bytes[index + offset] : nil
    }

    private static func isNameStart(_ byte: UInt8) -> Bool {
        (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || byte == 0x5F
    }

    private static func isDigit(_ byte: UInt8) -> Bool { byte >= 0x30 && byte <= 0x39 }

    mutating func next() -> Token? {
        while index < bytes.count {
            let current = bytes[index]
            switch current {
            case 0x20, 0x09, 0x0A, 0x0D, 0x0B, 0x0C:
                index += 1
            case UInt8(ascii: "-") where byte(1) == UInt8(ascii: "-"):
                index += 2
                if let level = longBracketLevel() {
                    skipLongBracket(level)
                } else {
                    while index < bytes.count, bytes[index] != 0x0A { index += 1 }
                }
            case UInt8(ascii: "\""), UInt8(ascii: "'"):
                index += 1
                while index < bytes.count, bytes[index] != current, bytes[index] != 0x0A {
                    index += bytes[index] == UInt8(ascii: "\\") ? 2 : 1
                }
                index += 1
            case UInt8(ascii: "[") where longBracketLevel() != nil:
                skipLongBracket(longBracketLevel()!)
            case _ where Self.isNameStart(current):
                let start = index
                while index < bytes.count, Self.isNameStart(bytes[index]) || Self.isDigit(bytes[index]) { index += 1 }
                return .name(String(decoding: bytes[start..<index], as: UTF8.self), start..<index)
            case _ where Self.isDigit(current) || (current == UInt8(ascii: ".") && byte(1).map(Self.isDigit) == true):
                // A number, exponent sign included (`1e-5`, `0x1p+4`).
                while index < bytes.count {
                    let digit = bytes[index]
                    if Self.isNameStart(digit) || Self.isDigit(digit) || digit == UInt8(ascii: ".") {
                        index += 1
                    } else if (digit == UInt8(ascii: "-") || digit == UInt8(ascii: "+")),
                              [UInt8(ascii: "e"), UInt8(ascii: "E"), UInt8(ascii: "p"), UInt8(ascii: "P")].contains(bytes[index - 1]) {
                        index += 1
                    } else {
                        break
                    }
                }
            default:
                let start = index
                index += 1
                // `==` is not an assignment's `=`.
                if current == UInt8(ascii: "="), byte(0) == UInt8(ascii: "=") {
                    index += 1
                    return .symbol("≡", start..<index)
                }
                return .symbol(Character(Unicode.Scalar(current)), start..<index)
            }
        }
        return nil
    }

    /// The level of a long bracket opening at `index` (`[[` 0, `[==[` 2).
    private func longBracketLevel() -> Int? {
        guard byte(0) == UInt8(ascii: "[") else { return nil }
        var level = 0
        while byte(1 + level) == UInt8(ascii: "=") { level += 1 }
        return byte(1 + level) == UInt8(ascii: "[") ? level : nil
    }

    private mutating func skipLongBracket(_ level: Int) {
        index += level + 2
        let closing = [UInt8(ascii: "]")] + Array(repeating: UInt8(ascii: "="), count: level) + [UInt8(ascii: "]")]
        while index < bytes.count {
            if bytes[index] == UInt8(ascii: "]"), index + closing.count <= bytes.count,
               Array(bytes[index..<(index + closing.count)]) == closing {
                index += closing.count
                return
            }
            index += 1
        }
    }
}
