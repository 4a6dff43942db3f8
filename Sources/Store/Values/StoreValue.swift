import Foundation
import GRDB
import TextCodec

/// A value the core hands to its callers without tying them to GRDB or to a
/// record type: what query keys fetch and observations deliver, what the
/// Lua bindings turn into Lua values and the shell prints.
public enum StoreValue: Hashable, Sendable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob([UInt8])
    case array([StoreValue])
    /// A row or a dictionary, its fields in order.
    case object([Field])

    public struct Field: Hashable, Sendable {
        public var name: String
        public var value: StoreValue
        public init(_ name: String, _ value: StoreValue) {
            self.name = name
            self.value = value
        }
    }

    /// The field of an object with this name.
    public subscript(name: String) -> StoreValue? {
        guard case .object(let fields) = self else { return nil }
        return fields.first { $0.name == name }?.value
    }

    /// The elements of an array.
    public var arrayValue: [StoreValue]? {
        if case .array(let values) = self { return values }
        return nil
    }

    public var textValue: String? {
        if case .text(let text) = self { return text }
        return nil
    }

    public var integerValue: Int64? {
        if case .integer(let value) = self { return value }
        return nil
    }
}

extension StoreValue {
    /// A database value as it is stored: no date or JSON interpretation.
    public init(_ value: DatabaseValue) {
        switch value.storage {
        case .null: self = .null
        case .int64(let value): self = .integer(value)
        case .double(let value): self = .real(value)
        case .string(let value): self = .text(value)
        case .blob(let data): self = .blob([UInt8](data))
        }
    }

    /// A row as an object with its columns in order.
    public init(_ row: Row) {
        // By position: a row's subscript by name searches its columns
        // without regard to case, each time (a key read's row took most of
        // its conversion's time so).
        self = .object(zip(row.columnNames, row.databaseValues).map { name, value in Field(name, StoreValue(value)) })
    }
}

extension StoreValue {
    /// The value as an SQL argument; arrays and objects are not arguments
    /// (callers read only scalars into arguments) and bind as NULL.
    var databaseValue: DatabaseValue {
        switch self {
        case .null: .null
        case let .integer(number): number.databaseValue
        case let .real(number): number.databaseValue
        case let .text(text): text.databaseValue
        case let .blob(bytes): Data(bytes).databaseValue
        case .array, .object: .null
        }
    }
}
