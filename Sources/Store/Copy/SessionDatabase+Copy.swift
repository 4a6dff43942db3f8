import Foundation
import GRDB
import GRDBSQLite

/// `db.copy` on SQLite: one prepared INSERT, run for each row in one
/// write (a savepoint inside the open transaction), so that the rows land
/// all or none and pass every rule any write passes (the authorizer, the
/// change counts, `--read-only`'s read-only connection).
extension SessionDatabase {
    public func copy(_ request: CopyRequest) throws -> Int {
        try write { db in
            let columns = request.columns.isEmpty ? try db.columns(in: request.table).map(\.name) : request.columns
            // Quoted as PostgreSQL's COPY quotes them: a keyword is a name on both engines.
            let table = request.table.split(separator: ".").map { quoteIdentifier(String($0)) }.joined(separator: ".")
            let sql = "INSERT INTO \(table) (\(columns.map(quoteIdentifier).joined(separator: ", "))) VALUES (\(Array(repeating: "?", count: columns.count).joined(separator: ", ")))"
            let statement = try db.makeStatement(sql: sql)
            func insert(_ values: [DatabaseValue], at number: Int) throws {
                do {
                    // With their lengths: text keeps every byte, a NUL too (ExactBinding).
                    try statement.bindExactly(values)
                    try statement.execute()
                } catch let error as DatabaseError {
                    throw CopyFailure("\(request.place(number)): \(error.message ?? "\(error.resultCode)")")
                }
            }
            switch request.source {
            case let .rows(rows):
                for (index, row) in rows.enumerated() {
                    try Self.checkWidth(row.count, columns, at: request.place(index + 1))
                    try insert(row.map(\.databaseValue), at: index + 1)
                }
                return rows.count
            case let .csv(path, header):
                var records = CSVRecords(try Self.contents(of: path), delimiter: request.delimiter)
                if header { _ = try records.next() }
                var count = 0
                // Each row is bound and stepped in SQLite's C API: GRDB's
                // execute costs more than the row (BENCHMARKS.md, issue 26).
                // The preupdate hook counts the rows all the same (a dry
                // run's, a chunk's, --max-changes' count, checked after the
                // write); GRDB's observers are told at the end.
                changedOutsideGRDB = true
                while let (line, fields) = try records.next() {
                    try Self.checkWidth(fields.count, columns, at: request.place(line))
                    try Self.insertDirectly(fields, statement.sqliteStatement, connection: db.sqliteConnection, at: request.place(line))
                    count += 1
                    if count % 1024 == 0 { request.progress?.report(records.offset, records.size) }
                }
                sqlite3_reset(statement.sqliteStatement)
                return count
            }
        }
    }

    /// One record's fields bound (NULL for an unquoted empty field, text
    /// with its length) and stepped; SQLite's message on failure.
    static func insertDirectly(_ fields: [String?], _ handle: SQLiteStatement, connection: SQLiteConnection?,
                               at place: @autoclosure () -> String) throws {
        sqlite3_reset(handle)
        for (offset, field) in fields.enumerated() {
            if let field {
                ExactBinding.bind(text: field, to: handle, at: Int32(offset + 1))
            } else {
                sqlite3_bind_null(handle, Int32(offset + 1))
            }
        }
        let code = sqlite3_step(handle)
        guard code == SQLITE_DONE else {
            let message = connection.map { String(cString: sqlite3_errmsg($0)) } ?? "SQLite error \(code)"
            sqlite3_reset(handle)
            throw CopyFailure("\(place()): \(message)")
        }
    }

    /// A row with more or fewer values than columns, said as PostgreSQL says it.
    static func checkWidth(_ count: Int, _ columns: [String], at place: String) throws {
        if count < columns.count {
            throw CopyFailure("\(place), column \(columns[count]): missing data for column \"\(columns[count])\"")
        }
        if count > columns.count {
            throw CopyFailure("\(place): extra data after last expected column (\(columns.count) columns: \(columns.joined(separator: ", ")))")
        }
    }

    static func contents(of path: String) throws -> [UInt8] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw CopyFailure("cannot read \(path)")
        }
        return [UInt8](data)
    }
}
