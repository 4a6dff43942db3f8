import Foundation
import GRDBSQLite

/// The store's read route for a query key of one statement read from Swift
/// (``Store/value(of:)``): a read-only connection of its own on SQLite's C
/// API, its statements prepared once and kept, each read a statement alone
/// (SQLite makes one statement its own snapshot: no BEGIN/COMMIT, as a
/// lookup outside a transaction is).
///
/// GRDB's reader pool cost a dispatch to a queue, a pool checkout and a
/// `Row` copy per read; a key read is the route a backend's hot path takes,
/// measured against C in BENCHMARKS.md ("Storage core"). Reads from several
/// threads take turns (a lock): the connection is NOMUTEX.
final class KeyReader: @unchecked Sendable {
    private let connection: ReadConnection
    private let lock = NSLock()
    private var statements: [String: OpaquePointer] = [:]

    init(store: Store, path: String) throws {
        connection = try ReadConnection(path: store.readingName ?? path, lockWait: store.lockWait,
                                        beforeFirstUse: { try store.connect() })
    }

    deinit {
        connection.lending { _ in for statement in statements.values { sqlite3_finalize(statement) } }
    }

    /// Runs `statement` as ``QueryStatement/Shape`` says (what every
    /// engine's fetch of a key's statement returns).
    func fetch(_ statement: QueryStatement) throws -> StoreValue {
        lock.lock()
        defer { lock.unlock() }
        try connection.ready()
        return try connection.lending { handle in
            let prepared = try self.prepared(statement.sql, on: handle)
            defer {
                sqlite3_reset(prepared)
                sqlite3_clear_bindings(prepared)
            }
            for (offset, value) in statement.values.enumerated() {
                ExactBinding.bind(value.databaseValue, to: prepared, at: Int32(offset + 1))
            }
            let count = sqlite3_column_count(prepared)
            var names: [String]?
            var results: [StoreValue] = []
            while true {
                let code = sqlite3_step(prepared)
                if code == SQLITE_DONE { break }
                guard code == SQLITE_ROW else { throw SQLFailure(lastErrorOf: handle, sql: statement.sql) }
                switch statement.shape {
                case .ids:
                    results.append(ExactBinding.value(prepared, 0))
                case .row, .rows:
                    let columns = names ?? (0..<count).map { String(cString: sqlite3_column_name(prepared, $0)) }
                    names = columns
                    results.append(.object((0..<count).map { StoreValue.Field(columns[Int($0)], ExactBinding.value(prepared, $0)) }))
                }
                if statement.shape == .row { break }
            }
            switch statement.shape {
            case .row: return results.first ?? .null
            case .rows, .ids: return .array(results)
            }
        }
    }

    private func prepared(_ sql: String, on handle: OpaquePointer) throws -> OpaquePointer {
        if let statement = statements[sql] { return statement }
        let statement = try ReadConnection.prepare(sql, on: handle)
        statements[sql] = statement
        return statement
    }
}
