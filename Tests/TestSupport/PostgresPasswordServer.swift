import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A second throwaway PostgreSQL server, for the tests of password logins:
/// ``PostgresServer`` trusts everyone on its Unix socket and has no TCP,
/// so it never asks for a password. This one is made the same way (by
/// `scripts/pg-server start`, in its own folder, stopped and removed at
/// exit), then also listens on 127.0.0.1 at a free port, where pg_hba.conf
/// asks each test role for its password by one method:
///
/// | role | method | password |
/// | --- | --- | --- |
/// | `scram_user` | scram-sha-256 | `scram secret` |
/// | `md5_user` | md5 (its password stored as an MD5 hash) | `md5 secret` |
/// | `clear_user` | password (cleartext) | `clear secret` |
///
/// Every other role is rejected over TCP; the Unix socket still trusts the
/// superuser (``sql(_:)``).
public final class PostgresPasswordServer: Sendable {
    public let directory: String
    /// The TCP port on 127.0.0.1.
    public let port: Int
    /// The superuser over the Unix socket (trust).
    public let socketURL: String
    let psql: String

    public static let roles: [(name: String, method: String, password: String)] = [
        ("scram_user", "scram-sha-256", "scram secret"),
        ("md5_user", "md5", "md5 secret"),
        ("clear_user", "password", "clear secret"),
    ]

    /// The server of this test process, started at first use.
    public static func shared() throws -> PostgresPasswordServer {
        try started.get()
    }

    private static let started: Result<PostgresPasswordServer, any Error> = Result { try PostgresPasswordServer() }

    /// `postgresql://USER:PASSWORD@127.0.0.1:PORT/opsh`, each part percent-encoded.
    public func tcpURL(user: String, password: String?) -> String {
        func encode(_ text: String) -> String {
            text.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? text
        }
        let credentials = password.map { "\(encode(user)):\(encode($0))" } ?? encode(user)
        return "postgresql://\(credentials)@127.0.0.1:\(port)/opsh"
    }

    private init() throws {
        let folder = "/tmp/opsh-pgpw-\(getpid())"
        directory = folder
        let first = try sh("'\(PostgresServer.script)' start '\(folder)'").split(separator: "\n").last.map(String.init) ?? ""
        guard first.hasPrefix("postgresql://") else { throw ShellError(script: "scripts/pg-server start", output: first) }
        atexit {
            _ = try? sh("'\(PostgresServer.script)' stop '/tmp/opsh-pgpw-\(getpid())'")
        }
        port = try Self.freePort()
        let bin = try sh("ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1")
        psql = "\(bin)/psql"
        let asOwner = getuid() == 0 ? "runuser -u postgres -- " : ""
        var hba = "local all all trust\n"
        for role in Self.roles { hba += "host all \(role.name) 127.0.0.1/32 \(role.method)\n" }
        hba += "host all all 127.0.0.1/32 reject\n"
        try sh("""
            printf "listen_addresses = '127.0.0.1'\\nport = \(port)\\n" >> '\(folder)/data/postgresql.conf'
            printf '\(hba.replacingOccurrences(of: "\n", with: "\\n"))' > '\(folder)/data/pg_hba.conf'
            \(asOwner)'\(bin)/pg_ctl' -D '\(folder)/data' -l '\(folder)/server.log' -w -t 60 restart >/dev/null
            """)
        let role = try sh("id -un")
        socketURL = "postgresql://\(role)@/opsh?host=\(folder)&port=\(port)"
        var setup = ""
        for role in Self.roles {
            let encryption = role.method == "md5" ? "md5" : "scram-sha-256"
            setup += "SET password_encryption = '\(encryption)'; CREATE ROLE \(role.name) LOGIN PASSWORD '\(role.password)'; "
        }
        try sql(setup)
    }

    /// Runs SQL through `psql` as the superuser over the socket; its
    /// unaligned, tuples-only output.
    @discardableResult
    public func sql(_ text: String) throws -> String {
        let result = try ChildProcess.start(psql, ["-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-d", socketURL, "-c", text],
                                            environment: ProcessInfo.processInfo.environment).finish()
        guard result.status == 0 else { throw ShellError(script: "psql -c \(text)", output: result.stderr) }
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// A TCP port nothing listens on now (the kernel's choice for port 0).
    public static func freePort() throws -> Int {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw ShellError(script: "socket()", output: String(cString: strerror(errno))) }
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer -> Bool in
                bind(descriptor, pointer, length) == 0 && getsockname(descriptor, pointer, &length) == 0
            }
        }
        guard bound else { throw ShellError(script: "bind(127.0.0.1:0)", output: String(cString: strerror(errno))) }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
