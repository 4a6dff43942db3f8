import Testing
import TextCodec

/// The one form in which opsh shows control characters from a build or
/// the database on a terminal (ARCHITECTURE.md, "Text").
@Suite struct VisibleTextTests {
    @Test func controlCharactersBecomeTheirPicturesAndC1TheirCodePoint() {
        #expect(VisibleText.of("\u{1B}]0;title\u{07}") == "␛]0;title␇")
        #expect(VisibleText.of("nul:\u{0}:after") == "nul:␀:after")
        #expect(VisibleText.of("over\rwrite") == "over␍write")
        #expect(VisibleText.of("del\u{7F}") == "del␡")
        #expect(VisibleText.of("c1:\u{9B}31m \u{85}") == "c1:<U+009B>31m <U+0085>")
        #expect(VisibleText.of("two\nlines") == "two␊lines")
        #expect(VisibleText.of("two\nlines", keepingNewlines: true) == "two\nlines")
    }

    @Test func everythingElseIsLeftAsItIs() {
        for text in ["", "plain ASCII", "tab\there", "日本語 🚀 é ❤️", "\u{A0}nbsp", "already ␛ shown"] {
            #expect(VisibleText.of(text) == text)
        }
    }
}
