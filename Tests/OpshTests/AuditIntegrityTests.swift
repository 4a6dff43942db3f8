import Foundation
import Testing

/// The audit trail against attack (issue 24: items 5, 6, 15, 19, 20, 25):
/// a script cannot hide its run from the trail, rows that were rewritten,
/// removed or forged are named, `opsh runs --overdue` trusts only rows that
/// fit the chain, every row also goes to syslog, and neither a lock nor
/// `kill -9` loses a row. Real opsh processes on real SQLite files and a
/// real PostgreSQL server; each promise both engines keep is one body.
@Suite struct AuditIntegrityTests {
    // MARK: Hiding from the trail (item 5)

    /// A TEMP table named `opsh_audit` shadows the trail on the script's
    /// connection; the row is written through a connection of opsh's own,
    /// addressed to the database's trail, so it lands there anyway.
    /// PostgreSQL only: SQLite's statement guard refuses the TEMP table
    /// (27x; TempTableShadowTests), and the run is recorded.
    @Test(arguments: Engine.allCases) func aShadowTableDoesNotHideTheRun(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
        if engine == .sqlite {
            let refused = try sandbox.opsh(["-e", "db.exec('CREATE TEMP TABLE opsh_audit AS SELECT * FROM opsh_audit WHERE 1 = 0')"], on: db)
            #expect(refused.status != 0)
            #expect(refused.stderr.contains("a TEMP table named opsh_audit would stand in for opsh's opsh_audit table"), "\(refused.stderr)")
            #expect(try db.count("opsh_audit") == 1)
            return
        }
        // In db.transaction, so that every statement runs on the
        // connection holding the TEMP table (SQLite reads outside one from
        // the pool's other connections).
        let run = try sandbox.opsh(["-e", """
            db.exec("CREATE TEMP TABLE opsh_audit AS SELECT * FROM opsh_audit WHERE 1 = 0")
            db.exec("INSERT INTO telemetry (event, created_at) VALUES ('hidden', 1)")
            -- Control: the shadow is real: what this connection writes to
            -- the unqualified name never reaches the database's trail.
            local shadowed
            db.transaction(function()
              db.exec("INSERT INTO opsh_audit (startedAt, endedAt, \\"user\\", host, pid, version, mode, status) VALUES (1, 1, 'u', 'h', 1, 'v', 'run', 0)")
              shadowed = db.value("SELECT count(*) FROM opsh_audit")
            end)
            return shadowed
            """], on: db)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == "1\n")
        #expect(!run.stderr.contains("could not record"), "\(run.stderr)")
        #expect(try db.count("opsh_audit") == 1)
        #expect(try db.sql("SELECT mode FROM opsh_audit") == "eval")
        #expect(try db.sql("SELECT code FROM opsh_audit").contains("'hidden'"))
    }

    /// SQLite only (PostgreSQL has no temporary triggers; its way of
    /// redirecting the row, `search_path`, is tested below): a TEMP
    /// trigger that ignores every insert into the trail.
    @Test func aTemporaryTriggerDoesNotDropTheRow() throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(.sqlite)
        let run = try sandbox.opsh(["-e", """
            db.exec("CREATE TEMP TRIGGER hide BEFORE INSERT ON main.opsh_audit BEGIN SELECT RAISE(IGNORE); END")
            db.exec("INSERT INTO telemetry (event, created_at) VALUES ('hidden', 1)")
            -- Control: on this connection the trigger does drop a row.
            return (db.exec("INSERT INTO main.opsh_audit (startedAt, endedAt, user, host, pid, version, mode, status) VALUES (1, 1, 'u', 'h', 1, 'v', 'run', 0)"))
            """], on: db)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == "0\n")
        #expect(try db.count("opsh_audit") == 1)
        #expect(try db.sql("SELECT json_extract(changes, '$.telemetry.inserted') FROM opsh_audit") == "1")
    }

    /// The same TEMP trigger made at the shell's prompt, where a chunk's row
    /// is written in the chunk's own transaction (on the session's
    /// connection): the row does not land there, and opsh writes it after
    /// the commit through its own connection, saying so. SQLite only, as
    /// above.
    @Test func aTemporaryTriggerAtThePromptDoesNotDropTheChunksRow() throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(.sqlite)
        let terminal = try PseudoTerminal(arguments: ["--db", db.db, "--no-init"], environment: sandbox.environment)
        terminal.expect("opsh> ")
        terminal.send("db.exec('CREATE TEMP TRIGGER hide BEFORE INSERT ON main.opsh_audit BEGIN SELECT RAISE(IGNORE); END')\r")
        terminal.expect("opsh> ")
        terminal.send("db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('prompt', 1)\")\r")
        terminal.expect("committed: telemetry: 1 inserted")
        terminal.expect("the audit row could not be written in this chunk's transaction (the row did not land in main.opsh_audit")
        terminal.expect("opsh> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit(timeout: 15) == 0)
        #expect(try db.count("opsh_audit") == 1)
        #expect(try db.sql("SELECT code FROM opsh_audit").contains("'prompt'"))
        #expect(try sandbox.opsh(["runs", "--verify"], on: db).status == 0)
    }

    /// A trigger in the database itself that drops the trail's rows: opsh
    /// reads its row back and says it did not land; without the trigger
    /// the same run is recorded and says nothing.
    @Test(arguments: Engine.allCases) func aRowThatDidNotLandIsSaid(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
        switch engine {
        case .sqlite:
            try db.sql("CREATE TRIGGER drop_rows BEFORE INSERT ON opsh_audit BEGIN SELECT RAISE(IGNORE); END")
        case .postgresql:
            try db.sql("""
                CREATE FUNCTION drop_rows() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
                CREATE TRIGGER drop_rows BEFORE INSERT ON opsh_audit FOR EACH ROW EXECUTE FUNCTION drop_rows();
                """)
        }
        let write = ["-e", "db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('w', 1)\")"]
        let dropped = try sandbox.opsh(write, on: db)
        #expect(dropped.status == 0, "\(dropped.stderr)")
        #expect(dropped.stderr.contains("the audit trail could not record this run: the row did not land in"), "\(dropped.stderr)")
        #expect(try db.count("opsh_audit") == 0)
        // Control: without the trigger the same run lands, silently.
        try db.sql(engine == .sqlite ? "DROP TRIGGER drop_rows" : "DROP TRIGGER drop_rows ON opsh_audit")
        let recorded = try sandbox.opsh(write, on: db)
        #expect(recorded.status == 0, "\(recorded.stderr)")
        #expect(!recorded.stderr.contains("could not record"), "\(recorded.stderr)")
        #expect(try db.count("opsh_audit") >= 1)
    }

    /// PostgreSQL only (SQLite has no search_path): the row goes to the
    /// schema opsh's tables live in, whatever the script set.
    @Test func searchPathDoesNotMoveTheRow() throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(.postgresql)
        // Nothing found there: the row used to be lost, with a note that
        // the trail is not recorded until `opsh migrate`.
        let catalogOnly = try sandbox.opsh(["-e", """
            db.exec("SET search_path = pg_catalog")
            db.exec("INSERT INTO public.telemetry (event, created_at) VALUES ('catalog', 1)")
            """], on: db)
        #expect(catalogOnly.status == 0, "\(catalogOnly.stderr)")
        #expect(catalogOnly.stderr.isEmpty, "\(catalogOnly.stderr)")
        #expect(try db.count("public.opsh_audit") == 1)

        // A schema of the script's own, with a trail of its own.
        try db.sql("CREATE SCHEMA evil; CREATE TABLE evil.opsh_audit (LIKE public.opsh_audit INCLUDING ALL)")
        let redirected = try sandbox.opsh(["-e", """
            db.exec("SET search_path = evil, public")
            db.exec("INSERT INTO telemetry (event, created_at) VALUES ('evil', 1)")
            -- Control: the redirection is real for what the script writes.
            db.exec("INSERT INTO opsh_audit (startedAt, endedAt, \\"user\\", host, pid, version, mode, status) VALUES (1, 1, 'u', 'h', 1, 'v', 'run', 0)")
            """], on: db)
        #expect(redirected.status == 0, "\(redirected.stderr)")
        #expect(try db.count("public.opsh_audit") == 2)
        #expect(try db.count("evil.opsh_audit") == 1)
        #expect(try db.sql("SELECT code FROM public.opsh_audit ORDER BY id DESC LIMIT 1").contains("'evil'"))
    }

    // MARK: TRUNCATE (item 20)

    /// PostgreSQL only: SQLite has no TRUNCATE (its `DELETE` without
    /// `WHERE` fires the row triggers, AuditTrailTests). Row triggers do
    /// not fire on TRUNCATE; a statement-level trigger refuses it.
    @Test func truncatingTheTrailIsRefused() throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(.postgresql)
        #expect(try sandbox.opsh(["-e", "db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('w', 1)\")"], on: db).status == 0)
        let refusal = "opsh_audit rows leave only through audit.prune"
        let byOpsh = try sandbox.opsh(["-e", "db.exec('TRUNCATE opsh_audit')"], on: db)
        #expect(byOpsh.status == 1)
        #expect(byOpsh.stderr.contains(refusal), "\(byOpsh.stderr)")
        #expect(throws: (any Error).self) { try db.sql("TRUNCATE opsh_audit") }
        do {
            try db.sql("TRUNCATE opsh_audit")
        } catch {
            #expect("\(error)".contains(refusal), "\(error)")
        }
        #expect(try db.count("opsh_audit") >= 1)
        // Control: without the trigger the same TRUNCATE empties it.
        try db.sql("DROP TRIGGER opsh_audit_no_truncate ON opsh_audit")
        try db.sql("TRUNCATE opsh_audit")
        #expect(try db.count("opsh_audit") == 0)
    }

    /// PostgreSQL only (SQLite's triggers read only tables of their own
    /// schema, never a TEMP one): the delete trigger's function looked for
    /// the prune permit through the caller's `search_path`, where a TEMP
    /// table comes first, so a script's own permit opened the whole trail.
    @Test func aTemporaryPermitDoesNotOpenTheTrail() throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(.postgresql)
        #expect(try sandbox.opsh(["-e", "db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('w', 1)\")"], on: db).status == 0)
        let attack = ["-e", """
            db.exec("CREATE TEMP TABLE opsh_audit_prune (before double precision)")
            db.exec("INSERT INTO opsh_audit_prune VALUES (1e300)")
            return (db.exec("DELETE FROM opsh_audit"))
            """]
        let refused = try sandbox.opsh(attack, on: db)
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("opsh_audit rows leave only through audit.prune"), "\(refused.stderr)")
        #expect(try db.count("opsh_audit") >= 1)
        // Control: the function as migration 003 made it lets the same attack through.
        try db.sql("ALTER FUNCTION opsh_audit_refuse_delete() RESET search_path")
        let opened = try sandbox.opsh(attack, on: db)
        #expect(opened.status == 0, "\(opened.stderr)")
        #expect(opened.stdout != "0\n")
    }

    // MARK: The chain (items 6, 25)

    /// Each row carries the hash of the one before it: `opsh runs --verify`
    /// and `audit.verify()` name the first row that does not fit, whether
    /// a row was rewritten (with the triggers out of the way, as the
    /// database's owner can) or removed.
    @Test(arguments: Engine.allCases) func verifyNamesTheFirstRowThatDoesNotFit(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
        for event in ["a", "b", "c", "d"] {
            let run = try sandbox.opsh(["-e", "db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('\(event)', 1)\")"], on: db)
            #expect(run.status == 0, "\(run.stderr)")
        }
        #expect(try db.count("opsh_audit") == 4)
        let intact = try sandbox.opsh(["runs", "--verify"], on: db)
        #expect(intact.status == 0, "\(intact.stdout) \(intact.stderr)")
        #expect(intact.stdout.contains("the audit trail's chain holds: 4 rows"), "\(intact.stdout)")
        let fromLua = try sandbox.opsh(["--read-only", "-e", "local v = audit.verify() return v.ok, v.rows"], on: db)
        #expect(fromLua.stdout == "true\t4\n", "\(fromLua.stdout) \(fromLua.stderr)")
        let ids = try db.sql("SELECT id FROM opsh_audit ORDER BY id").split(separator: "\n").map(String.init)

        // Removed: row 3, by the owner with the trigger out of the way.
        switch engine {
        case .sqlite:
            try db.sql("DROP TRIGGER opsh_audit_no_delete; DELETE FROM opsh_audit WHERE id = \(ids[2])")
        case .postgresql:
            try db.sql("ALTER TABLE opsh_audit DISABLE TRIGGER opsh_audit_no_delete; DELETE FROM opsh_audit WHERE id = \(ids[2])")
        }
        let removed = try sandbox.opsh(["runs", "--verify"], on: db)
        #expect(removed.status == 1, "\(removed.stdout) \(removed.stderr)")
        #expect(removed.stdout.contains("row \(ids[3]) does not fit the audit trail's chain: its previous hash is not row \(ids[1])'s hash"), "\(removed.stdout)")

        // Rewritten: row 1 says it succeeded.
        switch engine {
        case .sqlite:
            // REPLACE fires no DELETE trigger; the trail refuses it by id.
            let replace = "INSERT OR REPLACE INTO opsh_audit (id, startedAt, endedAt, user, host, pid, version, mode, status) SELECT id, startedAt, endedAt, user, host, pid, version, mode, 0 FROM opsh_audit WHERE id = \(ids[0])"
            #expect(throws: (any Error).self) { try db.sql(replace) }
            do { try db.sql(replace) } catch {
                #expect("\(error)".contains("opsh_audit is append-only: a row cannot be replaced"), "\(error)")
            }
            try db.sql("DROP TRIGGER opsh_audit_no_replace; \(replace)")
        case .postgresql:
            try db.sql("ALTER TABLE opsh_audit DISABLE TRIGGER opsh_audit_no_update; UPDATE opsh_audit SET reason = 'forged' WHERE id = \(ids[0])")
        }
        let rewritten = try sandbox.opsh(["runs", "--verify"], on: db)
        #expect(rewritten.status == 1, "\(rewritten.stdout) \(rewritten.stderr)")
        #expect(rewritten.stdout.contains("row \(ids[0]) does not fit the audit trail's chain"), "\(rewritten.stdout)")
        let luaFinding = try sandbox.opsh(["--read-only", "-e", "local v = audit.verify() return v.ok, v.row"], on: db)
        #expect(luaFinding.stdout == "false\t\(ids[0])\n", "\(luaFinding.stdout) \(luaFinding.stderr)")
    }

    /// A trail from before migration 005: its rows stay as they are, the
    /// chain starts with the first row written after `opsh migrate`, and
    /// `--verify` says how many rows are from before it.
    @Test(arguments: Engine.allCases) func rowsFromBeforeTheChainStayReadable(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
        switch engine {
        case .sqlite:
            try db.sql("""
                DROP TRIGGER opsh_audit_no_replace; DROP TABLE opsh_audit_cut;
                ALTER TABLE opsh_audit DROP COLUMN hash; ALTER TABLE opsh_audit DROP COLUMN previousHash;
                DELETE FROM grdb_migrations WHERE identifier = '005_auditChain';
                """)
        case .postgresql:
            try db.sql("""
                DROP TABLE opsh_audit_cut; DROP TRIGGER opsh_audit_no_truncate ON opsh_audit;
                DROP FUNCTION opsh_audit_refuse_truncate(); DROP FUNCTION opsh_audit_cut_refuse_change(); DROP FUNCTION opsh_audit_cut_needs_permit();
                ALTER TABLE opsh_audit DROP COLUMN hash; ALTER TABLE opsh_audit DROP COLUMN previousHash;
                ALTER TABLE schemes DROP COLUMN passEnvironment; DROP TABLE opsh_runners;
                DELETE FROM opsh_migrations WHERE identifier IN ('005_auditChain', '006_schemeEnvironment', '007_runnerRegistry', '008_pinnedFunctions');
                """)
        }
        let write = ["-e", "db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('w', 1)\")"]
        for _ in 0..<2 { #expect(try sandbox.opsh(write, on: db).status == 0) }
        let pending = try sandbox.opsh(["runs", "--verify"], on: db)
        #expect(pending.status == 3)
        #expect(pending.stderr.contains("has no chain yet (migration 005_auditChain is pending): run `opsh migrate`"), "\(pending.stderr)")

        #expect(try sandbox.opsh(["migrate"], on: db).status == 0)
        #expect(try sandbox.opsh(write, on: db).status == 0)
        let verified = try sandbox.opsh(["runs", "--verify"], on: db)
        #expect(verified.status == 0, "\(verified.stdout) \(verified.stderr)")
        #expect(verified.stdout.contains("the audit trail's chain holds: 1 row, from row 3 to row 3; 2 older rows from before 005_auditChain are not chained"), "\(verified.stdout)")
        #expect(try db.count("opsh_audit") == 3)
    }

    /// Anyone with INSERT can add a successful row for a script that did
    /// not run: `opsh runs --overdue` does not trust a row that does not
    /// fit the chain, and says so.
    @Test(arguments: Engine.allCases) func overdueDoesNotTrustAForgedRow(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
        let script = try sandbox.script("every-second.lua", "-- @every 1s\nreturn builds.count()\n")
        let path = URL(fileURLWithPath: script).resolvingSymlinksInPath().path
        #expect(try sandbox.opsh(["run", script], on: db).status == 0)
        #expect(try waitUntil(30) { try sandbox.opsh(["runs", "--overdue", "--grace", "1s"], on: db).status == 1 })

        let now = Date().timeIntervalSince1970
        try db.sql("""
            INSERT INTO opsh_audit (startedAt, endedAt, "user", host, pid, version, mode, script, status, period)
            VALUES (\(now), \(now), 'cron', 'h', 1, 'v', 'run', '\(path)', 0, 1)
            """)
        let late = try sandbox.opsh(["runs", "--overdue", "--grace", "1s"], on: db)
        #expect(late.status == 1, "\(late.stdout) \(late.stderr)")
        #expect(late.stdout.contains("overdue: \(path): its last successful run started"), "\(late.stdout)")
        #expect(late.stderr.contains("1 row of the audit trail does not fit its chain and is not trusted"), "\(late.stderr)")
        // Control: a real run is trusted and clears it.
        #expect(try sandbox.opsh(["run", script], on: db).status == 0)
        let onTime = try sandbox.opsh(["runs", "--overdue", "--grace", "1m"], on: db)
        #expect(onTime.status == 0, "\(onTime.stdout) \(onTime.stderr)")
    }

    // MARK: Syslog (item 6)

    /// Each row also goes to syslog (authpriv.notice), one line with its
    /// id and hash, where a script cannot reach it; a reason with a newline
    /// stays on that one line.
    @Test(arguments: Engine.allCases) func everyRowGoesToSyslog(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
        let listener = try SyslogListener(path: sandbox.root + "/runtime/log")
        let run = try sandbox.opsh(["--reason", "INC-1\nsecond line", "-e", "db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('w', 1)\")"],
                                   on: db, environment: ["OPSH_SYSLOG_SOCKET": listener.path])
        #expect(run.status == 0, "\(run.stderr)")
        let hash = try db.sql("SELECT hash FROM opsh_audit ORDER BY id DESC LIMIT 1")
        let id = try db.sql("SELECT id FROM opsh_audit ORDER BY id DESC LIMIT 1")
        #expect(hash.count == 64)
        let line = listener.receive { $0.contains(hash) }
        #expect(line != nil, "no syslog line with \(hash): \(listener.received)")
        guard let line else { return }
        #expect(line.hasPrefix("<85>"), "\(line)")   // LOG_AUTHPRIV | LOG_NOTICE
        #expect(line.contains("opsh["), "\(line)")
        #expect(line.contains("audit row \(id) hash \(hash)"), "\(line)")
        #expect(line.contains("reason \"INC-1\\nsecond line\""), "\(line)")
        #expect(!line.contains("\n"), "\(line)")
    }

    // MARK: Locks and kill -9 (item 15)

    /// A run that changed nothing, beside another process holding the lock
    /// the row needs: nothing on stderr (cron mails what it prints), and
    /// the row is kept in a spool that the next run writes.
    @Test(arguments: Engine.allCases) func aReadBesideAHeldLockIsSpooledQuietly(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
        let holder: ChildProcess
        switch engine {
        case .sqlite:
            // (Waiting for the lock while the check below tries it.)
            holder = try sandbox.start("/usr/bin/sqlite3", [db.db], stdin: ".timeout 10000\nBEGIN IMMEDIATE;\n", keepingStdinOpen: true)
            #expect(try waitUntil(10) { (try? db.sql("BEGIN IMMEDIATE; ROLLBACK;")) == nil })
        case .postgresql:
            holder = try sandbox.start(try PostgresServer.shared().tool("psql"), ["-X", "-q", "-d", db.db],
                                       stdin: "BEGIN;\nLOCK TABLE opsh_audit IN ACCESS EXCLUSIVE MODE;\n", keepingStdinOpen: true)
            #expect(try waitUntil(10) {
                try db.sql("SELECT count(*) FROM pg_locks WHERE relation = 'opsh_audit'::regclass AND mode = 'AccessExclusiveLock' AND granted") == "1"
            })
        }
        let started = Date()
        let read = try sandbox.opsh(["-e", "return db.value('SELECT count(*) FROM telemetry')"], on: db)
        #expect(read.status == 0, "\(read.stderr)")
        #expect(read.stdout == "0\n")
        #expect(read.stderr.isEmpty, "\(read.stderr)")
        #expect(Date().timeIntervalSince(started) < 4)
        holder.write("ROLLBACK;\n")
        holder.closeInput()
        _ = sandbox.finish(holder)
        #expect(try db.count("opsh_audit") == 0)

        // The next run writes the spooled row, then its own.
        let next = try sandbox.opsh(["-e", "db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('w', 1)\")"], on: db)
        #expect(next.status == 0, "\(next.stderr)")
        #expect(next.stderr.isEmpty, "\(next.stderr)")
        #expect(try db.sql("SELECT count(*) FROM opsh_audit WHERE mode = 'eval'") == "2")
        #expect(try db.sql("SELECT code FROM opsh_audit ORDER BY id LIMIT 1").contains("count(*) FROM telemetry"))
        let verified = try sandbox.opsh(["runs", "--verify"], on: db)
        #expect(verified.status == 0, "\(verified.stdout) \(verified.stderr)")
        // Written once: a third run finds the spool empty.
        #expect(try sandbox.opsh(["-e", "db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('x', 2)\")"], on: db).status == 0)
        #expect(try db.count("opsh_audit") == 3)
    }

    /// opsh killed (SIGKILL) while it writes a shell chunk's audit row:
    /// the chunk's changes and its row land together or not at all. The
    /// row's insert is held up by something the test controls: on SQLite
    /// a trigger on the trail that computes for minutes (SQLite has no
    /// lock on one table), on PostgreSQL a lock on the trail.
    @Test(arguments: Engine.allCases) func aChunkAndItsRowLandTogetherWhenOpshIsKilled(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
        var holder: ChildProcess?
        switch engine {
        case .sqlite:
            try db.sql("""
                CREATE TABLE slow_rows (n INTEGER);
                WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 3000) INSERT INTO slow_rows SELECT n FROM c;
                CREATE TRIGGER slow BEFORE INSERT ON opsh_audit
                WHEN (SELECT count(*) FROM slow_rows a, slow_rows b, slow_rows c) > 0 BEGIN SELECT 1; END;
                """)
        case .postgresql:
            holder = try sandbox.start(try PostgresServer.shared().tool("psql"), ["-X", "-q", "-d", db.db],
                                       stdin: "BEGIN;\nLOCK TABLE opsh_audit IN ACCESS EXCLUSIVE MODE;\n", keepingStdinOpen: true)
            #expect(try waitUntil(10) {
                try db.sql("SELECT count(*) FROM pg_locks WHERE relation = 'opsh_audit'::regclass AND mode = 'AccessExclusiveLock' AND granted") == "1"
            })
        }
        let terminal = try PseudoTerminal(arguments: ["--db", db.db, "--no-init"], environment: sandbox.environment)
        terminal.expect("opsh> ")
        let cpuBefore = Self.cpuSeconds(terminal.pid)
        terminal.send("db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('killed', 1)\")\r")
        // Wait until opsh is inside the row's insert.
        let inside = try waitUntil(60) {
            switch engine {
            case .sqlite: Self.cpuSeconds(terminal.pid) - cpuBefore > 1.5
            case .postgresql:
                try db.sql("SELECT count(*) FROM pg_locks WHERE relation = 'opsh_audit'::regclass AND NOT granted") != "0"
            }
        }
        #expect(inside)
        kill(terminal.pid, SIGKILL)
        #expect(terminal.waitForExit(timeout: 10) == 128 + SIGKILL)
        if let holder {
            holder.write("ROLLBACK;\n")
            holder.closeInput()
            _ = sandbox.finish(holder)
        }
        let changed = try db.count("telemetry", where: "event = 'killed'")
        let audited = try db.count("opsh_audit", where: "code LIKE '%killed%'")
        #expect(changed == audited, "the chunk's change landed \(changed) time(s), its audit row \(audited)")

        // Control: nothing holding the row up, the same chunk lands with its row.
        if engine == .sqlite { try db.sql("DROP TRIGGER slow") }
        let again = try PseudoTerminal(arguments: ["--db", db.db, "--no-init"], environment: sandbox.environment)
        again.expect("opsh> ")
        again.send("db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('killed', 1)\")\r")
        again.expect("committed: telemetry: 1 inserted")
        again.expect("opsh> ")
        again.send("\u{4}")
        #expect(again.waitForExit(timeout: 15) == 0)
        #expect(try db.count("telemetry", where: "event = 'killed'") == changed + 1)
        #expect(try db.count("opsh_audit", where: "code LIKE '%killed%'") == audited + 1)
        #expect(try sandbox.opsh(["runs", "--verify"], on: db).status == 0)
    }

    // MARK: Concurrent writers

    /// Three opsh processes recording runs at once keep one chain.
    @Test(arguments: Engine.allCases) func concurrentRunsKeepOneChain(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
        let loop = "for i in 1 2 3 4 5 6; do \"$0\" --db \"$1\" -e \"db.exec(\\\"INSERT INTO telemetry (event, created_at) VALUES ('c', 1)\\\")\" || exit 1; done"
        let writers = try (0..<3).map { _ in try sandbox.start("/bin/sh", ["-c", loop, opshExecutable, db.db]) }
        for writer in writers {
            let done = sandbox.finish(writer)
            #expect(done.status == 0, "\(done.stderr)")
        }
        #expect(try db.count("opsh_audit") == 18)
        let verified = try sandbox.opsh(["runs", "--verify"], on: db)
        #expect(verified.status == 0, "\(verified.stdout) \(verified.stderr)")
        #expect(verified.stdout.contains("18 rows"), "\(verified.stdout)")
    }

    /// User and system CPU seconds `pid` has used so far.
    static func cpuSeconds(_ pid: pid_t) -> Double {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return 0 }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // After the command: state is field 3, utime 14 and stime 15.
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }
}

/// A Unix datagram socket standing in for syslog's `/dev/log`
/// (`OPSH_SYSLOG_SOCKET` points opsh at it).
final class SyslogListener {
    let path: String
    private let socket: Int32
    private(set) var received: [String] = []

    init(path: String) throws {
        self.path = path
        socket = Glibc.socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        guard socket >= 0 else { throw POSIXError(.EMFILE) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            for (index, byte) in path.utf8.prefix(buffer.count - 1).enumerated() { buffer[index] = byte }
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socket, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
    }

    deinit {
        close(socket)
        unlink(path)
    }

    /// The first datagram (received now or before) that `matches`, within
    /// 10 seconds; nil when none came.
    func receive(_ matches: (String) -> Bool) -> String? {
        let deadline = Date().addingTimeInterval(10)
        while true {
            if let found = received.first(where: matches) { return found }
            let left = deadline.timeIntervalSinceNow
            if left <= 0 { return nil }
            var descriptor = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, Int32(min(left, 0.2) * 1000) + 1) > 0 else { continue }
            var buffer = [UInt8](repeating: 0, count: 65536)
            let count = recv(socket, &buffer, buffer.count, 0)
            if count > 0 { received.append(String(decoding: buffer[..<count], as: UTF8.self)) }
        }
    }
}
