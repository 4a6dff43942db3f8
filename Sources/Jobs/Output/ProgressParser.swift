/// Reads build progress from `[n/m]`-style lines (ninja, cmake, swift
/// build, many test runners): `[12/345] Compiling …` means 12 of 345 done.
public enum ProgressParser {
    /// The fraction done, 0…1, or nil when the line has no `[n/m]`.
    public static func progress(in line: String) -> Double? {
        var bytes = Substring(line).utf8[...]
        while let open = bytes.firstIndex(of: UInt8(ascii: "[")) {
            bytes = bytes[bytes.index(after: open)...]
            guard let (done, afterDone) = number(bytes), afterDone.first == UInt8(ascii: "/") else { continue }
            guard let (total, afterTotal) = number(afterDone.dropFirst()), afterTotal.first == UInt8(ascii: "]"),
                  total > 0, done <= total else { continue }
            return Double(done) / Double(total)
        }
        return nil
    }

    private static func number(_ bytes: Substring.UTF8View.SubSequence) -> (Int, Substring.UTF8View.SubSequence)? {
        var value = 0
        var rest = bytes
        var digits = 0
        while let byte = rest.first, byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9"), digits < 12 {
            value = value * 10 + Int(byte - UInt8(ascii: "0"))
            rest = rest.dropFirst()
            digits += 1
        }
        return digits == 0 ? nil : (value, rest)
    }
}
