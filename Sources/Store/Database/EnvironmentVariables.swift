#if canImport(Glibc)
import Glibc
#endif

/// Where opsh reads environment variables from: the process (`getenv`, one
/// variable at a time) or, in tests, a dictionary.
///
/// `ProcessInfo.processInfo.environment` copies every variable into a new
/// dictionary on each call: at start-up, where opsh needs two or three
/// variables, that copy was a measurable part of the time to the first line.
public struct EnvironmentVariables: Sendable, ExpressibleByDictionaryLiteral {
    private let values: [String: String]?

    /// The process's environment, read when asked.
    public static let process = EnvironmentVariables(values: nil)

    private init(values: [String: String]?) {
        self.values = values
    }

    public init(_ values: [String: String]) {
        self.values = values
    }

    public init(dictionaryLiteral elements: (String, String)...) {
        values = Dictionary(elements, uniquingKeysWith: { _, last in last })
    }

    public subscript(name: String) -> String? {
        if let values { return values[name] }
        return getenv(name).map { String(cString: $0) }
    }
}
