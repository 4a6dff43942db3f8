import Foundation
import LuaRuntime
import Store

/// The shell's dot commands, for what operators reach for without typing
/// Lua (sqlite3's names).
extension REPL {
    static let dotHelp = """
        .help                   this list
        .tables                 the tables and views
        .schema [TABLE]         CREATE statements (of one table)
        .timer on|off           show how long each chunk ran
        .mode MODE              how returned values are shown: table, line
                                (a record at a time, values whole), json,
                                csv or lua
        .locks                  which processes hold the database's locks
        .rows N|all             rows of a result shown here (default 200);
                                .output FILE gets them all
        .output [FILE]          returned values to FILE (a new file); to
                                the terminal again without FILE
        .read FILE              run a Lua file here (one chunk)
        .confirm N|off          ask before committing a chunk that changed
                                more than N rows (default 1000)
        .quit                   leave (Ctrl-D too)

        Type Lua; an expression prints its value (`=expr` too). Tab completes
        globals, fields, query keys in query("…"), names in SQL strings and
        dot commands.
        Each chunk is one transaction: an error or Ctrl-C rolls all of it
        back. undo() takes back the last chunk that changed data, undo(n) the
        n-th last, unless someone else changed those rows since.
        Ctrl-C clears the line or stops the running chunk.
        """

    /// Runs a dot command; returns false to leave the shell.
    func runDotCommand(_ line: String) -> Bool {
        let words = line.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
        let argument = words.count > 1 ? words[1...].joined(separator: " ") : nil
        switch words.first ?? "" {
        case ".help":
            print(Self.dotHelp)
        case ".quit", ".exit", ".q":
            return false
        case ".tables":
            do {
                let names = try catalog.tables()
                if !names.isEmpty { print(columnsLayout(names)) }
            } catch {
                report(error)
            }
        case ".schema":
            do {
                let statements = try catalog.schemaStatements(of: argument)
                if let argument, statements.isEmpty {
                    console.error("no table or view named \(argument); .tables lists them")
                }
                for statement in statements { print(statement + ";") }
            } catch {
                report(error)
            }
        case ".timer":
            switch argument {
            case "on": timer = true
            case "off": timer = false
            default: console.error("usage: .timer on|off")
            }
        case ".mode":
            if let argument, let mode = OutputMode(rawValue: argument) {
                runner.printer.mode = mode
            } else if argument == nil {
                print(runner.printer.mode.rawValue)
            } else {
                console.error("usage: .mode " + OutputMode.allCases.map(\.rawValue).joined(separator: "|"))
            }
        case ".confirm":
            guard let chunks else {
                console.error(".confirm is not available on this database: a chunk commits when it ends")
                break
            }
            switch argument {
            case "off": chunks.confirmThreshold = nil
            case let text? where Int(text).map({ $0 >= 0 }) == true: chunks.confirmThreshold = Int(text)
            case nil: print(chunks.confirmThreshold.map { "asks before committing more than \($0) changed rows" } ?? "off")
            default: console.error("usage: .confirm N|off (a number of rows, 0 or more)")
            }
        case ".locks":
            if let sentence = session.describeLocks() {
                // PostgreSQL: the server's sessions and their locks.
                print(sentence)
            } else if let path = session.databaseFilePath {
                // Who holds locks on the database now (/proc/locks).
                print(LockHolders.sentence(for: path).map { "locks " + $0 } ?? "no other process holds a lock on \(path)")
            }
        case ".rows":
            switch argument {
            case "all": rowLimit = nil
            case let text? where Int(text).map({ $0 > 0 }) == true: rowLimit = Int(text)
            case nil: print(rowLimit.map(String.init) ?? "all")
            default: console.error("usage: .rows N|all (a number of rows of 1 or more)")
            }
            if runner.resultsFile == nil { runner.printer.maximumRows = rowLimit }
        case ".output":
            if argument != nil && argument != "stdout" && session.isSandboxed {
                console.error(".output FILE is refused in the sandbox: it has no files (run opsh without --sandbox to write one)")
                break
            }
            redirectResults(to: argument)
        case ".read":
            guard let argument else {
                console.error("usage: .read FILE")
                break
            }
            if session.isSandboxed {
                console.error(".read is refused in the sandbox: it has no files (run opsh without --sandbox to read one)")
                break
            }
            let path = (argument as NSString).expandingTildeInPath
            // One chunk, audited as one typed at the prompt.
            configuration.beforeChunk?()
            let startedAt = Date().timeIntervalSince1970
            var failed = false
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
            configuration.afterChunk?(".read \(argument)", startedAt, failed)
        default:
            console.error("unknown command \(words.first ?? line); .help lists them")
        }
        fflush(nil)
        return true
    }

    /// `.output FILE`: returned values go to FILE, as text without the
    /// terminal's width limit; `.output` (or `.output stdout`) ends that.
    private func redirectResults(to argument: String?) {
        guard let argument, argument != "stdout" else {
            runner.resultsFile = nil
            runner.printer.totalWidth = Terminal.width(descriptor: 1)
            runner.printer.maximumRows = rowLimit
            return
        }
        let path = (argument as NSString).expandingTildeInPath
        // A file made anew, never one opsh did not make (an earlier .output
        // of this session may be written again).
        let mine = outputFiles.contains(path)
        let descriptor = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (mine ? O_TRUNC : O_EXCL), 0o644)
        guard descriptor >= 0 else {
            let reason = errno == EEXIST ? "it exists, and opsh does not overwrite a file it did not make; choose another name"
                : String(cString: strerror(errno))
            console.error("cannot write \(path): \(reason)")
            return
        }
        outputFiles.insert(path)
        runner.resultsFile = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        runner.printer.totalWidth = nil
        runner.printer.maximumRows = nil
        console.note("returned values go to \(path) until .output")
    }

    /// Names in columns across an 80-column terminal, as sqlite3 does.
    private func columnsLayout(_ names: [String]) -> String {
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
