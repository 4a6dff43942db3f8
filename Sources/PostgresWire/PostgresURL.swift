import Glibc

/// Where and as whom to connect, read as libpq (and so psql) reads it: a
/// URL or a keyword/value string, then its service, the `PG*` environment
/// variables and the defaults (``ConnectionParameters``).
///
///     postgresql://USER[:PASSWORD]@HOST[:PORT][,HOST[:PORT]…]/DATABASE[?PARAMETER=VALUE&...]
///     postgres://…                                  (the same)
///     postgresql://alice@/opsh                       the default socket folder, /var/run/postgresql
///     postgresql://alice@/opsh?host=/tmp/pg          the Unix socket /tmp/pg/.s.PGSQL.5432
///     postgresql://alice:s3cret@db.example:6432/opsh TCP
///     postgresql://                                  everything from PG* variables and defaults
///     host=db.example port=6432 dbname=opsh user=alice   (``KeywordValueString``)
///     service=builds                                 (``ServiceFile``)
///
/// The parameters this client honours are `host`, `hostaddr`, `port`,
/// `user`, `password`, `passfile`, `dbname`, `service`, `options`,
/// `application_name`, `fallback_application_name`, `connect_timeout`,
/// `target_session_attrs`, `load_balance_hosts` and TLS's `sslmode`,
/// `sslrootcert`, `sslcert`, `sslkey`, `sslnegotiation` and
/// `channel_binding`; in a URL's query they override what its other parts
/// say, as in libpq. A host that starts with `/` is a folder holding the
/// server's Unix socket (`FOLDER/.s.PGSQL.PORT`), so is an empty host.
/// Every part of a URL is percent-decoded (`%40` is `@`, `%2F` is `/`); `+`
/// stays a plus. Several hosts are tried in order (``PostgresConnection``,
/// HostSelection.swift). With no password, each host's is looked up in the
/// password file (``PassFile``) when connecting.
///
/// TLS parameters keep libpq's meanings and defaults (``TLSSettings``
/// applies them when connecting): `sslmode=prefer`, no certificate files
/// named (libpq's `~/.postgresql/` files are used when they exist),
/// `sslnegotiation=postgres`, `channel_binding=prefer`.
///
/// Parsing fails with ``PostgresClientError/invalidURL(_:)`` (a URL) or
/// ``PostgresClientError/invalidConnectionString(_:)`` (the rest) naming
/// what is wrong and where; the message never quotes the password.
public struct PostgresURL: Sendable, Equatable, CustomStringConvertible {
    /// Where the server listens.
    public enum Endpoint: Sendable, Equatable, CustomStringConvertible {
        /// A Unix-domain socket: the full path of the socket file.
        case unixSocket(path: String)
        /// A TCP host name or address and port.
        case tcp(host: String, port: Int)

        public var description: String {
            switch self {
            case .unixSocket(let path): return "Unix socket \(path)"
            case .tcp(let host, let port): return host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
            }
        }
    }

    /// libpq's `sslmode`: ``TLSSettings`` says what each one does.
    public enum SSLMode: String, Sendable, Equatable {
        case disable, allow, prefer, require
        case verifyCA = "verify-ca"
        case verifyFull = "verify-full"
    }

    /// libpq's `sslnegotiation` (PostgreSQL 17): `postgres` asks the server
    /// for TLS first (SSLRequest); `direct` starts TLS at once.
    public enum SSLNegotiation: String, Sendable, Equatable {
        case postgres, direct
    }

    /// libpq's `channel_binding`: whether SCRAM binds the login to the TLS
    /// session (SCRAM-SHA-256-PLUS).
    public enum ChannelBinding: String, Sendable, Equatable {
        case disable, prefer, require
    }

    /// The role to log in as (libpq's default: the operating system's user name).
    public var user: String
    /// The password given (URL, `password=`, service, `PGPASSWORD`); nil:
    /// the password file's, looked up per host when connecting.
    public var password: String?
    /// The hosts to try, in order (one, unless the URL names several).
    public var hosts: [Host]
    /// The database (libpq's default: the user name).
    public var database: String
    public var sslMode: SSLMode
    /// `sslrootcert`: the trusted root certificates (PEM), or `system` for
    /// the system's store; nil: `~/.postgresql/root.crt` when it exists.
    public var sslRootCert: String? = nil
    /// `sslcert`: the client's certificate; nil: `~/.postgresql/postgresql.crt`
    /// when it exists.
    public var sslCert: String? = nil
    /// `sslkey`: the client certificate's key; nil: `~/.postgresql/postgresql.key`.
    public var sslKey: String? = nil
    public var sslNegotiation: SSLNegotiation = .postgres
    public var channelBinding: ChannelBinding = .prefer
    public var applicationName: String
    /// Seconds to wait for each host's connection to be established
    /// (libpq's `connect_timeout`; 10 when the URL does not say).
    public var connectTimeout: Double
    /// The server's command-line options for the session (`options`,
    /// `PGOPTIONS`: `-c statement_timeout=5s`), sent at start-up.
    public var options: String?
    /// The password file (`passfile`, `PGPASSFILE`, else `~/.pgpass`).
    public var passFile: String?
    /// Which kind of server will do (`target_session_attrs`).
    public var targetSessionAttributes: TargetSessionAttributes
    /// `load_balance_hosts=random`: try the hosts in a random order.
    public var loadBalanceHosts: Bool

    /// The first host's name or socket folder.
    public var host: String { hosts[0].name }
    /// The first host's port.
    public var port: Int { hosts[0].port }

    /// The folder libpq (as Debian builds it) looks in for the socket when
    /// the URL names no host.
    public static let defaultSocketDirectory = "/var/run/postgresql"

    /// The first host's endpoint.
    public var endpoint: Endpoint { hosts[0].endpoint }

    /// The URL again, with the password replaced by `***`: for messages and logs.
    public var description: String {
        var text = "postgresql://\(user)"
        if password != nil { text += ":***" }
        text += "@"
        var query: [String] = []
        if hosts.contains(where: { $0.name.hasPrefix("/") }) {
            text += "/\(database)"
            query.append("host=" + hosts.map(\.name).joined(separator: ","))
            if hosts.contains(where: { $0.port != 5432 }) { query.append("port=" + hosts.map { String($0.port) }.joined(separator: ",")) }
        } else {
            text += hosts.map { host in
                (host.name.contains(":") ? "[\(host.name)]" : host.name) + (host.port != 5432 ? ":\(host.port)" : "")
            }.joined(separator: ",")
            text += "/\(database)"
        }
        if targetSessionAttributes != .any { query.append("target_session_attrs=\(targetSessionAttributes.rawValue)") }
        if loadBalanceHosts { query.append("load_balance_hosts=random") }
        return query.isEmpty ? text : text + "?" + query.joined(separator: "&")
    }

    /// Reads `text` with this process's `PG*` variables and home folder.
    public init(_ text: String) throws {
        try self.init(text, environment: .process)
    }

    /// Reads `text` (a URL, or keyword/value settings) with `environment`'s
    /// `PG*` variables, service files and home folder.
    public init(_ text: String, environment: ConnectionEnvironment) throws {
        let explicit: [ConnectionSetting]
        if text.hasPrefix("postgresql://") || text.hasPrefix("postgres://") {
            explicit = try Self.urlSettings(text)
        } else if text.allSatisfy(\.isWhitespace) || KeywordValueString.startsWithKnownKeyword(text) {
            explicit = try KeywordValueString.settings(text)
        } else {
            throw PostgresClientError.invalidURL(
                "a PostgreSQL URL starts with postgresql:// or postgres:// (or give keyword/value settings: host=… dbname=…)")
        }
        try self.init(settings: try ConnectionParameters.resolve(explicit, environment: environment), environment: environment)
    }

    /// Whether `text` names a PostgreSQL server rather than a file: a
    /// `postgresql://` or `postgres://` URL, or keyword/value settings that
    /// start with a keyword libpq knows (`host=…`, `dbname=…`, `service=…`).
    public static func isConnectionString(_ text: String) -> Bool {
        text.hasPrefix("postgresql://") || text.hasPrefix("postgres://") || KeywordValueString.startsWithKnownKeyword(text)
    }

    /// The settings of a URL: its parts, then its query's parameters.
    static func urlSettings(_ text: String) throws -> [ConnectionSetting] {
        let characters = Array(text)
        func fail(_ message: String, at offset: Int) -> PostgresClientError {
            .invalidURL("\(message) (at character \(offset + 1) of the URL)")
        }
        let schemeLength = text.hasPrefix("postgresql://") ? 13 : 11
        // Split: authority up to the first '/' or '?', then the database up
        // to '?', then the parameters.
        var index = schemeLength
        let authorityStart = index
        while index < characters.count, characters[index] != "/", characters[index] != "?" { index += 1 }
        let authority = Array(characters[authorityStart..<index])
        var databasePart: (text: [Character], start: Int)? = nil
        if index < characters.count, characters[index] == "/" {
            let start = index + 1
            index = start
            while index < characters.count, characters[index] != "?" { index += 1 }
            databasePart = (Array(characters[start..<index]), start)
        }
        var queryPart: (text: [Character], start: Int)? = nil
        if index < characters.count, characters[index] == "?" {
            queryPart = (Array(characters[(index + 1)...]), index + 1)
        }

        func decode(_ part: ArraySlice<Character>, at start: Int, what: String) throws -> String {
            var bytes: [UInt8] = []
            var i = part.startIndex
            while i < part.endIndex {
                let character = part[i]
                if character == "%" {
                    let offset = start + (i - part.startIndex)
                    guard i + 2 < part.endIndex,
                          let high = part[i + 1].hexDigitValue, let low = part[i + 2].hexDigitValue else {
                        throw fail("\(what): “%” must be followed by two hexadecimal digits (a percent-encoded byte)", at: offset)
                    }
                    bytes.append(UInt8(high * 16 + low))
                    i += 3
                } else {
                    bytes += Array(String(character).utf8)
                    i += 1
                }
            }
            guard let decoded = String(validating: bytes, as: UTF8.self) else {
                throw fail("\(what): the percent-encoded bytes are not UTF-8", at: start)
            }
            return decoded
        }

        var settings: [ConnectionSetting] = []
        func add(_ keyword: String, _ value: String, at offset: Int) {
            settings.append(ConnectionSetting(keyword, value, from: .url(keyword: offset, value: offset)))
        }
        // The authority: [user[:password]@]host[:port][,host[:port]…]. The
        // last '@' ends the user information, so a password may hold an
        // unencoded '@'.
        var hostPart = ArraySlice(authority)
        var hostStart = authorityStart
        if let at = authority.lastIndex(of: "@") {
            let userInfo = authority[..<at]
            if let colon = userInfo.firstIndex(of: ":") {
                let user = try decode(userInfo[..<colon], at: authorityStart, what: "the user name")
                if !user.isEmpty { add("user", user, at: authorityStart) }
                add("password", try decode(userInfo[(colon + 1)...], at: authorityStart + colon + 1, what: "the password"),
                    at: authorityStart + colon + 1)
            } else {
                let user = try decode(userInfo, at: authorityStart, what: "the user name")
                if !user.isEmpty { add("user", user, at: authorityStart) }
            }
            hostPart = authority[(at + 1)...]
            hostStart = authorityStart + at + 1
        }
        // Each host of the list; a comma inside [an IPv6 address] is not a separator.
        var hostEntries: [(text: ArraySlice<Character>, start: Int)] = []
        var entryStart = hostPart.startIndex
        var inBrackets = false
        for i in hostPart.indices {
            if hostPart[i] == "[" { inBrackets = true }
            if hostPart[i] == "]" { inBrackets = false }
            if hostPart[i] == ",", !inBrackets {
                hostEntries.append((hostPart[entryStart..<i], hostStart + (entryStart - hostPart.startIndex)))
                entryStart = i + 1
            }
        }
        hostEntries.append((hostPart[entryStart...], hostStart + (entryStart - hostPart.startIndex)))
        var hostNames: [String] = []
        var portTexts: [String] = []
        for (entry, start) in hostEntries {
            var host = ""
            var portText: (String, Int)? = nil
            if entry.first == "[" {
                guard let close = entry.firstIndex(of: "]") else {
                    throw fail("an IPv6 address opened with “[” is not closed with “]”", at: start)
                }
                host = String(entry[(entry.startIndex + 1)..<close])
                let rest = entry[(close + 1)...]
                if let first = rest.first {
                    guard first == ":" else { throw fail("expected “:PORT” or “/DATABASE” after the IPv6 address", at: start + (close + 1 - entry.startIndex)) }
                    portText = (String(rest.dropFirst()), start + (close + 2 - entry.startIndex))
                }
            } else if let colon = entry.firstIndex(of: ":") {
                host = try decode(entry[..<colon], at: start, what: "the host")
                portText = (String(entry[(colon + 1)...]), start + (colon + 1 - entry.startIndex))
            } else {
                host = try decode(entry, at: start, what: "the host")
            }
            if let (text, offset) = portText, !text.isEmpty {
                _ = try Self.port(text) { fail($0, at: offset) }
                portTexts.append(text)
            } else {
                portTexts.append("")
            }
            hostNames.append(host)
        }
        let hostText = hostNames.joined(separator: ",")
        if !hostText.isEmpty { add("host", hostText, at: hostStart) }
        let portText = portTexts.joined(separator: ",")
        if !portText.isEmpty { add("port", portText, at: hostStart) }

        if let (text, start) = databasePart, !text.isEmpty {
            add("dbname", try decode(ArraySlice(text), at: start, what: "the database name"), at: start)
        }

        if let (text, start) = queryPart {
            var offset = start
            for pair in text.split(separator: "&", omittingEmptySubsequences: false) {
                defer { offset += pair.count + 1 }
                if pair.isEmpty { continue }
                guard let equals = pair.firstIndex(of: "=") else {
                    throw fail("the parameter “\(String(pair))” has no “=VALUE”", at: offset)
                }
                let key = try decode(pair[..<equals], at: offset, what: "a parameter name")
                let valueStart = offset + (equals - pair.startIndex) + 1
                let value = try decode(pair[(equals + 1)...], at: valueStart, what: "the value of \(key)")
                settings.append(ConnectionSetting(key, value, from: .url(keyword: offset, value: valueStart)))
            }
        }
        return settings
    }

    /// A port number from 1 to 65535, or `fail`'s error.
    static func port(_ text: String, _ fail: (String) -> PostgresClientError) throws -> Int {
        guard !text.isEmpty, text.allSatisfy(\.isASCII), let port = Int(text), (1...65535).contains(port) else {
            throw fail("the port “\(text)” is not a number from 1 to 65535")
        }
        return port
    }

    /// Applies the resolved settings (the URL's or string's, its service's,
    /// the environment's), then the defaults.
    private init(settings: [ConnectionSetting], environment: ConnectionEnvironment) throws {
        var user: String? = nil
        var password: String? = nil
        var hostList: ConnectionSetting? = nil
        var addressList: ConnectionSetting? = nil
        var portList: ConnectionSetting? = nil
        var database: String? = nil
        var sslMode = SSLMode.prefer
        var sslModeGiven = false
        var sslRootCert: String? = nil
        var sslCert: String? = nil
        var sslKey: String? = nil
        var sslNegotiation = SSLNegotiation.postgres
        var channelBinding = ChannelBinding.prefer
        var applicationName: String? = nil
        var fallbackApplicationName: String? = nil
        var connectTimeout = 10.0
        var options: String? = nil
        var passFile: String? = nil
        var targetSessionAttributes = TargetSessionAttributes.any
        var loadBalanceHosts = false
        for setting in settings {
            let key = setting.keyword, value = setting.value
            func fail(_ message: String) -> PostgresClientError { setting.failure(message) }
            switch key {
            case "host": hostList = setting
            case "hostaddr": addressList = setting
            case "port": portList = setting
            case "user": user = value
            case "password": password = value
            case "dbname": database = value
            case "application_name": applicationName = value
            case "connect_timeout":
                guard let seconds = Double(value.trimmingBlanks), seconds.isFinite else {
                    throw fail("connect_timeout “\(value)” is not a number of seconds")
                }
                connectTimeout = seconds <= 0 ? 10 : max(seconds, 2)
            case "sslmode":
                guard let mode = SSLMode(rawValue: value) else {
                    throw fail("sslmode “\(value)” is not one of disable, allow, prefer, require, verify-ca, verify-full")
                }
                sslMode = mode
                sslModeGiven = true
            case "sslrootcert": sslRootCert = value
            case "sslcert": sslCert = value
            case "sslkey": sslKey = value
            case "sslnegotiation":
                guard let negotiation = SSLNegotiation(rawValue: value) else {
                    throw fail("sslnegotiation “\(value)” is not one of postgres, direct")
                }
                sslNegotiation = negotiation
            case "channel_binding":
                guard let binding = ChannelBinding(rawValue: value) else {
                    throw fail("channel_binding “\(value)” is not one of disable, prefer, require")
                }
                channelBinding = binding
            case "fallback_application_name": fallbackApplicationName = value
            case "options": options = value
            case "passfile": passFile = value
            case "service": break  // read by ConnectionParameters
            case "target_session_attrs":
                guard let attributes = TargetSessionAttributes(rawValue: value) else {
                    throw fail("target_session_attrs “\(value)” is not one of \(TargetSessionAttributes.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                targetSessionAttributes = attributes
            case "load_balance_hosts":
                guard value == "disable" || value == "random" else {
                    throw fail("load_balance_hosts “\(value)” is not disable or random")
                }
                loadBalanceHosts = value == "random"
            default:
                throw setting.failure("the parameter “\(KeywordValueString.visible(key))” is not supported (known: \(Self.knownParameters))", atValue: false)
            }
        }

        let resolvedUser = user.flatMap { $0.isEmpty ? nil : $0 } ?? environment.operatingSystemUser
        self.user = resolvedUser
        self.password = password
        self.hosts = try Host.list(hosts: hostList, addresses: addressList, ports: portList)
        self.database = database.flatMap { $0.isEmpty ? nil : $0 } ?? resolvedUser
        // libpq: sslrootcert=system makes verify-full the default mode.
        self.sslMode = !sslModeGiven && sslRootCert == "system" ? .verifyFull : sslMode
        self.sslRootCert = sslRootCert
        self.sslCert = sslCert
        self.sslKey = sslKey
        self.sslNegotiation = sslNegotiation
        self.channelBinding = channelBinding
        self.applicationName = applicationName ?? fallbackApplicationName ?? "opsh"
        self.connectTimeout = connectTimeout
        self.options = options.flatMap { $0.isEmpty ? nil : $0 }
        self.passFile = passFile.flatMap { $0.isEmpty ? nil : $0 } ?? environment.home.map { $0 + "/.pgpass" }
        self.targetSessionAttributes = targetSessionAttributes
        self.loadBalanceHosts = loadBalanceHosts
    }

    static let knownParameters = "host, hostaddr, port, user, password, passfile, dbname, service, options, application_name, fallback_application_name, connect_timeout, target_session_attrs, load_balance_hosts, sslmode, sslrootcert, sslcert, sslkey, sslnegotiation, channel_binding"
}
