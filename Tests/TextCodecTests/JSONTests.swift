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

    /// The compact form a column or a file holds: no spaces; with
    /// `sortingKeys` every object's members in the byte order of their
    /// names, nested ones too; read back as the same value.
    @Test func theCompactFormSortsKeysAtEveryLevelWhenAsked() throws {
        let value = JSON.object([("b", .array([.integer(1), .real(0.5), .real(2), .null, .bool(false)])),
                                 ("Ü/x", .string("a/b\n\u{7F}")),
                                 ("a", .object([("z", .integer(-1)), ("A", .object([]))])), ("", .array([]))])
        #expect(value.compactText() == #"{"b":[1,0.5,2.0,null,false],"Ü/x":"a/b\n\u007f","a":{"z":-1,"A":{}},"":[]}"#)
        #expect(value.compactText(sortingKeys: true) == #"{"":[],"a":{"A":{},"z":-1},"b":[1,0.5,2.0,null,false],"Ü/x":"a/b\n\u007f"}"#)
        #expect(try JSON.parse(value.compactText()) == value)
        #expect(JSON.array([.real(.infinity), .real(.nan)]).compactText() == "[null,null]")
    }

    /// Equal documents hash alike, so a value holding one can be Hashable;
    /// an integer and the same float are different values.
    @Test func equalDocumentsHashAlike() throws {
        let first = try JSON.parse(#"{"a": [1, 2.5, "x"], "b": {"c": null}}"#)
        let second = try JSON.parse(#"{ "a":[1,2.5,"x"],"b":{"c":null} }"#)
        #expect(Set([first, second]).count == 1)
        #expect(Set([JSON.integer(3), .real(3)]).count == 2)
    }

    @Test func valuesReadAsSwiftsOrNil() throws {
        let document = try JSON.parse(#"{"s": "x", "i": 3, "r": 3.5, "w": 4.0, "b": true, "n": null, "a": [1]}"#)
        #expect(document["s"]?.stringValue == "x")
        #expect(document["i"]?.integerValue == 3)
        #expect(document["i"]?.numberValue == 3)
        #expect(document["r"]?.numberValue == 3.5)
        #expect(document["w"]?.integerValue == nil)
        #expect(document["b"]?.boolValue == true)
        #expect(document["n"]?.isNull == true)
        #expect(document["a"]?.arrayValue == [.integer(1)])
        #expect(document.members?.map(\.0) == ["s", "i", "r", "w", "b", "n", "a"])
        #expect(document["s"]?.integerValue == nil)
        #expect(document["missing"] == nil)
    }
}
