/// A key that does not parse, with the position (1-based, in characters)
/// of the problem and what was expected there.
public struct QueryKeyError: Error, Hashable, Sendable, CustomStringConvertible {
    public var key: String
    public var position: Int
    public var expected: String

    public var description: String {
        "malformed query key '\(key)' at position \(position): expected \(expected)"
    }
}
