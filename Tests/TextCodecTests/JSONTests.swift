import Testing
import TextCodec

/// The one JSON reader and writer.
@Suite struct JSONTests {
    @Test func integersStayExactAndApartFromFloats() throws {
        #expect(try JSON.parse("[9223372036854775807, -9223372036854775808, 3, 3.0, 1E2, 9223372036854775808]")
            == .array([.integer(.max), .integer(.min), .integer(3), .real(3), .real(100), .real(9223372036854775808)]))
        let value = JSON.object([("a", .array([.integer(-3), .real(2.5), .real(1e-7), .real(3), .null, .bool(true)])),
                                 ("b\n\"c\"", .string("é\u{7}\u{7F}"))])
        #expect(try JSON.parse(value.text()) == value)
    }

    @Test(arguments: [
        ("{\"a\": 1,}", 1, 9, "expected a string key, found '}'"),
        ("", 1, 1, "unexpected end of text, expected a value"),
        ("[1,\n  01]", 2, 3, "invalid number: leading zeros are not allowed"),
        ("[1e400]", 1, 2, "number out of range: 1e400"),
        ("\"\\ud800\"", 1, 2, "unpaired surrogate \\uD800"),
        ("\"tab\there\"", 1, 5, "control character 0x09 inside a string (write it as an escape)"),
        ("{\"日本\": nul}", 1, 8, "expected 'null'"),
    ])
    func errorsSayTheLineAndColumn(text: String, line: Int, column: Int, reason: String) {
        #expect(throws: JSONParser.Failure(line: line, column: column, reason: reason)) { try JSON.parse(text) }
    }

    @Test func theEscaperWritesControlsAsEscapesAndKeepsUTF8() {
        #expect(JSONString.quoted("a\"b\\c\n\r\t\u{8}\u{C}\u{1}\u{7F}é🚀") == #""a\"b\\c\n\r\t\b\f\u0001\u007fé🚀""#)
        #expect(JSONString.floatText(5) == "5.0")
        #expect(JSONString.floatText(1e-7) == "1e-07")
    }
}
