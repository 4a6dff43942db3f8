import Foundation
import GRDBSQLite
import Testing
@testable import Store

/// The statement guard reads a statement's compiled program (SetCookie,
/// DropTable: `CSQLiteStore/opsh_sql_guard.h`) because GRDB owns the
/// authorizer of the connections the script's SQL reaches. Here, on a
/// connection of the test's own, SQLite's authorizer is the oracle: every
/// statement it reports as creating, dropping or altering a table, index,
/// view or trigger (TEMP ones too) is one the guard calls a schema change,
/// and refuses on a sandboxed connection; the tables it reports dropped
/// are the ones whose rows are counted as deleted.
@Suite struct StatementGuardTests {
    static let statements = [
        "CREATE TABLE n (a)", "CREATE TABLE IF NOT EXISTS t (a)", "CREATE TEMP TABLE n (a)",
        "CREATE TABLE n AS SELECT * FROM t", "CREATE VIEW n AS SELECT 1", "CREATE TEMP VIEW n AS SELECT 1",
        "CREATE VIEW IF NOT EXISTS v AS SELECT 1", "CREATE INDEX n ON t (a)", "CREATE UNIQUE INDEX IF NOT EXISTS i ON t (a)",
        "CREATE TRIGGER n AFTER UPDATE ON t BEGIN SELECT 1; END",
        "CREATE TEMP TRIGGER n AFTER UPDATE ON main.t BEGIN SELECT 1; END",
        "CREATE TRIGGER IF NOT EXISTS tr AFTER UPDATE ON t BEGIN SELECT 1; END",
        "DROP TABLE t", "DROP TABLE IF EXISTS t", "DROP TABLE IF EXISTS missing", "DROP TABLE temp.tt",
        "DROP VIEW v", "DROP INDEX i", "DROP TRIGGER tr", "DROP TRIGGER IF EXISTS missing", "DROP TRIGGER temp.ttr",
        "ALTER TABLE t RENAME TO n", "ALTER TABLE t RENAME COLUMN a TO n", "ALTER TABLE t ADD COLUMN n",
        "ALTER TABLE t DROP COLUMN b", "/* comment */ create  table \"n\" (a)", "ANALYZE",
        // Not schema changes: the guard must let these run in the sandbox.
        "INSERT INTO t VALUES (1, 2)", "UPDATE t SET a = 1", "DELETE FROM t", "PRAGMA user_version = 3",
        "PRAGMA foreign_keys = ON", "REINDEX", "VACUUM", "SELECT * FROM t", "UPDATE OR REPLACE t SET a = 1",
    ]

    /// What SQLite's authorizer reports while `sql` is prepared: whether it
    /// changes the schema, and the tables it drops.
    final class Oracle {
        var schemaChange = false
        var dropped: [String] = []
    }

    @Test(arguments: statements)
    func theGuardAgreesWithSQLitesAuthorizer(_ sql: String) throws {
        var connection: OpaquePointer?
        #expect(sqlite3_open(":memory:", &connection) == SQLITE_OK)
        defer { sqlite3_close(connection) }
        #expect(sqlite3_exec(connection, """
            CREATE TABLE t (a, b); CREATE INDEX i ON t (a); CREATE VIEW v AS SELECT 1;
            CREATE TRIGGER tr AFTER INSERT ON t BEGIN SELECT 1; END;
            CREATE TEMP TABLE tt (x); CREATE TEMP TRIGGER ttr AFTER INSERT ON main.t BEGIN SELECT 1; END;
            """, nil, nil, nil) == SQLITE_OK)
        let oracle = Oracle()
        sqlite3_set_authorizer(connection, { context, action, first, _, _, _ in
            let oracle = Unmanaged<Oracle>.fromOpaque(context!).takeUnretainedValue()
            switch action {
            case SQLITE_CREATE_INDEX, SQLITE_CREATE_TABLE, SQLITE_CREATE_TEMP_INDEX, SQLITE_CREATE_TEMP_TABLE,
                 SQLITE_CREATE_TEMP_TRIGGER, SQLITE_CREATE_TEMP_VIEW, SQLITE_CREATE_TRIGGER, SQLITE_CREATE_VIEW,
                 SQLITE_DROP_INDEX, SQLITE_DROP_TEMP_INDEX, SQLITE_DROP_TEMP_TABLE, SQLITE_DROP_TEMP_TRIGGER,
                 SQLITE_DROP_TEMP_VIEW, SQLITE_DROP_TRIGGER, SQLITE_DROP_VIEW, SQLITE_ALTER_TABLE, SQLITE_ANALYZE:
                oracle.schemaChange = true
            case SQLITE_DROP_TABLE:
                oracle.schemaChange = true
                if let first { oracle.dropped.append(String(cString: first)) }
            default:
                break
            }
            return SQLITE_OK
        }, Unmanaged.passUnretained(oracle).toOpaque())
        var statement: OpaquePointer?
        #expect(sqlite3_prepare_v2(connection, sql, -1, &statement, nil) == SQLITE_OK, "\(String(cString: sqlite3_errmsg(connection)))")
        sqlite3_set_authorizer(connection, nil, nil)
        defer { sqlite3_finalize(statement) }
        guard let statement, let connection else { return }

        let effects = try TransactionGuard.check(statement, on: connection)
        #expect(effects.changesSchema == oracle.schemaChange || (oracle.schemaChange && sql.contains("IF ")),
                "\(sql): the guard says \(effects.changesSchema), SQLite's authorizer \(oracle.schemaChange)")
        #expect(effects.droppedTables == oracle.dropped.filter { $0 != "tt" }, "\(sql)")
        // On a sandboxed connection every one the authorizer calls a schema
        // change is refused, with the reason.
        TransactionGuard.protect(connection)
        defer { TransactionGuard.unprotect(connection) }
        var refused: String?
        do {
            try TransactionGuard.check(statement, on: connection)
        } catch let failure as SQLFailure {
            refused = failure.message
        }
        // So is a CREATE … IF NOT EXISTS or DROP … IF EXISTS that does
        // nothing now: prepared again after the schema changed, it would.
        if oracle.schemaChange || sql.contains(" IF ") {
            #expect(refused == TransactionGuard.sandboxSchemaRefusal, "\(sql) was not refused in the sandbox")
        } else {
            #expect(refused == nil, "\(sql) was refused in the sandbox: \(refused ?? "")")
        }
    }

    static let temporaryObjects = [
        "CREATE TEMP TABLE projects AS SELECT * FROM t", "CREATE TEMPORARY TABLE \"PROJECTS\" (a)", "CREATE TABLE temp.Schemes (a)",
        "CREATE TEMP VIEW opsh_audit AS SELECT 1", "CREATE TEMP TABLE IF NOT EXISTS builds (a)", "CREATE VIRTUAL TABLE temp.projects USING rtree(id, a, b)",
        // The migrations' records, which opsh's statements name unqualified too (28b).
        "CREATE TEMP TABLE opsh_lua_migrations (identifier, checksum, applied_at)", "CREATE TEMP TABLE GRDB_Migrations (identifier)",
        // Not refused: other names, TEMP triggers and indexes, main's tables.
        "CREATE TEMP TABLE staging (a)", "CREATE TEMP TABLE 'project''s' (a)", "CREATE TEMP VIEW projects_copy AS SELECT 1",
        "CREATE TEMP TRIGGER projects AFTER UPDATE ON main.t BEGIN SELECT 1; END", "CREATE INDEX temp.projects ON tt (x)",
        "CREATE TABLE n (a)", "ALTER TABLE tt ADD COLUMN y", "ALTER TABLE tt RENAME COLUMN x TO y", "ALTER TABLE t RENAME TO n",
    ]

    /// A TEMP table or view is refused on every connection when SQLite's
    /// authorizer names it as one of opsh's tables (case aside: a built-in
    /// table or the migrations' records, 27x and 28b), and not
    /// otherwise; a TEMP table's rename is refused (27x).
    @Test(arguments: temporaryObjects)
    func aTempTableMayNotTakeTheNameOfOpshsTables(_ sql: String) throws {
        var connection: OpaquePointer?
        #expect(sqlite3_open(":memory:", &connection) == SQLITE_OK)
        defer { sqlite3_close(connection) }
        #expect(sqlite3_exec(connection, "CREATE TABLE t (a, b); CREATE TEMP TABLE tt (x);", nil, nil, nil) == SQLITE_OK)
        final class Created { var names: [String] = [] }
        let created = Created()
        sqlite3_set_authorizer(connection, { context, action, first, _, database, _ in
            let created = Unmanaged<Created>.fromOpaque(context!).takeUnretainedValue()
            // `CREATE TABLE temp.x` is reported as CREATE_TABLE of database
            // temp, a virtual table as CREATE_VTABLE.
            let inTemp = database.map { String(cString: $0) == "temp" } ?? false
            let temporary = action == SQLITE_CREATE_TEMP_TABLE || action == SQLITE_CREATE_TEMP_VIEW
                || ((action == SQLITE_CREATE_TABLE || action == SQLITE_CREATE_VTABLE) && inTemp)
            if temporary, let first {
                created.names.append(String(cString: first))
            }
            return SQLITE_OK
        }, Unmanaged.passUnretained(created).toOpaque())
        var statement: OpaquePointer?
        let prepared = sqlite3_prepare_v2(connection, sql, -1, &statement, nil)
        sqlite3_set_authorizer(connection, nil, nil)
        defer { sqlite3_finalize(statement) }
        guard prepared == SQLITE_OK, let statement, let connection else {
            // rtree may be missing from this SQLite.
            #expect(sql.contains("VIRTUAL"), "\(String(cString: sqlite3_errmsg(connection)))")
            return
        }
        var refused: String?
        do {
            try TransactionGuard.check(statement, on: connection)
        } catch let failure as SQLFailure {
            refused = failure.message
        }
        let shadowing = created.names.compactMap { name in
            StoreMigrations.opshTables.first { $0.lowercased() == name.lowercased() }
        }.first
        if let shadowing {
            #expect(refused == TransactionGuard.shadowRefusal(shadowing), "\(sql)")
        } else if sql.hasPrefix("ALTER TABLE tt RENAME TO") {
            #expect(refused == TransactionGuard.temporaryRenameRefusal, "\(sql)")
        } else {
            #expect(refused == nil, "\(sql) was refused: \(refused ?? "")")
        }
        if sql.hasPrefix("CREATE TEMP TABLE IF NOT EXISTS") || sql.contains("VIRTUAL") {
            #expect(shadowing != nil, "the authorizer named no table of opsh's in \(sql)")
        }
    }

    /// Renaming a TEMP table is refused whatever the new name (SQLite's
    /// authorizer does not give it); renaming a table of the file is not.
    @Test func renamingATempTableIsRefused() throws {
        var connection: OpaquePointer?
        #expect(sqlite3_open(":memory:", &connection) == SQLITE_OK)
        defer { sqlite3_close(connection) }
        #expect(sqlite3_exec(connection, "CREATE TABLE t (a, b); CREATE TEMP TABLE tt (x);", nil, nil, nil) == SQLITE_OK)
        for (sql, refusal) in [("ALTER TABLE tt RENAME TO projects", TransactionGuard.temporaryRenameRefusal),
                               ("ALTER TABLE temp.tt RENAME TO staging", TransactionGuard.temporaryRenameRefusal),
                               ("ALTER TABLE t RENAME TO n", nil)] as [(String, String?)] {
            var statement: OpaquePointer?
            #expect(sqlite3_prepare_v2(connection, sql, -1, &statement, nil) == SQLITE_OK)
            defer { sqlite3_finalize(statement) }
            var refused: String?
            do {
                try TransactionGuard.check(statement!, on: connection!)
            } catch let failure as SQLFailure {
                refused = failure.message
            }
            #expect(refused == refusal, "\(sql)")
        }
    }
}
