import Foundation
import LuaRuntime
import Store

/// A dot command: what operators reach for without typing Lua (sqlite3's
/// names). One record drives dispatch, `.help` and completion, as
/// litecli's special-command registry does: a command is added here and
/// nowhere else.
struct DotCommand: Sendable {
    /// What the command takes, for completion and the usage line.
    enum Argument: Sendable {
        case none
        case table
        case mode
        case onOff
        case file
        case rows
        case confirm
        case expanded
        case pager
    }

    let name: String
    /// Other names typed for it (`.exit`, `.q`).
    let aliases: [String]
    /// The argument as the usage line shows it (`[TABLE]`), or "".
    let usage: String
    let argument: Argument
    let help: String
    /// Why the command is refused on this session (an engine, the
    /// sandbox), as the sentence the shell says, or nil where it works:
    /// `.help` leaves it out then.
    let unavailable: @Sendable (REPL) -> String?
    /// Runs it with what followed the name; returns false to leave the shell.
    let action: @Sendable (REPL, String?) -> Bool

    init(_ name: String, aliases: [String] = [], usage: String = "", argument: Argument = .none, help: String,
         unavailable: @escaping @Sendable (REPL) -> String? = { _ in nil }, action: @escaping @Sendable (REPL, String?) -> Bool) {
        self.name = name
        self.aliases = aliases
        self.usage = usage
        self.argument = argument
        self.help = help
        self.unavailable = unavailable
        self.action = action
    }

    var names: [String] { [name] + aliases }

    /// The registry.
    static let all: [DotCommand] = [
        DotCommand(".help", help: "this list") { repl, _ in
            print(repl.dotHelp())
            return true
        },
        DotCommand(".tables", aliases: ["\\dt"], help: "the tables and views") { repl, _ in
            repl.showTables()
            return true
        },
        DotCommand(".schema", usage: "[TABLE]", argument: .table,
                   help: "the schema (of one table): SQLite's CREATE statements, PostgreSQL's \\d") { repl, table in
            repl.showSchema(of: table, listedBy: ".tables")
            return true
        },
        // psql's \d: without a table, the tables (as psql lists relations); with one, its schema.
        DotCommand("\\d", usage: "[TABLE]", argument: .table, help: "psql's \\d: the tables, or one table's schema") { repl, table in
            if let table { repl.showSchema(of: table, listedBy: "\\d") } else { repl.showTables() }
            return true
        },
        DotCommand(".timer", aliases: ["\\timing"], usage: "[on|off]", argument: .onOff,
                   help: "show how long each chunk ran; alone, turns it on or off") { repl, argument in
            switch argument {
            case "on": repl.timer = true
            case "off": repl.timer = false
            case nil:
                // psql's \timing: alone it switches, and says how it is now.
                repl.timer.toggle()
                print("timing is \(repl.timer ? "on" : "off")")
            default: repl.console.error("usage: .timer [on|off]")
            }
            return true
        },
        DotCommand(".expanded", aliases: ["\\x"], usage: "[on|off|auto]", argument: .expanded,
                   help: "rows one record at a time (.mode line); off or auto: tables, a record at a time when a row is wider than the terminal") { repl, argument in
            let printer = repl.runner.printer
            switch argument {
            case nil: repl.runner.printer.mode = printer.mode == .line ? .table : .line
            case "on": repl.runner.printer.mode = .line
            case "off", "auto": repl.runner.printer.mode = .table
            default:
                repl.console.error("usage: \\x [on|off|auto]")
                return true
            }
            print(repl.runner.printer.mode == .line ? "expanded display is on" : "expanded display is auto (tables, records when too wide)")
            return true
        },
        DotCommand(".traceback", usage: "on|off", argument: .onOff,
                   help: "every error's traceback; off (the default): only one through a function you wrote") { repl, argument in
            switch argument {
            case "on": repl.allTracebacks = true
            case "off": repl.allTracebacks = false
            case nil: print(repl.allTracebacks ? "on" : "off")
            default: repl.console.error("usage: .traceback on|off")
            }
            return true
        },
        DotCommand(".mode", usage: "MODE", argument: .mode,
                   help: "how returned values are shown: table, line (a record at a time, values whole), json, csv, tsv or lua") { repl, argument in
            if let argument, let mode = OutputMode(rawValue: argument) {
                repl.runner.printer.mode = mode
            } else if argument == nil {
                print(repl.runner.printer.mode.rawValue)
            } else {
                repl.console.error("usage: .mode " + OutputMode.allCases.map(\.rawValue).joined(separator: "|"))
            }
            return true
        },
        DotCommand(".pager", usage: "on|off|auto", argument: .pager,
                   help: "output taller than the screen through $PAGER (default less -SRFX): auto; on: all of it; off: none") { repl, argument in
            if let argument, let mode = Pager.Mode(rawValue: argument) {
                repl.runner.pager?.mode = mode
            } else if argument == nil {
                print(repl.runner.pager.map { "\($0.mode.rawValue) (\($0.command))" } ?? "off")
            } else {
                repl.console.error("usage: .pager " + Pager.Mode.allCases.map(\.rawValue).joined(separator: "|"))
            }
            return true
        },
        DotCommand(".locks", help: "who holds the database's locks, and who waits") { repl, _ in
            repl.catalogTask {
                let locks = try repl.catalog.locks()
                print(locks.isEmpty ? "no other session holds a lock on \(repl.session.databaseSession.label)" : locks.joined(separator: "\n"))
            }
            return true
        },
        DotCommand(".rows", usage: "N|all", argument: .rows,
                   help: "rows of a result shown here (default 200); .output FILE gets them all") { repl, argument in
            switch argument {
            case "all": repl.rowLimit = nil
            case let text? where Int(text).map({ $0 > 0 }) == true: repl.rowLimit = Int(text)
            case nil: print(repl.rowLimit.map(String.init) ?? "all")
            default: repl.console.error("usage: .rows N|all (a number of rows of 1 or more)")
            }
            if repl.runner.resultsFile == nil { repl.runner.printer.maximumRows = repl.rowLimit }
            return true
        },
        DotCommand(".output", usage: "[FILE]", argument: .file,
                   help: "returned values to FILE (a new file); to the terminal again without FILE",
                   unavailable: { $0.session.isSandboxed ? ".output FILE is refused in the sandbox: it has no files (run opsh without --sandbox to write one)" : nil }) { repl, argument in
            repl.redirectResults(to: argument)
            return true
        },
        DotCommand(".once", usage: "FILE", argument: .file, help: "the next chunk's returned values to FILE (a new file), then to the terminal again",
                   unavailable: { $0.session.isSandboxed ? ".once FILE is refused in the sandbox: it has no files (run opsh without --sandbox to write one)" : nil }) { repl, argument in
            guard let argument, argument != "stdout" else {
                repl.console.error("usage: .once FILE")
                return true
            }
            if repl.redirectResults(to: argument, once: true) { repl.outputOnce = true }
            return true
        },
        DotCommand(".read", usage: "FILE", argument: .file, help: "run a Lua file here (one chunk)",
                   unavailable: { $0.session.isSandboxed ? ".read is refused in the sandbox: it has no files (run opsh without --sandbox to read one)" : nil }) { repl, argument in
            guard let argument else {
                repl.console.error("usage: .read FILE")
                return true
            }
            repl.readFile(argument)
            return true
        },
        DotCommand(".import", usage: "FILE TABLE", argument: .file,
                   help: "rows of a CSV file (.tsv: tabs) whose first line names the columns into TABLE, as one chunk",
                   unavailable: { $0.session.isSandboxed ? ".import is refused in the sandbox: it has no files (use db.copy with a table of rows)" : nil }) { repl, argument in
            repl.importFile(argument)
            return true
        },
        DotCommand(".dump", usage: "[TABLE]", argument: .table,
                   help: "the database (or one table) as SQL text sqlite3 reads back; with .output FILE, into the file") { repl, argument in
            repl.dumpDatabase(argument)
            return true
        },
        DotCommand(".undo", help: "what undo() can take back, newest first, with the n that takes each back",
                   unavailable: { $0.session.databaseSession.undoUnavailable }) { repl, _ in
            print(repl.chunks.undoList())
            return true
        },
        DotCommand(".confirm", usage: "N|off", argument: .confirm,
                   help: "ask before committing a chunk that changed more than N rows (default 1000)") { repl, argument in
            let chunks = repl.chunks
            switch argument {
            case "off": chunks.confirmThreshold = nil
            case let text? where Int(text).map({ $0 >= 0 }) == true: chunks.confirmThreshold = Int(text)
            case nil: print(chunks.confirmThreshold.map { "asks before committing more than \($0) changed rows" } ?? "off")
            default: repl.console.error("usage: .confirm N|off (a number of rows, 0 or more)")
            }
            return true
        },
        DotCommand(".edit", aliases: ["\\e"], help: "the last chunk in $VISUAL or $EDITOR; run when saved",
                   unavailable: { $0.session.isSandboxed ? "\\e is refused in the sandbox: it runs no editor (run opsh without --sandbox)" : nil }) { repl, _ in
            repl.editLastChunk()
        },
        DotCommand(".watch", aliases: ["\\watch"], usage: "[SECONDS]", help: "the last chunk again every SECONDS (default 2), drawn in place, until Ctrl-C") { repl, argument in
            repl.watchLastChunk(argument)
        },
        DotCommand(".quit", aliases: [".exit", ".q", "\\q"], help: "leave (Ctrl-D, exit and quit too)") { _, _ in false },
    ]

    /// The command typed as `name` (or one of its aliases).
    static func named(_ name: String) -> DotCommand? {
        all.first { $0.names.contains(name) }
    }
}

extension REPL {
    /// Runs a dot command; returns false to leave the shell.
    func runDotCommand(_ line: String) -> Bool {
        let words = line.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
        let argument = words.count > 1 ? words[1...].joined(separator: " ") : nil
        let name = words.first ?? ""
        guard let command = DotCommand.named(name) else {
            console.error("unknown command \(name); .help lists them")
            return true
        }
        if let why = command.unavailable(self) {
            console.error(why)
            return true
        }
        let goOn = command.action(self, argument)
        fflush(nil)
        return goOn
    }

    /// `.help`: the commands that work on this session, then how the
    /// prompt behaves here.
    func dotHelp() -> String {
        let available = DotCommand.all.filter { $0.unavailable(self) == nil }
        let left = available.map { ([$0.name] + [$0.usage]).filter { !$0.isEmpty }.joined(separator: " ") }
        let width = (left.map(\.count).max() ?? 0) + 2
        var lines = zip(available, left).map { command, head in
            head.padding(toLength: width, withPad: " ", startingAt: 0) + command.help
                + (command.aliases.isEmpty ? "" : " (also \(command.aliases.joined(separator: ", ")))")
        }
        lines.append("")
        lines.append("Type Lua; an expression prints its value (`=expr` too). Tab completes globals, fields, query keys in query(\"…\"), names in SQL strings and dot commands.")
        lines.append("SQL that starts with a keyword (SELECT, WITH, INSERT, UPDATE, DELETE, …) runs as SQL, read until `;` as in sqlite3 and psql.")
        lines.append("psql's \\q, \\dt, \\d, \\timing and \\x are the commands above; exit and quit leave.")
        lines.append("Each chunk is one transaction: an error or Ctrl-C rolls all of it back.")
        if session.databaseSession.undoUnavailable == nil {
            lines.append("undo() takes back the last chunk that changed data, undo(n) the n-th last, unless someone else changed those rows since.")
        }
        lines.append("Ctrl-C clears the line or stops the running chunk.")
        return lines.joined(separator: "\n")
    }

    /// `.tables`, `\d`: the tables and views, in columns.
    func showTables() {
        catalogTask {
            let names = try catalog.tables()
            if !names.isEmpty { print(columnsLayout(names)) }
        }
    }

    /// `.schema [TABLE]`, `\d TABLE`: the schema text; a table that is not
    /// there is named, with the command that lists the tables.
    func showSchema(of table: String?, listedBy command: String) {
        catalogTask {
            let texts = try catalog.schemaText(of: table)
            if let table, texts.isEmpty { console.error("no table or view named \(table); \(command) lists them") }
            for text in texts { print(text) }
        }
    }

    /// Runs a catalog read, reporting its failure.
    func catalogTask(_ body: () throws -> Void) {
        do {
            try body()
        } catch {
            report(error)
        }
    }

    /// `.read FILE`: one chunk, audited as one typed at the prompt.
    func readFile(_ argument: String) {
        let path = (argument as NSString).expandingTildeInPath
        configuration.beforeChunk?(".read \(argument)")
        let startedAt = Date().timeIntervalSince1970
        var failed = false
        Pager.collecting(runner.pager) {
            timed {
                do {
                    let code = try ChunkRunner.readScript(path)
                    try runChunk(code: ".read \(argument)") {
                        try runner.run(code, chunkName: "@\(path)")
                    }
                } catch {
                    failed = true
                    report(error)
                }
            }
        }
        configuration.afterChunk?(".read \(argument)", startedAt, failed)
    }

    /// `.output FILE`: returned values go to FILE, as text without the
    /// terminal's width limit; `.output` (or `.output stdout`) ends that.
    /// With `once`, for the next chunk only (`.once`). True when the
    /// results go to the file now.
    @discardableResult
    func redirectResults(to argument: String?, once: Bool = false) -> Bool {
        publishResults()
        guard let argument, argument != "stdout" else {
            runner.printer.widthFollowsTerminal = true
            runner.printer.maximumRows = rowLimit
            return false
        }
        let path = (argument as NSString).expandingTildeInPath
        // A file made anew, never one opsh did not make: an earlier
        // .output of this session may be written again while it is as
        // opsh left it (its device, inode, size and time).
        if access(path, F_OK) == 0, !writtenByThisSession(path) {
            console.error("cannot write \(path): it exists, and opsh does not overwrite a file it did not make; choose another name")
            return false
        }
        do {
            runner.resultsFile = try AtomicFile.Writer(path: path)
        } catch {
            console.error("\(error)")
            return false
        }
        runner.printer.totalWidth = nil
        runner.printer.maximumRows = nil
        console.note(once ? "the next chunk's returned values go to \(path)" : "returned values go to \(path) until .output")
        return true
    }

    /// Puts the results file being written at its name, whole (files
    /// appear atomically: a reader never sees half of one). If it cannot
    /// go there (a file appeared at the name meanwhile), its bytes stay
    /// where they were written, and the operator is told where.
    func publishResults() {
        guard let writer = runner.resultsFile else { return }
        runner.resultsFile = nil
        do {
            try writer.publish(replacing: { [unowned self] in writtenByThisSession($0) })
            outputFiles[writer.path] = WrittenFileRecord.current(writer.path)
        } catch {
            writer.keepUnpublished()
            console.error("\(error); what was written is kept in \(writer.temporaryPath)")
        }
    }

    private func writtenByThisSession(_ path: String) -> Bool {
        guard let written = outputFiles[path] else { return false }
        return WrittenFileRecord.current(path) == written
    }

    /// Names in columns across an 80-column terminal, as sqlite3 does.
    func columnsLayout(_ names: [String]) -> String {
        let width = (names.map(\.count).max() ?? 0) + 2
        let perLine = max(1, 80 / width)
        var lines: [String] = []
        var index = 0
        while index < names.count {
            let slice = names[index..<min(index + perLine, names.count)]
            lines.append(slice.map { $0.padding(toLength: width, withPad: " ", startingAt: 0) }.joined()
                .trimmingCharacters(in: .whitespaces))
            index += perLine
        }
        return lines.joined(separator: "\n")
    }
}
