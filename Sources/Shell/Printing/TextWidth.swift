/// How many terminal columns text takes: wide East Asian characters and
/// most emoji take two, combining marks none.
enum TextWidth {
    static func of(_ text: String) -> Int {
        var width = 0
        for scalar in text.unicodeScalars { width += of(scalar) }
        return width
    }

    static func of(_ scalar: Unicode.Scalar) -> Int {
        let value = scalar.value
        if value == 0 { return 0 }
        if value < 0x20 || (value >= 0x7F && value < 0xA0) { return 0 }
        if scalar.properties.generalCategory == .nonspacingMark
            || scalar.properties.generalCategory == .enclosingMark
            || value == 0x200B { return 0 }
        if (0x1100...0x115F).contains(value) || (0x2E80...0xA4CF).contains(value)
            || (0xAC00...0xD7A3).contains(value) || (0xF900...0xFAFF).contains(value)
            || (0xFE30...0xFE4F).contains(value) || (0xFF00...0xFF60).contains(value)
            || (0xFFE0...0xFFE6).contains(value) || (0x1F300...0x1F64F).contains(value)
            || (0x1F900...0x1F9FF).contains(value) || (0x20000...0x3FFFD).contains(value) {
            return 2
        }
        return 1
    }

    /// The longest prefix of `text` that fits in `width` columns, with `…`
    /// at the end when it was cut.
    static func truncate(_ text: String, to width: Int) -> String {
        if of(text) <= width { return text }
        guard width > 1 else { return width == 1 ? "…" : "" }
        var result = ""
        var used = 0
        for character in text {
            let characterWidth = of(String(character))
            if used + characterWidth > width - 1 { break }
            result.append(character)
            used += characterWidth
        }
        return result + "…"
    }
}
