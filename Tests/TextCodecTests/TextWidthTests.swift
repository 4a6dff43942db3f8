import Testing
import TextCodec

/// The one display-width table: what a terminal draws, per character.
@Suite struct TextWidthTests {
    @Test(arguments: [
        ("plain", 5),
        ("", 0),
        // Wide East Asian characters take two columns.
        ("日本語", 6), ("한국어", 6), ("ｆｕｌｌ", 8),
        // Combining marks take none: é written as e + U+0301 is one column.
        ("e\u{301}", 1), ("Zalgo\u{336}\u{336}", 5), ("가\u{302}", 2),
        // Emoji shown as emoji take two, however many scalars they are made of.
        ("🚀", 2), ("😀", 2), ("🧪", 2), ("👍🏽", 2), ("👩‍🔬", 2), ("🇫🇷", 2), ("❤️", 2),
        // Symbols whose default presentation is text take one.
        ("❤", 1), ("☀", 1), ("🌡", 1),
        // Format and control characters take none.
        ("a\u{200B}b", 2), ("a\u{200D}b", 2), ("tab\there", 7),
    ])
    func columns(text: String, width: Int) {
        #expect(TextWidth.of(text) == width, "\(text.unicodeScalars.map { String($0.value, radix: 16) })")
    }

    @Test func truncationNeverSplitsACharacterOrOverflows() {
        #expect(TextWidth.truncate("日本語テキスト", to: 5) == "日本…")
        #expect(TextWidth.truncate("👩‍🔬👩‍🔬👩‍🔬", to: 4) == "👩‍🔬…")
        #expect(TextWidth.truncate("cafe\u{301} au lait", to: 6) == "cafe\u{301} …")
        #expect(TextWidth.truncate("short", to: 5) == "short")
        for text in ["日本語テキスト", "🚀🚀🚀🚀", "e\u{301}e\u{301}e\u{301}e\u{301}"] {
            for width in 0...8 { #expect(TextWidth.of(TextWidth.truncate(text, to: width)) <= max(width, 0)) }
        }
    }
}
