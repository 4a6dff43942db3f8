import Foundation
import LuaRuntime
import Store

/// SQL typed at the prompt (README, "A chunk is a transaction"): each statement
/// runs through `db.query`, the route every `db` call takes, inside the
/// chunk's one transaction, so the confirmation, undo() and the audit are
/// the ones a Lua chunk gets. Rows print as `db.query`'s rows do; a write
/// says what it changed in the commit's note.
extension REPL {
    /// The chunk that runs the statements given as `...`, returning the
    /// results that have columns (a write without RETURNING has none).
    static let sqlChunk = """
        local query, getmetatable, type = db.query, getmetatable, type
        local results, n = {}, 0
        for i = 1, select('#', ...) do
          local rows = query((select(i, ...)))
          local meta = getmetatable(rows)
          if type(meta) == 'table' and type(meta.columns) == 'table' and #meta.columns > 0 then
            n = n + 1
            results[n] = rows
          end
        end
        return table.unpack(results, 1, n)
        """
    static let sqlChunkName = "=sql"

    func runSQL(_ statements: [String], typed: String) throws {
        var showed = false
        let summary: ChangeSummary?
        do {
            summary = try runChunk(code: typed) {
                showed = try runner.runShowingResults(Self.sqlChunk, chunkName: Self.sqlChunkName,
                                                      arguments: statements.map { .string($0) })
            }
        } catch let error as LuaError {
            throw Self.withoutPrompt(error)
        }
        // A write's note comes from the commit; one that changed nothing
        // says so rather than nothing at all (nil: the answer rolled it back,
        // and that was said).
        if !showed, summary?.isEmpty == true { console.note("no rows changed") }
    }

    /// An SQL error as the operator sees it: the statement's error, without
    /// the place in opsh's own chunk above or its traceback.
    static func withoutPrompt(_ error: LuaError) -> LuaError {
        var message = error.message
        let prefix = sqlChunkName.dropFirst() + ":"
        if message.hasPrefix(prefix), let colon = message.dropFirst(prefix.count).firstIndex(of: ":") {
            message = String(message[message.index(after: colon)...]).trimmingCharacters(in: .whitespaces)
        }
        return LuaError(kind: error.kind, message: message)
    }
}
