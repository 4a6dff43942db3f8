import Foundation

/// The one JSON reader (`json.decode`, import documents, JSON columns): a
/// strict parser (RFC 8259) whose errors say where, as the line and column
/// (in characters, from 1) of the offending character. Integers that fit
/// in 64 bits stay exact; numbers beyond a double's range are refused
/// (JSON has no infinity, and opsh would not write one back).
public struct JSONParser {
    public struct Failure: Error, Equatable, CustomStringConvertible {
        public let line: Int
        public let column: Int
        public let reason: String

        public init(line: Int, column: Int, reason: String) {
            self.line = line
            self.column = column
            self.reason = reason
        }

        public var description: String { "invalid JSON at line \(line), column \(column): \(reason)" }
    }

    public static let maxDepth = 200

    private let bytes: [UInt8]
    private var position = 0

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
    }

    public static func parse(_ bytes: [UInt8]) throws -> JSON {
        var parser = JSONParser(bytes)
        parser.skipSpace()
        let value = try parser.value(depth: 0)
        parser.skipSpace()
        if parser.position < parser.bytes.count {
            throw parser.failure("unexpected \(parser.describeCurrent()) after the JSON value")
        }
        return value
    }

    // MARK: Errors

    private func failure(_ reason: String, at offset: Int? = nil) -> Failure {
        let end = min(offset ?? position, bytes.count)
        var line = 1
        var column = 1
        var index = 0
        while index < end {
            let byte = bytes[index]
            if byte == 0x0A {
                line += 1
                column = 1
            } else if byte & 0xC0 != 0x80 {
                column += 1
            }
            index += 1
        }
        return Failure(line: line, column: column, reason: reason)
    }

    private func describeCurrent() -> String {
        guard position < bytes.count else { return "end of text" }
        let byte = bytes[position]
        if byte >= 0x20 && byte < 0x7F { return "'\(Character(Unicode.Scalar(byte)))'" }
        if byte >= 0x80 {
            // The whole character, when it decodes.
            var end = position + 1
            while end < bytes.count && bytes[end] & 0xC0 == 0x80 && end - position < 4 { end += 1 }
            if let text = String(validating: bytes[position..<end], as: UTF8.self) { return "'\(text)'" }
        }
        return String(format: "byte 0x%02X", byte)
    }

    // MARK: Grammar

    private mutating func skipSpace() {
        while position < bytes.count {
            switch bytes[position] {
            case 0x20, 0x09, 0x0A, 0x0D: position += 1
            default: return
            }
        }
    }

    private mutating func value(depth: Int) throws -> JSON {
        guard position < bytes.count else { throw failure("unexpected end of text, expected a value") }
        switch bytes[position] {
        case UInt8(ascii: "{"): return try object(depth: depth + 1)
        case UInt8(ascii: "["): return try array(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
        default: throw failure("expected a value, found \(describeCurrent())")
        }
    }

    private mutating func literal(_ word: String) throws {
        let start = position
        for expected in word.utf8 {
            guard position < bytes.count, bytes[position] == expected else {
                throw failure("expected '\(word)'", at: start)
            }
            position += 1
        }
    }

    private mutating func object(depth: Int) throws -> JSON {
        guard depth <= Self.maxDepth else { throw failure("nesting deeper than \(Self.maxDepth) levels") }
        position += 1
        var members: [(String, JSON)] = []
        skipSpace()
        if position < bytes.count && bytes[position] == UInt8(ascii: "}") {
            position += 1
            return .object(members)
        }
        while true {
            skipSpace()
            guard position < bytes.count, bytes[position] == UInt8(ascii: "\"") else {
                throw failure("expected a string key, found \(describeCurrent())")
            }
            let key = try string()
            skipSpace()
            guard position < bytes.count, bytes[position] == UInt8(ascii: ":") else {
                throw failure("expected ':' after the key \"\(key)\", found \(describeCurrent())")
            }
            position += 1
            skipSpace()
            members.append((key, try value(depth: depth)))
            skipSpace()
            guard position < bytes.count else { throw failure("unexpected end of text, expected ',' or '}'") }
            switch bytes[position] {
            case UInt8(ascii: ","): position += 1
            case UInt8(ascii: "}"): position += 1; return .object(members)
            default: throw failure("expected ',' or '}' after an object member, found \(describeCurrent())")
            }
        }
    }

    private mutating func array(depth: Int) throws -> JSON {
        guard depth <= Self.maxDepth else { throw failure("nesting deeper than \(Self.maxDepth) levels") }
        position += 1
        var elements: [JSON] = []
        skipSpace()
        if position < bytes.count && bytes[position] == UInt8(ascii: "]") {
            position += 1
            return .array(elements)
        }
        while true {
            skipSpace()
            elements.append(try value(depth: depth))
            skipSpace()
            guard position < bytes.count else { throw failure("unexpected end of text, expected ',' or ']'") }
            switch bytes[position] {
            case UInt8(ascii: ","): position += 1
            case UInt8(ascii: "]"): position += 1; return .array(elements)
            default: throw failure("expected ',' or ']' after an array element, found \(describeCurrent())")
            }
        }
    }

    private mutating func string() throws -> String {
        position += 1  // the opening quote
        var output: [UInt8] = []
        var runStart = position
        while true {
            guard position < bytes.count else { throw failure("unexpected end of text inside a string") }
            let byte = bytes[position]
            if byte == UInt8(ascii: "\"") {
                output.append(contentsOf: bytes[runStart..<position])
                position += 1
                break
            }
            if byte < 0x20 {
                throw failure("control character \(String(format: "0x%02X", byte)) inside a string (write it as an escape)")
            }
            if byte != UInt8(ascii: "\\") {
                position += 1
                continue
            }
            output.append(contentsOf: bytes[runStart..<position])
            let escapeStart = position
            position += 1
            guard position < bytes.count else { throw failure("unexpected end of text inside a string") }
            let code = bytes[position]
            position += 1
            switch code {
            case UInt8(ascii: "\""): output.append(0x22)
            case UInt8(ascii: "\\"): output.append(0x5C)
            case UInt8(ascii: "/"): output.append(0x2F)
            case UInt8(ascii: "b"): output.append(0x08)
            case UInt8(ascii: "f"): output.append(0x0C)
            case UInt8(ascii: "n"): output.append(0x0A)
            case UInt8(ascii: "r"): output.append(0x0D)
            case UInt8(ascii: "t"): output.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = try hex4(escapeStart)
                if (0xD800...0xDBFF).contains(scalar) {
                    guard position + 1 < bytes.count, bytes[position] == UInt8(ascii: "\\"), bytes[position + 1] == UInt8(ascii: "u") else {
                        throw failure("unpaired surrogate \\u\(String(format: "%04X", scalar))", at: escapeStart)
                    }
                    position += 2
                    let low = try hex4(escapeStart)
                    guard (0xDC00...0xDFFF).contains(low) else {
                        throw failure("unpaired surrogate \\u\(String(format: "%04X", scalar))", at: escapeStart)
                    }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                } else if (0xDC00...0xDFFF).contains(scalar) {
                    throw failure("unpaired surrogate \\u\(String(format: "%04X", scalar))", at: escapeStart)
                }
                output.append(contentsOf: String(Character(Unicode.Scalar(scalar)!)).utf8)
            default:
                let shown = code >= 0x20 && code < 0x7F ? String(Character(Unicode.Scalar(code))) : String(format: "\\x%02X", code)
                throw failure("invalid escape '\\\(shown)' in a string", at: escapeStart)
            }
            runStart = position
        }
        guard let text = String(validating: output, as: UTF8.self) else {
            throw failure("a string that is not valid UTF-8", at: runStart - 1)
        }
        return text
    }

    private mutating func hex4(_ escapeStart: Int) throws -> UInt32 {
        guard position + 4 <= bytes.count else { throw failure("unexpected end of text in a \\u escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[position]
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: throw failure("invalid \\u escape: \(describeCurrent()) is not a hex digit")
            }
            value = value * 16 + digit
            position += 1
        }
        return value
    }

    private mutating func number() throws -> JSON {
        let start = position
        var isInteger = true
        if bytes[position] == UInt8(ascii: "-") { position += 1 }
        guard position < bytes.count, isDigit(bytes[position]) else {
            throw failure("invalid number: expected a digit after '-'", at: position)
        }
        if bytes[position] == UInt8(ascii: "0") {
            position += 1
            if position < bytes.count, isDigit(bytes[position]) {
                throw failure("invalid number: leading zeros are not allowed", at: start)
            }
        } else {
            while position < bytes.count, isDigit(bytes[position]) { position += 1 }
        }
        if position < bytes.count, bytes[position] == UInt8(ascii: ".") {
            isInteger = false
            position += 1
            guard position < bytes.count, isDigit(bytes[position]) else {
                throw failure("invalid number: expected a digit after '.'")
            }
            while position < bytes.count, isDigit(bytes[position]) { position += 1 }
        }
        if position < bytes.count, bytes[position] == UInt8(ascii: "e") || bytes[position] == UInt8(ascii: "E") {
            isInteger = false
            position += 1
            if position < bytes.count, bytes[position] == UInt8(ascii: "+") || bytes[position] == UInt8(ascii: "-") { position += 1 }
            guard position < bytes.count, isDigit(bytes[position]) else {
                throw failure("invalid number: expected a digit in the exponent")
            }
            while position < bytes.count, isDigit(bytes[position]) { position += 1 }
        }
        let text = String(decoding: bytes[start..<position], as: UTF8.self)
        // Integers that fit stay integers; bigger ones become floats.
        if isInteger, let integer = Int64(text) { return .integer(integer) }
        guard let number = Double(text) else { throw failure("invalid number", at: start) }
        guard number.isFinite else { throw failure("number out of range: \(text)", at: start) }
        return .real(number)
    }

    private func isDigit(_ byte: UInt8) -> Bool {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
    }
}
