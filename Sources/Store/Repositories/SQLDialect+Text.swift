import TextCodec

/// What text each engine holds as given (issue 24, "Every hole found by
/// attack", item 3). SQLite's TEXT keeps any bytes, a NUL included (opsh
/// binds and reads text with its length: ``StoreDatabase``); PostgreSQL's
/// text is UTF-8 without NUL, so a value with a NUL is refused before it
/// is sent, saying which value and why, never cut or changed.
extension SQLDialect {
    /// Whether text keeps every byte given (SQLite), or must be UTF-8
    /// without NUL (PostgreSQL).
    public var textKeepsAnyBytes: Bool { self == .sqlite }

    /// Why this engine cannot hold `text` (nil when it can):
    /// `'a\0b' contains a NUL byte (byte 2), which PostgreSQL text cannot
    /// hold (SQLite keeps it)`. The caller says whose value it is.
    public func refusal(ofText text: String) -> String? {
        guard !textKeepsAnyBytes, let offset = TextBytes.firstNUL(text.utf8) else { return nil }
        return "'\(TextBytes.visible(text))' contains a NUL byte (byte \(offset + 1)), which PostgreSQL text cannot hold (SQLite keeps it)"
    }

    /// Why this engine cannot hold a value that would be bound as text
    /// (a string of the `db` module): besides a NUL, bytes that are not
    /// UTF-8, which SQLite keeps (as a BLOB) and PostgreSQL cannot.
    public func refusal(ofTextBytes bytes: UnsafeRawBufferPointer) -> String? {
        guard !textKeepsAnyBytes else { return nil }
        if let invalid = TextBytes.firstInvalidUTF8(bytes) {
            return "'\(TextBytes.visible(bytes))' is not valid UTF-8 (\(invalid)), which PostgreSQL text cannot hold (SQLite keeps the bytes)"
        }
        guard let offset = TextBytes.firstNUL(bytes) else { return nil }
        return "'\(TextBytes.visible(bytes))' contains a NUL byte (byte \(offset + 1)), which PostgreSQL text cannot hold (SQLite keeps it)"
    }
}
