import Glibc

/// Where and as whom to connect: a connection URL in libpq's syntax.
///
///     postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?PARAMETER=VALUE&...]
///     postgres://…                                  (the same)
///     postgresql://alice@/opsh                       the default socket folder, /var/run/postgresql
///     postgresql://alice@/opsh?host=/tmp/pg          the Unix socket /tmp/pg/.s.PGSQL.5432
///     postgresql://alice:s3cret@db.example:6432/opsh TCP
///
/// The query parameters libpq knows and this client honours are `host`,
/// `port`, `user`, `password`, `dbname`, `application_name`,
/// `connect_timeout` and TLS's `sslmode`, `sslrootcert`, `sslcert`,
/// `sslkey`, `sslnegotiation` and `channel_binding`; they override what the
/// URL's other parts say, as in libpq. A host that starts with `/` is a
/// folder holding the server's Unix socket (`FOLDER/.s.PGSQL.PORT`), so is
/// an empty host. Every part is percent-decoded (`%40` is `@`, `%2F` is
/// `/`); `+` stays a plus.
///
/// TLS parameters keep libpq's meanings and defaults (``TLSSettings``
/// applies them when connecting): `sslmode=prefer`, no certificate files
/// named (libpq's `~/.postgresql/` files are used when they exist),
/// `sslnegotiation=postgres`, `channel_binding=prefer`.
///
/// Parsing fails with ``PostgresClientError/invalidURL(_:)`` naming what is
/// wrong and at which character of the URL; the message never quotes the
/// password.
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
    public var password: String?
    /// A host name, an IP address, or a folder (starting with `/`) holding
    /// the server's Unix socket.
    public var host: String
    public var port: Int
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
    /// Seconds to wait for the connection to be established (libpq's
    /// `connect_timeout`; 10 when the URL does not say).
    public var connectTimeout: Double

    /// The folder libpq (as Debian builds it) looks in for the socket when
    /// the URL names no host.
    public static let defaultSocketDirectory = "/var/run/postgresql"

    public var endpoint: Endpoint {
        host.hasPrefix("/") ? .unixSocket(path: "\(host)/.s.PGSQL.\(port)") : .tcp(host: host, port: port)
    }

    /// The URL again, with the password replaced by `***`: for messages and logs.
    public var description: String {
        var text = "postgresql://\(user)"
        if password != nil { text += ":***" }
        text += "@"
        if host.hasPrefix("/") {
            text += "/\(database)?host=\(host)"
            if port != 5432 { text += "&port=\(port)" }
        } else {
            text += host.contains(":") ? "[\(host)]" : host
            if port != 5432 { text += ":\(port)" }
            text += "/\(database)"
        }
        return text
    }

    public init(_ text: String) throws {
        try self.init(parsing: text)
    }

    private init(parsing text: String) throws {
        let characters = Array(text)
        func fail(_ message: String, at offset: Int) -> PostgresClientError {
            .invalidURL("\(message) (at character \(offset + 1) of the URL)")
        }
        let schemeLength: Int
        if text.hasPrefix("postgresql://") {
            schemeLength = 13
        } else if text.hasPrefix("postgres://") {
            schemeLength = 11
        } else {
            throw PostgresClientError.invalidURL("a PostgreSQL URL starts with postgresql:// or postgres://")
        }
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

        // The authority: [user[:password]@]host[:port]. The last '@' ends the
        // user information, so a password may hold an unencoded '@'.
        var user: String? = nil
        var password: String? = nil
        var hostPart = ArraySlice(authority)
        var hostStart = authorityStart
        if let at = authority.lastIndex(of: "@") {
            let userInfo = authority[..<at]
            if let colon = userInfo.firstIndex(of: ":") {
                user = try decode(userInfo[..<colon], at: authorityStart, what: "the user name")
                password = try decode(userInfo[(colon + 1)...], at: authorityStart + colon + 1, what: "the password")
            } else {
                user = try decode(userInfo, at: authorityStart, what: "the user name")
            }
            hostPart = authority[(at + 1)...]
            hostStart = authorityStart + at + 1
        }
        if hostPart.contains(",") {
            throw fail("several hosts are not supported (name one server)", at: hostStart + (hostPart.firstIndex(of: ",")! - hostPart.startIndex))
        }
        var host = ""
        var portText: (String, Int)? = nil
        if hostPart.first == "[" {
            guard let close = hostPart.firstIndex(of: "]") else {
                throw fail("an IPv6 address opened with “[” is not closed with “]”", at: hostStart)
            }
            host = String(hostPart[(hostPart.startIndex + 1)..<close])
            let rest = hostPart[(close + 1)...]
            if let first = rest.first {
                guard first == ":" else { throw fail("expected “:PORT” or “/DATABASE” after the IPv6 address", at: hostStart + (close + 1 - hostPart.startIndex)) }
                portText = (String(rest.dropFirst()), hostStart + (close + 2 - hostPart.startIndex))
            }
        } else if let colon = hostPart.firstIndex(of: ":") {
            host = try decode(hostPart[..<colon], at: hostStart, what: "the host")
            portText = (String(hostPart[(colon + 1)...]), hostStart + (colon + 1 - hostPart.startIndex))
        } else {
            host = try decode(hostPart, at: hostStart, what: "the host")
        }

        func parsePort(_ text: String, at offset: Int) throws -> Int {
            guard !text.isEmpty, text.allSatisfy(\.isASCII), let port = Int(text), (1...65535).contains(port) else {
                throw fail("the port “\(text)” is not a number from 1 to 65535", at: offset)
            }
            return port
        }
        var port = 5432
        if let (text, offset) = portText, !text.isEmpty { port = try parsePort(text, at: offset) }

        var database: String? = nil
        if let (text, start) = databasePart, !text.isEmpty {
            database = try decode(ArraySlice(text), at: start, what: "the database name")
        }

        var sslMode = SSLMode.prefer
        var sslModeGiven = false
        var sslRootCert: String? = nil
        var sslCert: String? = nil
        var sslKey: String? = nil
        var sslNegotiation = SSLNegotiation.postgres
        var channelBinding = ChannelBinding.prefer
        var applicationName = "opsh"
        var connectTimeout = 10.0
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
                switch key {
                case "host", "hostaddr":
                    if value.contains(",") { throw fail("several hosts are not supported (name one server)", at: valueStart) }
                    host = value
                case "port": port = try parsePort(value, at: valueStart)
                case "user": user = value
                case "password": password = value
                case "dbname": database = value
                case "application_name": applicationName = value
                case "connect_timeout":
                    guard let seconds = Double(value), seconds >= 0 else {
                        throw fail("connect_timeout “\(value)” is not a number of seconds", at: valueStart)
                    }
                    connectTimeout = seconds == 0 ? 10 : max(seconds, 2)
                case "sslmode":
                    guard let mode = SSLMode(rawValue: value) else {
                        throw fail("sslmode “\(value)” is not one of disable, allow, prefer, require, verify-ca, verify-full", at: valueStart)
                    }
                    sslMode = mode
                    sslModeGiven = true
                case "sslrootcert": sslRootCert = value
                case "sslcert": sslCert = value
                case "sslkey": sslKey = value
                case "sslnegotiation":
                    guard let negotiation = SSLNegotiation(rawValue: value) else {
                        throw fail("sslnegotiation “\(value)” is not one of postgres, direct", at: valueStart)
                    }
                    sslNegotiation = negotiation
                case "channel_binding":
                    guard let binding = ChannelBinding(rawValue: value) else {
                        throw fail("channel_binding “\(value)” is not one of disable, prefer, require", at: valueStart)
                    }
                    channelBinding = binding
                default:
                    throw fail("the parameter “\(key)” is not supported (known: host, port, user, password, dbname, application_name, connect_timeout, sslmode, sslrootcert, sslcert, sslkey, sslnegotiation, channel_binding)", at: offset)
                }
            }
        }

        if host.isEmpty { host = Self.defaultSocketDirectory }
        let resolvedUser = user.flatMap { $0.isEmpty ? nil : $0 } ?? Self.operatingSystemUser()
        self.user = resolvedUser
        self.password = password
        self.host = host
        self.port = port
        self.database = database ?? resolvedUser
        // libpq: sslrootcert=system makes verify-full the default mode.
        self.sslMode = !sslModeGiven && sslRootCert == "system" ? .verifyFull : sslMode
        self.sslRootCert = sslRootCert
        self.sslCert = sslCert
        self.sslKey = sslKey
        self.sslNegotiation = sslNegotiation
        self.channelBinding = channelBinding
        self.applicationName = applicationName
        self.connectTimeout = connectTimeout
    }

    /// libpq's default role: the effective user's name.
    static func operatingSystemUser() -> String {
        if let entry = getpwuid(geteuid()), let name = entry.pointee.pw_name {
            return String(cString: name)
        }
        return getenv("USER").map { String(cString: $0) } ?? "postgres"
    }
}
