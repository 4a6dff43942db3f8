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
///
/// A version 7 UUID (RFC 9562): the time in milliseconds, then 74 random
/// bits. Ids made later sort later, so the rows a loop inserts land next
/// to each other in the primary key's index instead of on random pages of
/// it (a version 4 id scattered `logs.insert` across the whole index:
/// BENCHMARKS.md, "The domain layer against hand-written SQL").
public func makeIdentifier() -> String {
    // The random bits: 16 bytes of a buffer filled 256 ids at a time,
    // written as lowercase hex here: Foundation's UUID() opened
    // /dev/urandom on each call, and a getrandom(2) per 8 bytes and
    // uuidString.lowercased() were most of what insertedFields cost.
    var bytes = IdentifierBytes.shared.next()
    var now = timespec()
    clock_gettime(CLOCK_REALTIME, &now)
    let milliseconds = UInt64(now.tv_sec) &* 1000 &+ UInt64(now.tv_nsec / 1_000_000)
    return withUnsafeMutableBytes(of: &bytes) { raw in
        for index in 0..<6 { raw[index] = UInt8(truncatingIfNeeded: milliseconds >> (8 * (5 - index))) }
        raw[6] = raw[6] & 0x0F | 0x70  // version 7
        raw[8] = raw[8] & 0x3F | 0x80  // the RFC 9562 variant
        let digits: StaticString = "0123456789abcdef"
        return String(unsafeUninitializedCapacity: 36) { text in
            var position = 0
            for index in 0..<16 {
                if index == 4 || index == 6 || index == 8 || index == 10 {
                    text[position] = UInt8(ascii: "-")
                    position += 1
                }
                text[position] = digits.utf8Start[Int(raw[index] >> 4)]
                text[position + 1] = digits.utf8Start[Int(raw[index] & 0x0F)]
                position += 2
            }
            return position
        }
    }
}

/// Random bytes for identifiers, read from the system's generator
/// (`/dev/urandom`) 4 KiB at a time. A process made by fork(2) reads its
/// own: the buffer is refilled when the process id changed.
private final class IdentifierBytes: @unchecked Sendable {
    static let shared = IdentifierBytes()

    private let lock = NSLock()
    private var buffer = [(UInt64, UInt64)](repeating: (0, 0), count: 256)
    private var used = 256
    private var owner: pid_t = 0

    func next() -> (UInt64, UInt64) {
        lock.lock()
        defer { lock.unlock() }
        let pid = getpid()
        if used == buffer.count || owner != pid {
            buffer.withUnsafeMutableBytes { raw in
                var filled = 0
                let device = open("/dev/urandom", O_RDONLY | O_CLOEXEC)
                while device >= 0, filled < raw.count {
                    let count = read(device, raw.baseAddress! + filled, raw.count - filled)
                    if count > 0 {
                        filled += count
                    } else if count == 0 || errno != EINTR {
                        break
                    }
                }
                if device >= 0 { close(device) }
                // Without the device: the standard library's generator (getrandom(2), 8 bytes a call).
                var generator = SystemRandomNumberGenerator()
                while filled < raw.count {
                    raw.storeBytes(of: generator.next() as UInt8, toByteOffset: filled, as: UInt8.self)
                    filled += 1
                }
            }
            used = 0
            owner = pid
        }
        used += 1
        return buffer[used - 1]
    }
}
