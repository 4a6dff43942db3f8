import Foundation
import Store

/// `opsh migrate [options]`: applies the built-in migrations an existing
/// database lacks. opsh never migrates an existing database on its own
/// (that takes the write lock while the backend writes); it reports what
/// is pending and this command applies it, waiting for the lock like any
/// writer.
struct MigrateCommand {
    static let help = CommandHelp(
        name: "opsh migrate",
        abstract: "Apply the built-in migrations the database lacks.",
        usage: "opsh migrate [<options>]",
        discussion: """
            opsh migrates only the databases it creates. An existing database
            with pending migrations is reported (the shell's banner, a warning
            in batch mode, migrate.status()) and migrated by this command or by
            migrate.up() (which also applies Lua migrations).

            \(ExitStatus.summary)
            """,
        options: CommonOptions.specs)

    var options = CommonOptions()

    init?(parsing words: ArraySlice<String>) throws {
        var scanner = ArgumentScanner(words, options: Self.help.options, command: Self.help)
        while let item = try scanner.next() {
            switch item {
            case .help: return nil
            case let .option(spec, value): _ = try options.apply(spec, value: value, command: Self.help)
            case let .operand(word): throw UsageError("unexpected argument '\(word)'", command: Self.help)
            }
        }
        try options.validate(command: Self.help)
        if options.readOnly || options.dryRun {
            throw UsageError("opsh migrate writes the database: drop --read-only and --dry-run", command: Self.help)
        }
    }

    func run() throws -> Int32 {
        let launch = Launch(options: options)
        var database = launch.databaseOptions(interactive: true)
        database.createIfMissing = options.create || Databases.named(options.db) == nil
        do {
            let applied = try Databases.migrate(database)
            launch.console.note(applied.isEmpty ? "nothing to migrate: every migration is applied"
                                                : "applied \(applied.joined(separator: ", "))")
        } catch {
            throw Launch.stop(opening: error)
        }
        return ExitStatus.success.rawValue
    }
}
