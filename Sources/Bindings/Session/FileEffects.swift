import Foundation
import LuaRuntime
import Store

/// What opsh's own functions may do to files in this session — the one
/// place `backup`, its rotation and `export{ file = }` ask (issue 13.6):
///
/// - under `--dry-run` they write no file: they return a report marked
///   `dryRun = true` saying what they would have written or removed;
/// - under `--read-only` they delete and overwrite nothing: rotation and
///   overwriting are refused with the reason (a new file may still be
///   made: a backup is how a read-only operator rescues data).
///
/// (The Lua `io` library is the script's own business; the sandbox removes
/// it.)
struct FileEffects {
    /// `--read-only`.
    let readOnly: Bool
    private let isDryRun: () -> Bool

    init(database: any DatabaseSession) {
        readOnly = database.isReadOnly
        isDryRun = { database.isDryRun }
    }

    /// False under a dry run: report instead of writing.
    var mayWrite: Bool { !isDryRun() }

    /// Refuses deleting or replacing `what` under `--read-only`.
    func requireMayDelete(_ function: String, _ what: String) throws {
        if readOnly {
            throw LuaCallError.message("\(function): --read-only deletes and overwrites nothing (\(what)); run without --read-only to allow it")
        }
    }
}
