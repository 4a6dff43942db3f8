import Foundation

/// Rewrites the placeholders opsh's SQL is written with — SQLite's `?`,
/// `?NNN` and `:name` — into PostgreSQL's `$1 … $n`, so that a script's
/// `db.query("… WHERE id = ?", id)` runs unchanged on both engines.
///
/// PostgreSQL's lexical rules decide what is a placeholder. Nothing is
/// rewritten inside
/// - string constants: `'…'` with `''` (a backslash is an ordinary
///   character: `standard_conforming_strings` is on, PostgreSQL's default),
///   `E'…'` with backslash escapes, `U&'…'`, `B'…'`, `X'…'`;
/// - quoted identifiers: `"…"` with `""`;
/// - dollar quotes: `$$…$$`, `$tag$…$tag$` (a function body);
/// - comments: `-- …` to the end of the line (a `\n` or a `\r`), and
///   `/* … */`, which nest.
///
/// A string goes on after its closing quote where space with a newline
/// (and `--` comments) leads to another quote: `E'a'` newline `'\';'` is
/// one string with escapes.
///
/// Outside them:
/// - `?` is the next placeholder (one more than the largest number given so
///   far, as SQLite numbers them), `?NNN` is placeholder NNN;
/// - `:name` is a named placeholder (the same name is the same
///   placeholder), but `::` is a cast (`x::int`) and a name must start with
///   a letter or `_` (`a[1:2]` is a slice);
/// - `?|` and `?&` are operators (jsonb's "any key", "all keys"; geometry's
///   `?|`, `?||`), and `??` is a literal `?` (jsonb's "key exists", written
///   twice as JDBC has it; also `??-`, `??#`, `??-|` for geometry's
///   `?-`, `?#`, `?-|`);
/// - `$1 … $n` are PostgreSQL's own placeholders, kept as they are; a
///   statement may not mix them with `?` or `:name`.
///
/// A `$k` written right after a word gets a space before it (`LIMIT?`
/// becomes `LIMIT $1`): `LIMIT$1` would be one identifier to the server.
public struct PostgresPlaceholders: Sendable, Equatable {
    /// What each `$k` is, for k = 1…n. Numbers are SQLite's: values given
    /// by position bind `$k` to the k-th value whatever its spelling, as
    /// SQLite binds them; a table of values binds each `:name` by name.
    public enum Source: Sendable, Equatable {
        /// `?` or `?k`.
        case position(Int)
        /// `:name` (the name without the `:`).
        case name(String)
    }

    /// The statement with `$1 … $n`.
    public let sql: String
    /// `sources[k - 1]` binds `$k`.
    public let sources: [Source]
    /// The largest of PostgreSQL's own `$n` the statement was written
    /// with (0 without them): how many values it takes then.
    public let nativeCount: Int

    public enum Failure: Error, Equatable, CustomStringConvertible {
        /// `$n` beside `?` or `:name`: the numbers would collide.
        case mixed(sql: String)
        /// `?0`, or a number beyond PostgreSQL's 65,535 parameters.
        case badNumber(String, sql: String)

        public var description: String {
            switch self {
            case let .mixed(sql):
                "a statement uses either PostgreSQL's $1…$n or opsh's ? and :name placeholders, not both: \(sql)"
            case let .badNumber(text, sql):
                "placeholder \(text) is out of range (1…65535): \(sql)"
            }
        }
    }

    /// PostgreSQL's limit on a statement's parameters.
    static let maximum = 65_535

    /// Names of opsh's schema to write schema-qualified in opsh's own
    /// statements (``PostgresHomeSchema``): a table's name where a table
    /// is named (after `FROM`, `JOIN`, `INTO`, `UPDATE`, `TABLE`, `ON`,
    /// `REFERENCES`, `EXISTS`, `TRUNCATE`, `LOCK`), a function's before
    /// its `(`; never a name after or before a `.` (a column's table, or a
    /// name qualified already), nor one inside a literal, quoted text or
    /// comment. Plain or quoted, as the schema folds it (lower case).
    public struct Qualifier: Sendable, Equatable {
        /// The schema, quoted, and its `.`.
        let prefix: [UInt8]
        let tables: Set<String>
        let functions: Set<String>

        public init(schema quoted: String, tables: [String], functions: [String]) {
            prefix = Array((quoted + ".").utf8)
            self.tables = Set(tables.map { $0.lowercased() })
            self.functions = Set(functions.map { $0.lowercased() })
        }
    }

    /// Rewrites `sql`; a statement without placeholders comes back as it
    /// is. With `qualifier`, its names of opsh's schema are qualified too.
    public init(rewriting sql: String, qualifying qualifier: Qualifier? = nil) throws {
        var scanner = Scanner(Array(sql.utf8))
        scanner.qualifier = qualifier
        let (rewritten, sources) = try scanner.rewrite(original: sql)
        self.sql = rewritten
        self.sources = sources
        nativeCount = scanner.largestNative
    }

    /// How many values the statement takes by position: one per `$k`.
    public var placeholderCount: Int { sources.isEmpty ? nativeCount : sources.count }

    /// The statements of a script, split at each `;` the lexical rules
    /// above leave outside literals, quoted identifiers, dollar quotes and
    /// comments; pieces with nothing but space and comments are left out.
    /// What is split wrongly (a `BEGIN ATOMIC … END` function body, whose
    /// `;` are its own) reaches the server as a piece it refuses, never as
    /// two statements in one: the extended protocol runs one at a time.
    public static func statements(in sql: String) -> [String] {
        var scanner = Scanner(Array(sql.utf8))
        // A placeholder out of range does not stop the scan: the piece
        // that holds it is refused when it runs.
        _ = try? scanner.rewrite(original: sql)
        var pieces: [String] = []
        var start = 0
        for (end, hasCode) in zip(scanner.statementEnds + [scanner.bytes.count], scanner.pieceHasCode + [scanner.codeSinceEnd]) {
            if hasCode {
                // Trimmed of the space the scanner skips, no more: a
                // no-break space is part of a word to the server.
                var lower = start, upper = end
                while lower < upper, Scanner.isSpace(scanner.bytes[lower]) { lower += 1 }
                while upper > lower, Scanner.isSpace(scanner.bytes[upper - 1]) { upper -= 1 }
                pieces.append(String(decoding: scanner.bytes[lower..<upper], as: UTF8.self))
            }
            start = min(end + 1, scanner.bytes.count)
        }
        return pieces
    }
}

private struct Scanner {
    let bytes: [UInt8]
    var index = 0
    var output: [UInt8] = []
    var sources: [PostgresPlaceholders.Source] = []
    /// `:name` → its number.
    var names: [String: Int] = [:]
    var sawNative = false
    /// The largest `$n` seen.
    var largestNative = 0
    /// Where each top-level `;` is, and whether the piece it ends had any
    /// code (not only space and comments).
    var statementEnds: [Int] = []
    var pieceHasCode: [Bool] = []
    var codeSinceEnd = false
    /// The first placeholder out of range, thrown once the scan is done.
    var failure: PostgresPlaceholders.Failure?
    var qualifier: PostgresPlaceholders.Qualifier?
    /// The word just before, upper-cased, when nothing but space came
    /// after it: a table's name is qualified only after a keyword that
    /// names a table.
    var previousWord: String?
    static let beforeTable: Set<String> = ["FROM", "JOIN", "INTO", "UPDATE", "TABLE", "ON", "REFERENCES", "EXISTS", "TRUNCATE", "LOCK"]

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
        output.reserveCapacity(bytes.count + 8)
    }

    func peek(_ offset: Int = 0) -> UInt8? {
        let position = index + offset
        return position < bytes.count ? bytes[position] : nil
    }

    static func isNameStart(_ byte: UInt8) -> Bool {
        (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
            || byte == UInt8(ascii: "_") || byte >= 0x80
    }

    static func isSpace(_ byte: UInt8) -> Bool { byte == UInt8(ascii: " ") || (byte >= 0x09 && byte <= 0x0D) }
    static func isNamePart(_ byte: UInt8) -> Bool { isNameStart(byte) || isDigit(byte) || byte == UInt8(ascii: "$") }
    static func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

    /// Copies bytes up to and including the end of what starts here.
    mutating func copy(through end: Int) {
        let stop = min(end, bytes.count)
        output.append(contentsOf: bytes[index..<stop])
        index = stop
    }

    mutating func rewrite(original: String) throws -> (String, [PostgresPlaceholders.Source]) {
        while let byte = peek() {
            let startsComment = (byte == UInt8(ascii: "-") && peek(1) == UInt8(ascii: "-"))
                || (byte == UInt8(ascii: "/") && peek(1) == UInt8(ascii: "*"))
            if !startsComment, !Self.isSpace(byte), byte != UInt8(ascii: ";") { codeSinceEnd = true }
            let wordBefore = previousWord
            if !startsComment, !Self.isSpace(byte), !Self.isNameStart(byte) { previousWord = nil }
            switch byte {
            case UInt8(ascii: "'"):
                // E'…' (or e'…') allows backslash escapes; the prefix letter
                // was copied as part of a word just before.
                let escapes = index > 0 && (bytes[index - 1] == UInt8(ascii: "E") || bytes[index - 1] == UInt8(ascii: "e"))
                    && (index < 2 || !Self.isNamePart(bytes[index - 2]))
                copy(through: endOfQuoted(from: index, quote: byte, backslashEscapes: escapes))
            case UInt8(ascii: "\""):
                let end = endOfQuoted(from: index, quote: byte, backslashEscapes: false)
                if let qualifier, end - index >= 2, bytes[end - 1] == byte {
                    let name = String(decoding: bytes[(index + 1)..<(end - 1)], as: UTF8.self).replacingOccurrences(of: "\"\"", with: "\"")
                    qualify(name, qualifier, end: end, wordBefore: wordBefore, folded: false)
                }
                copy(through: end)
            case UInt8(ascii: "-") where peek(1) == UInt8(ascii: "-"):
                copy(through: endOfLineComment(from: index))
            case UInt8(ascii: "/") where peek(1) == UInt8(ascii: "*"):
                copy(through: endOfBlockComment(from: index))
            case UInt8(ascii: "$"):
                dollar()
            case UInt8(ascii: "?"):
                question(original: original)
            case UInt8(ascii: ":"):
                colon()
            case UInt8(ascii: ";"):
                statementEnds.append(index)
                pieceHasCode.append(codeSinceEnd)
                codeSinceEnd = false
                output.append(byte)
                index += 1
            default:
                if Self.isNameStart(byte) {
                    // A whole word: a `$` or quote inside it belongs to it.
                    var end = index + 1
                    while end < bytes.count, Self.isNamePart(bytes[end]) { end += 1 }
                    let word = String(decoding: bytes[index..<end], as: UTF8.self)
                    if let qualifier { qualify(word, qualifier, end: end, wordBefore: wordBefore, folded: true) }
                    copy(through: end)
                    previousWord = word.uppercased()
                } else {
                    output.append(byte)
                    index += 1
                }
            }
        }
        if let failure { throw failure }
        if sawNative && !sources.isEmpty { throw PostgresPlaceholders.Failure.mixed(sql: original) }
        return (String(decoding: output, as: UTF8.self), sources)
    }

    /// Writes the schema before the name at `index` (ending at `end`)
    /// when it names one of opsh's tables or functions (``PostgresPlaceholders/Qualifier``).
    mutating func qualify(_ name: String, _ qualifier: PostgresPlaceholders.Qualifier, end: Int, wordBefore: String?, folded: Bool) {
        let key = folded ? name.lowercased() : name
        if let last = output.last(where: { !Self.isSpace($0) }), last == UInt8(ascii: ".") { return }
        var next = end
        while next < bytes.count, Self.isSpace(bytes[next]) { next += 1 }
        let following = next < bytes.count ? bytes[next] : nil
        if following == UInt8(ascii: ".") { return }
        let isTable = qualifier.tables.contains(key) && wordBefore.map(Self.beforeTable.contains) == true
        let isFunction = qualifier.functions.contains(key) && following == UInt8(ascii: "(")
        if isTable || isFunction { output.append(contentsOf: qualifier.prefix) }
    }

    /// One past the closing quote (the end of the text when unclosed: the
    /// server then reports it).
    func endOfQuoted(from start: Int, quote: UInt8, backslashEscapes: Bool) -> Int {
        var position = start + 1
        while position < bytes.count {
            let byte = bytes[position]
            if backslashEscapes && byte == UInt8(ascii: "\\") {
                position += 2
                continue
            }
            if byte == quote {
                if position + 1 < bytes.count, bytes[position + 1] == quote {
                    position += 2
                    continue
                }
                if quote == UInt8(ascii: "'"), let next = continuation(after: position + 1) {
                    position = next + 1
                    continue
                }
                return position + 1
            }
            position += 1
        }
        return bytes.count
    }

    /// Where `--` ends: before the `\n` or `\r` that ends its line.
    func endOfLineComment(from start: Int) -> Int {
        var end = start + 2
        while end < bytes.count, bytes[end] != UInt8(ascii: "\n"), bytes[end] != UInt8(ascii: "\r") { end += 1 }
        return end
    }

    /// The quote that continues a string closed just before `start`:
    /// spaces and `--` comments, a newline, then any space and comments
    /// ended by a newline (PostgreSQL's `whitespace_with_newline`).
    func continuation(after start: Int) -> Int? {
        var position = start
        while position < bytes.count {
            if bytes[position] == UInt8(ascii: " ") || bytes[position] == UInt8(ascii: "\t") || bytes[position] == 0x0C {
                position += 1
            } else if bytes[position] == UInt8(ascii: "-"), position + 1 < bytes.count, bytes[position + 1] == UInt8(ascii: "-") {
                position = endOfLineComment(from: position)
            } else {
                break
            }
        }
        guard position < bytes.count, bytes[position] == UInt8(ascii: "\n") || bytes[position] == UInt8(ascii: "\r") else { return nil }
        position += 1
        while position < bytes.count {
            if Self.isSpace(bytes[position]) {
                position += 1
            } else if bytes[position] == UInt8(ascii: "-"), position + 1 < bytes.count, bytes[position + 1] == UInt8(ascii: "-") {
                let end = endOfLineComment(from: position)
                guard end < bytes.count else { return nil }
                position = end + 1
            } else {
                break
            }
        }
        return position < bytes.count && bytes[position] == UInt8(ascii: "'") ? position : nil
    }

    /// One past the `*/` that closes the comment at `start`, nesting.
    func endOfBlockComment(from start: Int) -> Int {
        var depth = 0
        var position = start
        while position + 1 < bytes.count {
            if bytes[position] == UInt8(ascii: "/"), bytes[position + 1] == UInt8(ascii: "*") {
                depth += 1
                position += 2
            } else if bytes[position] == UInt8(ascii: "*"), bytes[position + 1] == UInt8(ascii: "/") {
                depth -= 1
                position += 2
                if depth == 0 { return position }
            } else {
                position += 1
            }
        }
        return bytes.count
    }

    /// `$n` (PostgreSQL's placeholder), `$tag$…$tag$`, or a lone `$`.
    mutating func dollar() {
        if let next = peek(1), Self.isDigit(next) {
            sawNative = true
            var end = index + 1
            while end < bytes.count, Self.isDigit(bytes[end]) { end += 1 }
            let text = String(decoding: bytes[index..<end], as: UTF8.self)
            guard let number = Int(text.dropFirst()), number >= 1, number <= PostgresPlaceholders.maximum else {
                failure = failure ?? .badNumber(text, sql: String(decoding: bytes, as: UTF8.self))
                copy(through: end)
                return
            }
            largestNative = max(largestNative, number)
            copy(through: end)
            return
        }
        // A tag: empty, or a name without `$`.
        var end = index + 1
        if end < bytes.count, Self.isNameStart(bytes[end]) {
            end += 1
            while end < bytes.count, Self.isNameStart(bytes[end]) || Self.isDigit(bytes[end]) { end += 1 }
        }
        guard end < bytes.count, bytes[end] == UInt8(ascii: "$") else {
            output.append(UInt8(ascii: "$"))
            index += 1
            return
        }
        let tag = Array(bytes[index...end])
        var position = end + 1
        while position + tag.count <= bytes.count {
            if bytes[position] == UInt8(ascii: "$"), Array(bytes[position..<(position + tag.count)]) == tag {
                copy(through: position + tag.count)
                return
            }
            position += 1
        }
        copy(through: bytes.count)
    }

    mutating func question(original: String) {
        switch peek(1) {
        case UInt8(ascii: "?"):
            // `??` is one literal `?`.
            output.append(UInt8(ascii: "?"))
            index += 2
            return
        case UInt8(ascii: "|"), UInt8(ascii: "&"):
            output.append(UInt8(ascii: "?"))
            index += 1
            return
        default:
            break
        }
        var end = index + 1
        while end < bytes.count, Self.isDigit(bytes[end]) { end += 1 }
        let number: Int
        if end > index + 1 {
            let text = String(decoding: bytes[index..<end], as: UTF8.self)
            guard let given = Int(text.dropFirst()), given >= 1, given <= PostgresPlaceholders.maximum else {
                failure = failure ?? .badNumber(text, sql: original)
                copy(through: end)
                return
            }
            number = given
            while sources.count < number { sources.append(.position(sources.count + 1)) }
        } else {
            // SQLite: one more than the largest number so far.
            number = sources.count + 1
            guard number <= PostgresPlaceholders.maximum else {
                failure = failure ?? .badNumber("?", sql: original)
                copy(through: end)
                return
            }
            sources.append(.position(number))
        }
        appendPlaceholder(number)
        index = end
    }

    /// `:name`, or `::` (a cast), or a lone `:`.
    mutating func colon() {
        if peek(1) == UInt8(ascii: ":") {
            output.append(contentsOf: [UInt8(ascii: ":"), UInt8(ascii: ":")])
            index += 2
            return
        }
        guard let next = peek(1), Self.isNameStart(next) else {
            output.append(UInt8(ascii: ":"))
            index += 1
            return
        }
        var end = index + 2
        while end < bytes.count, Self.isNameStart(bytes[end]) || Self.isDigit(bytes[end]) { end += 1 }
        let name = String(decoding: bytes[(index + 1)..<end], as: UTF8.self)
        let number: Int
        if let known = names[name] {
            number = known
        } else {
            sources.append(.name(name))
            number = sources.count
            names[name] = number
        }
        appendPlaceholder(number)
        index = end
    }

    /// `$number`, apart from a word just before it.
    mutating func appendPlaceholder(_ number: Int) {
        if let last = output.last, Self.isNamePart(last) { output.append(UInt8(ascii: " ")) }
        output.append(contentsOf: Array("$\(number)".utf8))
    }
}
