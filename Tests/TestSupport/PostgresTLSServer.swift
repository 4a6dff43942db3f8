import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A throwaway PostgreSQL server with TLS, for the tests of encrypted
/// connections (TLS is PostgreSQL's: SQLite has no network). Started at
/// first use only by the tests that need it, made by `scripts/pg-server
/// start DIR --ssl CERTS`, then listening on 127.0.0.1 at a free port and
/// stopped and removed at exit, as ``PostgresPasswordServer``.
///
/// The certificates are made here with the `openssl` command, in
/// ``certificates``: a CA (`root.crt`), the server's certificate for
/// `localhost` only (subjectAltName DNS:localhost, so 127.0.0.1 is a wrong
/// host name for it), a client certificate for role `cert_user`
/// (`client.crt`, `client.key`), and a second CA that signed nothing
/// (`other-root.crt`, the wrong CA).
///
/// | role | pg_hba.conf over TCP | password |
/// | --- | --- | --- |
/// | `cert_user` | `hostssl … cert` (a client certificate signed by the CA) | – |
/// | `scram_user` | `host … scram-sha-256` (with TLS or without) | `scram secret` |
/// | `tls_only_user` | `hostssl … trust`, `hostnossl … reject` | – |
/// | every other role | `host … trust` | – |
public final class PostgresTLSServer: Sendable {
    public let directory: String
    /// The folder of the certificates and keys the test made.
    public let certificates: String
    /// The TCP port on 127.0.0.1.
    public let port: Int
    /// The superuser over the Unix socket (trust).
    public let socketURL: String
    /// The role the server trusts over TCP (the superuser, named after the user running the tests).
    public let role: String
    let psql: String

    public static let scramPassword = "scram secret"

    /// The server of this test process, started at first use.
    public static func shared() throws -> PostgresTLSServer {
        try started.get()
    }

    private static let started: Result<PostgresTLSServer, any Error> = Result { try PostgresTLSServer() }

    private init() throws {
        let folder = "/tmp/opsh-pgtls-\(getpid())"
        directory = folder
        certificates = folder + "-certificates"
        atexit {
            _ = try? sh("'\(PostgresServer.script)' stop '/tmp/opsh-pgtls-\(getpid())'; rm -rf '/tmp/opsh-pgtls-\(getpid())-certificates'")
        }
        try Self.makeCertificates(in: certificates)
        let first = try sh("'\(PostgresServer.script)' start '\(folder)' --ssl '\(certificates)'").split(separator: "\n").last.map(String.init) ?? ""
        guard first.hasPrefix("postgresql://") else { throw ShellError(script: "scripts/pg-server start --ssl", output: first) }
        port = try PostgresPasswordServer.freePort()
        let bin = try sh("ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1")
        psql = "\(bin)/psql"
        let asOwner = getuid() == 0 ? "runuser -u postgres -- " : ""
        let hba = """
            local all all trust
            hostssl all cert_user 127.0.0.1/32 cert
            host all scram_user 127.0.0.1/32 scram-sha-256
            hostssl all tls_only_user 127.0.0.1/32 trust
            hostnossl all tls_only_user 127.0.0.1/32 reject
            host all all 127.0.0.1/32 trust

            """
        try sh("""
            printf "listen_addresses = '127.0.0.1'\\nport = \(port)\\n" >> '\(folder)/data/postgresql.conf'
            printf '\(hba.replacingOccurrences(of: "\n", with: "\\n"))' > '\(folder)/data/pg_hba.conf'
            \(asOwner)'\(bin)/pg_ctl' -D '\(folder)/data' -l '\(folder)/server.log' -w -t 60 restart >/dev/null
            """)
        role = try sh("id -un")
        socketURL = "postgresql://\(role)@/opsh?host=\(folder)&port=\(port)"
        try sql("""
            SET password_encryption = 'scram-sha-256';
            CREATE ROLE scram_user LOGIN SUPERUSER PASSWORD '\(Self.scramPassword)';
            CREATE ROLE cert_user LOGIN SUPERUSER;
            CREATE ROLE tls_only_user LOGIN SUPERUSER;
            """)
    }

    /// `postgresql://USER[:PASSWORD]@HOST:PORT/opsh?PARAMETERS`.
    public func url(user: String? = nil, password: String? = nil, host: String = "localhost", _ parameters: String = "") -> String {
        let credentials = (user ?? role) + (password.map { ":" + ($0.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? $0) } ?? "")
        return "postgresql://\(credentials)@\(host):\(port)/opsh" + (parameters.isEmpty ? "" : "?" + parameters)
    }

    /// A file of ``certificates``.
    public func file(_ name: String) -> String { certificates + "/" + name }

    /// Runs SQL through `psql` as the superuser over the socket; its
    /// unaligned, tuples-only output.
    @discardableResult
    public func sql(_ text: String) throws -> String {
        let result = try ChildProcess.start(psql, ["-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-d", socketURL, "-c", text],
                                            environment: ProcessInfo.processInfo.environment).finish()
        guard result.status == 0 else { throw ShellError(script: "psql -c \(text)", output: result.stderr) }
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Runs `psql` (the reference client, libpq) at `url` with `environment`
    /// added: its status, output and error text.
    public func psql(_ url: String, _ query: String, environment: [String: String] = [:]) throws -> TestFolder.Result {
        try ChildProcess.start(psql, ["-X", "-A", "-t", "-q", "-d", url, "-c", query],
                               environment: ProcessInfo.processInfo.environment.merging(environment) { $1 }).finish()
    }

    /// The CA, the server's and the client's certificates, and a second CA.
    static func makeCertificates(in folder: String) throws {
        try sh("""
            set -e
            rm -rf '\(folder)'; mkdir -m 700 '\(folder)'; cd '\(folder)'
            key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
            key ca.key
            openssl req -x509 -new -key ca.key -out root.crt -days 3 -subj '/CN=opsh test CA' 2>/dev/null
            key other-ca.key
            openssl req -x509 -new -key other-ca.key -out other-root.crt -days 3 -subj '/CN=opsh other CA' 2>/dev/null
            key server.key
            openssl req -new -key server.key -out server.csr -subj '/CN=localhost' 2>/dev/null
            printf 'subjectAltName = DNS:localhost\\n' > server.ext
            openssl x509 -req -in server.csr -CA root.crt -CAkey ca.key -CAcreateserial -out server.crt -days 3 -extfile server.ext 2>/dev/null
            key client.key
            openssl req -new -key client.key -out client.csr -subj '/CN=cert_user' 2>/dev/null
            printf 'extendedKeyUsage = clientAuth\\n' > client.ext
            openssl x509 -req -in client.csr -CA root.crt -CAkey ca.key -CAcreateserial -out client.crt -days 3 -extfile client.ext 2>/dev/null
            chmod 600 *.key
            """)
    }
}
