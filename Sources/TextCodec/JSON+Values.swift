/// A document's values as Swift's, for code that reads a JSON document it
/// knows the shape of (a file opsh kept, a column, the server's plan): each
/// is nil when the value is of another type, so a reader says "not what I
/// expected" with one `guard`.
extension JSON {
    public var stringValue: String? {
        if case let .string(text) = self { return text }
        return nil
    }

    public var boolValue: Bool? {
        if case let .bool(flag) = self { return flag }
        return nil
    }

    /// An integer (not a float, even a whole one).
    public var integerValue: Int64? {
        if case let .integer(value) = self { return value }
        return nil
    }

    /// Any number: a float, or an integer as a float (another writer may
    /// have written a whole number of seconds without its `.0`).
    public var numberValue: Double? {
        switch self {
        case let .integer(value): return Double(value)
        case let .real(value): return value
        default: return nil
        }
    }

    public var arrayValue: [JSON]? {
        if case let .array(items) = self { return items }
        return nil
    }

    /// An object's members in document order.
    public var members: [(String, JSON)]? {
        if case let .object(members) = self { return members }
        return nil
    }

    /// Whether this is `null`: an optional member may be absent or null.
    public var isNull: Bool {
        if case .null = self { return true }
        return false
    }
}
