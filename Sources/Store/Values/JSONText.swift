import GRDB
import TextCodec

/// The text of a JSON column.
///
/// Records hold JSON as text so that a script can write any JSON document
/// (an array of capabilities, a dictionary of properties) and read it back
/// byte for byte. Validity is checked on write, by SQLite's own
/// `json_valid`, both in ``StoreRecord/willSave(_:)`` (for a clear error)
/// and by the schema's CHECK constraints (for every other writer).
public struct JSONText: Hashable, Sendable, Codable, DatabaseValueConvertible, CustomStringConvertible {
    public var text: String

    /// Wraps text without checking it; the write checks it.
    public init(_ text: String) {
        self.text = text
    }

    /// `document` as compact text, every object's keys sorted, so equal
    /// documents are stored alike (``JSON/compactText(sortingKeys:)``).
    public init(_ document: JSON) {
        self.text = document.compactText(sortingKeys: true)
    }

    /// The document, read by TextCodec's parser; a ``JSONParser/Failure``
    /// says where the text is not JSON.
    public func parsed() throws -> JSON {
        try JSON.parse(text)
    }

    public var description: String { text }

    public var databaseValue: DatabaseValue { text.databaseValue }

    public static func fromDatabaseValue(_ dbValue: DatabaseValue) -> JSONText? {
        // Read whatever is stored, valid or not: repair scripts must see
        // the damage to fix it.
        switch dbValue.storage {
        case .string(let text): return JSONText(text)
        case .blob(let data): return JSONText(String(decoding: data, as: UTF8.self))
        default: return nil
        }
    }

    public init(from decoder: any Decoder) throws {
        self.text = try decoder.singleValueContainer().decode(String.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(text)
    }

    /// Whether SQLite accepts `text` as JSON. A NUL byte is never JSON (a
    /// control character must be escaped), though SQLite's parser stops
    /// at it and would judge the text before it.
    static func isValid(_ text: String, in db: Database) throws -> Bool {
        guard !text.utf8.contains(0) else { return false }
        return try Bool.fetchOne(db, sql: "SELECT json_valid(?)", arguments: [text]) ?? false
    }
}
