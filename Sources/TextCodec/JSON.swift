/// A JSON document as read by ``JSONParser`` and written by ``text(indent:)``
/// or ``compactText(sortingKeys:)``: opsh's one JSON value type. Integers
/// kept exact and apart from floats (`3` is an integer, `3.0` a float),
/// object members in document order, so a document written twice from the
/// same values is the same text.
public indirect enum JSON: Hashable, Sendable {
    case null
    case bool(Bool)
    case integer(Int64)
    case real(Double)
    case string(String)
    case array([JSON])
    case object([(String, JSON)])

    public static func == (lhs: JSON, rhs: JSON) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return true
        case let (.bool(a), .bool(b)): return a == b
        case let (.integer(a), .integer(b)): return a == b
        case let (.real(a), .real(b)): return a == b
        case let (.string(a), .string(b)): return a == b
        case let (.array(a), .array(b)): return a == b
        case let (.object(a), .object(b)):
            return a.count == b.count && zip(a, b).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
        default: return false
        }
    }

    public func hash(into hasher: inout Hasher) {
        switch self {
        case .null: hasher.combine(0)
        case let .bool(flag): hasher.combine(1); hasher.combine(flag)
        case let .integer(value): hasher.combine(2); hasher.combine(value)
        case let .real(value): hasher.combine(3); hasher.combine(value)
        case let .string(text): hasher.combine(4); hasher.combine(text)
        case let .array(items): hasher.combine(5); hasher.combine(items)
        case let .object(members):
            hasher.combine(6)
            hasher.combine(members.count)
            for (name, value) in members {
                hasher.combine(name)
                hasher.combine(value)
            }
        }
    }

    /// Parses JSON text (RFC 8259, strictly); throws a ``JSONParser/Failure``
    /// that says where.
    public static func parse(_ text: String) throws -> JSON {
        try JSONParser.parse(Array(text.utf8))
    }

    /// The member called `name` of an object.
    public subscript(name: String) -> JSON? {
        guard case let .object(members) = self else { return nil }
        return members.first { $0.0 == name }?.1
    }

    /// `object`, `array`, `string`, `number` (integer or float), `boolean`, `null`.
    public var typeName: String {
        switch self {
        case .null: return "null"
        case .bool: return "boolean"
        case .integer: return "integer"
        case .real: return "number"
        case .string: return "string"
        case .array: return "array"
        case .object: return "object"
        }
    }

    // MARK: Writing

    /// Pretty-printed text: two-space indentation, a flat object (a row)
    /// on one line.
    public func text(indent: Int = 0) -> String {
        var output = ""
        write(to: &output, indent: indent)
        return output
    }

    private func write(to output: inout String, indent: Int) {
        switch self {
        case .null: output += "null"
        case let .bool(flag): output += flag ? "true" : "false"
        case let .integer(value): output += String(value)
        case let .real(value): output += JSONString.floatText(value)
        case let .string(text): JSONString.append(text, to: &output)
        case let .array(items):
            if items.isEmpty { output += "[]"; return }
            let pad = String(repeating: "  ", count: indent + 1)
            output += "[\n"
            for (index, item) in items.enumerated() {
                output += pad
                if case let .object(members) = item, members.allSatisfy({ !$0.1.isContainer }) {
                    item.writeFlat(to: &output)
                } else {
                    item.write(to: &output, indent: indent + 1)
                }
                output += index == items.count - 1 ? "\n" : ",\n"
            }
            output += String(repeating: "  ", count: indent) + "]"
        case let .object(members):
            if members.isEmpty { output += "{}"; return }
            let pad = String(repeating: "  ", count: indent + 1)
            output += "{\n"
            for (index, (name, value)) in members.enumerated() {
                output += pad
                JSONString.append(name, to: &output)
                output += ": "
                value.write(to: &output, indent: indent + 1)
                output += index == members.count - 1 ? "\n" : ",\n"
            }
            output += String(repeating: "  ", count: indent) + "}"
        }
    }

    /// Text without spaces or line breaks (`{"a":1,"b":[true,null]}`), what
    /// a column or a file holds. With `sortingKeys`, every object's members
    /// are written in the byte order of their names, so the same members
    /// give the same text whatever order they came in. A float that is not
    /// finite (no parsed document has one) is written as `null`: JSON has
    /// no such number.
    public func compactText(sortingKeys: Bool = false) -> String {
        var output = ""
        writeCompact(to: &output, sortingKeys: sortingKeys)
        return output
    }

    private func writeCompact(to output: inout String, sortingKeys: Bool) {
        switch self {
        case .null: output += "null"
        case let .bool(flag): output += flag ? "true" : "false"
        case let .integer(value): output += String(value)
        case let .real(value): output += value.isFinite ? JSONString.floatText(value) : "null"
        case let .string(text): JSONString.append(text, to: &output)
        case let .array(items):
            output += "["
            for (index, item) in items.enumerated() {
                if index > 0 { output += "," }
                item.writeCompact(to: &output, sortingKeys: sortingKeys)
            }
            output += "]"
        case let .object(members):
            let ordered = sortingKeys ? members.sorted { $0.0.utf8.lexicographicallyPrecedes($1.0.utf8) } : members
            output += "{"
            for (index, (name, value)) in ordered.enumerated() {
                if index > 0 { output += "," }
                JSONString.append(name, to: &output)
                output += ":"
                value.writeCompact(to: &output, sortingKeys: sortingKeys)
            }
            output += "}"
        }
    }

    private var isContainer: Bool {
        switch self {
        case .array, .object: return true
        default: return false
        }
    }

    private func writeFlat(to output: inout String) {
        guard case let .object(members) = self else { write(to: &output, indent: 0); return }
        output += "{"
        for (index, (name, value)) in members.enumerated() {
            if index > 0 { output += ", " }
            JSONString.append(name, to: &output)
            output += ": "
            value.write(to: &output, indent: 0)
        }
        output += "}"
    }
}
