import CSQLiteStore
import GRDB
import GRDBSQLite

/// The rows one writer connection changes in its open transaction, as
/// SQLite's preupdate hook reports them (`CSQLiteStore/opsh_changes.c`,
/// which says why that hook): whatever runs the statement (GRDB, the `db`
/// module's C path, a changeset applied, the job manager) and however (the
/// rows a REPLACE conflict resolution deletes, a DELETE without WHERE). The
/// store installs one on each writer connection (``ChangeTally``); the
/// counts are the open transaction's until ``clear()`` (its end).
///
/// It also keeps, while asked (``startRecording()``), what the transaction's
/// changeset is made of: SQLite allows one preupdate hook per connection.
public final class ConnectionChanges: @unchecked Sendable {
    let counter: OpaquePointer
    /// The connection (for lookups by connection only: never used once
    /// it is closed).
    let connection: OpaquePointer

    /// Installs the hook on `connection`. The counter lives as long as the
    /// GRDB connection that holds it (``ChangeTally`` registers it for the
    /// connection's lifetime), so the hook never outlives it.
    init?(connection: OpaquePointer) {
        guard let counter = opsh_changes_install(connection) else { return nil }
        self.counter = counter
        self.connection = connection
    }

    deinit { opsh_changes_free(counter) }

    /// The rows changed per table since the transaction began: `temporary`
    /// tables (TEMP) included or not.
    public func pending(includingTemporary: Bool = true) -> TableChanges {
        var counts: UnsafeMutablePointer<opsh_change_count>?
        let count = Int(opsh_changes_read(counter, &counts))
        defer { opsh_changes_free_counts(counts, Int32(count)) }
        var changes: TableChanges = [:]
        for index in 0..<count {
            let entry = counts![index]
            guard includingTemporary || entry.temporary == 0 else { continue }
            let name = String(cString: entry.table)
            changes[name] = (changes[name] ?? .init())
                + TableChangeCounts(inserted: Int(entry.inserted), updated: Int(entry.updated), deleted: Int(entry.deleted))
        }
        return changes
    }

    /// What the counts are now, to go back to when a savepoint rolls back
    /// (``rewind(to:)``).
    public struct Mark {
        fileprivate let counts: [(table: String, temporary: Bool, counts: TableChangeCounts)]
    }

    public func mark() -> Mark {
        var counts: UnsafeMutablePointer<opsh_change_count>?
        let count = Int(opsh_changes_read(counter, &counts))
        defer { opsh_changes_free_counts(counts, Int32(count)) }
        return Mark(counts: (0..<count).map { index in
            let entry = counts![index]
            return (String(cString: entry.table), entry.temporary != 0,
                    TableChangeCounts(inserted: Int(entry.inserted), updated: Int(entry.updated), deleted: Int(entry.deleted)))
        })
    }

    /// The counts as they were at `mark`: what a rolled-back savepoint
    /// changed is not counted.
    public func rewind(to mark: Mark) {
        opsh_changes_clear(counter)
        for entry in mark.counts {
            opsh_changes_add(counter, entry.table, entry.temporary ? 1 : 0,
                             Int64(entry.counts.inserted), Int64(entry.counts.updated), Int64(entry.counts.deleted))
        }
    }

    /// Rows deleted in `table` of the database file that no row change
    /// reported (a dropped table's).
    public func addDeleted(_ count: Int, in table: String) {
        guard count > 0 else { return }
        opsh_changes_add(counter, table, 0, 0, 0, Int64(count))
    }

    /// Forgets the counts: the transaction ended.
    public func clear() { opsh_changes_clear(counter) }

    // MARK: Recording

    /// Keeps the first version of every row of the database file changed
    /// from now on, for ``changeset()``.
    public func startRecording() { _ = opsh_changes_record(counter) }

    public func stopRecording() { opsh_changes_stop_recording(counter) }

    public var isRecording: Bool { opsh_changes_is_recording(counter) != 0 }

    /// What the transaction changed since recording started, row by row;
    /// called on the connection's own thread, inside its transaction.
    public func changeset() throws -> Changeset {
        var size: Int32 = 0
        var bytes: UnsafeMutableRawPointer?
        let code = opsh_changes_changeset(counter, &size, &bytes)
        guard code == SQLITE_OK else { throw ChangesetError(code: code, action: "read the recorded changes") }
        return Changeset(bytes: bytes, size: size)
    }

    /// The first changed table whose rows could not be recorded (no
    /// PRIMARY KEY, generated columns, its columns changed meanwhile).
    public var unrecordedTable: String? {
        opsh_changes_unrecorded(counter).map { String(cString: $0) }
    }
}
