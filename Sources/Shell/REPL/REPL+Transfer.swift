import Bindings
import Foundation
import Store

extension REPL {
    /// `.import FILE TABLE`: the rows of a CSV or TSV file whose first line
    /// names the columns, written into TABLE by the engine's bulk path
    /// (``DatabaseSession/copy(_:)``) as one chunk: the chunk's
    /// confirmation, undo and audit apply as to any chunk typed here.
    func importFile(_ argument: String?) {
        let words = argument?.split(separator: " ", omittingEmptySubsequences: true) ?? []
        guard words.count >= 2 else {
            console.error("usage: .import FILE TABLE (a CSV file, or .tsv, whose first line names the columns)")
            return
        }
        let table = String(words.last!)
        let file = words.dropLast().joined(separator: " ")
        let path = (file as NSString).expandingTildeInPath
        let code = ".import \(argument!)"
        configuration.beforeChunk?(code)
        let startedAt = Date().timeIntervalSince1970
        var failed = false
        timed {
            do {
                try runChunk(code: code) {
                    let count: Int
                    do {
                        var (request, clearProgress) = try CopyRequest.file(path, into: table).showingProgress()
                        request.namedByScript = true
                        defer { clearProgress() }
                        count = try session.databaseSession.copy(request)
                    } catch let failure as CopyFailure {
                        throw ImportRefusal(message: ".import into \(table): \(failure); nothing was imported")
                    }
                    console.note("\(count) row\(count == 1 ? "" : "s") read from \(file) into \(table)")
                }
            } catch let refusal as ImportRefusal {
                failed = true
                console.error(refusal.message)
            } catch {
                failed = true
                report(error)
            }
        }
        configuration.afterChunk?(code, startedAt, failed)
    }
}

/// `.import`'s failure, already worded for the operator.
struct ImportRefusal: Error, CustomStringConvertible {
    let message: String
    var description: String { message }
}

extension REPL {
    /// `.dump [TABLE]`: SQL text that sqlite3 reads back (``SQLDump``), to
    /// the terminal or to `.output`'s file.
    func dumpDatabase(_ argument: String?) {
        catalogTask {
            let table = argument?.trimmingCharacters(in: .whitespaces)
            let file = runner.resultsFile
            try session.databaseSession.dump(table: table?.isEmpty == false ? table : nil) { text in
                if let file { try file.write(Data(text.utf8)) } else { print(text, terminator: "") }
            }
        }
    }
}
