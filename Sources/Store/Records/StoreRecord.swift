import Foundation
import GRDB
import TextCodec

/// What every record of the schema is: a Codable row of one table, with
/// dates stored as seconds since 1970 and JSON columns checked on write.
public protocol StoreRecord: Codable, Sendable, FetchableRecord, MutablePersistableRecord {
    /// The columns that hold JSON text.
    static var jsonColumns: [String] { get }
    /// The primary-key column(s), in order.
    static var primaryKeyColumns: [String] { get }
    /// Columns that take one of a few words (a build's `status`): what an
    /// error names when a value is none of them.
    static var allowedValues: [String: [String]] { get }
}

extension StoreRecord {
    public static var jsonColumns: [String] { [] }
    public static var allowedValues: [String: [String]] { [:] }

    public static func databaseDateEncodingStrategy(for column: String) -> DatabaseDateEncodingStrategy {
        .timeIntervalSince1970
    }

    public static func databaseDateDecodingStrategy(for column: String) -> DatabaseDateDecodingStrategy {
        .timeIntervalSince1970
    }

    /// Refuses invalid JSON with an error naming the column, before SQLite's
    /// CHECK constraint would refuse it with a terser one.
    public func willSave(_ db: Database) throws {
        guard !Self.jsonColumns.isEmpty else { return }
        let values = try databaseDictionary
        for column in Self.jsonColumns {
            guard let value = values[column], case .string(let text) = value.storage else { continue }
            if try !JSONText.isValid(text, in: db) {
                throw StoreError.invalidValue(
                    table: Self.databaseTableName, column: column,
                    reason: "not valid JSON: \(Self.excerpt(text))")
            }
        }
    }

    /// Control characters visibly (a NUL as `\0`), at most 60 characters.
    static func excerpt(_ text: String) -> String {
        TextBytes.visible(text, limit: 60)
    }
}

/// A record whose table uses snake_case column names (the analytics store's tables, ARCHITECTURE.md)
/// while Swift properties stay camelCase.
public protocol SnakeCaseStoreRecord: StoreRecord {}

extension SnakeCaseStoreRecord {
    public static var databaseColumnEncodingStrategy: DatabaseColumnEncodingStrategy { .convertToSnakeCase }
    public static var databaseColumnDecodingStrategy: DatabaseColumnDecodingStrategy { .convertFromSnakeCase }
}

/// Makes a new lowercase UUID string: ids operators can type.
public func makeIdentifier() -> String {
    // A version 4 UUID from the system's generator (getrandom(2)):
    // Foundation's UUID() opened /dev/urandom on each call (the profile
    // of BENCHMARKS.md, "The domain layer against hand-written SQL").
    var generator = SystemRandomNumberGenerator()
    var bytes = (generator.next() as UInt64, generator.next() as UInt64)
    return withUnsafeMutableBytes(of: &bytes) { raw in
        raw[6] = raw[6] & 0x0F | 0x40  // version 4
        raw[8] = raw[8] & 0x3F | 0x80  // the RFC 4122 variant
        return UUID(uuid: raw.load(as: uuid_t.self)).uuidString.lowercased()
    }
}
