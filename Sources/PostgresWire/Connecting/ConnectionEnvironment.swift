import Glibc

/// What libpq reads from the process besides the connection string: its
/// `PG*` environment variables and the home folder (for `~/.pgpass` and
/// `~/.pg_service.conf`). Tests pass their own; ``process`` is the real one.
public struct ConnectionEnvironment: Sendable, Equatable {
    public var variables: [String: String]
    /// `HOME`, else the user's home in the password database (libpq 15+).
    public var home: String?
    /// libpq's default role: the effective user's name.
    public var operatingSystemUser: String

    public init(variables: [String: String], home: String? = nil, operatingSystemUser: String? = nil) {
        self.variables = variables
        self.home = home ?? variables["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? Self.passwordDatabaseHome()
        self.operatingSystemUser = operatingSystemUser ?? Self.effectiveUserName()
    }

    /// A variable's value; an empty one counts as unset.
    public subscript(name: String) -> String? {
        guard let value = variables[name], !value.isEmpty else { return nil }
        return value
    }

    /// The variables libpq (and this client) read, from this process.
    public static var process: ConnectionEnvironment {
        var variables: [String: String] = [:]
        let names = ConnectionParameters.environmentVariables.map(\.variable)
            + ["PGSERVICE", "PGSERVICEFILE", "PGSYSCONFDIR", "HOME"]
        for name in names {
            if let value = getenv(name) { variables[name] = String(cString: value) }
        }
        return ConnectionEnvironment(variables: variables)
    }

    static func passwordDatabaseHome() -> String? {
        guard let entry = getpwuid(geteuid()), let folder = entry.pointee.pw_dir else { return nil }
        return String(cString: folder)
    }

    static func effectiveUserName() -> String {
        if let entry = getpwuid(geteuid()), let name = entry.pointee.pw_name {
            return String(cString: name)
        }
        return getenv("USER").map { String(cString: $0) } ?? "postgres"
    }
}
