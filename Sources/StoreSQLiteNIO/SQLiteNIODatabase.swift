#if SQLiteNIO
import Dispatch
import Foundation
import NIOCore
import SQLiteNIO
import Store
import Synchronization

// The second SQLite engine of the seed-002 witness design: SQLite through
// vapor/sqlite-nio, compiled only with the package trait `SQLiteNIO`
// (ARCHITECTURE.md, "The second SQLite engine"). It satisfies
// ``RepositoryConnection`` on a file opsh's migrations made, so every rule
// written over the seam runs on it, and ``RepositoryClient/sqliteNIO(path:externalChangePollInterval:)``
// gives the witness its implementation. sqlite-nio is asynchronous (event
// loop futures); opsh's callers are synchronous threads, so each call waits
// for its future, never on an event loop.

/// One sqlite-nio connection to an opsh database file, as a
/// ``RepositoryConnection``, with the witness's transactions and table
/// observation.
public final class SQLiteNIODatabase: RepositoryConnection, @unchecked Sendable {
    public let path: String
    let connection: SQLiteConnection

    /// One transaction at a time on the one connection; a read or write
    /// started inside another on the same thread nests as a savepoint.
    private let transactionLock = NSRecursiveLock()
    private var depth = 0
    /// Tables changed by the open transaction (sqlite-nio's update hook);
    /// told to the observers when it commits.
    private let changedTables = Mutex<Set<String>>([])
    private let observers = Mutex<[Int: (tables: Set<String>, onChange: @Sendable () -> Void)]>([:])
    private let nextObserver = Atomic<Int>(0)
    private let externalChanges: ExternalChangeMonitor

    /// Opens an existing database file (one opsh created: this engine does
    /// not migrate). Waits at most `busyTimeout` seconds for another
    /// writer's lock, as the GRDB engine does (sqlite-nio's own busy
    /// handler would retry for ever).
    public init(path: String, busyTimeout: TimeInterval = 5, externalChangePollInterval: TimeInterval = 0.1) throws {
        // sqlite-nio opens with SQLITE_OPEN_CREATE: a mistyped path would
        // become a new empty database. opsh opens only what exists.
        guard FileManager.default.fileExists(atPath: path) else {
            throw StoreError.refused(reason: "no database at \(path) (the SQLiteNIO engine opens existing opsh databases; create one with opsh --create)")
        }
        self.path = path
        self.connection = try SQLiteConnection.open(storage: .file(path: path)).wait()
        self.externalChanges = ExternalChangeMonitor(path: path, interval: externalChangePollInterval)
        do {
            _ = try connection.query("PRAGMA busy_timeout = \(Int(busyTimeout * 1000))").wait()
            _ = try connection.query("PRAGMA foreign_keys = ON").wait()
            let connection = connection
            _ = try Self.waitFor {
                try await connection.addUpdateObserver(lifetime: .pinned) { [weak self] event in
                    self?.changedTables.withLock { _ = $0.insert(event.table) }
                }
            }
        } catch {
            try? connection.close().wait()
            throw Self.storeError(error, sql: "opening \(path)")
        }
    }

    deinit {
        try? connection.close().wait()
    }

    // MARK: RepositoryConnection

    public var dialect: SQLDialect { .sqlite }

    public func fetch(_ sql: String, _ arguments: [StoreValue]) throws -> (columns: [String], rows: [[StoreValue]]) {
        let rows = try run(sql, arguments)
        guard let first = rows.first else { return (try columnNames(of: sql, arguments), []) }
        return (first.columns.map(\.name), rows.map { row in row.columns.map { Self.storeValue($0.data) } })
    }

    /// The column names of a query that returned no row. sqlite-nio names
    /// columns only on rows, so the query is asked again as the right side
    /// of a LEFT JOIN, which gives one row of NULLs under its names (what
    /// analytics reports show for an empty period). Only a SELECT is valid
    /// there: any other statement is a syntax error, runs no second time,
    /// and has no columns.
    private func columnNames(of sql: String, _ arguments: [StoreValue]) throws -> [String] {
        guard let row = try? run("SELECT opsh_query.* FROM (SELECT 1) LEFT JOIN (\n\(sql)\n) AS opsh_query", arguments).first else {
            return []
        }
        return row.columns.map(\.name)
    }

    public func execute(_ sql: String, _ arguments: [StoreValue]) throws -> Int {
        _ = try run(sql, arguments)
        // sqlite-nio does not expose sqlite3_changes(); SQLite's changes()
        // says the same of the last statement on this connection, which no
        // other caller uses meanwhile (the transaction lock).
        return Int(try value("SELECT changes()")?.integerValue ?? 0)
    }

    public func insert(_ sql: String, _ arguments: [StoreValue], keyColumn: String) throws -> Int64? {
        _ = try run(sql, arguments)
        return Int64(try connection.lastAutoincrementID().wait())
    }

    public func tableSpec(_ table: String, primaryKey: String, jsonColumns: [String], booleans: Set<String>) throws -> TableSpec {
        let columns = try fetch("SELECT name, type, \"notnull\", dflt_value FROM pragma_table_info(?)", [.text(table)]).rows
            .map { row -> ColumnSpec in
                let name = Self.text(row[0])
                return ColumnSpec(name: name,
                                  kind: TableSpec.kind(of: name, declared: Self.text(row[1]), jsonColumns: jsonColumns, booleans: booleans),
                                  notNull: row[2] == .integer(1), defaultSQL: row[3] == .null ? nil : Self.text(row[3]),
                                  isPrimaryKey: name == primaryKey)
            }
        guard !columns.isEmpty else { throw StoreError.refused(reason: "no table \(table) in \(path)") }
        // Single-column foreign keys only, as the GRDB engine reads them.
        let keys = try fetch("SELECT id, \"table\", \"from\", \"to\" FROM pragma_foreign_key_list(?) ORDER BY id, seq", [.text(table)]).rows
        let byConstraint = Dictionary(grouping: keys) { $0[0] }
        let references = byConstraint.values.filter { $0.count == 1 }.map { $0[0] }
            .sorted { Self.text($0[2]) < Self.text($1[2]) }
            .map { (column: Self.text($0[2]), table: Self.text($0[1]), key: Self.text($0[3])) }
        return TableSpec(table: table, columns: columns, references: references)
    }

    public func isValidJSON(_ text: String) throws -> Bool {
        try fetch("SELECT json_valid(?)", [.text(text)]).rows.first?.first == .integer(1)
    }

    // MARK: Transactions

    /// Runs `body` in a read transaction that SQLite itself keeps from
    /// writing (`PRAGMA query_only`), on one snapshot.
    public func read<T>(_ body: (SQLiteNIODatabase) throws -> T) throws -> T {
        try transaction(write: false) { try body(self) }
    }

    /// Runs `body` in a write transaction (`BEGIN IMMEDIATE`: the write
    /// lock is taken at the start, so the transaction cannot fail later
    /// for want of it), committed when it returns, rolled back when it
    /// throws; observers of the tables it changed are told after the
    /// commit.
    public func write<T>(_ body: (SQLiteNIODatabase) throws -> T) throws -> T {
        let result = try transaction(write: true) { try body(self) }
        notifyCommitted()
        return result
    }

    private func transaction<T>(write: Bool, _ body: () throws -> T) throws -> T {
        transactionLock.lock()
        defer { transactionLock.unlock() }
        depth += 1
        defer { depth -= 1 }
        if depth > 1 {
            // Nested: a savepoint of the open transaction.
            let name = "opsh_nio_\(depth)"
            _ = try run("SAVEPOINT \(name)", [])
            do {
                let result = try body()
                _ = try run("RELEASE \(name)", [])
                return result
            } catch {
                _ = try? run("ROLLBACK TO \(name)", [])
                _ = try? run("RELEASE \(name)", [])
                throw error
            }
        }
        if !write { _ = try run("PRAGMA query_only = ON", []) }
        defer { if !write { _ = try? run("PRAGMA query_only = OFF", []) } }
        changedTables.withLock { $0.removeAll() }
        _ = try run(write ? "BEGIN IMMEDIATE" : "BEGIN DEFERRED", [])
        do {
            let result = try body()
            _ = try run("COMMIT", [])
            return result
        } catch {
            _ = try? run("ROLLBACK", [])
            changedTables.withLock { $0.removeAll() }
            throw error
        }
    }

    // MARK: Observation

    /// Calls `onChange` after each commit of this connection that changed
    /// one of `tables` (any when empty), and after other connections'
    /// and processes' commits (``ExternalChangeMonitor``: it cannot tell
    /// which tables, so those calls may be spurious).
    public func observe(_ tables: Set<String>, _ onChange: @escaping @Sendable () -> Void) -> StorageCancellable {
        let id = nextObserver.add(1, ordering: .relaxed).oldValue
        observers.withLock { $0[id] = (tables, onChange) }
        let external = externalChanges.subscribe(onChange)
        return StorageCancellable { [weak self] in
            external.cancel()
            self?.observers.withLock { _ = $0.removeValue(forKey: id) }
        }
    }

    private func notifyCommitted() {
        let changed = changedTables.withLock { tables -> Set<String> in
            defer { tables.removeAll() }
            return tables
        }
        guard !changed.isEmpty else { return }
        let lowercased = Set(changed.map { $0.lowercased() })
        let due = observers.withLock { observers in
            observers.values.filter { $0.tables.isEmpty || !lowercased.isDisjoint(with: $0.tables.map { $0.lowercased() }) }
                .map(\.onChange)
        }
        for onChange in due { Self.observationQueue.async { onChange() } }
    }

    // MARK: Statements

    private func run(_ sql: String, _ arguments: [StoreValue]) throws -> [SQLiteRow] {
        do {
            return try connection.query(sql, arguments.map(Self.sqliteData)).wait()
        } catch {
            throw Self.storeError(error, sql: sql)
        }
    }

    /// sqlite-nio's errors as the repositories report SQLite's: the
    /// message and the statement.
    private static func storeError(_ error: any Error, sql: String) -> any Error {
        guard let error = error as? SQLiteError else { return error }
        return StoreError.refused(reason: "\(error.message) (in: \(sql))")
    }

    static func storeValue(_ data: SQLiteData) -> StoreValue {
        switch data {
        case .integer(let number): .integer(Int64(number))
        case .float(let number): .real(number)
        case .text(let text): .text(text)
        case .blob(let buffer): .blob(Array(buffer.readableBytesView))
        case .null: .null
        }
    }

    static func sqliteData(_ value: StoreValue) -> SQLiteData {
        switch value {
        case .integer(let number): .integer(SQLiteInt64(number))
        case .real(let number): .float(number)
        case .text(let text): .text(text)
        case .blob(let bytes): .blob(ByteBuffer(bytes: bytes))
        case .null, .array, .object: .null
        }
    }

    private static func text(_ value: StoreValue) -> String {
        if case let .text(text) = value { return text }
        return ""
    }

    /// Where observers are called, off the committing thread.
    private static let observationQueue = DispatchQueue(label: "opsh.store.sqlite-nio.observation")

    /// Waits on this (non-async) thread for sqlite-nio's async-only calls.
    /// The task runs on a queue of its own, not Swift's cooperative pool:
    /// a caller blocked here may itself hold one of that pool's few
    /// threads (a test, a task), and waiting for the pool from it can
    /// deadlock.
    private static func waitFor<T: Sendable>(_ operation: @escaping @Sendable () async throws -> T) throws -> T {
        let outcome = Mutex<Result<T, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Task(executorPreference: BlockingCallExecutor.shared) {
            let result: Result<T, any Error>
            do { result = .success(try await operation()) } catch { result = .failure(error) }
            outcome.withLock { $0 = result }
            done.signal()
        }
        done.wait()
        return try outcome.withLock { $0! }.get()
    }
}

/// Runs the tasks of ``SQLiteNIODatabase``'s waits on a serial queue.
private final class BlockingCallExecutor: TaskExecutor {
    static let shared = BlockingCallExecutor()
    private let queue = DispatchQueue(label: "opsh.store.sqlite-nio.waits")

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}

extension RepositoryClient {
    /// SQLite through vapor/sqlite-nio, on an existing opsh database file
    /// (built with the package trait `SQLiteNIO`).
    public static func sqliteNIO(path: String, externalChangePollInterval: TimeInterval = 0.1) throws -> RepositoryClient {
        sqliteNIO(try SQLiteNIODatabase(path: path, externalChangePollInterval: externalChangePollInterval))
    }

    /// The witness over an open sqlite-nio connection.
    public static func sqliteNIO(_ database: SQLiteNIODatabase) -> RepositoryClient {
        RepositoryClient(
            performRead: { body in try database.read { try body($0) } },
            performWrite: { body in try database.write { try body($0) } },
            path: { database.path },
            observeTables: { tables, onChange in database.observe(tables, onChange) })
    }
}
#endif
