import Foundation
import Store
import TextCodec

/// The environment a build's command runs with: an allow list, never
/// opsh's whole environment (ARCHITECTURE.md, "Build runners and the
/// queue"). opsh's environment holds what builds must not see: a
/// database password (`PGPASSWORD`, a URL in `OPSH_DB`), the run's
/// `OPSH_REASON`, every token in the operator's shell; and a fleet's
/// runner runs every repository's build script.
///
/// A build gets:
/// - ``allowed`` from opsh's environment (`PATH` falls back to
///   `/usr/local/bin:/usr/bin:/bin`);
/// - the names its scheme declares in `passEnvironment` (migration
///   006_schemeEnvironment: a JSON array of names), with opsh's values,
///   when opsh has them;
/// - its own `OPSH_BUILD_*`, `OPSH_SCHEME*`, `OPSH_PROJECT`,
///   `OPSH_COMMIT`, `OPSH_WORKSPACE` and `PWD`, which nothing overrides.
enum BuildEnvironment {
    /// What every build gets of opsh's environment.
    static let allowed = ["PATH", "HOME", "LANG", "TZ"]

    /// A scheme's declaration that is not a JSON array of variable names.
    struct InvalidDeclaration: Error, CustomStringConvertible {
        var scheme: String
        var problem: String
        var description: String { "scheme \(scheme)'s passEnvironment: \(problem)" }
    }

    /// The names `passEnvironment` declares (nil or empty: none).
    static func declaredNames(_ json: String?, scheme: String) throws(InvalidDeclaration) -> [String] {
        guard let json, !json.isEmpty else { return [] }
        let value: JSON
        do {
            value = try JSON.parse(json)
        } catch {
            throw InvalidDeclaration(scheme: scheme, problem: "not JSON (\(error))")
        }
        guard case let .array(items) = value else {
            throw InvalidDeclaration(scheme: scheme, problem: "expected a JSON array of variable names such as [\"NPM_TOKEN\"]")
        }
        return try items.map { item throws(InvalidDeclaration) -> String in
            guard case let .string(name) = item else {
                throw InvalidDeclaration(scheme: scheme, problem: "\(item.text()) is not a variable name (a string expected)")
            }
            guard isVariableName(name) else {
                throw InvalidDeclaration(scheme: scheme, problem: "'\(VisibleText.of(name))' is not a variable name (letters, digits and _, not starting with a digit)")
            }
            return name
        }
    }

    static func isVariableName(_ name: String) -> Bool {
        guard let first = name.utf8.first, !(0x30...0x39).contains(first) else { return false }
        return name.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x61 && $0 <= 0x7A) || $0 == 0x5F }
    }

    /// The build's environment from opsh's (`host`), the declared names
    /// and the build's own variables.
    static func make(from host: [String: String], declared: [String], own: [String: String]) -> [String: String] {
        var environment: [String: String] = [:]
        for name in allowed + declared {
            if let value = host[name] { environment[name] = value }
        }
        if environment["PATH"] == nil { environment["PATH"] = "/usr/local/bin:/usr/bin:/bin" }
        environment.merge(own) { $1 }
        return environment
    }
}
