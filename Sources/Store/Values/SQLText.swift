import TextCodec

/// SQL text that would run as other SQL than written is refused, on both
/// engines (issue 24): a NUL byte ends the text for SQLite's prepare (so
/// `DELETE FROM side\0 WHERE id = 1` ran as `DELETE FROM side`) and cannot
/// cross PostgreSQL's protocol; bytes that are not UTF-8 would reach the
/// engine as other text (U+FFFD). Values that are bytes go as parameters.
public enum SQLText {
    /// Why the SQL in `bytes` is refused, nil when it is not.
    public static func refusal(_ bytes: UnsafeRawBufferPointer) -> String? {
        if let offset = TextBytes.firstNUL(bytes) {
            return "the SQL text contains a NUL byte (byte \(offset + 1)): \(TextBytes.visible(bytes, limit: 200, keepingLines: true))"
        }
        if let invalid = TextBytes.firstInvalidUTF8(bytes) {
            return "the SQL text is not valid UTF-8 (\(invalid)): \(TextBytes.visible(bytes, limit: 200, keepingLines: true))"
        }
        return nil
    }

    /// The same for SQL already read as a String (which is UTF-8): a NUL.
    public static func refusal(_ sql: String) -> String? {
        guard sql.utf8.contains(0) else { return nil }
        var sql = sql
        return sql.withUTF8 { refusal(UnsafeRawBufferPointer($0)) }
    }
}
