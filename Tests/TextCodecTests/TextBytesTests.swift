import Testing
import TextCodec

/// Where bytes stop being UTF-8, where a NUL is, and how a value shows in
/// a message: what every reader of a Lua string and every engine's text
/// rule say (fuzzed by `fuzz/lua-string` against `String(validating:)`).
@Suite struct TextBytesTests {
    @Test(arguments: [
        ([0x63, 0x61, 0x66, 0xE9] as [UInt8], 3 as Int?),  // Latin-1 é
        ([0x61, 0xC0, 0xAF], 1),                              // overlong '/'
        ([0x61, 0xED, 0xA0, 0x80], 1),                        // a surrogate
        ([0xF4, 0x90, 0x80, 0x80], 0),                        // past U+10FFFF
        ([0xE2, 0x82], 0),                                    // cut short
        (Array("café ✓ 🚀".utf8), nil),
        ([0x61, 0x00, 0x62], nil),                            // a NUL is UTF-8
    ])
    func theFirstByteThatIsNotUTF8(bytes: [UInt8], offset: Int?) {
        #expect(TextBytes.firstInvalidUTF8(bytes)?.offset == offset)
        #expect((String(validating: bytes, as: UTF8.self) == nil) == (offset != nil))
    }

    @Test func messagesNameTheByteFromOne() {
        #expect(TextBytes.firstInvalidUTF8([0x63, 0x61, 0x66, 0xE9])?.description == "byte 4: 0xE9")
        #expect(TextBytes.firstNUL(Array("a\u{0}b".utf8)) == 1)
        #expect(TextBytes.firstNUL(Array("ab".utf8)) == nil)
    }

    @Test func controlCharactersShowVisibly() {
        #expect(TextBytes.visible("com.ex.app\u{0}x") == #"com.ex.app\0x"#)
        #expect(TextBytes.visible("a\tb\nc\r\u{1B}[31m\u{7F}\u{85}") == #"a\tb\nc\r\x1B[31m\x7F\u0085"#)
        #expect(TextBytes.visible([0x63, 0x61, 0x66, 0xE9]) == #"caf\xE9"#)
        #expect(TextBytes.visible("plain text ✓") == "plain text ✓")
        #expect(TextBytes.visible(String(repeating: "x", count: 100), limit: 5) == "xxxxx…")
        // SQL keeps its lines and tabs.
        #expect(TextBytes.visibleSQL("SELECT 1\n\tFROM t\u{0}") == "SELECT 1\n\tFROM t\\0")
    }
}
