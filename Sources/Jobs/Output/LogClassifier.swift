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
    public static func level(of line: String) -> BuildLogLevel {
        let lower = line.lowercased()
        if contains(lower, ["error:", "error ", "fatal:", "fatal error", "failed", "failure", "panic:", "exception", "traceback"])
            || lower.hasPrefix("error") || lower.hasPrefix("e: ") {
            // "0 errors", "no errors": not an error.
            if !contains(lower, [" 0 error", "no error", "0 failed", "0 failures"]) { return .error }
        }
        if contains(lower, ["warning:", "warning ", "warn:", "deprecated"]) || lower.hasPrefix("warn") {
            return .warning
        }
        if lower.hasPrefix("debug") || lower.hasPrefix("[debug]") || lower.hasPrefix("+ ") || lower.hasPrefix("trace") {
            return .debug
        }
        return .info
    }

    /// The category of this line, updating the phase when the output
    /// announces tests.
    public mutating func category(of line: String) -> String {
        if category == "build" {
            let lower = line.lowercased()
            if Self.contains(lower, ["running tests", "test suite", "testing ", "test session starts", "=== run", "running unittests"])
                || lower.hasPrefix("test ") || lower.hasPrefix("[test") {
                category = "test"
            }
        }
        return category
    }

    private static func contains(_ line: String, _ needles: [String]) -> Bool {
        needles.contains { line.contains($0) }
    }
}
