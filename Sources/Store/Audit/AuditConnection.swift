import Foundation
import GRDB
import PostgresWire

/// The audit trail's own connection: where opsh writes a run's row, and
/// checks a shell chunk's. Never the script's connection, whose TEMP
/// tables and triggers (SQLite) or `search_path` (PostgreSQL) could hide
/// the row or send it elsewhere (docs/operations.md, "The audit trail"):
///
/// - **SQLite**: a connection of its own to the file the session opened
///   (checked by device and inode), opened when first needed, with no
///   pragma or TEMP object of anyone's; the row goes to `main.opsh_audit`
///   in a `BEGIN IMMEDIATE` transaction, which also serializes appenders.
/// - **PostgreSQL**: a connection of its own to the same URL, its
///   `search_path` set to `pg_catalog, pg_temp` once it found the schema
///   opsh's tables live in (``AuditTrail/tables(_:)``); every name it
///   writes is qualified.
///
/// ``record(_:code:waitingAtMost:)`` is the whole of recording a row:
/// the rows spooled earlier for this database first, the row, its syslog
/// line, and the spool when the row could not be written.
public final class AuditConnection {
    private enum Target {
        case sqlite(Store)
        case postgres(url: String, lockWait: Double, searchPath: String?)
    }

    private let target: Target
    private var queue: DatabaseQueue?
    private var postgres: PostgresDatabase?
    /// The SQLite connection's lock waits: the store's busy timeout, given
    /// up when the store's are (Ctrl-C), capped for a run that changed
    /// nothing.
    private let lockWait: LockWait
    public var spool = AuditSpool()

    /// The trail of the SQLite file `store` opened.
    public static func sqlite(_ store: Store) -> AuditConnection {
        AuditConnection(target: .sqlite(store), lockWait: store.lockWait)
    }

    /// The trail of the PostgreSQL database at `url`; a row waits at most
    /// `lockWait` seconds for a lock (the server's `lock_timeout`). It
    /// connects with `searchPath` (the session's pinned path), so that an
    /// `ALTER DATABASE … SET search_path` the run made does not refuse the
    /// run's own row at opening (28n).
    public static func postgres(url: String, lockWait: Double, searchPath: String? = nil) -> AuditConnection {
        AuditConnection(target: .postgres(url: url, lockWait: lockWait, searchPath: searchPath), lockWait: LockWait(timeout: lockWait))
    }

    private init(target: Target, lockWait storeWait: LockWait) {
        self.target = target
        let own = LockWait(timeout: storeWait.timeout)
        own.abandon { storeWait.isAbandoned }
        lockWait = own
    }

    /// The database, as the spool keys its rows: an SQLite file by device
    /// and inode (not its name), a PostgreSQL database by its URL without
    /// the password.
    public var identity: String {
        switch target {
        case let .sqlite(store):
            let file = store.openedFileIdentity ?? store.path.flatMap(FileIdentity.init(path:))
            return file.map { "sqlite \($0.device)-\($0.inode)" } ?? "sqlite \(store.path ?? ":memory:")"
        case let .postgres(url, _, _):
            return "postgresql " + ((try? PostgresURL(url).description) ?? "?")
        }
    }

    /// The database as people name it: the file's path, or the URL
    /// without its password.
    public var label: String {
        switch target {
        case let .sqlite(store): store.path ?? ":memory:"
        case let .postgres(url, _, _): (try? PostgresURL(url).description) ?? "?"
        }
    }

    // MARK: Recording

    /// How ``record(_:code:waitingAtMost:)`` went.
    public enum Outcome {
        /// The row is in the trail.
        case written(AuditRowStamp)
        /// It could not be written (`error`) and waits in the spool for
        /// the next run on this database.
        case spooled(file: String, error: any Error)
        /// It could not be written, nor spooled.
        case failed(any Error)
    }

    /// Records one row: first the rows spooled for this database (oldest
    /// first; each leaves the spool once written), then `entry` with
    /// `code` masked; each row written also goes to syslog. A row that
    /// cannot be written is spooled.
    ///
    /// - parameter waitingAtMost: seconds the row may wait for a lock
    ///   (nil: as long as any write).
    public func record(_ entry: AuditEntry, code: String?, waitingAtMost seconds: Double?) -> Outcome {
        var entry = entry
        if let code { entry.code = CodeMask.mask(code, knownSecrets: knownSecrets()) }
        do {
            // A spooled row that still cannot be written stays spooled;
            // this run's row is tried all the same.
            try? writeSpooled(waitingAtMost: seconds)
            let stamp = try append(entry, waitingAtMost: seconds)
            AuditSyslog.written(entry, stamp: stamp, database: label)
            return .written(stamp)
        } catch {
            do {
                let file = try spool.keep(entry, database: identity)
                AuditSyslog.spooled(entry, database: label, reason: "\(error)")
                return .spooled(file: file, error: error)
            } catch let spoolError {
                return .failed(AuditSpoolError(write: error, spool: spoolError))
            }
        }
    }

    /// Writes what the spool holds for this database, oldest first.
    func writeSpooled(waitingAtMost seconds: Double?) throws {
        var pending = spool.claimPending(database: identity)[...]
        // What is not written goes back to the spool for the next run.
        defer { for rest in pending { spool.release(rest.file) } }
        while let next = pending.first {
            let stamp = try append(next.entry, waitingAtMost: seconds)
            pending.removeFirst()
            spool.remove(next.file)
            AuditSyslog.written(next.entry, stamp: stamp, database: label)
        }
    }

    /// Whether the database has the trail (migration 003).
    public func hasTrail() throws -> Bool {
        try withConnection { try AuditTrail.tables($0) != nil }
    }

    /// Whether the row `stamp` names is in the trail as written (a shell
    /// chunk's row, checked after the chunk committed).
    public func contains(_ stamp: AuditRowStamp) throws -> Bool {
        try withConnection { db in
            guard let tables = try AuditTrail.tables(db) else { return false }
            return try AuditTrail.contains(stamp, db, tables: tables)
        }
    }

    /// Reads the whole trail and checks its chain (``AuditChain/verify(_:)``).
    public func verify() throws -> AuditChain.Verdict {
        try withConnection { try AuditChain.verify($0) }
    }

    /// Whether `error` is a lock wait that ran out.
    public func isLockTimeout(_ error: any Error) -> Bool {
        if PostgresDatabase.isLockTimeout(error) { return true }
        if let error = error as? DatabaseError { return error.resultCode == .SQLITE_BUSY || error.resultCode == .SQLITE_LOCKED }
        return "\(error)".contains("database is locked")
    }

    /// The secrets the database holds, to mask in recorded code; none
    /// when they cannot be read.
    func knownSecrets() -> [String] {
        (try? withConnection { AuditTrail.knownSecrets($0) }) ?? []
    }

    // MARK: Writing

    /// Appends `entry` (code already masked) in a short transaction of its
    /// own, waiting at most `seconds` for a lock.
    @discardableResult
    public func append(_ entry: AuditEntry, waitingAtMost seconds: Double?) throws -> AuditRowStamp {
        switch target {
        case let .sqlite(store):
            let queue = try sqliteQueue(store)
            var stamp: AuditRowStamp?
            let write = {
                try queue.inTransaction(.immediate) { db in
                    let connection = StoreDatabase(db)
                    guard let tables = try AuditTrail.tables(connection) else { throw AuditTrailError.missing }
                    stamp = try AuditTrail.append(entry, connection, tables: tables)
                    return .commit
                }
            }
            if let seconds { try lockWait.capped(at: seconds, write) } else { try write() }
            return stamp!
        case let .postgres(_, lockWait, _):
            let database = try postgresDatabase()
            return try database.transaction {
                let wait = seconds ?? lockWait
                _ = try database.execute("SELECT pg_catalog.set_config('lock_timeout', ?, true)",
                                         .positional([.text("\(max(Int(wait * 1000), 1))ms")]))
                guard let tables = try AuditTrail.tables(database) else { throw AuditTrailError.missing }
                return try AuditTrail.append(entry, database, tables: tables)
            }
        }
    }

    private func withConnection<T>(_ body: (any RepositoryConnection) throws -> T) throws -> T {
        switch target {
        case let .sqlite(store):
            return try sqliteQueue(store).read { try body(StoreDatabase($0)) }
        case .postgres:
            return try body(try postgresDatabase())
        }
    }

    /// The SQLite connection, opened now if not yet; refused when the file
    /// at the path is not the one the store opened.
    private func sqliteQueue(_ store: Store) throws -> DatabaseQueue {
        guard let path = store.path else { throw AuditTrailError.replacedFile(":memory:") }
        try store.connect()
        if let opened = store.openedFileIdentity, FileIdentity(path: path) != opened {
            throw AuditTrailError.replacedFile(path)
        }
        if let queue { return queue }
        var options = store.options
        options.readOnly = false
        let opened = try DatabaseQueue(path: path, configuration: Store.configuration(options, lockWait: lockWait))
        queue = opened
        return opened
    }

    /// The PostgreSQL connection, opened now if not yet, its `search_path`
    /// set so that nothing but qualified names reach a table.
    private func postgresDatabase() throws -> PostgresDatabase {
        if let postgres { return postgres }
        guard case let .postgres(url, _, searchPath) = target else { preconditionFailure() }
        let database = try PostgresDatabase(url: url, options: .init(searchPath: searchPath))
        _ = try database.execute("SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', false)")
        postgres = database
        return database
    }
}

/// A row that could be neither written nor spooled.
public struct AuditSpoolError: Error, CustomStringConvertible {
    public var write: any Error
    public var spool: any Error
    public var description: String { "\(write); and it could not be kept for later either: \(spool)" }
}
