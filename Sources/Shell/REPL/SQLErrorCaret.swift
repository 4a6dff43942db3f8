import Foundation
import TextCodec

/// The caret under the place of an SQL error, as psql draws it, for both
/// engines' errors at the prompt: SQLite's `sqlite3_error_offset` and
/// PostgreSQL's `position` both reach the message as "(at character N of:
/// SQL)" (SQLFailure, PostgresError), and this is the one place that
/// draws them:
///
///     LINE 1: SELECT id FROM builds LIMT 3
///                                   ^
enum SQLErrorCaret {
    /// The caret's lines for an error message that says where, or nil.
    static func lines(forMessage message: String) -> String? {
        guard let at = message.range(of: " (at character ", options: .backwards) else { return nil }
        let rest = message[at.upperBound...]
        let digits = rest.prefix { $0.isNumber }
        guard let character = Int(digits), rest.dropFirst(digits.count).hasPrefix(" of: ") else { return nil }
        var sql = rest.dropFirst(digits.count + 5)
        // PostgreSQL's DETAIL and HINT follow on lines of their own.
        for suffix in ["\nDETAIL: ", "\nHINT: "] {
            if let range = sql.range(of: suffix) { sql = sql[..<range.lowerBound] }
        }
        guard sql.hasSuffix(")") else { return nil }
        return lines(sql: String(sql.dropLast()), character: character)
    }

    /// `LINE n: ` and the line of `sql` holding `character` (counted in
    /// code points from 1), the caret under it; long lines cut around it.
    static func lines(sql: String, character: Int) -> String? {
        let scalars = Array(sql.unicodeScalars)
        let index = character - 1
        guard index >= 0, index <= scalars.count else { return nil }
        let start = scalars[..<index].lastIndex(of: "\n").map { $0 + 1 } ?? 0
        let end = scalars[index...].firstIndex(of: "\n") ?? scalars.count
        let number = scalars[..<index].filter { $0 == "\n" }.count + 1
        func shown(_ part: ArraySlice<Unicode.Scalar>) -> String {
            var text = String.UnicodeScalarView()
            text.append(contentsOf: part.map { $0 == "\t" ? " " : $0 })
            return VisibleText.of(String(text))
        }
        var before = shown(scalars[start..<index])
        var after = shown(scalars[index..<end])
        // Room for the place: some of what leads to it, some of what follows.
        if TextWidth.of(before) > 60 { before = "…" + String(before.suffix(50)) }
        after = TextWidth.truncate(after, to: 40)
        let prefix = "LINE \(number): "
        return prefix + before + after + "\n" + String(repeating: " ", count: prefix.count + TextWidth.of(before)) + "^"
    }
}
