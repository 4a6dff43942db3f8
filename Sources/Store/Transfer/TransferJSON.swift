import Foundation

/// A JSON value of an export document, as read and written by ``Transfer``.
///
/// Integers and floats stay apart (`3` is an integer, `3.0` a float), and
/// object members keep their order, so a document written twice from the
/// same rows is the same text.
public indirect enum TransferJSON: Equatable, Sendable {
    case null
    case bool(Bool)
    case integer(Int64)
    case real(Double)
    case string(String)
    case array([TransferJSON])
    case object([(String, TransferJSON)])

    public static func == (lhs: TransferJSON, rhs: TransferJSON) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return true
        case let (.bool(a), .bool(b)): return a == b
        case let (.integer(a), .integer(b)): return a == b
        case let (.real(a), .real(b)): return a == b
        case let (.string(a), .string(b)): return a == b
        case let (.array(a), .array(b)): return a == b
        case let (.object(a), .object(b)):
            return a.count == b.count && zip(a, b).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
        default: return false
        }
    }

    /// The member called `name` of an object.
    public subscript(name: String) -> TransferJSON? {
        guard case let .object(members) = self else { return nil }
        return members.first { $0.0 == name }?.1
    }

    /// `object`, `array`, `string`, `number` (integer or float), `boolean`, `null`.
    public var typeName: String {
        switch self {
        case .null: return "null"
        case .bool: return "boolean"
        case .integer: return "integer"
        case .real: return "number"
        case .string: return "string"
        case .array: return "array"
        case .object: return "object"
        }
    }

    // MARK: Writing

    /// Pretty-printed text: two-space indentation, one row per line.
    public func text(indent: Int = 0) -> String {
        var output = ""
        write(to: &output, indent: indent)
        return output
    }

    private func write(to output: inout String, indent: Int) {
        switch self {
        case .null: output += "null"
        case let .bool(flag): output += flag ? "true" : "false"
        case let .integer(value): output += String(value)
        case let .real(value): output += Self.number(value)
        case let .string(text): Self.quote(text, into: &output)
        case let .array(items):
            if items.isEmpty { output += "[]"; return }
            let pad = String(repeating: "  ", count: indent + 1)
            output += "[\n"
            for (index, item) in items.enumerated() {
                output += pad
                // Rows (flat objects) on one line each.
                if case let .object(members) = item, members.allSatisfy({ !$0.1.isContainer }) {
                    item.writeCompact(to: &output)
                } else {
                    item.write(to: &output, indent: indent + 1)
                }
                output += index == items.count - 1 ? "\n" : ",\n"
            }
            output += String(repeating: "  ", count: indent) + "]"
        case let .object(members):
            if members.isEmpty { output += "{}"; return }
            let pad = String(repeating: "  ", count: indent + 1)
            output += "{\n"
            for (index, (name, value)) in members.enumerated() {
                output += pad
                Self.quote(name, into: &output)
                output += ": "
                value.write(to: &output, indent: indent + 1)
                output += index == members.count - 1 ? "\n" : ",\n"
            }
            output += String(repeating: "  ", count: indent) + "}"
        }
    }

    private var isContainer: Bool {
        switch self {
        case .array, .object: return true
        default: return false
        }
    }

    private func writeCompact(to output: inout String) {
        guard case let .object(members) = self else { write(to: &output, indent: 0); return }
        output += "{"
        for (index, (name, value)) in members.enumerated() {
            if index > 0 { output += ", " }
            Self.quote(name, into: &output)
            output += ": "
            value.write(to: &output, indent: 0)
        }
        output += "}"
    }

    /// The shortest text that reads back as the same double, always with a
    /// `.` or an exponent so that it reads back as a float.
    static func number(_ value: Double) -> String {
        var text = "\(value)"
        if !text.contains(".") && !text.contains("e") { text += ".0" }
        return text
    }

    static func quote(_ text: String, into output: inout String) {
        output += "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": output += "\\\""
            case "\\": output += "\\\\"
            case "\n": output += "\\n"
            case "\r": output += "\\r"
            case "\t": output += "\\t"
            case let c where c.value < 0x20:
                output += String(format: "\\u%04x", c.value)
            default: output.unicodeScalars.append(scalar)
            }
        }
        output += "\""
    }

    // MARK: Reading

    /// Parses JSON text; errors say the line and column.
    public static func parse(_ text: String) throws -> TransferJSON {
        var parser = Parser(bytes: Array(text.utf8))
        parser.skipSpace()
        let value = try parser.value(depth: 0)
        parser.skipSpace()
        if parser.index < parser.bytes.count { throw parser.error("unexpected text after the document") }
        return value
    }

    struct Parser {
        let bytes: [UInt8]
        var index = 0

        func error(_ message: String) -> TransferError {
            var line = 1, column = 1
            for byte in bytes[..<min(index, bytes.count)] {
                if byte == UInt8(ascii: "\n") { line += 1; column = 1 } else if byte & 0xC0 != 0x80 { column += 1 }
            }
            return TransferError.document("not valid JSON at line \(line), column \(column): \(message)")
        }

        mutating func skipSpace() {
            while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
        }

        mutating func value(depth: Int) throws -> TransferJSON {
            guard depth < 64 else { throw error("nested too deeply") }
            guard index < bytes.count else { throw error("unexpected end of text") }
            switch bytes[index] {
            case UInt8(ascii: "{"):
                index += 1
                var members: [(String, TransferJSON)] = []
                skipSpace()
                if index < bytes.count, bytes[index] == UInt8(ascii: "}") { index += 1; return .object(members) }
                while true {
                    skipSpace()
                    guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw error("a member name in quotes expected") }
                    let name = try string()
                    skipSpace()
                    try expect(":")
                    skipSpace()
                    members.append((name, try value(depth: depth + 1)))
                    skipSpace()
                    if try endOrComma("}") { return .object(members) }
                }
            case UInt8(ascii: "["):
                index += 1
                var items: [TransferJSON] = []
                skipSpace()
                if index < bytes.count, bytes[index] == UInt8(ascii: "]") { index += 1; return .array(items) }
                while true {
                    skipSpace()
                    items.append(try value(depth: depth + 1))
                    skipSpace()
                    if try endOrComma("]") { return .array(items) }
                }
            case UInt8(ascii: "\""): return .string(try string())
            case UInt8(ascii: "t"): try word("true"); return .bool(true)
            case UInt8(ascii: "f"): try word("false"); return .bool(false)
            case UInt8(ascii: "n"): try word("null"); return .null
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
            default: throw error("unexpected character '\(String(decoding: [bytes[index]], as: UTF8.self))'")
            }
        }

        mutating func expect(_ character: Character) throws {
            guard index < bytes.count, bytes[index] == character.asciiValue! else { throw error("'\(character)' expected") }
            index += 1
        }

        mutating func endOrComma(_ end: Character) throws -> Bool {
            guard index < bytes.count else { throw error("unexpected end of text") }
            if bytes[index] == end.asciiValue! { index += 1; return true }
            if bytes[index] == UInt8(ascii: ",") { index += 1; return false }
            throw error("',' or '\(end)' expected")
        }

        mutating func word(_ word: String) throws {
            let expected = Array(word.utf8)
            guard bytes.count - index >= expected.count, Array(bytes[index..<index + expected.count]) == expected else {
                throw error("unexpected character '\(String(decoding: [bytes[index]], as: UTF8.self))'")
            }
            index += expected.count
        }

        mutating func number() throws -> TransferJSON {
            let start = index
            var isFloat = false
            if bytes[index] == UInt8(ascii: "-") { index += 1 }
            func digits() -> Int {
                let from = index
                while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
                return index - from
            }
            guard digits() > 0 else { throw error("a digit expected") }
            if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
                index += 1; isFloat = true
                guard digits() > 0 else { throw error("a digit expected") }
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
                index += 1; isFloat = true
                if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
                guard digits() > 0 else { throw error("a digit expected") }
            }
            let text = String(decoding: bytes[start..<index], as: UTF8.self)
            if !isFloat, let integer = Int64(text) { return .integer(integer) }
            guard let value = Double(text), value.isFinite else { throw error("number out of range: \(text)") }
            return .real(value)
        }

        mutating func string() throws -> String {
            index += 1
            var output: [UInt8] = []
            while true {
                guard index < bytes.count else { throw error("unterminated string") }
                let byte = bytes[index]
                index += 1
                switch byte {
                case UInt8(ascii: "\""):
                    guard let text = String(validating: output, as: UTF8.self) else { throw error("invalid UTF-8 in a string") }
                    return text
                case UInt8(ascii: "\\"):
                    guard index < bytes.count else { throw error("unterminated string") }
                    let escape = bytes[index]
                    index += 1
                    switch escape {
                    case UInt8(ascii: "\""): output.append(0x22)
                    case UInt8(ascii: "\\"): output.append(0x5C)
                    case UInt8(ascii: "/"): output.append(0x2F)
                    case UInt8(ascii: "b"): output.append(0x08)
                    case UInt8(ascii: "f"): output.append(0x0C)
                    case UInt8(ascii: "n"): output.append(0x0A)
                    case UInt8(ascii: "r"): output.append(0x0D)
                    case UInt8(ascii: "t"): output.append(0x09)
                    case UInt8(ascii: "u"):
                        var code = try hex4()
                        if (0xD800..<0xDC00).contains(code) {
                            guard bytes.count - index >= 6, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                                throw error("a lone surrogate in \\u escape")
                            }
                            index += 2
                            let low = try hex4()
                            guard (0xDC00..<0xE000).contains(low) else { throw error("a lone surrogate in \\u escape") }
                            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                        }
                        guard let scalar = Unicode.Scalar(code) else { throw error("a lone surrogate in \\u escape") }
                        output += Array(String(Character(scalar)).utf8)
                    default: throw error("invalid escape '\\\(String(decoding: [escape], as: UTF8.self))'")
                    }
                case 0..<0x20: throw error("a control character in a string")
                default: output.append(byte)
                }
            }
        }

        mutating func hex4() throws -> UInt32 {
            guard bytes.count - index >= 4, let code = UInt32(String(decoding: bytes[index..<index + 4], as: UTF8.self), radix: 16) else {
                throw error("four hex digits expected after \\u")
            }
            index += 4
            return code
        }
    }
}
