import Foundation

/// A real PostgreSQL server for the tests: one throwaway cluster per test
/// process, made by `scripts/pg-server start` in a temporary folder the
/// first time a test asks for it (a Unix socket there, no TCP), and
/// stopped and removed when the process exits. `scripts/setup` installs
/// the server, so `./scripts/test` (and CI) runs these tests everywhere.
/// ``start(in:listen:)`` makes another one that also listens on TCP, on
/// the addresses of a network a test made (RunnerHosts).
public final class PostgresServer: Sendable {
    /// The folder that holds the cluster and its socket.
    public let directory: String
    /// `postgresql://ROLE@/opsh?host=DIR`.
    public let url: String
    let psql: String

    /// The server of this test process, started at first use.
    public static func shared() throws -> PostgresServer {
        try started.get()
    }

    private static let started: Result<PostgresServer, any Error> = Result { try PostgresServer() }

    static let script: String = {
        // Tests/TestSupport/PostgresServer.swift → the repository's scripts/.
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("scripts/pg-server").path
    }()

    private convenience init() throws {
        // Short: a socket's path has at most 107 bytes.
        try self.init(directory: "/tmp/opsh-pg-\(getpid())", listen: [])
        atexit {
            _ = try? sh("'\(PostgresServer.script)' stop '/tmp/opsh-pg-\(getpid())'")
        }
    }

    /// A server of its own in `directory` (made by `scripts/pg-server
    /// start DIR --listen ADDR/PREFIX…`) that also listens on TCP at each
    /// address of `listen`, trusting every role from those networks: for a
    /// test that made the network (Tests/OpshTests/RunnerHosts.swift).
    /// The caller stops it (``stop()``).
    public static func start(in directory: String, listen: [String]) throws -> PostgresServer {
        try PostgresServer(directory: directory, listen: listen)
    }

    private init(directory folder: String, listen: [String]) throws {
        directory = folder
        let options = listen.map { " --listen '\($0)'" }.joined()
        url = try sh("'\(Self.script)' start '\(folder)'\(options)")
            .split(separator: "\n").last.map(String.init) ?? ""
        guard url.hasPrefix("postgresql://") else { throw ShellError(script: "scripts/pg-server start", output: url) }
        let found = try sh("ls -d /usr/lib/postgresql/*/bin/psql | sort -V | tail -n 1")
        psql = found.isEmpty ? "psql" : found
    }

    private init(directory folder: String, standbyOf primary: String) throws {
        directory = folder
        url = try sh("'\(Self.script)' standby '\(folder)' '\(primary)'").split(separator: "\n").last.map(String.init) ?? ""
        guard url.hasPrefix("postgresql://") else { throw ShellError(script: "scripts/pg-server standby", output: url) }
        let found = try sh("ls -d /usr/lib/postgresql/*/bin/psql | sort -V | tail -n 1")
        psql = found.isEmpty ? "psql" : found
    }

    /// Stops the server, cutting its sessions, and keeps its folder
    /// (`scripts/pg-server halt`): an outage; ``resume()`` ends it.
    public func halt() throws {
        _ = try sh("'\(Self.script)' halt '\(directory)'")
    }

    /// Starts the halted server again, with its data (`scripts/pg-server start`).
    public func resume() throws {
        _ = try sh("'\(Self.script)' start '\(directory)'")
    }

    /// A streaming standby of this server in `directory` (`scripts/pg-server
    /// standby`: pg_basebackup -R over the socket), started; the caller
    /// stops it.
    public func standby(in directory: String) throws -> PostgresServer {
        try PostgresServer(directory: directory, standbyOf: self.directory)
    }

    /// Makes this standby a primary (`pg_ctl promote`).
    public func promote() throws {
        _ = try sh("'\(Self.script)' promote '\(directory)'")
    }

    /// Stops the server and removes its folder (`scripts/pg-server stop`).
    public func stop() {
        _ = try? sh("'\(Self.script)' stop '\(directory)'")
    }

    /// The URL of database `name` over TCP at `address` (one of the
    /// addresses it listens on), as the same role.
    public func tcpURL(of name: String, at address: String) -> String {
        let role = url.dropFirst("postgresql://".count).prefix { $0 != "@" }
        return "postgresql://\(role)@\(address)/\(name)"
    }

    /// A PostgreSQL program (`pg_restore`, `pg_dump`) of the server's version.
    public func tool(_ name: String) -> String {
        (psql as NSString).deletingLastPathComponent + "/" + name
    }

    /// A new, empty database of its own for one test (tests run in
    /// parallel on the one server): its URL.
    /// With `icuLocale` (`en-US`), its text sorts by that language's rules
    /// (an ICU collation, as an operator's server may be set up), not by
    /// the test server's byte order.
    public func makeDatabase(icuLocale: String? = nil) throws -> String {
        let name = "t_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased().prefix(20)
        if let icuLocale {
            try sql("CREATE DATABASE \(name) LOCALE_PROVIDER icu ICU_LOCALE '\(icuLocale)' LOCALE 'C.UTF-8' TEMPLATE template0")
        } else {
            try sql("CREATE DATABASE \(name)")
        }
        return url(of: String(name))
    }

    /// The role the URL logs in as (the server's superuser).
    public var role: String {
        String(url.dropFirst("postgresql://".count).prefix { $0 != "@" })
    }

    /// The database a URL of this server names (`…@/NAME?host=…`).
    public static func databaseName(of url: String) -> String {
        guard let start = url.range(of: "@/")?.upperBound else { return "" }
        return String(url[start...].prefix { $0 != "?" })
    }

    /// The URL of database `name` on this server.
    public func url(of name: String) -> String {
        url.replacingOccurrences(of: "/opsh?", with: "/\(name)?")
    }

    /// Runs SQL through `psql` in the database at `url` (see ``sql(_:)``).
    @discardableResult
    public func sql(_ text: String, url: String) throws -> String {
        let result = try ChildProcess.start(psql, ["-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", text],
                                            environment: ProcessInfo.processInfo.environment).finish()
        guard result.status == 0 else { throw ShellError(script: "psql -c \(text)", output: result.stderr) }
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Runs SQL through `psql` (another process, a real client) in database
    /// `opsh`, stopping at the first error: its output, unaligned, tuples
    /// only, fields separated by `|`. Throws with psql's message.
    @discardableResult
    public func sql(_ text: String) throws -> String {
        let result = try ChildProcess.start(psql, ["-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", text],
                                            environment: ProcessInfo.processInfo.environment).finish()
        guard result.status == 0 else { throw ShellError(script: "psql -c \(text)", output: result.stderr) }
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
