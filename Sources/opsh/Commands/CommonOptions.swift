import Foundation
import Glibc
import Shell
import Store
/// The options every mode takes (the shell, `run`, `-e`).
struct CommonOptions {
    var db: String?
    var readOnly = false
    var dryRun = false
    var timeout: Double?
    var json = false
    var csv = false
    var tsv = false
    var quiet = false
    var busyTimeout: Double = 5
    var sandbox = false
    var memoryLimit: Int?
    var noInit = false
    var create = false
    var maxChanges: Int?
    var allowSchemaChanges = false
    /// Why this run happens (`--reason`, else `OPSH_REASON`): recorded in
    /// the audit trail.
    var reason: String?

    static let specs: [OptionSpec] = [
        OptionSpec(long: "db", valueName: "path",
                   help: "The database file (default: $OPSH_DB, else $XDG_DATA_HOME/opsh/opsh.sqlite). It must exist, unless --create."),
        OptionSpec(long: "create", help: "Create the database (and its folders) if it does not exist; only the default location is created without it."),
        OptionSpec(long: "read-only", help: "Open the database read-only: SQLite refuses every write."),
        OptionSpec(long: "dry-run", help: "Run everything in one transaction, roll it back, and report on stderr the rows that would have been inserted, updated and deleted per table."),
        OptionSpec(long: "timeout", valueName: "seconds", help: "Stop the run after this many seconds (exit status 124)."),
        OptionSpec(long: "json", help: "Print the values a chunk returns as JSON (one document per value)."),
        OptionSpec(long: "csv", help: "Print the rows a chunk returns as CSV with a header line (every row; NULL as an empty field)."),
        OptionSpec(long: "tsv", help: "Print the rows a chunk returns as tab-separated values with a header line (tab, newline and backslash in a value as \\t, \\n, \\\\; NULL as an empty field)."),
        OptionSpec(long: "quiet", short: "q", help: "Print no banner, warnings or notes; errors still go to stderr."),
        OptionSpec(long: "busy-timeout", valueName: "seconds",
                   help: "How long to wait for another process's lock on the database before giving up (exit status 3).",
                   defaultValue: "5"),
        OptionSpec(long: "sandbox", help: "Lua without io, os.execute, require, debug and load of bytecode."),
        OptionSpec(long: "memory-limit", valueName: "MiB", help: "Most memory the Lua state may hold, in MiB; a script that needs more fails with 'not enough memory' (exit status 1)."),
        OptionSpec(long: "max-changes", valueName: "rows",
                   help: "Run everything in one transaction and roll it back if it changed more than this many rows (exit status 1, the counts per table on stderr); in the shell, per chunk."),
        OptionSpec(long: "allow-schema-changes",
                   help: "Let a schema change (CREATE, DROP, ALTER) pass --max-changes and maxChanges, counting a dropped table's rows as deleted; without it any schema change is over the limit."),
        OptionSpec(long: "no-init", help: "Do not run $XDG_CONFIG_HOME/opsh/init.lua (the shell runs it at start)."),
        OptionSpec(long: "reason", valueName: "text", help: "Why you run this, recorded in the audit trail (default: $OPSH_REASON). Required when OPSH_REQUIRE_REASON=1 or the database asks for one (audit.requireReason(true))."),
    ]

    /// Takes the option if it is one of these; false if it is not.
    mutating func apply(_ spec: OptionSpec, value: String?, command: CommandHelp) throws -> Bool {
        switch spec.name {
        case "db": db = value
        case "read-only": readOnly = true
        case "dry-run": dryRun = true
        case "timeout": timeout = try Self.seconds(value!, for: spec, command: command)
        case "json": json = true
        case "csv": csv = true
        case "tsv": tsv = true
        case "quiet": quiet = true
        case "busy-timeout": busyTimeout = try Self.seconds(value!, for: spec, command: command)
        case "sandbox": sandbox = true
        case "memory-limit":
            guard let mebibytes = Int(value!) else {
                throw UsageError("'\(value!)' is not a whole number of MiB for '--memory-limit'", command: command)
            }
            memoryLimit = mebibytes
        case "max-changes":
            guard let rows = Int(value!), rows >= 0 else {
                throw UsageError("'\(value!)' is not a number of rows (0 or more) for '--max-changes'", command: command)
            }
            maxChanges = rows
        case "allow-schema-changes": allowSchemaChanges = true
        case "no-init": noInit = true
        case "create": create = true
        case "reason": reason = value
        default: return false
        }
        return true
    }

    /// The reason given: `--reason`, else a non-empty `OPSH_REASON`.
    var givenReason: String? {
        if let reason { return reason }
        guard let text = EnvironmentVariables.process["OPSH_REASON"],
              text.contains(where: { !$0.isWhitespace }) else { return nil }
        return text
    }

    /// `OPSH_REQUIRE_REASON=1` (also true/yes/on).
    static var environmentRequiresReason: Bool {
        guard let value = EnvironmentVariables.process["OPSH_REQUIRE_REASON"] else { return false }
        return ["1", "true", "yes", "on"].contains(value.lowercased())
    }

    private static func seconds(_ text: String, for spec: OptionSpec, command: CommandHelp) throws -> Double {
        guard let value = Double(text), value.isFinite else {
            throw UsageError("'\(text)' is not a number of seconds for '--\(spec.name)'", command: command)
        }
        return value
    }

    /// How returned values are printed: --json, --csv, --tsv, else tables.
    var outputMode: OutputMode { json ? .json : csv ? .csv : tsv ? .tsv : .table }

    func validate(command: CommandHelp) throws {
        if [json, csv, tsv].filter({ $0 }).count > 1 {
            throw UsageError("--json, --csv and --tsv each choose how values are printed: give one", command: command)
        }
        if let timeout, !(timeout > 0) { throw UsageError("--timeout must be a positive number of seconds", command: command) }
        if let memoryLimit, memoryLimit < 1 { throw UsageError("--memory-limit must be at least 1 MiB", command: command) }
        if !(busyTimeout >= 0) { throw UsageError("--busy-timeout must be zero or more seconds", command: command) }
        if dryRun && readOnly { throw UsageError("--dry-run needs a writable database: drop --read-only", command: command) }
        if db == "" { throw UsageError("--db needs a path or a PostgreSQL connection (postgresql://…, host=… dbname=…); it was given an empty one", command: command) }
        if let reason, reason.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
            throw UsageError("--reason needs a text saying why; it was given an empty one", command: command)
        }
        if db == nil, let fromEnvironment = getenv("OPSH_DB"), fromEnvironment.pointee == 0 {
            throw UsageError("OPSH_DB is set but empty: give it a path, or unset it for the default database", command: command)
        }
    }
}
