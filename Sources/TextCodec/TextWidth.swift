/// How many terminal columns text takes: the one table behind the shell's
/// tables and records and `chart`'s labels.
///
/// Counted per character (grapheme cluster), as a terminal draws them:
/// - 2 for a character with a wide East Asian scalar (CJK, Hangul,
///   fullwidth forms) or an emoji shown as emoji: a scalar whose default
///   presentation is emoji (Unicode's Emoji_Presentation, what East Asian
///   Width calls W since Unicode 9: 🚀, 😀, 🧪), or any scalar followed by
///   VS16 (U+FE0F, `❤️`). A sequence joined by ZWJ (👩‍🔬), a flag (🇫🇷) or an
///   emoji with a skin tone is one character: 2.
/// - 0 for combining marks, format characters (ZWJ, ZWSP, variation
///   selectors) and control characters standing alone;
/// - 1 otherwise, including symbols whose default is text (`❤`, `☀`).
/// ARCHITECTURE.md, "Layers": why emoji count by presentation.
public enum TextWidth {
    public static func of(_ text: String) -> Int {
        // Printable ASCII, the common case: one column a byte.
        if text.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) { return text.utf8.count }
        var width = 0
        for character in text { width += of(character) }
        return width
    }

    public static func of(_ character: Character) -> Int {
        var width = 0
        for scalar in character.unicodeScalars {
            if scalar.value == 0xFE0F { return 2 }
            width = max(width, of(scalar))
        }
        return width
    }

    /// The columns one scalar takes on its own.
    public static func of(_ scalar: Unicode.Scalar) -> Int {
        let value = scalar.value
        if value < 0x20 || (value >= 0x7F && value < 0xA0) { return 0 }
        switch scalar.properties.generalCategory {
        case .nonspacingMark, .enclosingMark, .format: return 0
        default: break
        }
        if scalar.properties.isEmojiPresentation { return 2 }
        if (0x1100...0x115F).contains(value) || (0x2E80...0xA4CF).contains(value)
            || (0xAC00...0xD7A3).contains(value) || (0xF900...0xFAFF).contains(value)
            || (0xFE30...0xFE4F).contains(value) || (0xFF00...0xFF60).contains(value)
            || (0xFFE0...0xFFE6).contains(value) || (0x20000...0x3FFFD).contains(value) {
            return 2
        }
        return 1
    }

    /// The longest prefix of `text` that fits in `width` columns, with `…`
    /// at the end when it was cut.
    public static func truncate(_ text: String, to width: Int) -> String {
        if of(text) <= width { return text }
        guard width > 1 else { return width == 1 ? "…" : "" }
        var result = ""
        var used = 0
        for character in text {
            let characterWidth = of(character)
            if used + characterWidth > width - 1 { break }
            result.append(character)
            used += characterWidth
        }
        return result + "…"
    }
}
