import Foundation
import Shell
import Store
import TextCodec

/// `opsh runs [--overdue]`: recent runs from the audit trail, and the dead
/// man's switch for cron (docs/operations.md, "Cron runs that did not
/// happen").
/// Reads only: it never takes the write lock. Written once over
/// ``RepositoryConnection``: an SQLite file or a PostgreSQL URL
/// (`--db postgresql://…`), the same output.
struct RunsCommand {
    static let overdueOption = OptionSpec(long: "overdue", help: "List only the scripts whose last successful run is older than their period (-- @every in the script's header) plus the grace; exit status 1 when there is one, 0 when none is.")
    static let graceOption = OptionSpec(long: "grace", valueName: "duration", help: "How late a run may be, e.g. 5m (default: 10 % of the script's period, at least 1m).")
    static let limitOption = OptionSpec(long: "limit", valueName: "n", help: "How many recent runs to list.", defaultValue: "20")
    static let verifyOption = OptionSpec(long: "verify", help: "Check the audit trail's hash chain and name the first row that does not fit (one rewritten, removed from the middle, or not written by opsh); exit status 1 when there is one, 0 when the chain holds.")

    static let help = CommandHelp(
        name: "opsh runs",
        abstract: "Recent script runs from the audit trail; --overdue for the ones that did not happen.",
        usage: "opsh runs [<options>] [--overdue [--grace <duration>] | --verify]",
        discussion: """
            Lists the newest `opsh run` and `opsh -e` runs recorded in the
            database's audit trail: script, start (UTC), duration, rows
            changed per table (+inserted ~updated -deleted) and exit status.

            A script declares its period in its header, as a comment before
            its first statement: `-- @every 10m` (s, m, h or d). With
            --overdue, opsh names every script whose last successful run
            (exit status 0, not a dry run) started longer ago than its
            period plus the grace, and exits 1; it exits 0 when none is
            late. The period is the one the script's latest run declared.
            A row that does not fit the trail's hash chain is not trusted
            (anyone with INSERT could add a successful run): it is left
            out, and said on stderr.

            With --verify, opsh reads the whole trail and checks its hash
            chain: each row carries the hash of the row before it.

            Exit status: 0 (none overdue; the chain holds), 1 (some
            overdue; a row does not fit), 2 (usage), 3 (the database is
            unavailable or has no audit trail yet).
            """,
        // It only reads: the options about running Lua or writing do not apply.
        options: CommonOptions.specs.filter { ["db", "busy-timeout", "quiet"].contains($0.name) }
            + [overdueOption, graceOption, limitOption, verifyOption])

    var options = CommonOptions()
    var overdue = false
    var verify = false
    var grace: Double?
    var limit = 20

    init?(parsing words: ArraySlice<String>) throws {
        var scanner = ArgumentScanner(words, options: Self.help.options, command: Self.help)
        while let item = try scanner.next() {
            switch item {
            case .help: return nil
            case let .option(spec, value):
                switch spec.name {
                case Self.overdueOption.name: overdue = true
                case Self.verifyOption.name: verify = true
                case Self.graceOption.name:
                    do {
                        grace = try DurationText.seconds(value!)
                    } catch {
                        throw UsageError("--grace: \(error)", command: Self.help)
                    }
                case Self.limitOption.name:
                    guard let count = Int(value!), count > 0 else {
                        throw UsageError("'\(value!)' is not a positive whole number for '--limit'", command: Self.help)
                    }
                    limit = count
                default: _ = try options.apply(spec, value: value, command: Self.help)
                }
            case let .operand(word): throw UsageError("unexpected argument '\(word)'", command: Self.help)
            }
        }
        try options.validate(command: Self.help)
        if grace != nil && !overdue { throw UsageError("--grace goes with --overdue", command: Self.help) }
        if verify && overdue { throw UsageError("--verify and --overdue are two questions: ask one at a time", command: Self.help) }
    }

    func run() throws -> Int32 {
        let launch = Launch(options: options)
        let now = Date().timeIntervalSince1970
        var status = ExitStatus.success
        do {
            try Databases.read(launch.databaseOptions(interactive: false)) { db in
                guard try AuditTrail.exists(db) else {
                    throw Stop(.databaseUnavailable, "this database has no audit trail yet (migration \(AuditTrail.migration) is pending): run `opsh migrate`")
                }
                if verify {
                    let verdict = try AuditChain.verify(db)
                    guard verdict.hasChain else { throw Stop(.databaseUnavailable, verdict.summary) }
                    print(verdict.summary)
                    for misfit in verdict.misfits.dropFirst() { print(misfit.description) }
                    status = verdict.holds ? .success : .scriptError
                    return
                }
                if overdue {
                    // Only rows that fit the chain are trusted.
                    let verdict = try AuditChain.verify(db)
                    if let first = verdict.misfits.first {
                        let count = verdict.misfits.count
                        launch.console.warning("\(count) row\(count == 1 ? "" : "s") of the audit trail \(count == 1 ? "does" : "do") not fit its chain and \(count == 1 ? "is" : "are") not trusted (\(first)); `opsh runs --verify` lists them")
                    }
                    let late = try ScriptSchedule.overdue(db, now: now, grace: grace, untrusted: verdict.untrusted)
                    for script in late {
                        let last = script.lastSuccess.map { "its last successful run started \(Self.time($0)) (\(ScriptSchedule.describe(seconds: now - $0)) ago)" }
                            ?? "it never ran successfully (due since \(Self.time(script.dueSince)))"
                        print("overdue: \(script.script): \(last); period \(ScriptSchedule.describe(seconds: script.period)), grace \(ScriptSchedule.describe(seconds: script.grace))")
                    }
                    if late.isEmpty { launch.console.note("no script is overdue") }
                    status = late.isEmpty ? .success : .scriptError
                    return
                }
                let entries = try AuditTrail.list(db, ListRequest(
                    filters: [ColumnFilter("mode", .in, storeValues: [.text("run"), .text("eval")])],
                    order: [ColumnOrder("startedAt", descending: true)], limit: limit))
                print(Self.table(entries), terminator: "")
            }
        } catch let stop as Stop {
            throw stop
        } catch {
            throw Stop(.databaseUnavailable, "\(error)")
        }
        return status.rawValue
    }

    static func time(_ seconds: Double) -> String {
        let formatter = DateFormatter()
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss"
        formatter.timeZone = TimeZone(identifier: "UTC")
        return formatter.string(from: Date(timeIntervalSince1970: seconds))
    }

    /// script | started | duration | changes | status, aligned. At a
    /// terminal (`width`) the script and changes columns are cut with `…`,
    /// the wider first, so the status stays on screen.
    static func table(_ entries: [AuditEntry], width: Int? = Terminal.width(descriptor: 1)) -> String {
        var rows = [["script", "started (UTC)", "duration", "changes", "status"]]
        for entry in entries {
            var script = entry.script ?? "-e " + (entry.code ?? "").replacingOccurrences(of: "\n", with: " ")
            if entry.script == nil, script.count > 60 { script = String(script.prefix(59)) + "…" }
            let changes = entry.changes.sorted { $0.key < $1.key }.map { table, counts in
                table + " " + [("+", counts.inserted), ("~", counts.updated), ("-", counts.deleted)]
                    .filter { $0.1 != 0 }.map { "\($0.0)\($0.1)" }.joined(separator: " ")
            }.joined(separator: ", ")
            let status = "\(entry.status)" + (entry.dryRun ? " (dry run)" : "")
            rows.append([script, time(entry.startedAt), String(format: "%.2f s", entry.endedAt - entry.startedAt),
                         changes.isEmpty ? "none" : changes, status])
        }
        var widths = (0..<5).map { column in rows.map { TextWidth.of($0[column]) }.max() ?? 0 }
        if let width {
            // Two spaces between columns; the last is not padded.
            var excess = widths.reduce(0, +) + 2 * (widths.count - 1) - width
            let cuttable = [0, 3], narrowest = 12
            while excess > 0, let widest = cuttable.max(by: { widths[$0] < widths[$1] }), widths[widest] > narrowest {
                widths[widest] -= 1
                excess -= 1
            }
        }
        return rows.map { row in
            row.enumerated().map { column, text in
                let shown = TextWidth.truncate(text, to: widths[column])
                return column == row.count - 1 ? shown : shown + String(repeating: " ", count: widths[column] - TextWidth.of(shown))
            }.joined(separator: "  ")
        }.joined(separator: "\n") + "\n"
    }
}
