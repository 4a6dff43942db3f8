/// The one way opsh writes a string or a float into JSON (`json.encode`,
/// `.mode json`, `--json`, exports, JSON columns' messages).
///
/// Strings: `"` and `\` escaped, the usual short escapes (`\n \r \t \b \f`),
/// every other control character and DEL as `\u00XX`; everything else
/// as is (UTF-8 stays UTF-8, so text in any script stays readable).
public enum JSONString {
    /// Appends `bytes` (valid UTF-8: callers check) quoted to `output`.
    public static func append(_ bytes: UnsafeRawBufferPointer, to output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        var runStart = 0
        for (offset, byte) in bytes.enumerated() {
            guard let escape = escape(byte) else { continue }
            output.append(contentsOf: bytes[runStart..<offset])
            output.append(contentsOf: escape)
            runStart = offset + 1
        }
        output.append(contentsOf: bytes[runStart...])
        output.append(UInt8(ascii: "\""))
    }

    /// Appends `text` quoted to `output`.
    public static func append(_ text: String, to output: inout String) {
        output += quoted(text)
    }

    /// `text` as a JSON string.
    public static func quoted(_ text: String) -> String {
        var text = text
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count + 2)
        text.withUTF8 { append(UnsafeRawBufferPointer($0), to: &bytes) }
        return String(decoding: bytes, as: UTF8.self)
    }

    private static let hex: [UInt8] = Array("0123456789abcdef".utf8)

    /// The escape for `byte`, nil when it stands for itself.
    @inline(__always)
    private static func escape(_ byte: UInt8) -> [UInt8]? {
        switch byte {
        case UInt8(ascii: "\""): return [92, 34]
        case UInt8(ascii: "\\"): return [92, 92]
        case 0x0A: return [92, UInt8(ascii: "n")]
        case 0x0D: return [92, UInt8(ascii: "r")]
        case 0x09: return [92, UInt8(ascii: "t")]
        case 0x08: return [92, UInt8(ascii: "b")]
        case 0x0C: return [92, UInt8(ascii: "f")]
        case 0..<0x20, 0x7F: return [92, UInt8(ascii: "u"), 48, 48, hex[Int(byte >> 4)], hex[Int(byte & 15)]]
        default: return nil
        }
    }

    /// The shortest text that reads back as the same double, always with a
    /// `.` or an exponent so that it reads back as a float (`5.0`).
    /// Callers refuse NaN and infinities first: JSON has no such number.
    public static func floatText(_ number: Double) -> String {
        var text = "\(number)"
        if !text.contains(".") && !text.contains("e") && !text.contains("E") { text += ".0" }
        return text
    }
}
