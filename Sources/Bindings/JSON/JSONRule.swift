import Foundation
import TextCodec

/// The one rule for turning Lua values into JSON, shared by `json.encode`,
/// `--json` and the shell's `.mode json` so that none of them changes a
/// byte silently (docs/lua-api.md, "JSON"):
///
/// - strings must be valid UTF-8: bytes that are not (a BLOB, say) are
///   refused with their place, never replaced by U+FFFD — encode them
///   yourself (`hex(x)` in SQL, or `string.format("%02x", …)`);
/// - NaN and ±infinity are refused: JSON has no such number (they never
///   become `null`);
/// - functions, userdata and threads are refused;
/// - floats keep a `.` or an exponent (`5.0`), so they read back as floats;
/// - strings are escaped by TextCodec's ``JSONString``, the one escaper.
public enum JSONRule {
    public static func invalidUTF8(at path: String) -> String {
        "cannot encode a string that is not valid UTF-8 at \(path) (bytes such as a BLOB: encode them yourself, e.g. with hex() in SQL)"
    }

    public static func nonFinite(_ number: Double, at path: String) -> String {
        "cannot encode \(number.isNaN ? "NaN" : number > 0 ? "inf" : "-inf") at \(path) (JSON has no such number)"
    }

    public static func unencodable(_ typeName: String, at path: String) -> String {
        "cannot encode a \(typeName) at \(path)"
    }

    /// `path.field`, or `path["odd field"]`.
    public static func path(_ path: String, field: String) -> String {
        let plain = field.first.map { $0.isLetter || $0 == "_" } == true
            && field.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }
        if plain { return "\(path).\(field)" }
        return "\(path)[\(JSONString.quoted(field))]"
    }
}
