import Foundation
import Testing
import LuaRuntime
@testable import Bindings

/// `json`: encode and decode, with the conventions for arrays, empty
/// tables, null and integers.
@Suite struct JSONModuleTests {
    let test = try! TestSession()

    @Test func encodesArraysObjectsAndScalars() throws {
        #expect(try test.run("return json.encode({ name = 'app', tags = {'a', 'b'}, n = 3, x = 1.5, ok = true })")
            == [#"{"n":3,"name":"app","ok":true,"tags":["a","b"],"x":1.5}"#])
        #expect(try test.run("return json.encode('a\"b\\\\c\\n\\1'), json.encode(42), json.encode(2.0), json.encode(nil)")
            == [#""a\"b\\c\n\u0001""#, "42", "2.0", "null"])
        #expect(try test.run("return json.encode(math.maxinteger), json.encode(math.mininteger)")
            == ["9223372036854775807", "-9223372036854775808"])
        // Empty tables: [] unless marked as objects.
        #expect(try test.run("return json.encode({}), json.encode(json.object()), json.encode({ list = {}, map = json.object({}) })")
            == ["[]", "{}", #"{"list":[],"map":{}}"#])
        #expect(try test.run("return json.encode({ a = json.null, b = db.NULL, c = { 1, json.null, 3 } })")
            == [#"{"a":null,"b":null,"c":[1,null,3]}"#])
        #expect(try test.run("return json.encode({ b = { c = 1 } }, { pretty = true })")
            == ["{\n  \"b\": {\n    \"c\": 1\n  }\n}"])
    }

    @Test func decodesKeepingIntegersAndNull() throws {
        let values = try test.run("""
            local t = json.decode('{"n": 3, "x": 3.0, "big": 1e3, "huge": 123456789012345678901, "s": "\\\\u00e9\\\\ud83d\\\\ude00", "none": null, "list": [1, null, 3], "empty": {}}')
            return math.type(t.n), t.n, math.type(t.x), math.type(t.big), math.type(t.huge), t.s,
                   t.none == json.null, t.none == db.NULL, #t.list, t.list[2] == json.null, json.encode(t.empty)
            """)
        #expect(values == ["integer", 3, "float", "float", "float", "é😀", true, true, 3, true, "{}"])
        #expect(try test.run("return json.decode('[]'), json.decode('  true '), json.decode('-0.5')")
            == [.table([:]), true, -0.5])
    }

    @Test func roundTripsThroughEncodeAndDecode() throws {
        let document = #"{"a":[1,2.5,"x",true,false,null,{}],"b":{"c":[],"d":"\"quoted\"\n"},"e":-9223372036854775808}"#
        #expect(try test.run("return json.encode(json.decode(...))", [.string(document)]) == [.string(document)])
    }

    /// Each case: the code, and the exact message it raises.
    static let badInput: [(String, String)] = [
        ("json.decode('{\"a\": 1,}')", "test:1: json.decode: invalid JSON at line 1, column 9: expected a string key, found '}'"),
        ("json.decode('{\"a\" 1}')", "test:1: json.decode: invalid JSON at line 1, column 6: expected ':' after the key \"a\", found '1'"),
        ("json.decode('[1, 2')", "test:1: json.decode: invalid JSON at line 1, column 6: unexpected end of text, expected ',' or ']'"),
        ("json.decode('{\\n  \"a\": tru\\n}')", "test:1: json.decode: invalid JSON at line 2, column 8: expected 'true'"),
        ("json.decode('[01]')", "test:1: json.decode: invalid JSON at line 1, column 2: invalid number: leading zeros are not allowed"),
        ("json.decode('\"\\\\q\"')", "test:1: json.decode: invalid JSON at line 1, column 2: invalid escape '\\q' in a string"),
        ("json.decode('1 2')", "test:1: json.decode: invalid JSON at line 1, column 3: unexpected '2' after the JSON value"),
        ("json.decode('')", "test:1: json.decode: invalid JSON at line 1, column 1: unexpected end of text, expected a value"),
        ("json.decode(42)", "test:1: bad argument #1 to 'decode' (string expected, got number)"),
        ("json.encode({ f = print })", "test:1: json.encode: cannot encode a function at $.f"),
        ("json.encode({ 1, 2, x = 3 })", "test:1: json.encode: cannot encode the table at $: it mixes array items (1…n) and named fields"),
        ("json.encode({ a = { [1] = 1, [3] = 3 } })", "test:1: json.encode: cannot encode the table at $.a: its keys are not 1…2 (a sparse array)"),
        ("json.encode({ [true] = 1 })", "test:1: json.encode: cannot encode the table at $: it has a boolean key (JSON object keys are strings, arrays have keys 1…n)"),
        ("local t = {} t.self = t json.encode(t)", "test:1: json.encode: cannot encode a table that contains itself at $.self"),
        ("json.encode(0/0)", "test:1: json.encode: cannot encode NaN at $ (JSON has no such number)"),
        ("json.encode({ ['a b'] = { 1/0 } })", "test:1: json.encode: cannot encode inf at $[\"a b\"][1] (JSON has no such number)"),
        ("json.encode('\\255')", "test:1: json.encode: cannot encode a string that is not valid UTF-8 at $ (bytes such as a BLOB: encode them yourself, e.g. with hex() in SQL)"),
        ("json.encode({}, { indent = 2 })", "test:1: bad argument #2 to 'encode' (unknown option 'indent' (options: pretty))"),
        ("json.encode()", "test:1: bad argument #1 to 'encode' (value expected, got no value)"),
    ]

    @Test(arguments: badInput)
    func badInputIsRefused(_ code: String, _ message: String) {
        #expect(test.failure(code) == message)
    }
}
