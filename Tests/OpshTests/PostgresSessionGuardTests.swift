import Foundation
import Glibc
import Testing

/// The PostgreSQL session's guards through the real executable (issue 24,
/// section PostgreSQL): the promises only PostgreSQL has to keep.
/// Transaction control in the spellings only PostgreSQL has (two-phase
/// commit among them), `--read-only` and `--dry-run` against what the
/// server's own transaction does not hold back (large objects,
/// notifications, dblink, postgres_fdw), the server's lock holders at the
/// prompt, and connecting to a server over the network. The promises SQLite
/// makes too are in ``TransactionControlTests``, one body for both engines.
@Suite struct PostgresSessionGuardTests: PostgresSuite {
    let server: PostgresServer
    let sandbox: Sandbox

    /// A server that cannot start fails each test with its reason.
    init() throws {
        server = try PostgresServer.shared()
        sandbox = try Sandbox()
    }

    static var refusal: String { TransactionControlTests.refusal }

    /// A database with opsh's schema and one telemetry row.
    func databaseWithARow() throws -> TestDatabase {
        let db = TestDatabase(engine: .postgresql, db: try createdDatabase())
        try db.sql("INSERT INTO telemetry (event, created_at) VALUES ('kept', 1)")
        return db
    }

    /// Prepared transactions of `db`'s database (other tests share the server).
    func preparedTransactions(in db: TestDatabase) throws -> Int {
        Int(try db.sql("SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()")) ?? -1
    }

    /// PostgreSQL's own spellings of transaction control, and the ways
    /// around a transaction block it has (a DO block, a procedure, opsh's
    /// savepoints by name): none commits what db.transaction did, each is
    /// refused with the reason, and no prepared transaction is left.
    @Test func postgresSpellingsCommitNothing() throws {
        let db = try databaseWithARow()
        try db.sql("CREATE PROCEDURE commits_inside() LANGUAGE plpgsql AS $$ BEGIN COMMIT; END $$")
        let spellings = [
            "COMMIT AND CHAIN", "/* x */ commit work and chain", "ABORT", "abort transaction", "START TRANSACTION",
            "RELEASE SAVEPOINT opsh_statement", "ROLLBACK TO SAVEPOINT opsh_statement", "DO $$ BEGIN COMMIT; END $$",
            "CALL commits_inside()", "ROLLBACK AND CHAIN",
            // Last: before the guard, the prepared transaction held the
            // deleted row's lock, and every later delete waited for it.
            "PREPARE TRANSACTION 'opsh_attack'",
        ]
        let results = try TransactionControlTests.attempts(spellings, on: db, in: sandbox, timeout: 60)
        for (sql, result) in zip(spellings, results) {
            #expect(result.rows == 1, "\(sql.debugDescription) committed the delete: \(result.outcome)")
            #expect(result.outcome.contains(Self.refusal), "\(sql.debugDescription): \(result.outcome)")
        }
        #expect(try preparedTransactions(in: db) == 0)
        #expect(try db.count("telemetry") == 1)
    }

    /// A script's PREPARE TRANSACTION inside db.transaction: refused, and
    /// no prepared transaction outlives opsh holding the rows' locks. (On
    /// opsh's own tables the server refuses it anyway, since their triggers
    /// NOTIFY; a table of the operator's has none.)
    @Test func prepareTransactionLeavesNothingPrepared() throws {
        let db = TestDatabase(engine: .postgresql, db: try createdDatabase())
        try db.sql("CREATE TABLE notes (body text); INSERT INTO notes VALUES ('kept')")
        let run = try opsh(db.db, ["--timeout", "60", "-e", """
            print(select(2, pcall(db.transaction, function()
              db.exec('DELETE FROM notes')
              db.exec("PREPARE TRANSACTION 'opsh_attack'")
            end)))
            db.exec("INSERT INTO notes VALUES ('after')")
            """])
        let prepared = try preparedTransactions(in: db)
        if prepared > 0 { try db.sql("ROLLBACK PREPARED 'opsh_attack'") }
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains(Self.refusal), "\(run.stdout)")
        #expect(prepared == 0, "a script's PREPARE TRANSACTION left \(prepared) prepared transaction(s)")
        #expect(try db.sql("SELECT string_agg(body, ',' ORDER BY body) FROM notes") == "after,kept")

        // Control: on this server, the same statements in psql prepare a
        // transaction that outlives its session, holding its locks.
        try db.sql("BEGIN; DELETE FROM notes; PREPARE TRANSACTION 'opsh_control'")
        #expect(try preparedTransactions(in: db) == 1)
        try db.sql("ROLLBACK PREPARED 'opsh_control'")
        #expect(try db.count("notes") == 2)
    }

    // opsh's savepoints by name, and a COMMIT in a shell chunk: both
    // engines in TransactionControlTests.

    /// `--read-only` keeps nothing a statement does, though the server's
    /// read-only transaction lets large objects, two-phase commit and
    /// NOTIFY through: each is refused with the reason, and nothing is
    /// left or sent.
    @Test func readOnlyKeepsNoLargeObjectNoPreparedTransactionNoNotification() throws {
        let db = try databaseWithARow()
        let existing = try db.sql("SELECT lo_from_bytea(0, 'kept')")
        let listener = try sandbox.start(server.tool("psql"), ["-X", "-q", "-d", db.db], stdin: "LISTEN opsh_test;\n", keepingStdinOpen: true)
        #expect(try waitUntil(10) {
            try db.sql("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN opsh_test%' AND state = 'idle'") == "1"
        })
        let attacks = [
            ("SELECT lo_from_bytea(0, 'new')", "--read-only"),
            ("SELECT lo_unlink(\(existing))", "--read-only"),
            ("PREPARE TRANSACTION 'read_only'", Self.refusal),
            ("NOTIFY opsh_test, 'read-only'", "--read-only"),
            ("SELECT pg_notify('opsh_test', 'read-only too')", ""),
        ]
        let lua = "local function try(f, ...) local ok, err = pcall(f, ...); print(ok and 'ran' or (tostring(err):gsub('\\n', ' '))) end\n"
            + attacks.map { "try(db.exec, [[\($0.0)]])" }.joined(separator: "\n")
            + "\ntry(db.transaction, function() db.value([[SELECT lo_from_bytea(0, 'in a transaction')]]) end)"
        let run = try opsh(db.db, ["--read-only", "--timeout", "60", "-e", lua])
        #expect(run.status == 0, "\(run.stderr)")
        let lines = run.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == attacks.count + 1, "\(run.stdout)")
        for (index, (sql, reason)) in attacks.enumerated() where !reason.isEmpty && index < lines.count {
            #expect(lines[index].contains(reason), "\(sql): \(lines[index])")
        }
        #expect(lines.last?.contains("--read-only") == true, "\(run.stdout)")
        #expect(try db.sql("SELECT count(*) FROM pg_largeobject_metadata") == "1")
        #expect(try db.sql("SELECT count(*) FROM pg_largeobject_metadata WHERE oid = \(existing)") == "1")
        #expect(try preparedTransactions(in: db) == 0)
        if try preparedTransactions(in: db) > 0 { try db.sql("ROLLBACK PREPARED 'read_only'") }

        // Control: without --read-only the large object is made and the
        // notification sent; the listener hears only this one (the
        // read-only run's would have come first).
        let writable = try opsh(db.db, ["-e", "db.exec(\"SELECT lo_from_bytea(0, 'new')\"); db.exec(\"NOTIFY opsh_test, 'written'\")"])
        #expect(writable.status == 0, "\(writable.stderr)")
        #expect(try db.sql("SELECT count(*) FROM pg_largeobject_metadata") == "2")
        listener.write("SELECT 1;\n")
        listener.closeInput()
        let heard = listener.finish().stdout
        #expect(heard.contains("payload \"written\""), "\(heard)")
        #expect(!heard.contains("read-only"), "\(heard)")
    }

    /// dblink writes through a connection of its own, which neither the
    /// read-only transaction nor the dry run's rollback reaches: with the
    /// extension in the database (by the catalog) both are refused before
    /// the script runs. Without the flags, the same call writes.
    @Test func dblinkIsRefusedUnderReadOnlyAndDryRun() throws {
        let db = try databaseWithARow()
        try db.sql("CREATE EXTENSION dblink")
        let role = db.db.dropFirst("postgresql://".count).prefix { $0 != "@" }
        let target = "host=\(server.directory) dbname=\(PostgresServer.databaseName(of: db.db)) user=\(role)"
        let write = "db.value(\"SELECT dblink_exec('\(target)', 'INSERT INTO telemetry (event, created_at) VALUES (''through dblink'', 2)')\")"
        for flag in ["--read-only", "--dry-run"] {
            let run = try opsh(db.db, [flag, "-e", write])
            #expect(run.status == 3, "\(flag): \(run.stderr)")
            #expect(run.stderr.contains("dblink") && run.stderr.contains(flag), "\(flag): \(run.stderr)")
            #expect(try db.count("telemetry") == 1, "\(flag)")
        }
        // Control: without them, the call writes through its own connection.
        let run = try opsh(db.db, ["-e", write])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(try db.count("telemetry") == 2)
    }

    /// postgres_fdw writes in a remote transaction that follows the local
    /// one: a dry run's rollback takes them back too, so it is not refused.
    @Test func postgresFdwWritesAreRolledBackWithTheDryRun() throws {
        let db = try databaseWithARow()
        let role = db.db.dropFirst("postgresql://".count).prefix { $0 != "@" }
        try db.sql("""
            CREATE EXTENSION postgres_fdw;
            CREATE SERVER loop FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '\(server.directory)', dbname '\(PostgresServer.databaseName(of: db.db))');
            CREATE USER MAPPING FOR CURRENT_USER SERVER loop OPTIONS (user '\(role)');
            CREATE FOREIGN TABLE remote_telemetry (event text, created_at double precision) SERVER loop OPTIONS (table_name 'telemetry');
            """)
        let write = "db.exec(\"INSERT INTO remote_telemetry VALUES ('through fdw', 2)\")"
        let dry = try opsh(db.db, ["--dry-run", "-e", write])
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(try db.count("telemetry") == 1)
        let readOnly = try opsh(db.db, ["--read-only", "-e", write])
        #expect(readOnly.status == 1)
        #expect(readOnly.stderr.contains("25006"), "\(readOnly.stderr)")
        // Control: without --dry-run the row lands, through the foreign table.
        let run = try opsh(db.db, ["-e", write])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(try db.count("telemetry") == 2)
    }

    /// `.locks` at the shell's prompt names the sessions holding locks on
    /// the database's tables, as SQLite's names the processes holding the
    /// file's; the lock error's hint points at it.
    @Test func dotLocksNamesTheSessionsHoldingLocks() throws {
        let db = try databaseWithARow()
        let terminal = try PseudoTerminal(arguments: ["--db", db.db, "--busy-timeout", "0.5"], environment: sandbox.environment)
        terminal.expect("> ")
        // Control: nothing held yet.
        terminal.send(".locks\r")
        terminal.expect("no other session holds a lock")
        terminal.expect("> ")
        let holder = try sandbox.start(server.tool("psql"), ["-X", "-q", "-d", db.db], stdin: "BEGIN;\nLOCK TABLE telemetry;\n",
                                       keepingStdinOpen: true)
        #expect(try waitUntil(10) {
            try db.sql("SELECT count(*) FROM pg_locks WHERE relation = 'telemetry'::regclass AND mode = 'AccessExclusiveLock' AND granted") == "1"
        })
        let pid = try db.sql("SELECT pid FROM pg_locks WHERE relation = 'telemetry'::regclass AND mode = 'AccessExclusiveLock'")
        // The busy timeout is the session's default: RESET returns to it.
        terminal.send("db.exec('RESET ALL')\r")
        terminal.expect("> ")
        terminal.send("db.exec('DELETE FROM telemetry')\r")
        terminal.expect("database is locked", timeout: 20)
        terminal.expect("session \(pid) (psql")
        terminal.expect(".locks shows the sessions holding locks now")
        terminal.expect("> ")
        terminal.send(".locks\r")
        terminal.expect("locks held by session \(pid) (psql")
        terminal.expect("AccessExclusiveLock on telemetry")
        terminal.expect("> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit() == 0)
        holder.write("ROLLBACK;\n")
        holder.closeInput()
        _ = holder.finish()
        #expect(try db.count("telemetry") == 1)
    }

    /// `.locks` names the sessions holding locks on the database's own
    /// tables: a session whose only locks are on the server's catalog (an
    /// autovacuum worker analysing pg_attribute, a session creating a
    /// temporary table) is not one, however busy the server. Control: the
    /// same session locking telemetry is named.
    @Test func dotLocksLeavesOutLocksOnTheCatalogOnly() throws {
        let db = try databaseWithARow()
        let holder = try sandbox.start(server.tool("psql"), ["-X", "-q", "-d", db.db],
                                       stdin: "BEGIN;\nCREATE TEMP TABLE scratch (a int);\nSET application_name = 'catalog-only';\n",
                                       keepingStdinOpen: true)
        defer {
            holder.write("ROLLBACK;\n")
            holder.closeInput()
            _ = holder.finish()
        }
        #expect(try waitUntil(10) {
            try db.sql("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'catalog-only' AND state = 'idle in transaction'") == "1"
        })
        #expect(try db.sql("""
            SELECT count(*) > 0 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
            WHERE a.application_name = 'catalog-only' AND l.locktype = 'relation' AND l.mode <> 'AccessShareLock'
            """) == "t")
        let terminal = try PseudoTerminal(arguments: ["--db", db.db], environment: sandbox.environment)
        terminal.expect("> ")
        terminal.send(".locks\r")
        terminal.expect("> ")
        #expect(!terminal.transcript.contains("catalog-only"), "\(terminal.transcript)")
        // Control: the same session locking one of the database's tables is named.
        holder.write("LOCK TABLE telemetry IN SHARE MODE;\n")
        let named = waitUntil(10) {
            terminal.send(".locks\r")
            return terminal.sees("(catalog-only", timeout: 0.5)
        }
        #expect(named, "\(terminal.transcript)")
        // The .locks typed while one ran are answered first; Ctrl-D only at
        // an idle prompt (typed meanwhile, the terminal's cooked mode eats it).
        terminal.send("print('idle' .. 'prompt')\r")
        terminal.expect("idleprompt")
        terminal.expect("> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit() == 0)
    }

    // MARK: Connecting

    /// `--timeout` covers connecting: a host that takes the connection and
    /// never answers ends the run at the timeout with exit 124, not at the
    /// URL's connect_timeout with 3.
    @Test func theTimeoutCoversConnecting() throws {
        let silent = try TCPListener(closesConnections: false)
        let url = "postgresql://someone@127.0.0.1:\(silent.port)/x"
        let started = Date()
        let run = try opsh(url, ["--timeout", "2", "-e", "return 1"])
        #expect(run.status == 124, "\(run.stderr)")
        #expect(run.stderr.contains("timed out after 2 s"), "\(run.stderr)")
        #expect(Date().timeIntervalSince(started) < 9)
        // Control: without --timeout, connect_timeout ends it: exit 3, saying so.
        let control = try opsh(url + "?connect_timeout=2", ["-e", "return 1"])
        #expect(control.status == 3, "\(control.stderr)")
        #expect(control.stderr.contains("no answer"), "\(control.stderr)")
    }

    /// A host where something takes the connection and closes it at once,
    /// and a port where nothing listens: each says it could not connect
    /// and why (exit 3), not that "the connection is closed".
    @Test func anUnreachableServerSaysWhy() throws {
        let closing = try TCPListener(closesConnections: true)
        let closed = try opsh("postgresql://someone@127.0.0.1:\(closing.port)/x", ["-e", "return 1"])
        #expect(closed.status == 3, "\(closed.stderr)")
        #expect(closed.stderr.contains("could not connect to PostgreSQL: 127.0.0.1:\(closing.port)"), "\(closed.stderr)")
        #expect(closed.stderr.contains("closed the connection before"), "\(closed.stderr)")
        let port = try TCPListener.unusedPort()
        let refused = try opsh("postgresql://someone@127.0.0.1:\(port)/x", ["-e", "return 1"])
        #expect(refused.status == 3, "\(refused.stderr)")
        #expect(refused.stderr.contains("127.0.0.1:\(port): Connection refused"), "\(refused.stderr)")
    }

    /// A malformed URL is a usage error (2), saying what is wrong and
    /// where; a well-formed one that cannot be reached is 3.
    @Test func aMalformedURLIsAUsageError() throws {
        for url in ["postgresql://root@[::1/x", "postgresql://root@host:99999/x", "postgresql://root@/x?sslmode=sometimes"] {
            let run = try opsh(url, ["-e", "return 1"])
            #expect(run.status == 2, "\(url): \(run.stderr)")
            #expect(run.stderr.contains("PostgreSQL URL") || run.stderr.contains("sslmode"), "\(url): \(run.stderr)")
            let shell = try sandbox.opsh(["--db", url], stdin: "", database: false)
            #expect(shell.status == 2, "\(url) (shell): \(shell.stderr)")
        }
        let port = try TCPListener.unusedPort()
        let control = try opsh("postgresql://root@127.0.0.1:\(port)/x", ["-e", "return 1"])
        #expect(control.status == 3, "\(control.stderr)")
    }
}

/// A TCP socket on 127.0.0.1 that takes connections and either closes
/// each at once or keeps it open without a word (a server that never
/// answers), until it is released.
final class TCPListener: @unchecked Sendable {
    let port: Int
    private let descriptor: Int32
    private let held = LockedValue<[Int32]>([])

    init(closesConnections: Bool) throws {
        (descriptor, port) = try Self.bound()
        guard listen(descriptor, 16) == 0 else { throw POSIXError(.EADDRINUSE) }
        let descriptor = descriptor
        let held = held
        Thread.detachNewThread {
            while true {
                let connection = accept(descriptor, nil, nil)
                if connection < 0 {
                    if errno == EINTR { continue }
                    return
                }
                if closesConnections { close(connection) } else { held.withLock { $0.append(connection) } }
            }
        }
    }

    deinit {
        shutdown(descriptor, Int32(SHUT_RDWR))
        close(descriptor)
        held.withLock { $0.forEach { close($0) } }
    }

    /// A port on 127.0.0.1 nothing listens on (bound, then let go).
    static func unusedPort() throws -> Int {
        let (descriptor, port) = try bound()
        close(descriptor)
        return port
    }

    private static func bound() throws -> (Int32, Int) {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw POSIXError(.EMFILE) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, length) == 0 && getsockname(descriptor, $0, &length) == 0
            }
        }
        guard ok else {
            close(descriptor)
            throw POSIXError(.EADDRINUSE)
        }
        return (descriptor, Int(UInt16(bigEndian: address.sin_port)))
    }
}

/// A value behind a lock, for the listener's thread.
final class LockedValue<Value>: @unchecked Sendable {
    private var value: Value
    private let lock = NSLock()

    init(_ value: Value) { self.value = value }

    func withLock<T>(_ body: (inout Value) -> T) -> T {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}
