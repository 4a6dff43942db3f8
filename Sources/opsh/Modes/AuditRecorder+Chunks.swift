import Foundation
import Store

/// A shell chunk's audit row, written in the chunk's own transaction: so a
/// commit is never left without its row (`kill -9` between the two; issue
/// 24, item 15), and checked after the commit through the trail's own
/// connection (a TEMP trigger on the session's connection could have
/// dropped it; item 5). Both engines call these around a chunk:
/// ``chunkBegins(code:)``, ``writeInChunk(changes:on:savepoint:)`` from the
/// session's hook right before the chunk commits, and
/// ``chunkEnded(code:startedAt:failed:changes:destination:)``.
extension AuditRecorder {
    struct ChunkInProgress {
        var code: String
        var startedAt: Double
        /// The row written in the chunk's transaction, and its id and hash.
        var written: (entry: AuditEntry, stamp: AuditRowStamp)?
        /// Why it could not be written there.
        var problem: String?
    }

    /// Before a chunk runs.
    func chunkBegins(code: String) {
        chunk = ChunkInProgress(code: code, startedAt: Date().timeIntervalSince1970)
    }

    /// Right before a chunk's transaction commits, on its connection:
    /// appends the chunk's row (qualified names, read back) in a savepoint
    /// (`savepoint` runs its body in one). A failure never stops the
    /// commit: the row is then written after it, through the trail's own
    /// connection.
    func writeInChunk(changes: TableChanges, on db: some RepositoryConnection,
                      savepoint: (() throws -> AuditRowStamp) throws -> AuditRowStamp) {
        guard !readOnly, let current = chunk, !changes.isEmpty else { return }
        do {
            guard let tables = try AuditTrail.tables(db) else { return }
            let entry = AuditEntry(startedAt: current.startedAt, endedAt: Date().timeIntervalSince1970, mode: mode,
                                   code: CodeMask.mask(current.code, knownSecrets: AuditTrail.knownSecrets(db)),
                                   reason: reason, readOnly: readOnly, changes: changes, status: 0)
            let stamp = try savepoint { try AuditTrail.append(entry, db, tables: tables) }
            chunk?.written = (entry, stamp)
        } catch {
            chunk?.problem = "\(error)"
        }
    }

    /// The committed changes less the chunk's own audit row (SQLite's
    /// tally sees it commit with the chunk). Call before ``chunkEnded(code:startedAt:failed:changes:destination:)``.
    func withoutOwnRow(_ changes: TableChanges) -> TableChanges {
        guard chunk?.written != nil, var counts = changes[AuditTrail.table] else { return changes }
        var result = changes
        counts.inserted -= 1
        result[AuditTrail.table] = counts.total == 0 ? nil : counts
        return result
    }

    /// After a chunk: the row written in its transaction must be in the
    /// trail as written, read through the trail's own connection; when it
    /// is not (or was not written there), and the chunk committed changes,
    /// the row is written now, as a run's is.
    func chunkEnded(code: String, startedAt: Double, failed: Bool, changes: TableChanges,
                    destination: some AuditDestination) {
        let current = chunk
        chunk = nil
        if let written = current?.written {
            let trail = destination.trail
            do {
                if try trail.contains(written.stamp) {
                    AuditSyslog.written(written.entry, stamp: written.stamp, database: trail.label)
                    return
                }
                console.warning("the audit row written in this chunk's transaction is not in the trail as written (something on the session's connection dropped or changed it): writing it again through opsh's own connection")
            } catch {
                console.warning("the audit row written in this chunk's transaction could not be checked (\(error)): writing it again through opsh's own connection")
            }
        } else if let problem = current?.problem, !changes.isEmpty {
            console.warning("the audit row could not be written in this chunk's transaction (\(problem)): writing it after the commit instead")
        }
        guard !changes.isEmpty else { return }
        self.code = code
        record(to: destination, startedAt: current?.startedAt ?? startedAt, status: failed ? 1 : 0, dryRun: false, changes: changes)
    }
}
