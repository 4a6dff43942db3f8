/// Text as opsh shows it on a terminal or writes it to a log: control
/// characters made visible, so that text from a build or the database
/// (a log line, a scheme's name, a commit subject) cannot set the window
/// title, write the clipboard (OSC 52), move the cursor over other lines
/// or switch screens (ARCHITECTURE.md, "Layers").
///
/// The form, one for every printer:
/// - C0 controls (U+0000–U+001F) but tab become Unicode's control
///   pictures, the same code plus U+2400: `␀` NUL, `␇` BEL, `␍` CR,
///   `␛` ESC, `␊` newline (unless kept);
/// - DEL (U+007F) becomes `␡`;
/// - C1 controls (U+0080–U+009F), which have no pictures, become their
///   code point: `<U+009B>` for CSI.
///
/// Tab stays (it only moves to the next column), and so do newlines where
/// a printer keeps lines (a returned string, `.mode line`, CSV).
public enum VisibleText {
    /// `text` with its control characters made visible.
    public static func of(_ text: String, keepingNewlines: Bool = false) -> String {
        // The common case: nothing to change, no copy.
        guard text.unicodeScalars.contains(where: { needsPicture($0, keepingNewlines: keepingNewlines) }) else { return text }
        var shown = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            guard needsPicture(scalar, keepingNewlines: keepingNewlines) else {
                shown.append(scalar)
                continue
            }
            switch scalar.value {
            case 0x00...0x1F: shown.append(Unicode.Scalar(0x2400 + scalar.value)!)
            case 0x7F: shown.append("\u{2421}")
            default: shown.append(contentsOf: "<U+\(hex(scalar.value))>".unicodeScalars)
            }
        }
        return String(shown)
    }

    /// Whether `scalar` is a control character this form replaces.
    public static func needsPicture(_ scalar: Unicode.Scalar, keepingNewlines: Bool = false) -> Bool {
        switch scalar.value {
        case 0x09: false
        case 0x0A: !keepingNewlines
        case 0x00...0x1F, 0x7F, 0x80...0x9F: true
        default: false
        }
    }

    /// The NUL's picture: what a log line holds instead of a NUL, which
    /// neither engine's text keeps whole (SQLite's C strings end there,
    /// PostgreSQL's text refuses it).
    public static let nulPicture: Unicode.Scalar = "\u{2400}"

    private static func hex(_ value: UInt32) -> String {
        let digits = String(value, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }
}
