import Foundation
import Shell
import Store
import TextCodec

/// `opsh runners [--all] [--json]`: the build runners the database knows
/// (`opsh_runners`, migration 007_runnerRegistry), idle ones included:
/// host, pid, start, builds held, last heartbeat, version (README, "Build
/// runners"). Reads only. Written once over ``RepositoryConnection``: an
/// SQLite file or a PostgreSQL URL, the same output, judged by the
/// database's clock (the server's on PostgreSQL).
struct RunnersCommand {
    static let allOption = OptionSpec(long: "all", help: "List the runners that stopped (exited cleanly) or were lost (missed three heartbeats without stopping) as well; kept a week after they ended.")
    static let jsonOption = OptionSpec(long: "json", help: "Print the runners as one JSON array, times in seconds since 1970 by the database's clock.")

    static let help = CommandHelp(
        name: "opsh runners",
        abstract: "List the live build runners: host, pid, start, builds held, last heartbeat, version.",
        usage: "opsh runners [<options>] [--all] [--json]",
        discussion: """
            Every `opsh runner` records itself in the database when it starts,
            refreshes its row with each heartbeat and marks it stopped when it
            exits cleanly. A runner is live while its last heartbeat is within
            three of its intervals by the database's clock (the server's on
            PostgreSQL); one that missed three without stopping is lost
            (killed, its machine gone, or cut off from the database).

            Builds held: the builds reserved for it or running there, of its
            --concurrency. Times are UTC; the heartbeat is how long ago.

            Exit status: 0, 2 (usage), 3 (the database is unavailable or
            lacks migration 007_runnerRegistry: run `opsh migrate`).
            """,
        options: CommonOptions.specs.filter { ["db", "busy-timeout", "quiet"].contains($0.name) } + [allOption, jsonOption])

    var options = CommonOptions()
    var all = false
    var json = false

    init?(parsing words: ArraySlice<String>) throws {
        var scanner = ArgumentScanner(words, options: Self.help.options, command: Self.help)
        while let item = try scanner.next() {
            switch item {
            case .help: return nil
            case let .option(spec, value):
                switch spec.name {
                case Self.allOption.name: all = true
                case Self.jsonOption.name: json = true
                default: _ = try options.apply(spec, value: value, command: Self.help)
                }
            case let .operand(word): throw UsageError("unexpected argument '\(word)'", command: Self.help)
            }
        }
        try options.validate(command: Self.help)
    }

    func run() throws -> Int32 {
        let launch = Launch(options: options)
        var listed: (now: Double, runners: [RunnerEntry]) = (0, [])
        do {
            try Databases.read(launch.databaseOptions(interactive: false)) { db in
                guard try RunnerRegistry.exists(db) else {
                    throw Stop(.databaseUnavailable, "this database does not record its runners yet (migration \(RunnerRegistry.migration) is pending): run `opsh migrate`")
                }
                listed = try RunnerRegistry.list(db, includeEnded: all)
            }
        } catch let stop as Stop {
            throw stop
        } catch {
            throw Launch.stop(opening: error)
        }
        if json {
            print(Self.json(listed.runners).text())
        } else {
            let unicode = Terminal.isTerminal(1) && Terminal.isUTF8
            let formatter = TableFormatter(maximumColumnWidth: 40, unicode: unicode, totalWidth: Terminal.width(descriptor: 1))
            let (columns, rows) = Self.table(listed.runners, now: listed.now, all: all)
            print(formatter.format(columns: columns, rows: rows))
            if listed.runners.isEmpty, !all {
                launch.console.note("no runner is live; `opsh runners --all` lists the ones that stopped or were lost")
            }
        }
        return ExitStatus.success.rawValue
    }

    /// host | pid | (state) | started (UTC) | builds | heartbeat | version | schemes.
    static func table(_ runners: [RunnerEntry], now: Double, all: Bool) -> ([String], [[TableFormatter.Cell]]) {
        var columns = ["host", "pid", "started (UTC)", "builds", "heartbeat", "version", "schemes"]
        if all { columns.insert("state", at: 2) }
        let rows = runners.map { runner -> [TableFormatter.Cell] in
            var row: [TableFormatter.Cell] = [
                .text(runner.host), .number(String(runner.pid)), .text(RunsCommand.time(runner.startedAt)),
                .text("\(runner.buildsHeld) of \(runner.concurrency)"),
                .text(ago(now - runner.heartbeatAt) + " (every \(RunnerServiceStatus.seconds(runner.heartbeatInterval)))"),
                .text(runner.version), .text(runner.schemes ?? "all"),
            ]
            if all {
                let state = runner.stoppedAt.map { "stopped \(RunsCommand.time($0))" } ?? runner.state.rawValue
                row.insert(.text(state), at: 2)
            }
            return row
        }
        return (columns, rows)
    }

    /// `4.2 s ago`, `3 min ago`, `2 h ago`, `5 d ago`.
    static func ago(_ seconds: Double) -> String {
        let seconds = max(0, seconds)
        switch seconds {
        case ..<60: return String(format: "%.1f s ago", seconds)
        case ..<3600: return "\(Int(seconds / 60)) min ago"
        case ..<86_400: return "\(Int(seconds / 3600)) h ago"
        default: return "\(Int(seconds / 86_400)) d ago"
        }
    }

    static func json(_ runners: [RunnerEntry]) -> JSON {
        .array(runners.map { runner in
            .object([
                ("id", .string(runner.id)), ("host", .string(runner.host)), ("pid", .integer(Int64(runner.pid))),
                ("state", .string(runner.state.rawValue)), ("startedAt", .real(runner.startedAt)),
                ("heartbeatAt", .real(runner.heartbeatAt)), ("heartbeatInterval", .real(runner.heartbeatInterval)),
                ("stoppedAt", runner.stoppedAt.map(JSON.real) ?? .null), ("buildsHeld", .integer(Int64(runner.buildsHeld))),
                ("concurrency", .integer(Int64(runner.concurrency))), ("version", .string(runner.version)),
                ("schemes", runner.schemes.map { .array($0.components(separatedBy: ", ").map(JSON.string)) } ?? .null),
            ])
        })
    }
}
