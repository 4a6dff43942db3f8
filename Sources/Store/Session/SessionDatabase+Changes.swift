import CSQLiteStore
import Foundation

/// The rows this session's raw statements change, for the store's
/// ``ChangeTally`` (the audit trail's per-table counts): GRDB's observers
/// see only the statements GRDB executes, so the `db` module counts the
/// rest with SQLite's update hook (`CSQLiteStore/opsh_sql_tally.c`).
final class RawChangeTally: RawChangeSource, @unchecked Sendable {
    let tally: UnsafeMutablePointer<opsh_sql_tally>

    init() { tally = opsh_sql_tally_new() }
    deinit { opsh_sql_tally_free(tally) }

    func peek() -> TableChanges { Self.peek(tally) }

    func drain(connection: OpaquePointer?) -> TableChanges {
        guard tally.pointee.count > 0, tally.pointee.connection == connection else { return [:] }
        let changes = peek()
        opsh_sql_tally_clear(tally)
        return changes
    }

    static func peek(_ tally: UnsafeMutablePointer<opsh_sql_tally>) -> TableChanges {
        var changes: TableChanges = [:]
        for index in 0..<Int(tally.pointee.count) {
            let entry = tally.pointee.entries[index]
            changes[String(cString: entry.table)] = TableChangeCounts(
                inserted: Int(entry.inserted), updated: Int(entry.updated), deleted: Int(entry.deleted))
        }
        return changes
    }
}

extension SessionDatabase {
    /// Counts what this session's raw statements change, into the
    /// store's tally (which keeps the counter alive).
    func countRawChanges() {
        let raw = RawChangeTally()
        store.committedChanges.attach(raw)
        route.pointee.tally = raw.tally
    }

    /// The raw counts of the open transaction, to go back to when a
    /// savepoint rolls back.
    func rawChangesMark() -> TableChanges? {
        guard let tally = route.pointee.tally else { return nil }
        return RawChangeTally.peek(tally)
    }

    func rewindRawChanges(to mark: TableChanges?) {
        guard let mark, let tally = route.pointee.tally else { return }
        opsh_sql_tally_clear(tally)
        for (table, counts) in mark {
            opsh_sql_tally_add(tally, table, Int64(counts.inserted), Int64(counts.updated), Int64(counts.deleted))
        }
    }

    /// Runs `body` (which steps statements through SQLite's C API on
    /// `connection`: a changeset applied) with the audit's update hook armed.
    public func countingRawChanges<T>(on connection: OpaquePointer, _ body: (OpaquePointer) throws -> T) rethrows -> T {
        opsh_sql_tally_arm(route.pointee.tally, connection)
        defer { opsh_sql_tally_disarm(route.pointee.tally, connection) }
        return try body(connection)
    }

    /// Rows this session (and the store's other writers: jobs' log lines)
    /// committed per table since the store connected.
    public var committedChanges: TableChanges { store.committedChanges.committed }
}
