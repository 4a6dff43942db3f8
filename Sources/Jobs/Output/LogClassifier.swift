import Store

/// Gives a line of build output its level and category.
///
/// The level comes from the line's content, the way a person skims a log:
/// compiler-style `error:`/`warning:` markers, `FAILED`, `fatal`, and lines
/// that look like debug chatter. The category starts as the phase opsh is
/// in (checkout, build) and switches to `test` when the build's own output
/// says tests are running, so operators can filter with
/// `build.{id}.logs.ids.categorytest`.
public struct LogClassifier: Sendable {
    public private(set) var category: String

    public init(category: String = "build") {
        self.category = category
    }

    /// The level of one line.
    ///
    /// Matching is ASCII case-insensitive on the line's bytes, without
    /// allocating: the job runner classifies every line of output.
    public static func level(of line: String) -> BuildLogLevel {
        var line = line
        return line.withUTF8 { level(ofBytes: $0) }
    }

    static func level(ofBytes line: UnsafeBufferPointer<UInt8>) -> BuildLogLevel {
        if containsAny(line, errorWords) || hasPrefix(line, "error") || hasPrefix(line, "e: ") {
            // "0 errors", "no errors": not an error.
            if !containsAny(line, notErrorWords) { return .error }
        }
        if containsAny(line, warningWords) || hasPrefix(line, "warn") {
            return .warning
        }
        if hasPrefix(line, "debug") || hasPrefix(line, "[debug]") || hasPrefix(line, "+ ") || hasPrefix(line, "trace") {
            return .debug
        }
        return .info
    }

    /// The category of this line, updating the phase when the output
    /// announces tests.
    public mutating func category(of line: String) -> String {
        if category == "build" {
            var line = line
            let startsTests = line.withUTF8 { bytes in
                Self.containsAny(bytes, Self.testWords) || Self.hasPrefix(bytes, "test ") || Self.hasPrefix(bytes, "[test")
            }
            if startsTests { category = "test" }
        }
        return category
    }

    private static let errorWords = words(["error:", "error ", "fatal:", "fatal error", "failed", "failure", "panic:", "exception", "traceback"])
    private static let notErrorWords = words([" 0 error", "no error", "0 failed", "0 failures"])
    private static let warningWords = words(["warning:", "warning ", "warn:", "deprecated"])
    private static let testWords = words(["running tests", "test suite", "testing ", "test session starts", "=== run", "running unittests"])

    private static func words(_ words: [String]) -> [[UInt8]] { words.map { Array($0.utf8) } }

    @inline(__always)
    private static func lower(_ byte: UInt8) -> UInt8 {
        byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte
    }

    private static func hasPrefix(_ line: UnsafeBufferPointer<UInt8>, _ prefix: StaticString) -> Bool {
        let count = prefix.utf8CodeUnitCount
        guard line.count >= count else { return false }
        let bytes = prefix.utf8Start
        for index in 0..<count where lower(line[index]) != bytes[index] { return false }
        return true
    }

    /// Whether the line holds one of `needles` (lowercase ASCII), ignoring case.
    private static func containsAny(_ line: UnsafeBufferPointer<UInt8>, _ needles: [[UInt8]]) -> Bool {
        for needle in needles where needle.count <= line.count {
            let first = needle[0]
            var start = 0
            let last = line.count - needle.count
            while start <= last {
                if lower(line[start]) == first {
                    var matched = 1
                    while matched < needle.count && lower(line[start + matched]) == needle[matched] { matched += 1 }
                    if matched == needle.count { return true }
                }
                start += 1
            }
        }
        return false
    }
}
