/// A semantic version (semver.org 2.0.0) read from a tag name, with an
/// optional `v` prefix: `1.2.0`, `v2.0.0-beta.1`, `1.0.0+build.5`.
///
/// Versions compare by semver precedence: `1.10.0 > 1.9.0`,
/// `2.0.0-beta.1 < 2.0.0`, `1.0.0-alpha.2 < 1.0.0-alpha.10 < 1.0.0-alpha.beta`;
/// build metadata and the `v` prefix do not count. Equality is precedence
/// equality too (`v1.0.0 == 1.0.0+build.7`), so that `<`, `==` and `>` stay
/// consistent; ``tagName`` keeps the text the version was read from.
public struct Version: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// One dot-separated part of a pre-release.
    public enum Identifier: Sendable, Hashable, Comparable, CustomStringConvertible {
        /// Digits only, compared as numbers (kept as text: no overflow).
        case numeric(String)
        case alphanumeric(String)

        public var description: String {
            switch self {
            case .numeric(let text), .alphanumeric(let text): return text
            }
        }

        /// Numeric identifiers sort before alphanumeric ones; numbers by
        /// value; text by ASCII order.
        public static func < (lhs: Identifier, rhs: Identifier) -> Bool {
            switch (lhs, rhs) {
            case let (.numeric(a), .numeric(b)):
                return a.count != b.count ? a.count < b.count : a < b
            case (.numeric, .alphanumeric):
                return true
            case (.alphanumeric, .numeric):
                return false
            case let (.alphanumeric(a), .alphanumeric(b)):
                return Array(a.utf8).lexicographicallyPrecedes(Array(b.utf8))
            }
        }
    }

    /// The text this version was read from (`v2.0.0-beta.1`).
    public let tagName: String
    public let major: Int
    public let minor: Int
    public let patch: Int
    public let prerelease: [Identifier]
    public let buildMetadata: [String]

    /// Reads a version; nil when `text` is not one (see ``validate(_:)``
    /// for the reason).
    public init?(_ text: String) {
        guard let version = try? Version(parsing: text) else { return nil }
        self = version
    }

    /// Reads a version, or says why `text` is not one.
    public init(parsing text: String) throws(VersionError) {
        func fail(_ reason: String) -> VersionError { VersionError(text: text, reason: reason) }
        var rest = Substring(text)
        if rest.hasPrefix("v") { rest = rest.dropFirst() }
        guard !rest.isEmpty else { throw fail("it is empty") }

        var build: [String] = []
        if let plus = rest.firstIndex(of: "+") {
            let metadata = rest[rest.index(after: plus)...]
            rest = rest[..<plus]
            build = metadata.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
            for identifier in build {
                guard !identifier.isEmpty else { throw fail("build metadata has an empty identifier") }
                guard identifier.utf8.allSatisfy(Self.isIdentifierByte) else {
                    throw fail("build metadata '\(identifier)' may only hold letters, digits and '-'")
                }
            }
        }
        var pre: [Identifier] = []
        if let dash = rest.firstIndex(of: "-") {
            let prerelease = rest[rest.index(after: dash)...]
            rest = rest[..<dash]
            for part in prerelease.split(separator: ".", omittingEmptySubsequences: false) {
                guard !part.isEmpty else { throw fail("the pre-release has an empty identifier") }
                guard part.utf8.allSatisfy(Self.isIdentifierByte) else {
                    throw fail("pre-release identifier '\(part)' may only hold letters, digits and '-'")
                }
                if part.utf8.allSatisfy(Self.isDigit) {
                    guard part == "0" || !part.hasPrefix("0") else {
                        throw fail("numeric pre-release identifier '\(part)' has a leading zero")
                    }
                    pre.append(.numeric(String(part)))
                } else {
                    pre.append(.alphanumeric(String(part)))
                }
            }
        }
        let core = rest.split(separator: ".", omittingEmptySubsequences: false)
        guard core.count == 3 else {
            throw fail("expected MAJOR.MINOR.PATCH, found \(core.count) part\(core.count == 1 ? "" : "s")")
        }
        var numbers: [Int] = []
        for (name, part) in zip(["major", "minor", "patch"], core) {
            guard !part.isEmpty, part.utf8.allSatisfy(Self.isDigit) else {
                throw fail("the \(name) version '\(part)' is not a number")
            }
            guard part == "0" || !part.hasPrefix("0") else { throw fail("the \(name) version '\(part)' has a leading zero") }
            guard let number = Int(part) else { throw fail("the \(name) version '\(part)' is too large") }
            numbers.append(number)
        }
        tagName = text
        major = numbers[0]
        minor = numbers[1]
        patch = numbers[2]
        self.prerelease = pre
        buildMetadata = build
    }

    /// Why `text` is not a version, or nil when it is one.
    public static func validate(_ text: String) -> String? {
        do {
            _ = try Version(parsing: text)
            return nil
        } catch {
            return error.description
        }
    }

    /// Whether `text` is a semantic version (optionally `v`-prefixed).
    public static func isValid(_ text: String) -> Bool {
        Version(text) != nil
    }

    public var isPrerelease: Bool { !prerelease.isEmpty }

    /// The normalized version: no `v`, with pre-release and build metadata.
    public var description: String {
        var text = "\(major).\(minor).\(patch)"
        if !prerelease.isEmpty { text += "-" + prerelease.map(\.description).joined(separator: ".") }
        if !buildMetadata.isEmpty { text += "+" + buildMetadata.joined(separator: ".") }
        return text
    }

    public static func == (lhs: Version, rhs: Version) -> Bool {
        lhs.major == rhs.major && lhs.minor == rhs.minor && lhs.patch == rhs.patch && lhs.prerelease == rhs.prerelease
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(major)
        hasher.combine(minor)
        hasher.combine(patch)
        hasher.combine(prerelease)
    }

    public static func < (lhs: Version, rhs: Version) -> Bool {
        if lhs.major != rhs.major { return lhs.major < rhs.major }
        if lhs.minor != rhs.minor { return lhs.minor < rhs.minor }
        if lhs.patch != rhs.patch { return lhs.patch < rhs.patch }
        // A pre-release comes before its release.
        switch (lhs.prerelease.isEmpty, rhs.prerelease.isEmpty) {
        case (true, true), (true, false): return false
        case (false, true): return true
        case (false, false): return lhs.prerelease.lexicographicallyPrecedes(rhs.prerelease)
        }
    }

    private static func isDigit(_ byte: UInt8) -> Bool {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
    }

    private static func isIdentifierByte(_ byte: UInt8) -> Bool {
        isDigit(byte) || (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
            || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z")) || byte == UInt8(ascii: "-")
    }
}

/// Text that is not a semantic version, and why.
public struct VersionError: Error, Equatable, Sendable, CustomStringConvertible {
    public var text: String
    public var reason: String

    public var description: String { "'\(text)' is not a semantic version: \(reason)" }
}
