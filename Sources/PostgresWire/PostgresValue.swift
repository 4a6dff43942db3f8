/// One value going to or coming from the server: a statement's parameter, a
/// row's column.
///
/// The cases are the types every engine above has in common (SQLite's
/// storage classes plus a boolean). What each becomes on the wire:
///
/// | case | as a parameter | comes back from the column types |
/// | --- | --- | --- |
/// | `null` | NULL, type left to the server | any NULL |
/// | `integer` | `int8`, binary: exact over the whole Int64 range | `int2`, `int4`, `int8`, `oid` (binary) |
/// | `double` | `float8`, binary: every bit kept | `float4`, `float8` (binary) |
/// | `text` | text, type left to the server (so `'2024-01-01'` fills a `timestamptz`) | every other type, in PostgreSQL's text form (`numeric`, `timestamptz`, `json`, arrays, …) |
/// | `bytes` | `bytea`, binary: NUL and 0xFF bytes kept | `bytea` (binary) |
/// | `bool` | `bool`, binary | `bool` (binary) |
///
/// Timestamps, numerics and JSON come back as their text: the engine above
/// decides what they mean. A `numeric` is never turned into a `Double`
/// behind the caller's back.
public enum PostgresValue: Sendable, Hashable, CustomStringConvertible {
    case null
    case integer(Int64)
    case double(Double)
    case text(String)
    case bytes([UInt8])
    case bool(Bool)

    public var description: String {
        switch self {
        case .null: return "NULL"
        case .integer(let value): return String(value)
        case .double(let value): return String(value)
        case .text(let value): return value
        case .bytes(let value): return "\\x" + hexString(value)
        case .bool(let value): return value ? "true" : "false"
        }
    }

    public var isNull: Bool { self == .null }
}

extension PostgresValue: ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral, ExpressibleByStringLiteral,
    ExpressibleByBooleanLiteral, ExpressibleByNilLiteral {
    public init(integerLiteral value: Int64) { self = .integer(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(stringLiteral value: String) { self = .text(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(nilLiteral: ()) { self = .null }
}

/// Type OIDs the client knows by number (`pg_type.oid`, fixed since
/// PostgreSQL 7). Any other type is read as text.
public enum PostgresType {
    public static let bool: UInt32 = 16
    public static let bytea: UInt32 = 17
    public static let int8: UInt32 = 20
    public static let int2: UInt32 = 21
    public static let int4: UInt32 = 23
    public static let text: UInt32 = 25
    public static let oid: UInt32 = 26
    public static let json: UInt32 = 114
    public static let float4: UInt32 = 700
    public static let float8: UInt32 = 701
    public static let unknown: UInt32 = 705
    public static let varchar: UInt32 = 1043
    public static let timestamp: UInt32 = 1114
    public static let timestamptz: UInt32 = 1184
    public static let numeric: UInt32 = 1700
    public static let jsonb: UInt32 = 3802

    /// The types whose results are asked for in binary: the ones whose
    /// binary form is simpler and exact (integers, floats, booleans,
    /// bytes). Every other type comes as text.
    static func prefersBinary(_ type: UInt32) -> Bool {
        switch type {
        case PostgresType.int2, PostgresType.int4, PostgresType.int8, PostgresType.oid,
             PostgresType.float4, PostgresType.float8, PostgresType.bool, PostgresType.bytea: return true
        default: return false
        }
    }
}

/// A result column: its name and its type, as the server describes them.
public struct PostgresColumn: Sendable, Equatable {
    public var name: String
    /// The type's OID (``PostgresType``); `pg_type` names the others.
    public var typeOID: UInt32
    /// The table the column comes from (0 for an expression) and its
    /// attribute number there.
    public var tableOID: UInt32
    public var attributeNumber: Int16
}

/// What a statement returned: its columns, its rows, and the command tag
/// (`SELECT 3`, `INSERT 0 1`, `UPDATE 12`, `CREATE TABLE`, …).
public struct PostgresResult: Sendable, Equatable {
    public var columns: [PostgresColumn]
    public var rows: [[PostgresValue]]
    /// The server's CommandComplete tag; empty for an empty query.
    public var commandTag: String

    public init(columns: [PostgresColumn], rows: [[PostgresValue]], commandTag: String) {
        self.columns = columns
        self.rows = rows
        self.commandTag = commandTag
    }

    /// The rows the command inserted, updated, deleted, selected, moved,
    /// fetched or copied: the tag's last number (nil for a tag without one,
    /// such as `CREATE TABLE`).
    public var affectedRows: Int? {
        // By bytes: read after each statement (String's contains(_:) is
        // Foundation's locale-aware search).
        let bytes = commandTag.utf8
        guard let space = bytes.lastIndex(of: UInt8(ascii: " ")) else { return nil }
        return Int(Substring(bytes[bytes.index(after: space)...]))
    }

    /// The first row's first value: for `SELECT count(*) …` and the like.
    public var scalar: PostgresValue? { rows.first?.first }
}

// MARK: Encoding and decoding

extension PostgresValue {
    /// The type OID to declare for this parameter in Parse (0: let the
    /// server infer it from the statement, as it does for a literal).
    var parameterTypeOID: UInt32 {
        switch self {
        case .null, .text: return 0
        case .integer: return PostgresType.int8
        case .double: return PostgresType.float8
        case .bytes: return PostgresType.bytea
        case .bool: return PostgresType.bool
        }
    }

    /// Whether Bind sends this parameter in binary (1) or text (0).
    var parameterFormat: Int16 {
        switch self {
        case .null, .text: return 0
        case .integer, .double, .bytes, .bool: return 1
        }
    }

    /// Appends Bind's length and bytes for this parameter.
    func encodeParameter(into buffer: inout [UInt8]) {
        switch self {
        case .null:
            buffer.appendInt32(-1)
        case .integer(let value):
            buffer.appendInt32(8)
            buffer.appendInt64(value)
        case .double(let value):
            buffer.appendInt32(8)
            buffer.appendInt64(Int64(bitPattern: value.bitPattern))
        case .text(let value):
            let utf8 = Array(value.utf8)
            buffer.appendInt32(Int32(utf8.count))
            buffer += utf8
        case .bytes(let value):
            buffer.appendInt32(Int32(value.count))
            buffer += value
        case .bool(let value):
            buffer.appendInt32(1)
            buffer.append(value ? 1 : 0)
        }
    }

    /// Decodes one column of a DataRow. `binary` says which format the
    /// server used (the one Bind asked for, or text for a simple query).
    static func decode(_ bytes: UnsafeRawBufferPointer, type: UInt32, binary: Bool) throws -> PostgresValue {
        if binary {
            func bigEndian(_ count: Int) throws -> UInt64 {
                guard bytes.count == count else {
                    throw PostgresClientError.protocolViolation("a binary value of type \(type) has \(bytes.count) bytes, expected \(count)")
                }
                var value: UInt64 = 0
                for byte in bytes { value = value << 8 | UInt64(byte) }
                return value
            }
            switch type {
            case PostgresType.int2: return .integer(Int64(Int16(truncatingIfNeeded: try bigEndian(2))))
            case PostgresType.int4: return .integer(Int64(Int32(truncatingIfNeeded: try bigEndian(4))))
            case PostgresType.oid: return .integer(Int64(UInt32(truncatingIfNeeded: try bigEndian(4))))
            case PostgresType.int8: return .integer(Int64(bitPattern: try bigEndian(8)))
            case PostgresType.float4: return .double(Double(Float(bitPattern: UInt32(truncatingIfNeeded: try bigEndian(4)))))
            case PostgresType.float8: return .double(Double(bitPattern: try bigEndian(8)))
            case PostgresType.bool: return .bool(try bigEndian(1) != 0)
            case PostgresType.bytea: return .bytes(Array(bytes))
            default: return .text(String(decoding: bytes, as: UTF8.self))
            }
        }
        // Text format: a simple query's results, and the types read as text.
        let text = String(decoding: bytes, as: UTF8.self)
        switch type {
        case PostgresType.int2, PostgresType.int4, PostgresType.int8, PostgresType.oid:
            if let value = Int64(text) { return .integer(value) }
        case PostgresType.float4, PostgresType.float8:
            switch text {
            case "NaN": return .double(.nan)
            case "Infinity": return .double(.infinity)
            case "-Infinity": return .double(-.infinity)
            default:
                // A float4 read as text is the same Double as read in binary
                // (0.1::float4 is 0.10000000149011612 both ways).
                if type == PostgresType.float4, let value = Float(text) { return .double(Double(value)) }
                if let value = Double(text) { return .double(value) }
            }
        case PostgresType.bool:
            return .bool(text == "t")
        case PostgresType.bytea:
            if let value = decodeByteaHex(bytes) { return .bytes(value) }
        default:
            break
        }
        return .text(text)
    }

    /// bytea's text form as the server writes it since 9.0 (`\x` and hex).
    private static func decodeByteaHex(_ bytes: UnsafeRawBufferPointer) -> [UInt8]? {
        guard bytes.count >= 2, bytes[0] == UInt8(ascii: "\\"), bytes[1] == UInt8(ascii: "x"), bytes.count % 2 == 0 else { return nil }
        func nibble(_ c: UInt8) -> UInt8? {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
            default: return nil
            }
        }
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count - 2) / 2)
        var i = 2
        while i < bytes.count {
            guard let high = nibble(bytes[i]), let low = nibble(bytes[i + 1]) else { return nil }
            out.append(high << 4 | low)
            i += 2
        }
        return out
    }
}
