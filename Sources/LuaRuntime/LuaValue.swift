import Synchronization

/// A Lua value copied out of (or into) a Lua state.
///
/// Integers stay exact 64-bit integers and floats stay floats, as Lua 5.4
/// keeps them apart. Lua strings are bytes: valid UTF-8 arrives as
/// ``string(_:)``, anything else as ``bytes(_:)``, and both go back as the
/// same bytes. A table whose keys are exactly 1…n is an ``array(_:)``;
/// any other table (the empty one included) is a ``table(_:)``.
public indirect enum LuaValue: Hashable, Sendable {
    case `nil`
    case boolean(Bool)
    case integer(Int64)
    case number(Double)
    case string(String)
    case bytes([UInt8])
    case array([LuaValue])
    case table([LuaValue: LuaValue])
    /// A function, userdata or thread: kept by reference in the state.
    case reference(LuaReference)

    /// The Lua type name, as `type()` says it.
    public var typeName: String {
        switch self {
        case .nil: return "nil"
        case .boolean: return "boolean"
        case .integer, .number: return "number"
        case .string, .bytes: return "string"
        case .array, .table: return "table"
        case let .reference(reference): return reference.typeName
        }
    }

    /// The string's text, when it is a string (bytes decode lossily).
    public var stringValue: String? {
        switch self {
        case let .string(text): return text
        case let .bytes(bytes): return String(decoding: bytes, as: UTF8.self)
        default: return nil
        }
    }

    /// The bytes of a string value.
    public var byteValue: [UInt8]? {
        switch self {
        case let .string(text): return Array(text.utf8)
        case let .bytes(bytes): return bytes
        default: return nil
        }
    }

    /// Field `key` of a table (or element of an array), nil otherwise.
    public subscript(key: String) -> LuaValue {
        if case let .table(fields) = self { return fields[.string(key)] ?? .nil }
        return .nil
    }

    public var isNil: Bool { self == .nil }
}

extension LuaValue: ExpressibleByNilLiteral, ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByStringLiteral, ExpressibleByArrayLiteral,
    ExpressibleByDictionaryLiteral
{
    public init(nilLiteral: ()) { self = .nil }
    public init(booleanLiteral value: Bool) { self = .boolean(value) }
    public init(integerLiteral value: Int64) { self = .integer(value) }
    public init(floatLiteral value: Double) { self = .number(value) }
    public init(stringLiteral value: String) { self = .string(value) }
    public init(arrayLiteral elements: LuaValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (LuaValue, LuaValue)...) {
        self = .table(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}

/// A function, userdata or thread held in the Lua registry so Swift can
/// keep it (a callback) and push it back later.
///
/// Released when the last Swift reference goes, on the Lua thread: the
/// registry slot is freed at the runtime's next call, never from a deinit
/// that might run inside Lua's garbage collector.
public final class LuaReference: Hashable, @unchecked Sendable {
    public let typeName: String
    let slot: Int32
    weak var owner: LuaReferenceTable?

    init(slot: Int32, typeName: String, owner: LuaReferenceTable) {
        self.slot = slot
        self.typeName = typeName
        self.owner = owner
    }

    deinit { owner?.release(slot) }

    public static func == (lhs: LuaReference, rhs: LuaReference) -> Bool { lhs === rhs }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}

/// Registry slots whose Swift references are gone, freed on the Lua thread.
final class LuaReferenceTable: Sendable {
    private let released = Mutex<[Int32]>([])

    func release(_ slot: Int32) {
        released.withLock { $0.append(slot) }
    }

    func drain() -> [Int32] {
        released.withLock { slots in
            defer { slots.removeAll() }
            return slots
        }
    }
}
