import CLuaShim
import Foundation
import Testing

/// The release build writes Lua's integers as text itself
/// (`CLuaShim/opsh_integer_text.c`): the text, its length and its
/// truncation must be glibc's `snprintf("%lld")`, byte for byte.
@Suite struct IntegerTextTests {
    static let values: [Int64] = [0, 1, -1, 9, 10, -10, 99, 100, 12_345, -12_345, 999_999_999_999, 1_000_000_000_000,
                                  .max, .min, .max - 1, .min + 1, 1 << 40, -(1 << 40)]
        + (0..<200).map { Int64(bitPattern: UInt64($0) &* 0x9E37_79B9_7F4A_7C15) }

    static func glibc(_ value: Int64, capacity: Int) -> (String, Int32) {
        var buffer = [CChar](repeating: 0x7f, count: 48)
        let length = withVaList([value]) { vsnprintf(&buffer, capacity, "%lld", $0) }
        return (String(cString: buffer), length)
    }

    static func opsh(_ value: Int64, capacity: Int) -> (String, Int32) {
        var buffer = [CChar](repeating: 0x7f, count: 48)
        let length = opsh_integer_text(&buffer, capacity, value)
        return (String(cString: buffer), length)
    }

    @Test(arguments: values)
    func asPrintfWritesIt(value: Int64) {
        for capacity in [44, 21, 5, 1] {
            let (text, length) = Self.opsh(value, capacity: capacity)
            let (expected, expectedLength) = Self.glibc(value, capacity: capacity)
            #expect(text == expected && length == expectedLength, "\(value) in \(capacity) bytes")
        }
    }
}
