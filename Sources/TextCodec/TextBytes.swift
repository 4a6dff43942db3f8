#if canImport(Glibc)
import Glibc
#endif

/// Bytes as text: where they stop being UTF-8, where a NUL byte is, and
/// how a value is shown in a message. One place, so that every reader of a
/// Lua string (`LuaCall.string`, the SQL readers) and every engine's rule
/// on text (Store's `SQLDialect`) say the same thing the same way.
///
/// Offsets in messages count bytes from 1, as PostgreSQL's positions do.
public enum TextBytes {
    /// The first byte that is not part of valid UTF-8.
    public struct InvalidUTF8: Equatable, Sendable, CustomStringConvertible {
        /// From 0.
        public let offset: Int
        public let byte: UInt8

        public init(offset: Int, byte: UInt8) {
            self.offset = offset
            self.byte = byte
        }

        /// `byte 4: 0xE9`.
        public var description: String { "byte \(offset + 1): 0x\(hex(byte))" }
    }

    /// Where `bytes` stop being UTF-8 (overlong forms, surrogates and
    /// values past U+10FFFF are not UTF-8, as `String(validating:)` has
    /// it); nil when all of them are.
    public static func firstInvalidUTF8(_ bytes: some Collection<UInt8>) -> InvalidUTF8? {
        let array = Array(bytes)
        var index = 0
        while index < array.count {
            guard let width = scalarWidth(array, at: index) else {
                return InvalidUTF8(offset: index, byte: array[index])
            }
            index += width
        }
        return nil
    }

    /// The offset (from 0) of the first NUL byte, nil without one.
    public static func firstNUL(_ bytes: some Collection<UInt8>) -> Int? {
        // memchr over contiguous bytes (a native string's UTF-8, an
        // array): this runs on every statement's text.
        if let found = bytes.withContiguousStorageIfAvailable({ buffer -> Int? in
            guard let base = buffer.baseAddress, let hit = memchr(base, 0, buffer.count) else { return nil }
            return UnsafeRawPointer(hit) - UnsafeRawPointer(base)
        }) {
            return found
        }
        return bytes.firstIndex(of: 0).map { bytes.distance(from: bytes.startIndex, to: $0) }
    }

    /// The text of a value as a message shows it: control characters
    /// visibly (`\0`, `\n`, `\t`, `\x1B`, `\u0085`), a byte that is not
    /// UTF-8 as `\xE9`, and at most `limit` characters (then `…`). With
    /// `keepingLines` (SQL), line breaks and tabs stay as they are.
    public static func visible(_ bytes: some Collection<UInt8>, limit: Int = 80, keepingLines: Bool = false) -> String {
        let array = Array(bytes)
        var shown = ""
        var characters = 0
        var index = 0
        while index < array.count {
            guard characters < limit else { return shown + "…" }
            characters += 1
            guard let width = scalarWidth(array, at: index) else {
                shown += "\\x" + hex(array[index])
                index += 1
                continue
            }
            let scalar = String(decoding: array[index..<(index + width)], as: UTF8.self).unicodeScalars.first!
            index += width
            switch scalar.value {
            case 0: shown += "\\0"
            case 0x09 where keepingLines, 0x0A where keepingLines: shown.unicodeScalars.append(scalar)
            case 0x09: shown += "\\t"
            case 0x0A: shown += "\\n"
            case 0x0D: shown += "\\r"
            case 0x01...0x1F, 0x7F: shown += "\\x" + hex(UInt8(scalar.value))
            case 0x80...0x9F: shown += "\\u00" + hex(UInt8(scalar.value))
            default: shown.unicodeScalars.append(scalar)
            }
        }
        return shown
    }

    public static func visible(_ text: String, limit: Int = 80, keepingLines: Bool = false) -> String {
        visible(Array(text.utf8), limit: limit, keepingLines: keepingLines)
    }

    /// SQL as a message shows it: its first 200 characters, control
    /// characters but line breaks and tabs visibly.
    public static func visibleSQL(_ sql: String) -> String {
        visible(sql, limit: 200, keepingLines: true)
    }

    /// The length of the UTF-8 sequence at `index`, nil when none starts
    /// there (the rules of RFC 3629, table 3-7 of the Unicode standard).
    static func scalarWidth(_ bytes: [UInt8], at index: Int) -> Int? {
        let first = bytes[index]
        if first < 0x80 { return 1 }
        let width: Int
        var low: UInt8 = 0x80
        var high: UInt8 = 0xBF
        switch first {
        case 0xC2...0xDF: width = 2
        case 0xE0: width = 3; low = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF: width = 3
        case 0xED: width = 3; high = 0x9F
        case 0xF0: width = 4; low = 0x90
        case 0xF1...0xF3: width = 4
        case 0xF4: width = 4; high = 0x8F
        default: return nil
        }
        guard index + width <= bytes.count else { return nil }
        guard bytes[index + 1] >= low, bytes[index + 1] <= high else { return nil }
        for offset in 2..<width where bytes[index + offset] & 0xC0 != 0x80 { return nil }
        return width
    }

    static func hex(_ byte: UInt8) -> String {
        let digits = Array("0123456789ABCDEF")
        return String(digits[Int(byte >> 4)]) + String(digits[Int(byte & 0x0F)])
    }
}
