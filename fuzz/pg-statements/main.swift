import Foundation

// libFuzzer target: what PostgreSQL's session does to SQL text before the
// server sees it (Sources/Store/PostgreSQL/PostgresPlaceholders.swift):
// the rewrite of `?`, `?NNN` and `:name` into `$n`, and the split of a
// script at `;` (db.exec). Text that is not UTF-8 never gets there (the
// one reader of Lua strings refuses it), so such inputs are skipped; a NUL
// byte is text like any other here.
//
// The oracle is a second lexer written here from PostgreSQL's scanner
// (src/backend/parser/scan.l of PostgreSQL 15) and the placeholder rules
// in PostgresPlaceholders' documentation, not from the product's code:
// - the rewrite is deterministic and equals the reference rewrite (text,
//   sources, the largest native `$n`, the failure);
// - read back by PostgreSQL's rules, the rewritten text has a parameter
//   `$n` exactly where the statement had a placeholder, each n within
//   1...placeholderCount (none swallowed into an identifier or a quote);
// - the split is deterministic and equals the reference split: each piece
//   is the text between two top-level `;` (space trimmed), in order, none
//   lost or duplicated, only pieces of space and comments left out;
// - read by PostgreSQL's rules on its own, no piece holds a top-level `;`,
//   and a piece split again is itself: a wrong split is never two
//   statements in one.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzPostgresStatements(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    guard let sql = String(validating: bytes, as: UTF8.self) else { return 0 }
    checkRewrite(sql, bytes)
    checkSplit(sql, bytes)
    return 0
}

func fail(_ what: String, _ sql: String) -> Never {
    fatalError("\(what)\n  input: \(sql.debugDescription)")
}

// MARK: The rewrite

func checkRewrite(_ sql: String, _ bytes: [UInt8]) {
    let first = Result { try PostgresPlaceholders(rewriting: sql) }
    let again = Result { try PostgresPlaceholders(rewriting: sql) }
    guard "\(first)" == "\(again)" else { fail("rewrite not deterministic: \(first) then \(again)", sql) }
    let expected = ReferenceRewrite(bytes)
    switch (first, expected.failure) {
    case let (.failure(error), reason?):
        guard "\(error)" == reason else { fail("refused as \(error), expected \(reason)", sql) }
    case let (.failure(error), nil):
        fail("refused as \(error), expected \(String(decoding: expected.output, as: UTF8.self).debugDescription)", sql)
    case let (.success(result), reason?):
        fail("rewritten as \(result.sql.debugDescription), expected the refusal \(reason)", sql)
    case let (.success(result), nil):
        guard Array(result.sql.utf8) == expected.output else {
            fail("rewritten as \(result.sql.debugDescription), expected \(String(decoding: expected.output, as: UTF8.self).debugDescription)", sql)
        }
        guard result.sources == expected.sources, result.nativeCount == expected.largestNative else {
            fail("sources \(result.sources) native \(result.nativeCount), expected \(expected.sources) native \(expected.largestNative)", sql)
        }
        // What the server reads: its parameters, in order.
        let tokens = lex(Array(result.sql.utf8), placeholders: false)
        var parameters: [Int] = []
        for (offset, token) in tokens.enumerated() {
            guard case let .native(number) = token.kind else { continue }
            // `$1abc`: PostgreSQL 15 refuses "trailing junk after parameter".
            if offset + 1 < tokens.count, tokens[offset + 1].range.lowerBound == token.range.upperBound,
               case .word = tokens[offset + 1].kind { return }
            parameters.append(number ?? -1)
        }
        guard parameters == expected.parameters else {
            fail("PostgreSQL reads parameters \(parameters) in \(result.sql.debugDescription), meant \(expected.parameters)", sql)
        }
        if let wrong = parameters.first(where: { !(1...max(result.placeholderCount, 1)).contains($0) }) {
            fail("$\(wrong) outside 1...\(result.placeholderCount) in \(result.sql.debugDescription)", sql)
        }
    }
}

/// The rewrite from the documentation: placeholders numbered as SQLite
/// numbers them (a space before one right after a word), `??` a literal
/// `?`, everything else copied.
struct ReferenceRewrite {
    var output: [UInt8] = []
    var sources: [PostgresPlaceholders.Source] = []
    var largestNative = 0
    /// The numbers of the `$n` the server should see, in order.
    var parameters: [Int] = []
    var failure: String?

    init(_ bytes: [UInt8]) {
        let text = String(decoding: bytes, as: UTF8.self)
        var names: [String: Int] = [:]
        var sawNative = false
        for token in lex(bytes, placeholders: true) {
            let spelled = Array(bytes[token.range])
            let number: Int
            switch token.kind {
            case let .native(given):
                guard let given else { refuse("placeholder \(String(decoding: spelled, as: UTF8.self)) is out of range (1…65535): \(text)"); return }
                sawNative = true
                largestNative = max(largestNative, given)
                output += spelled
                parameters.append(given)
                continue
            case .next:
                number = sources.count + 1
                guard number <= 65_535 else { refuse("placeholder ? is out of range (1…65535): \(text)"); return }
                sources.append(.position(number))
            case let .numbered(given):
                guard let given else { refuse("placeholder \(String(decoding: spelled, as: UTF8.self)) is out of range (1…65535): \(text)"); return }
                number = given
                while sources.count < number { sources.append(.position(sources.count + 1)) }
            case let .name(name):
                if let known = names[name] {
                    number = known
                } else {
                    sources.append(.name(name))
                    number = sources.count
                    names[name] = number
                }
            case .literalQuestion:
                output.append(UInt8(ascii: "?"))
                continue
            default:
                output += spelled
                continue
            }
            // Apart from a word before it, which would swallow it.
            if let last = output.last, isIdentCont(last) { output.append(0x20) }
            output += Array("$\(number)".utf8)
            parameters.append(number)
        }
        if sawNative && !sources.isEmpty {
            refuse("a statement uses either PostgreSQL's $1…$n or opsh's ? and :name placeholders, not both: \(text)")
        }
    }

    private mutating func refuse(_ reason: String) { failure = reason }
}

// MARK: The split

func checkSplit(_ sql: String, _ bytes: [UInt8]) {
    let pieces = PostgresPlaceholders.statements(in: sql)
    guard pieces == PostgresPlaceholders.statements(in: sql) else { fail("split not deterministic", sql) }
    let expected = referenceSplit(bytes)
    guard pieces == expected else {
        fail("split into \(pieces), expected \(expected)", sql)
    }
    for piece in pieces {
        let tokens = lex(Array(piece.utf8), placeholders: false)
        if tokens.contains(where: { if case .semicolon = $0.kind { true } else { false } }) {
            fail("piece \(piece.debugDescription) holds a `;` PostgreSQL reads as the end of a statement", sql)
        }
        guard PostgresPlaceholders.statements(in: piece) == [piece] else {
            fail("piece \(piece.debugDescription) splits again into \(PostgresPlaceholders.statements(in: piece))", sql)
        }
    }
}

/// The text between top-level `;`, space trimmed, where there is code.
func referenceSplit(_ bytes: [UInt8]) -> [String] {
    var pieces: [String] = []
    var start = 0
    var hasCode = false
    func close(_ end: Int) {
        guard hasCode else { return }
        var lower = start, upper = end
        while lower < upper, isSpace(bytes[lower]) { lower += 1 }
        while upper > lower, isSpace(bytes[upper - 1]) { upper -= 1 }
        pieces.append(String(decoding: bytes[lower..<upper], as: UTF8.self))
    }
    for token in lex(bytes, placeholders: true) {
        switch token.kind {
        case .semicolon:
            close(token.range.lowerBound)
            start = token.range.upperBound
            hasCode = false
        case .space, .comment:
            break
        default:
            hasCode = true
        }
    }
    close(bytes.count)
    return pieces
}

// MARK: PostgreSQL's lexical rules

enum Kind {
    case space, comment, quoted, word, semicolon, code
    /// `$n` (nil: 0 or beyond 65,535).
    case native(Int?)
    /// `?`, `?NNN` (nil: out of range), `:name`, `??`.
    case next, numbered(Int?), name(String), literalQuestion
}

struct Token {
    let kind: Kind
    let range: Range<Int>
}

/// scan.l's `space` (with `\v`, PostgreSQL 16's).
func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || (0x09...0x0D).contains(byte) }
func isNewline(_ byte: UInt8) -> Bool { byte == 0x0A || byte == 0x0D }
func isDigit(_ byte: UInt8) -> Bool { (0x30...0x39).contains(byte) }
/// scan.l's `ident_start`: `[A-Za-z\200-\377_]`.
func isIdentStart(_ byte: UInt8) -> Bool {
    (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte) || byte == 0x5F || byte >= 0x80
}
/// scan.l's `ident_cont`: `[A-Za-z\200-\377_0-9\$]`.
func isIdentCont(_ byte: UInt8) -> Bool { isIdentStart(byte) || isDigit(byte) || byte == 0x24 }

/// `$n` or `?n` as a number in 1...65535, nil otherwise.
func parameterNumber(_ digits: ArraySlice<UInt8>) -> Int? {
    var number = 0
    for digit in digits {
        number = number * 10 + Int(digit - 0x30)
        if number > 65_535 { return nil }
    }
    return number >= 1 ? number : nil
}

/// Tokens by scan.l's rules; with `placeholders`, SQLite's `?`, `?NNN`,
/// `:name` and the `??` escape as PostgresPlaceholders documents them
/// (`?|` and `?&` stay operators, `::` a cast).
func lex(_ bytes: [UInt8], placeholders: Bool) -> [Token] {
    let count = bytes.count
    func at(_ position: Int) -> UInt8? { position < count ? bytes[position] : nil }
    /// `--` to the end of the line: scan.l's `non_newline` is `[^\n\r]`.
    func endOfLineComment(_ start: Int) -> Int {
        var end = start + 2
        while end < count, !isNewline(bytes[end]) { end += 1 }
        return end
    }
    /// scan.l's `{whitespace_with_newline}{quote}` after a closing quote:
    /// the string goes on in the state it was in. Where the next quote is.
    func continuation(_ start: Int) -> Int? {
        var position = start
        while position < count {
            if bytes[position] == 0x20 || bytes[position] == 0x09 || bytes[position] == 0x0C {
                position += 1
            } else if bytes[position] == 0x2D, at(position + 1) == 0x2D {
                position = endOfLineComment(position)
            } else {
                break
            }
        }
        guard position < count, isNewline(bytes[position]) else { return nil }
        position += 1
        while position < count {
            if isSpace(bytes[position]) {
                position += 1
            } else if bytes[position] == 0x2D, at(position + 1) == 0x2D {
                let end = endOfLineComment(position)
                guard end < count else { break }
                position = end + 1
            } else {
                break
            }
        }
        return at(position) == 0x27 ? position : nil
    }
    func endOfQuoted(_ start: Int, quote: UInt8, escapes: Bool) -> Int {
        var position = start + 1
        while position < count {
            let byte = bytes[position]
            if escapes, byte == 0x5C {
                position += 2
            } else if byte == quote {
                if at(position + 1) == quote {
                    position += 2
                } else if quote == 0x27, let next = continuation(position + 1) {
                    position = next + 1
                } else {
                    return position + 1
                }
            } else {
                position += 1
            }
        }
        return count
    }

    var tokens: [Token] = []
    var index = 0
    while index < count {
        let start = index
        let byte = bytes[index]
        let kind: Kind
        if isSpace(byte) {
            index += 1
            kind = .space
        } else if byte == 0x2D, at(index + 1) == 0x2D {
            index = endOfLineComment(index)
            kind = .comment
        } else if byte == 0x2F, at(index + 1) == 0x2A {
            var depth = 1
            index += 2
            while index < count, depth > 0 {
                if bytes[index] == 0x2F, at(index + 1) == 0x2A {
                    depth += 1
                    index += 2
                } else if bytes[index] == 0x2A, at(index + 1) == 0x2F {
                    depth -= 1
                    index += 2
                } else {
                    index += 1
                }
            }
            if depth > 0 { index = count }
            kind = .comment
        } else if byte == 0x27 {
            // E'…': the E begins its token (a digit before it: PostgreSQL 15
            // refuses `1E` as trailing junk after a number).
            let escapes = index > 0 && (bytes[index - 1] == 0x45 || bytes[index - 1] == 0x65)
                && (index < 2 || !isIdentCont(bytes[index - 2]))
            index = endOfQuoted(index, quote: byte, escapes: escapes)
            kind = .quoted
        } else if byte == 0x22 {
            index = endOfQuoted(index, quote: byte, escapes: false)
            kind = .quoted
        } else if byte == 0x24 {
            if let next = at(index + 1), isDigit(next) {
                var end = index + 1
                while end < count, isDigit(bytes[end]) { end += 1 }
                kind = .native(parameterNumber(bytes[(index + 1)..<end]))
                index = end
            } else {
                var end = index + 1
                if let next = at(end), isIdentStart(next) {
                    end += 1
                    while end < count, isIdentStart(bytes[end]) || isDigit(bytes[end]) { end += 1 }
                }
                if at(end) == 0x24 {
                    let tag = bytes[index...end]
                    var position = end + 1
                    index = count
                    while position + tag.count <= count {
                        if bytes[position..<(position + tag.count)].elementsEqual(tag) {
                            index = position + tag.count
                            break
                        }
                        position += 1
                    }
                    kind = .quoted
                } else {
                    index += 1
                    kind = .code
                }
            }
        } else if placeholders, byte == 0x3F {
            if at(index + 1) == 0x3F {
                index += 2
                kind = .literalQuestion
            } else if at(index + 1) == 0x7C || at(index + 1) == 0x26 {
                index += 1
                kind = .code
            } else {
                var end = index + 1
                while end < count, isDigit(bytes[end]) { end += 1 }
                kind = end > index + 1 ? .numbered(parameterNumber(bytes[(index + 1)..<end])) : .next
                index = end
            }
        } else if placeholders, byte == 0x3A, at(index + 1) == 0x3A {
            index += 2
            kind = .code
        } else if placeholders, byte == 0x3A, let next = at(index + 1), isIdentStart(next) {
            var end = index + 2
            while end < count, isIdentStart(bytes[end]) || isDigit(bytes[end]) { end += 1 }
            kind = .name(String(decoding: bytes[(index + 1)..<end], as: UTF8.self))
            index = end
        } else if byte == 0x3B {
            index += 1
            kind = .semicolon
        } else if isIdentStart(byte) {
            index += 1
            while index < count, isIdentCont(bytes[index]) { index += 1 }
            kind = .word
        } else {
            index += 1
            kind = .code
        }
        tokens.append(Token(kind: kind, range: start..<index))
    }
    return tokens
}
