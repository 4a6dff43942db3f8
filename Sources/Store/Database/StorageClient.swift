import Dispatch
import GRDB
import Synchronization

/// The seam between the core and SQLite, a protocol-witness client
/// (ARCHITECTURE.md, "The engine seam"): a value holding the few
/// operations the core needs — read, write, the file, table observation —
/// whose bodies receive GRDB's `Database`; ``grdb(_:externalChanges:path:)``
/// makes it. (PostgreSQL is the other engine, behind the session's seam,
/// ``DatabaseSession``, not this one.)
///
/// Reads and writes are synchronous: opsh's callers are a Lua thread and
/// job threads, never a UI.
public struct StorageClient: Sendable {
    /// Runs `body` in a read-only transaction (a stable snapshot).
    public var performRead: @Sendable (_ body: (Database) throws -> Void) throws -> Void
    /// Runs `body` in a write transaction, committed when it returns and
    /// rolled back when it throws.
    public var performWrite: @Sendable (_ body: (Database) throws -> Void) throws -> Void
    /// The database file, or nil for an in-memory database.
    public var path: @Sendable () -> String?
    /// Calls `onChange` after each commit that may have changed one of
    /// `tables` (any table when `tables` is empty), including commits of
    /// other processes. Calls arrive on an arbitrary thread and may be
    /// spurious: callers re-fetch and compare.
    public var observeTables: @Sendable (
        _ tables: Set<String>, _ onChange: @escaping @Sendable () -> Void
    ) throws -> StorageCancellable

    public init(
        performRead: @escaping @Sendable (_ body: (Database) throws -> Void) throws -> Void,
        performWrite: @escaping @Sendable (_ body: (Database) throws -> Void) throws -> Void,
        path: @escaping @Sendable () -> String?,
        observeTables: @escaping @Sendable (
            _ tables: Set<String>, _ onChange: @escaping @Sendable () -> Void
        ) throws -> StorageCancellable
    ) {
        self.performRead = performRead
        self.performWrite = performWrite
        self.path = path
        self.observeTables = observeTables
    }

    /// Runs `body` in a read-only transaction and returns its result.
    public func read<T>(_ body: (Database) throws -> T) throws -> T {
        var result: T?
        try performRead { db in result = try body(db) }
        return result!
    }

    /// Runs `body` in a write transaction and returns its result.
    public func write<T>(_ body: (Database) throws -> T) throws -> T {
        var result: T?
        try performWrite { db in result = try body(db) }
        return result!
    }
}

/// Stops an observation when cancelled or deallocated.
public final class StorageCancellable: Sendable {
    private let onCancel: Mutex<(@Sendable () -> Void)?>

    public init(_ onCancel: @escaping @Sendable () -> Void) {
        self.onCancel = Mutex(onCancel)
    }

    /// Stops the observation. Calling it again does nothing.
    public func cancel() {
        let action = onCancel.withLock { action in
            defer { action = nil }
            return action
        }
        action?()
    }

    deinit { cancel() }
}

extension StorageClient {
    /// The live client over a GRDB writer (a `DatabasePool` for files, a
    /// `DatabaseQueue` in memory).
    ///
    /// In-process commits are seen by GRDB's `ValueObservation`; commits of
    /// other processes by `externalChanges`, which polls
    /// `PRAGMA data_version`.
    public static func grdb(
        _ writer: any DatabaseWriter,
        externalChanges: ExternalChangeMonitor?,
        path: String?
    ) -> StorageClient {
        grdb({ writer }, externalChanges: externalChanges, path: path)
    }

    /// The live client over a writer obtained on each call (a store that
    /// connects on first use): what obtaining it throws, each call throws.
    public static func grdb(
        _ writer: @escaping @Sendable () throws -> any DatabaseWriter,
        externalChanges: ExternalChangeMonitor?,
        path: String?
    ) -> StorageClient {
        StorageClient(
            performRead: { body in try writer().read { db in try body(db) } },
            performWrite: { body in try writer().write { db in try body(db) } },
            path: { path },
            observeTables: { tables, onChange in
                try observeTables(in: writer(), externalChanges: externalChanges, tables: tables, onChange: onChange)
            })
    }

    private static func observeTables(
        in writer: any DatabaseWriter,
        externalChanges: ExternalChangeMonitor?,
        tables: Set<String>,
        onChange: @escaping @Sendable () -> Void
    ) throws -> StorageCancellable {
        let region: [any DatabaseRegionConvertible] = tables.isEmpty
            ? [DatabaseRegion.fullDatabase]
            : tables.sorted().map { Table($0) }
        // A ValueObservation of nothing but the region: it fires on each
        // commit that touches it. Its first value is the start, not a change.
        let started = Mutex(false)
        let observation = ValueObservation.tracking(regions: region) { _ in () }
        let inProcess = observation.start(
            in: writer,
            scheduling: .async(onQueue: observationQueue),
            onError: { _ in },
            onChange: { _ in
                let isFirst = started.withLock { started in
                    defer { started = true }
                    return !started
                }
                if isFirst { return }
                onChange()
            })
        let external = externalChanges?.subscribe(onChange)
        return StorageCancellable {
            inProcess.cancel()
            external?.cancel()
        }
    }
}

/// Where observation callbacks of the live client run.
let observationQueue = DispatchQueue(label: "opsh.store.observation")
