import GRDB
import GRDBSQLite

/// The values a query is run with: by position, or by name (`:name`).
public enum QueryArguments: Sendable {
    case positional([StoreValue])
    case named([String: StoreValue])

    var statementArguments: StatementArguments {
        switch self {
        case let .positional(values): StatementArguments(values.map(\.databaseValue))
        case let .named(values): StatementArguments(values.mapValues { $0.databaseValue })
        }
    }
}

/// What a query reads: its columns, and the tables whose changes can
/// change its result.
public struct QueryInspection: Sendable {
    public let columns: [String]
    public let tables: Set<String>
}

/// Why a query cannot be observed.
public enum QueryInspectionError: Error, CustomStringConvertible {
    /// It writes, or is an EXPLAIN.
    case notAQuery
    /// SQLite refused it (syntax, a missing table, the wrong arguments).
    case refused(String)

    public var description: String {
        switch self {
        case .notAQuery: "not a query"
        case let .refused(message): message
        }
    }
}

extension SessionDatabase {
    /// Prepares `sql` without running it, to check that it is one query
    /// that script SQL may run (ARCHITECTURE.md, decision 5) with these
    /// arguments, and to learn its columns and the tables it reads (through
    /// SQLite's authorizer, as GRDB's region).
    public func inspectQuery(_ sql: String, arguments: QueryArguments) throws -> QueryInspection {
        // SQLite's prepare stops at a NUL: another query would be inspected.
        if let reason = SQLText.refusal(sql) { throw QueryInspectionError.refused(reason) }
        do {
            return try unsafeRead { db in
                let statement = try db.makeStatement(sql: sql)
                try TransactionGuard.check(statement.sqliteStatement, on: db.sqliteConnection!)
                guard statement.isReadonly, sqlite3_stmt_isexplain(statement.sqliteStatement) == 0 else {
                    throw QueryInspectionError.notAQuery
                }
                try statement.validateArguments(arguments.statementArguments)
                let region = statement.databaseRegion
                var tables: Set<String> = []
                if !region.isFullDatabase {
                    for table in try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table'")
                    where region.isModified(byEventsOfKind: .insert(tableName: table)) {
                        tables.insert(table)
                    }
                }
                return QueryInspection(columns: statement.columnNames, tables: tables)
            }
        } catch let error as DatabaseError {
            throw QueryInspectionError.refused(error.message ?? "\(error.resultCode)")
        }
    }
}

extension SessionDatabase {
    /// `Store.check` where the session reads (its transaction's connection
    /// inside one, so it sees the transaction's own writes).
    public func check() throws -> IntegrityReport {
        try read { db in try Store.check(db) }
    }

    /// `Store.statistics` where the session reads.
    public func statistics() throws -> DatabaseStatistics {
        try read { db in try store.statistics(db) }
    }
}
