import Foundation
import GRDB

/// What `restore{ from = FILE, table = T, where = … }` brings back: the
/// rows of one table of an SQLite backup that match a condition and are
/// missing from the database now ("the builds deleted yesterday").
public struct RestoreRequest: Sendable {
    /// The backup: an SQLite file (what `backup()` writes on SQLite).
    public let backupPath: String
    /// As written in SQL, unquoted (``CopyRequest``'s rule).
    public let table: String
    /// An SQL condition on the backup's rows (SQLite's SQL: it runs on the
    /// backup), or nil for all of them.
    public let condition: String?
    /// The values of `condition`'s `?` placeholders.
    public let arguments: [StoreValue]

    public init(backupPath: String, table: String, condition: String?, arguments: [StoreValue]) throws {
        guard CopyRequest.isIdentifier(table, qualified: false) else {
            throw RestoreFailure("the table name \(VisibleName(table)) is not a plain SQL name (letters, digits, _)")
        }
        self.backupPath = backupPath
        self.table = table
        self.condition = condition
        self.arguments = arguments
    }
}

/// What a restore did.
public struct RestoreSummary: Sendable {
    public let table: String
    /// Rows of the backup that matched the condition.
    public let matched: Int
    /// Rows written back.
    public let restored: Int
    /// Matched rows whose key the table has now: left as they are.
    public let alreadyThere: Int
    /// The columns written (the table's columns the backup has).
    public let columns: [String]
}

/// A restore refused or failed, said as the operator needs it.
public struct RestoreFailure: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}

/// Rows back from a backup, as one write of the session: `restore{}`.
///
/// The backup is opened read-only on a connection of its own (SQLite's
/// read-only flag: the condition, the operator's SQL, runs there and can
/// write nothing). The rows that match and whose primary key the table
/// does not have now are written by ``DatabaseSession/copy(_:)``, so they
/// pass every rule any write passes (the chunk's transaction, its
/// confirmation and undo at the prompt, `--dry-run`, `--read-only`,
/// `--max-changes`, the sandbox, the audit) and land all or none. A row
/// the table has now is never overwritten: it is counted as already there.
/// A row written by someone else between the look-up and the write makes
/// the write fail on its key, and nothing is kept.
///
/// Only an SQLite file is read. A PostgreSQL backup is a `pg_dump` file:
/// it is refused with how to restore it (docs/operations.md, "Backups and
/// restore").
public enum Restore {
    public static func run(_ request: RestoreRequest, into session: any DatabaseSession) throws -> RestoreSummary {
        let path = request.backupPath
        guard access(path, R_OK) == 0 else {
            throw RestoreFailure("cannot read the backup \(path): \(String(cString: strerror(errno)))")
        }
        if session.isReadOnly {
            // The engine refuses the write too; this says why first.
            throw RestoreFailure("restore writes rows back, and this session is read-only (--read-only); nothing was restored")
        }
        if session.maintenance.isDatabaseFile(path) {
            throw RestoreFailure("\(path) is the database itself, not a backup of it")
        }
        if try isPostgresDump(path) {
            throw RestoreFailure("\(path) is a pg_dump file (PostgreSQL's backup): restore it with pg_restore into a new database, then copy the rows back with db.copy (docs/operations.md, \"Backups and restore\")")
        }
        let backup = try openBackup(path)
        let (backupColumns, key) = try backupShape(backup, request.table, path: path)
        let presentColumns = try session.read(table: request.table) { connection in
            try connection.fetch("SELECT * FROM \(connection.dialect.quote(request.table)) WHERE 1 = 0", []).columns
        }
        // Columns matched by name, whatever their case (PostgreSQL folds them).
        let present = Set(presentColumns.map { $0.lowercased() })
        let lost = backupColumns.filter { !present.contains($0.lowercased()) }
        guard lost.isEmpty else {
            throw RestoreFailure("the backup's \(request.table) has columns the table no longer has (\(lost.joined(separator: ", "))): their values would be lost; nothing was restored")
        }
        let rows = try matchingRows(backup, request, columns: backupColumns)
        let keyPositions = key.map { name in backupColumns.firstIndex(of: name)! }
        let existing = try existingKeys(session, request.table, key: key, of: rows.map { row in keyPositions.map { row[$0] } })
        let missing = rows.filter { row in !existing.contains(KeyValues(keyPositions.map { row[$0] })) }
        var restored = 0
        if !missing.isEmpty {
            do {
                restored = try session.copy(try CopyRequest(table: request.table, columns: backupColumns, source: .rows(missing)))
            } catch let failure as CopyFailure {
                let text = "\(failure)"
                let hint = text.lowercased().contains("foreign key")
                    ? " (a row refers to one the table it points to does not have: restore those rows first, e.g. builds before buildLogs)"
                    : text.lowercased().contains("unique") || text.lowercased().contains("duplicate")
                        ? " (another process wrote a row with the same key meanwhile: restore again)" : ""
                throw RestoreFailure("\(text)\(hint); nothing was restored")
            }
        }
        return RestoreSummary(table: request.table, matched: rows.count, restored: restored,
                              alreadyThere: rows.count - missing.count, columns: backupColumns)
    }

    /// pg_dump's custom format begins with "PGDMP".
    static func isPostgresDump(_ path: String) throws -> Bool {
        guard let handle = FileHandle(forReadingAtPath: path) else { return false }
        defer { try? handle.close() }
        return try handle.read(upToCount: 5) == Data("PGDMP".utf8)
    }

    static func openBackup(_ path: String) throws -> DatabaseQueue {
        var configuration = Configuration()
        configuration.readonly = true
        configuration.label = "opsh.restore"
        do {
            let queue = try DatabaseQueue(path: path, configuration: configuration)
            _ = try queue.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_schema") }
            return queue
        } catch let error as DatabaseError {
            throw RestoreFailure("\(path) cannot be read as an SQLite database: \(error.message ?? "\(error.resultCode)")")
        }
    }

    /// The backup's columns of `table`, in order, and its primary key.
    static func backupShape(_ backup: DatabaseQueue, _ table: String, path: String) throws -> (columns: [String], key: [String]) {
        try backup.read { db in
            let rows = try Row.fetchAll(db, sql: "SELECT name, pk FROM pragma_table_info(?) ORDER BY cid", arguments: [table])
            guard !rows.isEmpty else {
                let names = try String.fetchAll(db, sql: "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite%' ORDER BY name")
                throw RestoreFailure("the backup \(path) has no table \(table) (it has: \(names.joined(separator: ", ")))")
            }
            let columns = rows.map { $0["name"] as String }
            let key = rows.filter { ($0["pk"] as Int) > 0 }.sorted { ($0["pk"] as Int) < ($1["pk"] as Int) }.map { $0["name"] as String }
            guard !key.isEmpty else {
                throw RestoreFailure("\(table) has no primary key in the backup: restore cannot tell which of its rows the table has now")
            }
            return (columns, key)
        }
    }

    static func matchingRows(_ backup: DatabaseQueue, _ request: RestoreRequest, columns: [String]) throws -> [[StoreValue]] {
        let sql = "SELECT \(columns.map(quoteIdentifier).joined(separator: ", ")) FROM \(quoteIdentifier(request.table))"
            + (request.condition.map { " WHERE (\($0)\n)" } ?? "")
        do {
            return try backup.read { db in
                let statement = try db.makeStatement(sql: sql)
                try statement.setArguments(StatementArguments(request.arguments.map(\.databaseValue)))
                return try Row.fetchAll(statement).map { row in (0..<row.count).map { StoreValue(row[$0] as DatabaseValue) } }
            }
        } catch let error as DatabaseError {
            throw RestoreFailure("the condition did not run on the backup: \(error.message ?? "\(error.resultCode)") in: \(error.sql ?? sql)")
        }
    }

    /// The keys among `keys` that the table has now, looked up in batches.
    static func existingKeys(_ session: any DatabaseSession, _ table: String, key: [String], of keys: [[StoreValue]]) throws -> Set<KeyValues> {
        var found: Set<KeyValues> = []
        let batch = max(1, 500 / key.count)
        try session.read(table: table) { connection in
            let quoted = key.map(connection.dialect.quote)
            let tuple = key.count == 1 ? "?" : "(" + key.map { _ in "?" }.joined(separator: ", ") + ")"
            let columns = key.count == 1 ? quoted[0] : "(" + quoted.joined(separator: ", ") + ")"
            var start = 0
            while start < keys.count {
                let slice = keys[start..<min(start + batch, keys.count)]
                let sql = "SELECT \(quoted.joined(separator: ", ")) FROM \(connection.dialect.quote(table)) WHERE \(columns) IN ("
                    + Array(repeating: tuple, count: slice.count).joined(separator: ", ") + ")"
                for row in try connection.fetch(sql, slice.flatMap { $0 }).rows { found.insert(KeyValues(row)) }
                start += batch
            }
        }
        return found
    }

    /// A row's key, compared across engines (an integer key read back as a
    /// real is the same key).
    struct KeyValues: Hashable {
        let parts: [String]
        init(_ values: [StoreValue]) {
            parts = values.map { value in
                switch value {
                case let .integer(number): "i\(number)"
                case let .real(number) where number == number.rounded() && abs(number) < 9e15: "i\(Int64(number))"
                case let .real(number): "r\(number)"
                case let .text(text): "t" + text
                case let .blob(bytes): "b" + bytes.map { String($0, radix: 16) }.joined(separator: ".")
                case .null: "n"
                default: "?\(value)"
                }
            }
        }
    }
}
