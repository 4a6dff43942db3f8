/// One connection parameter (`host`, `port`, `dbname`, …) as libpq names
/// it, and where it was read: the URL or keyword/value string, a service
/// file, or an environment variable. Every source is read into these first
/// and applied by one `switch` (``PostgresURL``), so a keyword means the
/// same wherever it is written, and a bad value says where it came from.
public struct ConnectionSetting: Sendable, Equatable {
    public enum Source: Sendable, Equatable {
        /// A URL's part or query parameter: the offsets (from 0) of the
        /// parameter's name and of its value in the URL.
        case url(keyword: Int, value: Int)
        /// A keyword/value string: the offsets of the keyword and the value.
        case keywordValue(keyword: Int, value: Int)
        /// A line of a service file (`pg_service.conf`).
        case serviceFile(path: String, line: Int)
        /// An environment variable (`PGHOST`).
        case environment(String)
    }

    public var keyword: String
    public var value: String
    public var source: Source

    public init(_ keyword: String, _ value: String, from source: Source) {
        self.keyword = keyword
        self.value = value
        self.source = source
    }

    /// The error for a bad name (`atValue: false`) or value, saying where
    /// it was written; a URL's stays ``PostgresClientError/invalidURL(_:)``.
    func failure(_ message: String, atValue: Bool = true) -> PostgresClientError {
        switch source {
        case let .url(keyword, value):
            return .invalidURL("\(message) (at character \((atValue ? value : keyword) + 1) of the URL)")
        case let .keywordValue(keyword, value):
            return .invalidConnectionString("\(message) (at character \((atValue ? value : keyword) + 1) of the connection string)")
        case let .serviceFile(path, line):
            return .invalidConnectionString("\(message) (service file \(path), line \(line))")
        case let .environment(name):
            return .invalidConnectionString("\(message) (in the environment variable \(name))")
        }
    }
}
