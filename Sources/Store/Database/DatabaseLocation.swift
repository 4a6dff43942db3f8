import Foundation

/// Where opsh's database file lives.
///
/// The order is the one operators expect from other tools: an explicit path
/// wins, then `$OPSH_DB`, then the XDG data home
/// (`$XDG_DATA_HOME/opsh/opsh.sqlite`, falling back to
/// `~/.local/share/opsh/opsh.sqlite`).
public enum DatabaseLocation {
    /// The database file name inside the data folder.
    public static let defaultFileName = "opsh.sqlite"

    /// Resolves the database path.
    ///
    /// - parameters:
    ///   - explicitPath: a path given on the command line (`--db`), if any.
    ///   - environment: the process environment (injected for tests).
    public static func resolve(
        explicitPath: String? = nil,
        environment: EnvironmentVariables = .process
    ) -> String {
        if let explicitPath, !explicitPath.isEmpty {
            return expandTilde(explicitPath, environment: environment)
        }
        if let fromEnvironment = environment["OPSH_DB"], !fromEnvironment.isEmpty {
            return expandTilde(fromEnvironment, environment: environment)
        }
        return dataDirectory(environment: environment) + "/" + defaultFileName
    }

    /// opsh's data folder: databases, build workspaces.
    public static func dataDirectory(
        environment: EnvironmentVariables = .process
    ) -> String {
        xdgDirectory("XDG_DATA_HOME", fallback: ".local/share", environment: environment) + "/opsh"
    }

    /// opsh's state folder: shell history.
    public static func stateDirectory(
        environment: EnvironmentVariables = .process
    ) -> String {
        xdgDirectory("XDG_STATE_HOME", fallback: ".local/state", environment: environment) + "/opsh"
    }

    /// opsh's configuration folder: `init.lua`.
    public static func configDirectory(
        environment: EnvironmentVariables = .process
    ) -> String {
        xdgDirectory("XDG_CONFIG_HOME", fallback: ".config", environment: environment) + "/opsh"
    }

    private static func xdgDirectory(
        _ variable: String, fallback: String, environment: EnvironmentVariables
    ) -> String {
        // XDG says relative values are invalid and must be ignored.
        if let value = environment[variable], value.hasPrefix("/") {
            return value
        }
        return home(environment) + "/" + fallback
    }

    private static func home(_ environment: EnvironmentVariables) -> String {
        environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
    }

    private static func expandTilde(_ path: String, environment: EnvironmentVariables) -> String {
        if path == "~" { return home(environment) }
        if path.hasPrefix("~/") { return home(environment) + path.dropFirst() }
        return path
    }
}
