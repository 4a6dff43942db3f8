extension PostgresURL {
    /// One server to try: a host name, an IP address or a socket folder,
    /// and its port.
    public struct Host: Sendable, Equatable, CustomStringConvertible {
        /// The host name, IP address or socket folder (`host`); for TLS
        /// and the password file.
        public var name: String
        /// The numeric address to connect to instead of looking up `name`
        /// (`hostaddr`).
        public var address: String?
        public var port: Int

        public init(name: String, address: String? = nil, port: Int = 5432) {
            self.name = name
            self.address = address
            self.port = port
        }

        public var endpoint: Endpoint {
            if let address, !address.isEmpty { return .tcp(host: address, port: port) }
            return name.hasPrefix("/") ? .unixSocket(path: "\(name)/.s.PGSQL.\(port)") : .tcp(host: name, port: port)
        }

        public var description: String { endpoint.description }

        /// libpq's pairing of the comma-separated `host`, `hostaddr` and
        /// `port` lists: as many hosts as `host` (or `hostaddr`) names, one
        /// port for all of them or one each; an empty entry is the default
        /// (the socket folder, port 5432).
        static func list(hosts: ConnectionSetting?, addresses: ConnectionSetting?, ports: ConnectionSetting?) throws -> [Host] {
            func split(_ setting: ConnectionSetting?) -> [String] {
                guard let setting, !setting.value.isEmpty else { return [] }
                return setting.value.split(separator: ",", omittingEmptySubsequences: false).map { String($0).trimmingBlanks }
            }
            let names = split(hosts), numbers = split(addresses), portTexts = split(ports)
            if !names.isEmpty, !numbers.isEmpty, names.count != numbers.count {
                throw addresses!.failure("\(numbers.count) host address(es) for \(names.count) host name(s): name as many of each")
            }
            let count = max(names.count, numbers.count, 1)
            guard portTexts.count <= 1 || portTexts.count == count else {
                throw ports!.failure("\(portTexts.count) ports for \(count) host(s): give one port for all, or one for each host")
            }
            return try (0..<count).map { index in
                let portText = portTexts.isEmpty ? "" : portTexts[portTexts.count == 1 ? 0 : index]
                let port = portText.isEmpty ? 5432 : try PostgresURL.port(portText) { ports!.failure($0) }
                let name = index < names.count ? names[index] : ""
                let address = index < numbers.count && !numbers[index].isEmpty ? numbers[index] : nil
                return Host(name: name.isEmpty && address == nil ? PostgresURL.defaultSocketDirectory : name,
                            address: address, port: port)
            }
        }
    }

    /// Which server will do, of several hosts (libpq's `target_session_attrs`).
    public enum TargetSessionAttributes: String, Sendable, Equatable, CaseIterable {
        /// The first that accepts the connection.
        case any
        /// One whose sessions may write (`SHOW transaction_read_only` is off).
        case readWrite = "read-write"
        /// One whose sessions may not (`transaction_read_only` is on).
        case readOnly = "read-only"
        /// One not in recovery (`pg_is_in_recovery()` is false).
        case primary
        /// One in recovery: a hot standby.
        case standby
        /// A standby if any host is one, else any.
        case preferStandby = "prefer-standby"
    }
}
