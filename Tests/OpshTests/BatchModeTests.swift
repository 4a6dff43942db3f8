import Foundation
import Testing

/// `opsh -e`, `opsh run FILE`, `opsh run -` as cron runs them: exit
/// statuses, output on the right stream, dry runs, timeouts, the lock.
@Suite struct BatchModeTests {
    static let insertProject = """
        db.exec("INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt) VALUES (?, 'App', 'App', 'https://example.com/app.git', 0)", ...)
        """

    /// A run whose output cannot be written (stdout on a full disk) does
    /// not exit 0 as if its results had arrived: returned values (--json,
    /// --csv streamed) and what print wrote each fail the run with the
    /// reason on stderr. The control: the same runs into /dev/null exit 0.
    @Test(arguments: Engine.allCases) func aRunWhoseOutputCannotBeWrittenFails(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let runs: [(flags: String, code: String, reason: String)] = [
            ("--json", "return db.query('SELECT 1 AS a')", "cannot write the results to standard output: No space left on device"),
            ("--csv", "return db.query('SELECT 1 AS a')", "cannot write"),
            ("", "print('lost')", "cannot write standard output"),
        ]
        for run in runs {
            for (target, fails) in [("/dev/full", true), ("/dev/null", false)] {
                let shell = "exec \"$0\" --db \"$1\" \(run.flags) -e \"$2\" > \(target)"
                let result = try ChildProcess.start("/bin/sh", ["-c", shell, opshExecutable, database.db, run.code],
                                                    environment: sandbox.environment).finish()
                if fails {
                    #expect(result.status == 1, "\(run.flags) \(run.code) > \(target): \(result.status) \(result.stderr)")
                    #expect(result.stderr.contains(run.reason), "\(result.stderr)")
                } else {
                    #expect(result.status == 0, "\(run.flags) \(run.code) > \(target): \(result.stderr)")
                }
            }
        }
    }

    @Test func aChunkPrintsWhatItReturnsAndExitsZero() throws {
        let sandbox = try Sandbox()
        let result = try sandbox.opsh(["-e", "return 1 + 1, 'two'"])
        #expect(result.status == 0)
        #expect(result.stdout == "2\ttwo\n")
        #expect(result.stderr == "")
    }

    @Test func scriptErrorsExitOneWithFileLineAndTraceback() throws {
        let sandbox = try Sandbox()
        let script = try sandbox.script("fails.lua", "local x = 1\nerror('boom')\n")
        let result = try sandbox.opsh(["run", script])
        #expect(result.status == 1)
        #expect(result.stdout == "")
        // Lua shortens long chunk names from the left: match the end.
        #expect(result.stderr.contains("fails.lua:2: boom"))
        #expect(result.stderr.contains("stack traceback:"))
        // No terminal: no colour.
        #expect(!result.stderr.contains("\u{1B}["))
    }

    /// Options before `run` are run's: `opsh --db X run FILE` as much as
    /// `opsh run --db X FILE`.
    @Test func optionsMayComeBeforeRun() throws {
        let sandbox = try Sandbox()
        let script = try sandbox.script("count.lua", "return db.value('SELECT count(*) FROM projects'), arg[1]")
        let result = try sandbox.run(opshExecutable, ["--db", sandbox.database, "--create", "--json", "run", script, "--quiet"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "0\n\"--quiet\"\n")
    }

    @Test func requireFindsModulesInALuaFolderNextToTheScript() throws {
        let sandbox = try Sandbox()
        try FileManager.default.createDirectory(atPath: sandbox.root + "/ops/lua", withIntermediateDirectories: true)
        try "return { greet = function(n) return 'hello ' .. n end }".write(
            toFile: sandbox.root + "/ops/lua/helpers.lua", atomically: true, encoding: .utf8)
        try "print(require('helpers').greet(arg[1]))".write(
            toFile: sandbox.root + "/ops/main.lua", atomically: true, encoding: .utf8)
        let result = try sandbox.opsh(["run", sandbox.root + "/ops/main.lua", "cron"])
        #expect(result.status == 0)
        #expect(result.stdout == "hello cron\n")
    }

    @Test func aMemoryLimitStopsAGreedyScript() throws {
        let sandbox = try Sandbox()
        let greedy = try sandbox.script("greedy.lua", "local t = {} for i = 1, 1e8 do t[i] = ('x'):rep(64) .. i end")
        let result = try sandbox.opsh(["run", "--memory-limit", "16", greedy])
        #expect(result.status == 1)
        #expect(result.stderr.contains("not enough memory"))
        let fine = try sandbox.opsh(["-e", "return #('y'):rep(1000)", "--memory-limit", "16"])
        #expect(fine.stdout == "1000\n")
        #expect(try sandbox.opsh(["-e", "return 1", "--memory-limit", "0"]).status == 2)
    }

    @Test func usageErrorsExitTwo() throws {
        let sandbox = try Sandbox()
        let unknown = try sandbox.opsh(["--no-such-option"])
        #expect(unknown.status == 2)
        #expect(unknown.stderr.contains("no-such-option"))
        let missing = try sandbox.opsh(["run", sandbox.root + "/missing.lua"])
        #expect(missing.status == 2)
        #expect(missing.stderr.contains("cannot read"))
        let help = try sandbox.opsh(["run", "--help"], database: false)
        #expect(help.status == 0)
        #expect(help.stdout.contains("124"))
        // --version as psql and sqlite3 have it, and touching no database.
        let version = try sandbox.opsh(["--version"], database: false)
        #expect(version.status == 0, "\(version.stderr)")
        #expect(version.stdout.hasPrefix("opsh 0."), "\(version.stdout)")
        #expect(version.stdout.contains("SQLite 3.") && version.stdout.contains("Lua 5.4"), "\(version.stdout)")
    }

    @Test func anUnavailableDatabaseExitsThree() throws {
        let sandbox = try Sandbox()
        let notADatabase = sandbox.root + "/data/text.sqlite"
        try String(repeating: "not a database\n", count: 100).write(toFile: notADatabase, atomically: true, encoding: .utf8)
        let result = try sandbox.run(opshExecutable, ["--db", notADatabase, "-e", "return 1"])
        #expect(result.status == 3)
        #expect(result.stderr.contains("not an SQLite database"))
    }

    @Test func aDatabaseLockedPastTheBusyTimeoutExitsThree() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        try sandbox.whileAnotherProcessHolds("BEGIN IMMEDIATE;") {
            let result = try sandbox.opsh(["--busy-timeout", "0.2", "-e", "db.exec(\"DELETE FROM projects\")"])
            #expect(result.status == 3, "\(result.stderr)")
            #expect(result.stderr.contains("locked"))
        }
    }

    /// A script waiting for another process's lock (`--busy-timeout 60`)
    /// still stops at once on SIGINT, SIGTERM or `--timeout`: it does not
    /// sit out the busy timeout or wait for the lock to be released.
    @Test func aScriptWaitingForALockStopsOnASignalOrItsTimeout() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        try sandbox.sqlite("INSERT INTO telemetry (event, created_at) VALUES ('kept', 0)")
        // The lock is held until the three runs have ended: one that waited
        // for it would be killed by the test's 30 s guard (status 137).
        try sandbox.whileAnotherProcessHolds("BEGIN IMMEDIATE;") {
            for (signal, status) in [(SIGINT, Int32(130)), (SIGTERM, Int32(143))] {
                let process = try sandbox.start(opshExecutable, sandbox.withDatabase([
                    "--busy-timeout", "60", "-e", "db.exec(\"DELETE FROM telemetry\")",
                ]))
                // Signalled once it has reached the database (and waits for its lock).
                #expect(waitUntil(30) { processHasOpen(process.pid, sandbox.database) })
                kill(process.pid, signal)
                let result = sandbox.finish(process)
                #expect(result.status == status, "\(result.stderr)")
            }
            let timedOut = try sandbox.opsh(["--busy-timeout", "60", "--timeout", "0.5", "-e",
                                             "db.exec(\"DELETE FROM telemetry\")"])
            #expect(timedOut.status == 124, "\(timedOut.stderr)")
        }
        let rows = try sandbox.sqlite("SELECT event FROM telemetry ORDER BY id")
        #expect(rows == "kept\nx", "the stopped scripts deleted rows")
    }

    /// The batch modes connect on first use: a script that never touches
    /// the database is not held up by another process's exclusive lock,
    /// and one that does still gets exit 3.
    @Test func aScriptThatDoesNotTouchTheDatabaseIgnoresItsLocks() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        try sandbox.whileAnotherProcessHolds("PRAGMA locking_mode = EXCLUSIVE; BEGIN EXCLUSIVE;") {
            let untouched = try sandbox.opsh(["--busy-timeout", "0.2", "-e", "return 6 * 7, type(projects.list)"])
            #expect(untouched.status == 0, "\(untouched.stderr)")
            #expect(untouched.stdout.contains("42\tfunction"))
            let reads = try sandbox.opsh(["--busy-timeout", "0.2", "-e", "return db.value('SELECT count(*) FROM projects')"])
            #expect(reads.status == 3, "\(reads.stderr)")
            #expect(reads.stderr.contains("locked"))
        }
    }

    /// Modules installed on first use are whole when a script looks at
    /// them: `pairs` and `help()` see every function.
    @Test func lazilyInstalledModulesListEveryFunction() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        let listed = try sandbox.opsh(["-e", """
            local names = {}
            for name in pairs(builds) do names[#names + 1] = name end
            table.sort(names)
            return table.concat(names, ",")
            """])
        #expect(listed.status == 0, "\(listed.stderr)")
        #expect(listed.stdout.contains("create") && listed.stdout.contains("latest"))
        let help = try sandbox.opsh(["-e", "help()"])
        #expect(help.stdout.contains("jobs.start") && help.stdout.contains("models.") && help.stdout.contains("projects.insert"))
    }

    @Test func aTimeoutExits124AndRollsBackTheOpenTransaction() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        let started = Date()
        let result = try sandbox.opsh(["--timeout", "0.3", "-e", """
            db.transaction(function()
              \(Self.insertProject.replacingOccurrences(of: "...", with: "'com.example.timeout'"))
              while true do end
            end)
            """])
        #expect(result.status == 124)
        #expect(result.stderr.contains("timed out"))
        #expect(Date().timeIntervalSince(started) < 5)
        #expect(try sandbox.sqlite("SELECT count(*) FROM projects") == "0")
    }

    @Test func sigintExits130AndSigtermExits143() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        for (signal, status) in [(SIGINT, Int32(130)), (SIGTERM, Int32(143))] {
            let flag = sandbox.root + "/started-\(signal)"
            let process = try sandbox.start(opshExecutable, sandbox.withDatabase(["-e", """
                db.transaction(function()
                  \(Self.insertProject.replacingOccurrences(of: "...", with: "'com.example.signal'"))
                  io.open("\(flag)", "w"):close()
                  while true do pcall(function() while true do end end) end
                end)
                """]))
            // Signalled inside the transaction, after its write.
            #expect(waitUntil(30) { FileManager.default.fileExists(atPath: flag) })
            kill(process.pid, signal)
            let result = sandbox.finish(process)
            #expect(result.status == status, "\(result.stderr)")
            #expect(result.stderr.contains("rolled back"))
        }
        #expect(try sandbox.sqlite("SELECT count(*) FROM projects") == "0")
    }

    @Test func twoRunsOfTheSameScriptNeverOverlap() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        let flag = sandbox.root + "/first-started"
        let script = try sandbox.script("nightly.lua", """
            io.open("\(flag)", "w"):close()
            local t = os.clock() while os.clock() - t < 1.5 do end
            print("first done")
            """)
        let first = try sandbox.start(opshExecutable, sandbox.withDatabase(["run", script]))
        #expect(waitUntil(5) { FileManager.default.fileExists(atPath: flag) })
        let second = try sandbox.opsh(["run", script])
        #expect(second.status == 75)
        #expect(second.stderr.contains("another run holds the lock"))
        let firstResult = sandbox.finish(first)
        #expect(firstResult.status == 0)
        #expect(firstResult.stdout == "first done\n")
        // Without the lock the second one runs.
        try FileManager.default.removeItem(atPath: flag)
        let third = try sandbox.opsh(["run", "--no-lock", script])
        #expect(third.status == 0)
    }

    /// The run lock belongs to the database, not to the environment
    /// (issue 24, item 13): the same script on the same database, started
    /// by cron (no XDG_RUNTIME_DIR, another HOME) while a run from a login
    /// shell holds it, through another spelling of the script's path and
    /// another name of the database (a symbolic link; on PostgreSQL
    /// another URL of the same database), exits 75 saying who holds it.
    /// Control: the same run with --no-lock goes ahead.
    @Test(arguments: Engine.allCases)
    func theRunLockHoldsWhateverTheEnvironmentAndSpelling(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let flag = sandbox.root + "/started"
        let release = sandbox.root + "/release"
        let script = try sandbox.script("nightly.lua", """
            if arg[1] == "hold" then
              io.open("\(flag)", "w"):close()
              while not io.open("\(release)") do opsh.wait(0.02) end
            end
            print("done")
            """)
        symlink(sandbox.root + "/scripts", sandbox.root + "/deployed")
        let sameScript = sandbox.root + "/deployed/./nightly.lua"
        let sameDatabase: String
        switch engine {
        case .sqlite:
            sameDatabase = sandbox.root + "/alias.sqlite"
            symlink(database.db, sameDatabase)
        case .postgresql:
            sameDatabase = database.db.replacingOccurrences(of: "postgresql://", with: "postgres://") + "&application_name=cron"
        }
        let first = try sandbox.start(opshExecutable, ["run", "--db", database.db, script, "hold"])
        defer {
            FileManager.default.createFile(atPath: release, contents: Data())
            let ended = sandbox.finish(first)
            #expect(ended.status == 0, "\(ended.stderr)")
        }
        #expect(waitUntil(10) { FileManager.default.fileExists(atPath: flag) })

        try FileManager.default.createDirectory(atPath: sandbox.root + "/cron", withIntermediateDirectories: true)
        let cron = ["PATH": "/usr/bin:/bin", "HOME": sandbox.root + "/cron", "LANG": "C.UTF-8"]
        let second = try sandbox.run(opshExecutable, ["run", "--db", sameDatabase, sameScript], environment: cron)
        #expect(second.status == 75, "\(second.stderr)")
        #expect(second.stderr.contains("another run holds the lock of \(script) on"), "\(second.stderr)")
        #expect(second.stderr.contains("pid \(first.pid)"), "\(second.stderr)")
        #expect(second.stdout == "")
        // Control: without the lock the same run goes ahead.
        let unlocked = try sandbox.run(opshExecutable, ["run", "--no-lock", "--db", sameDatabase, sameScript], environment: cron)
        #expect(unlocked.status == 0, "\(unlocked.stderr)")
        #expect(unlocked.stdout == "done\n")
    }

    /// A run right after another of the same script (cron every minute, a
    /// dry run then the run) takes the lock: the lock of a run that ended is
    /// free, also on PostgreSQL, where the server releases it only once it
    /// notices the ended process's connection closed. Thirty runs back to back.
    @Test(arguments: Engine.allCases)
    func aRunRightAfterAnotherOfTheSameScriptTakesItsLock(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
        let script = try sandbox.script("every-minute.lua", "-- @every 1m\nprint(db.value('SELECT count(*) FROM projects'))")
        for round in 1...30 {
            let run = try sandbox.opsh(["run", script], on: db)
            #expect(run.status == 0, "round \(round): \(run.stderr)")
            guard run.status == 0 else { break }
        }
    }

    /// The run that creates the database (`--create`, the file not there
    /// when it took its lock) and a run of the same script that starts once
    /// the file exists do not overlap: the first holds the lock of the
    /// file's entry in its folder, which the second looks for. SQLite only:
    /// a PostgreSQL database exists on the server before any run, so the
    /// advisory lock covers the first run as any other.
    @Test func theRunThatCreatesTheDatabaseHoldsTheLockToo() throws {
        let sandbox = try Sandbox()
        let database = sandbox.root + "/fresh/folder/new.sqlite"
        let flag = sandbox.root + "/started"
        let release = sandbox.root + "/release"
        let script = try sandbox.script("nightly.lua", """
            if arg[1] == "hold" then
              db.value("SELECT 1")
              io.open("\(flag)", "w"):close()
              while not io.open("\(release)") do opsh.wait(0.02) end
            end
            print("done")
            """)
        let first = try sandbox.start(opshExecutable, ["run", "--db", database, "--create", script, "hold"])
        defer {
            FileManager.default.createFile(atPath: release, contents: Data())
            #expect(sandbox.finish(first).status == 0)
        }
        #expect(waitUntil(10) { FileManager.default.fileExists(atPath: flag) })
        #expect(FileManager.default.fileExists(atPath: database))
        let second = try sandbox.run(opshExecutable, ["run", "--db", sandbox.root + "/fresh/./folder/new.sqlite", script])
        #expect(second.status == 75, "\(second.stderr)")
        #expect(second.stderr.contains("another run holds the lock of \(script) on"), "\(second.stderr)")
        // Control: without the lock it runs.
        let unlocked = try sandbox.run(opshExecutable, ["run", "--no-lock", "--db", database, script])
        #expect(unlocked.status == 0, "\(unlocked.stderr)")
    }

    /// Another script, or the same script on another database, is not
    /// held up by the lock: it is per script and database (both engines).
    @Test(arguments: Engine.allCases)
    func theRunLockIsPerScriptAndDatabaseOnBothEngines(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let other = try TestDatabase.empty(engine, in: sandbox.root + "/other")
        #expect(try sandbox.opsh(["--create", "-e", "return 1"], on: other).status == 0)
        let flag = sandbox.root + "/started"
        let release = sandbox.root + "/release"
        let script = try sandbox.script("nightly.lua", """
            if arg[1] == "hold" then
              io.open("\(flag)", "w"):close()
              while not io.open("\(release)") do opsh.wait(0.02) end
            end
            print("done")
            """)
        let another = try sandbox.script("hourly.lua", "print('done')")
        let first = try sandbox.start(opshExecutable, ["run", "--db", database.db, script, "hold"])
        defer {
            FileManager.default.createFile(atPath: release, contents: Data())
            #expect(sandbox.finish(first).status == 0)
        }
        #expect(waitUntil(10) { FileManager.default.fileExists(atPath: flag) })
        for (arguments, what) in [(["run", "--db", other.db, script], "the same script on another database"),
                                  (["run", "--db", database.db, another], "another script on the same database")] {
            let result = try sandbox.run(opshExecutable, arguments)
            #expect(result.status == 0, "\(what): \(result.stderr)")
            #expect(result.stdout == "done\n", "\(what)")
        }
        let same = try sandbox.run(opshExecutable, ["run", "--db", database.db, script])
        #expect(same.status == 75, "\(same.stderr)")
    }

    @Test func scriptsFromStdinAndTheirArguments() throws {
        let sandbox = try Sandbox()
        let piped = try sandbox.opsh(["run", "-"], stdin: "print(1 + 1)\nreturn 'x'\n")
        #expect(piped.status == 0)
        #expect(piped.stdout == "2\nx\n")
        // opsh without a terminal on stdin runs what it reads.
        let bare = try sandbox.opsh([], stdin: "print('no prompt')\n")
        #expect(bare.stdout == "no prompt\n")
        #expect(bare.stderr == "")
        let script = try sandbox.script("args.lua", "#!/usr/bin/env opsh\nprint(arg[0], arg[1], arg[2], select('#', ...), ...)\n")
        let result = try sandbox.opsh(["run", script, "one", "--two"])
        #expect(result.stdout == "\(script)\tone\t--two\t2\tone\t--two\n")
    }

    @Test func jsonOutput() throws {
        let sandbox = try Sandbox()
        let result = try sandbox.opsh(["--json", "-e", """
            return db.query("SELECT 1 AS id, NULL AS note, 'x' AS api_key UNION ALL SELECT 2, 'n', 'sk-live-0123456789abcd'"),
                   {b = 2, a = {1, 2}}, "text", nil
            """])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == """
            [{"id":1,"note":null,"api_key":"••••"},{"id":2,"note":"n","api_key":"••••abcd"}]
            {"a":[1,2],"b":2}
            "text"
            null

            """)
    }

    // MARK: Both engines

    /// A dry run rolls back and says, per table, what it would have
    /// changed; the rows are as they were.
    @Test(arguments: Engine.allCases) func aDryRunReportsChangesAndLeavesTheRowsAsTheyWere(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
        try db.sql("""
            INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt) VALUES ('com.example.kept', 'Kept', 'Kept', 'u', 1);
            INSERT INTO telemetry (event, created_at) VALUES ('a', 1), ('b', 2);
            """)
        let before = try db.sql("SELECT bundleIdentifier, name FROM projects ORDER BY 1")
        let script = try sandbox.script("repair.lua", """
            \(Self.insertProject.replacingOccurrences(of: "...", with: "'com.example.new'"))
            db.exec("UPDATE projects SET name = 'Renamed' WHERE bundleIdentifier = 'com.example.kept'")
            db.exec("DELETE FROM telemetry WHERE event = 'a'")
            db.exec("UPDATE telemetry SET event = 'c'")
            return db.value("SELECT count(*) FROM projects"), db.value("SELECT count(*) FROM telemetry")
            """)
        let result = try sandbox.opsh(["run", "--dry-run", script], on: db)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "2\t1\n")
        #expect(result.stderr.contains("projects: 1 inserted, 1 updated, 0 deleted"), "\(result.stderr)")
        #expect(result.stderr.contains("telemetry: 0 inserted, 1 updated, 1 deleted"), "\(result.stderr)")
        #expect(try db.sql("SELECT bundleIdentifier, name FROM projects ORDER BY 1") == before)
        #expect(try db.sql("SELECT event FROM telemetry ORDER BY id") == "a\nb")
    }

    /// `--read-only`: a write is refused by the engine (SQLite's read-only
    /// flag, the server's read-only transaction) and the rows stay.
    /// Control: the same write without it.
    @Test(arguments: Engine.allCases) func readOnlyRefusesWrites(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
        try db.sql("INSERT INTO telemetry (event, created_at) VALUES ('kept', 1)")
        let result = try sandbox.opsh(["--read-only", "-e", "db.exec(\"DELETE FROM telemetry\")"], on: db)
        #expect(result.status == 1)
        #expect(result.stderr.contains(engine == .sqlite ? "attempt to write a readonly database"
                                       : "ERROR 25006: cannot execute DELETE in a read-only transaction"), "\(result.stderr)")
        #expect(try db.count("telemetry") == 1)
        let writable = try sandbox.opsh(["-e", "return db.exec('DELETE FROM telemetry')"], on: db)
        #expect(writable.status == 0, "\(writable.stderr)")
        #expect(try db.count("telemetry") == 0)
    }

    /// The same script prints the same on SQLite and PostgreSQL:
    /// placeholders, 64-bit integers, bytes, NULL, booleans, rows keyed by
    /// the schema's spelling; `db.engine` says which engine runs.
    @Test(arguments: Engine.allCases) func aScriptRunsUnchangedOnBothEngines(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
        let script = try sandbox.script("portable.lua", """
            db.exec("INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt) VALUES (?, ?, ?, ?, ?)",
                    "com.example.app", "App", "App", "/srv/app", 1700000000.5)
            local p = db.first("SELECT * FROM projects WHERE bundleIdentifier = :id", { id = "com.example.app" })
            print(p.bundleIdentifier, p.displayName, p.createdAt)
            print(db.value("SELECT ? + 0", math.maxinteger), db.value("SELECT ? + 0", math.mininteger))
            print(db.value("SELECT ?2 || ?1", "b", "a"))
            print(db.value("SELECT count(*) FROM projects WHERE name = ? OR name = ?", "App", db.NULL))
            print(db.value("SELECT EXISTS (SELECT 1 FROM projects)"), db.value("SELECT NULL") == nil)
            print(#db.value("SELECT ?", db.blob("a\\0\\255")))
            print((db.exec("UPDATE projects SET name = 'Renamed' WHERE bundleIdentifier LIKE 'com.%'")))
            local n = 0
            for row in db.rows("SELECT bundleIdentifier, name FROM projects ORDER BY bundleIdentifier") do n = n + 1; print(row.name) end
            print(n, db.inTransaction())
            local both = "FROM (SELECT 1 AS x UNION ALL SELECT 2) AS t"
            print(db.value("SELECT sum(CAST(x AS BIGINT)) " .. both), db.value("SELECT avg(x) " .. both), math.type(db.value("SELECT sum(CAST(x AS BIGINT)) " .. both)))
            print(db.engine)
            """)
        let run = try sandbox.opsh(["run", script], on: db)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout == """
            com.example.app\tApp\t1700000000.5
            9223372036854775807\t-9223372036854775808
            ab
            1
            1\ttrue
            3
            1
            Renamed
            1\tfalse
            3\t1.5\tinteger
            \(engine.rawValue)

            """)
    }

    /// A statement that fails inside `db.transaction`, caught by pcall,
    /// does not doom the transaction: the writes before and after it are
    /// kept. On PostgreSQL that takes a savepoint per statement (psql's
    /// ON_ERROR_ROLLBACK): the control shows the server refusing the rest
    /// of a transaction after a failure.
    @Test(arguments: Engine.allCases) func aCaughtFailureDoesNotDoomTheTransaction(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
        let run = try sandbox.opsh(["-e", """
            db.transaction(function()
              db.exec("INSERT INTO telemetry (event, created_at) VALUES ('before', 1)")
              local ok, err = pcall(db.exec, "INSERT INTO telemetry (event, created_at) VALUES (NULL, 2)")
              print(ok, err)
              db.exec("INSERT INTO telemetry (event, created_at) VALUES ('after', 3)")
            end)
            """], on: db)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains(engine == .sqlite ? "false\tSQL error: NOT NULL constraint failed: telemetry.event"
                                    : "false\tERROR 23502: null value in column \"event\""), "\(run.stdout)")
        #expect(try db.sql("SELECT event FROM telemetry ORDER BY id") == "before\nafter")
        guard engine == .postgresql else { return }

        // Control: the same statements in one transaction through psql.
        let doomed = #expect(throws: ShellError.self) {
            try db.sql("""
                BEGIN;
                INSERT INTO telemetry (event, created_at) VALUES ('x', 1);
                DO $$ BEGIN BEGIN INSERT INTO telemetry (event, created_at) VALUES (NULL, 2); EXCEPTION WHEN others THEN RAISE; END; END $$;
                COMMIT;
                """)
        }
        #expect(doomed?.output.contains("null value in column \"event\"") == true)
        #expect(try db.count("telemetry") == 2)
    }

    /// A dry run cannot be committed by the script: a COMMIT, in any
    /// spelling, alone or in a script of several statements, with what
    /// might switch PostgreSQL's guard off tried first, is refused or
    /// rolls the whole dry run back, and the row stays. (SQLite refuses
    /// transaction control when the statement is prepared, so a caught
    /// COMMIT leaves its dry run going; PostgreSQL's guard fails at the
    /// commit, which ends the dry run.) Each attack is run again without
    /// --dry-run as its control: there it deletes the row.
    @Test(arguments: Engine.allCases) func aDryRunCannotBeCommittedByTheScript(_ engine: Engine) throws {
        let attacks = [
            "db.exec(\"DELETE FROM telemetry\"); db.exec(\"COMMIT\")",
            "db.exec(\"DELETE FROM telemetry; END\")",
            "db.exec(\"DELETE FROM telemetry\"); db.exec(\"/* done */ CoMmIt AND CHAIN\")",
            "db.exec(\"DELETE FROM telemetry\"); pcall(db.exec, \"ALTER TABLE pg_temp.opsh_dry_run DISABLE TRIGGER ALL\"); "
                + "pcall(db.exec, \"DISCARD TEMP\"); pcall(db.exec, \"SET CONSTRAINTS ALL IMMEDIATE\"); db.exec(\"COMMIT\")",
            "db.exec(\"DELETE FROM telemetry\"); pcall(db.exec, \"COMMIT\"); db.exec(\"DELETE FROM telemetry\")",
        ]
        let reasons = engine == .sqlite
            ? ["transaction control (BEGIN, COMMIT, END, ROLLBACK, SAVEPOINT, RELEASE) is not run through db", "near \"AND\": syntax error",
               "opsh: dry run: rolled back"]
            : ["--dry-run: the statement tried to commit the dry run", "--dry-run: the dry run's transaction was rolled back"]
        let sandbox = try Sandbox()
        for attack in attacks {
            let db = try TestDatabase.empty(engine, in: sandbox.root + "/\(UUID().uuidString)")
            #expect(try sandbox.opsh(["--create", "-e", "db.exec(\"INSERT INTO telemetry (event, created_at) VALUES ('kept', 1)\")"],
                                     on: db).status == 0)
            let dry = try sandbox.opsh(["--dry-run", "-e", attack], on: db)
            #expect(engine == .sqlite || dry.status != 0, "\(attack): \(dry.stdout)")
            #expect(reasons.contains { dry.stderr.contains($0) }, "\(attack): \(dry.stderr)")
            #expect(try db.count("telemetry") == 1, "\(attack)")
            // Control: the same script without --dry-run deletes the row
            // (the DELETE commits on its own; a script of several
            // statements is one transaction, which its END cannot commit
            // either: TransactionControlTests).
            let committed = try sandbox.opsh(["-e", attack], on: db)
            #expect(try db.count("telemetry") == (attack.contains("; END") ? 1 : 0), "\(attack): \(committed.stderr)")
        }
        // The guard leaves nothing behind and is not in the summary.
        let db = try sandbox.createdDatabase(engine)
        try db.sql("INSERT INTO telemetry (event, created_at) VALUES ('kept', 1)")
        let dry = try sandbox.opsh(["--dry-run", "-e", "db.exec('DELETE FROM telemetry')"], on: db)
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stderr.contains("telemetry: 0 inserted, 0 updated, 1 deleted"), "\(dry.stderr)")
        #expect(!dry.stderr.contains("opsh_dry_run"), "\(dry.stderr)")
        #expect(try db.count("telemetry") == 1)
    }

    /// `db.exec` without values runs a script of several statements: one at
    /// a time, all or nothing; `;` inside literals and comments (and on
    /// PostgreSQL dollar quotes and E'' strings, its own syntax) does not
    /// split it.
    @Test(arguments: Engine.allCases) func severalStatementsRunAsOneScript(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
        let (quoted, escaped) = engine == .sqlite ? ("'c;d'", "'e;f'") : ("$$c;d$$", "E'e\\;f'")
        let run = try sandbox.opsh(["-e", """
            db.exec([[
              CREATE TABLE notes (body text);  -- a comment; with a semicolon
              INSERT INTO notes VALUES ('a;b'), (\(quoted)); /* ; */
              INSERT INTO notes VALUES (\(escaped));
            ]])
            local bodies = {}
            for row in db.rows("SELECT body FROM notes ORDER BY body") do bodies[#bodies + 1] = row.body end
            print(table.concat(bodies, "|"))
            print(pcall(db.exec, "INSERT INTO notes VALUES ('g'); INSERT INTO nowhere VALUES (1)"))
            print(db.value("SELECT count(*) FROM notes"))
            """], on: db)
        #expect(run.status == 0, "\(run.stderr)")
        let lines = run.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first == "a;b|c;d|e;f", "\(run.stdout)")
        // The failing script kept nothing of itself: still three rows.
        #expect(lines.count == 3 && lines[1].contains("false") && lines[1].contains("nowhere"), "\(run.stdout)")
        #expect(lines.last == "3", "\(run.stdout)")
    }

    /// Errors say where (the script's file and line), quote the SQL and
    /// give the engine's reason (PostgreSQL's with its SQLSTATE); undo() in
    /// a script says why it cannot be and what to use instead.
    @Test(arguments: Engine.allCases) func errorsSayWhereAndWhat(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(engine)
        let script = try sandbox.script("broken.lua", "local a = 1\nlocal n = db.value('SELECT count(*) FROM nope')\n")
        let run = try sandbox.opsh(["run", script], on: db)
        #expect(run.status == 1)
        #expect(run.stderr.contains("broken.lua:2:"), "\(run.stderr)")
        #expect(run.stderr.contains(engine == .sqlite ? "SQL error: no such table: nope" : "ERROR 42P01: relation \"nope\" does not exist"),
                "\(run.stderr)")
        #expect(run.stderr.contains("SELECT count(*) FROM nope"), "\(run.stderr)")

        let undo = try sandbox.opsh(["-e", "undo()"], on: db)
        #expect(undo.status == 1)
        switch engine {
        case .sqlite:
            #expect(undo.stderr.contains("(command line):1: undo() takes back chunks typed at the interactive shell's prompt; a script's changes cannot be undone: try it with --dry-run first"), "\(undo.stderr)")
        case .postgresql:
            #expect(undo.stderr.contains("(command line):1: undo() is not available on PostgreSQL: it takes a chunk back by applying the inverse of the changeset SQLite's session extension recorded"), "\(undo.stderr)")
            #expect(undo.stderr.contains("start the shell with --dry-run"), "\(undo.stderr)")
        }
    }

    /// `opsh migrate` makes the schema of a database that has none only
    /// with --create; a second run finds nothing to do. (On SQLite the
    /// file --create makes is migrated as it is opened, so migrate finds
    /// nothing left; PostgreSQL's names what it applied.)
    @Test(arguments: Engine.allCases) func migrateCreatesTheSchemaOnlyWhenAsked(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let db = try TestDatabase.empty(engine, in: sandbox.root)
        let refused = try sandbox.opsh(["migrate"], on: db)
        #expect(refused.status == 3, "\(refused.stderr)")
        switch engine {
        case .sqlite:
            #expect(refused.stderr.contains("no database at \(db.db)"), "\(refused.stderr)")
            #expect(!FileManager.default.fileExists(atPath: db.db))
        case .postgresql:
            #expect(refused.stderr.contains("has no opsh schema"), "\(refused.stderr)")
            #expect(try db.count("pg_tables", where: "schemaname = 'public'") == 0)
        }
        let migrate = try sandbox.opsh(["migrate", "--create"], on: db)
        #expect(migrate.status == 0, "\(migrate.stderr)")
        #expect(migrate.stderr.contains(engine == .sqlite ? "nothing to migrate"
                : "applied 001_initialSchema, 002_indexes, 003_audit, 004_runners, 005_auditChain, 006_schemeEnvironment, 007_runnerRegistry, 008_pinnedFunctions"), "\(migrate.stderr)")
        #expect(try db.sql("SELECT count(*) FROM projects") == "0")
        let again = try sandbox.opsh(["migrate"], on: db)
        #expect(again.status == 0, "\(again.stderr)")
        #expect(again.stderr.contains("nothing to migrate"), "\(again.stderr)")
    }

    // MARK: PostgreSQL's own

    /// PostgreSQL only: a database on a server exists before opsh, with or
    /// without opsh's schema (an SQLite file opsh makes itself, or is
    /// refused: DatabasePathTests). The schema is made only in an empty
    /// database and only with --create, and has SQLite's tables.
    @Test func theSchemaIsCreatedOnlyInAnEmptyPostgresDatabaseAndOnlyWhenAsked() throws {
        let sandbox = try Sandbox()
        let server = try PostgresServer.shared()
        let db = try TestDatabase.empty(.postgresql, in: sandbox.root)
        let without = try sandbox.opsh(["-e", "return 1"], on: db)
        #expect(without.status == 3)
        #expect(without.stderr.contains("has no opsh schema: pass --create"), "\(without.stderr)")
        #expect(try db.count("pg_tables", where: "schemaname = 'public'") == 0)

        // Control: the same database with --create gets every migration by name.
        let created = try sandbox.opsh(["--create", "-e", "return db.value('SELECT count(*) FROM opsh_migrations')"], on: db)
        #expect(created.status == 0, "\(created.stderr)")
        #expect(try db.sql("SELECT string_agg(identifier, ',' ORDER BY identifier) FROM opsh_migrations")
                == "001_initialSchema,002_indexes,003_audit,004_runners,005_auditChain,006_schemeEnvironment,007_runnerRegistry,008_pinnedFunctions")
        // The same tables as on SQLite (names folded), and the bookkeeping.
        let sqlite = try sandbox.createdDatabase(.sqlite)
        let onSQLite = try sqlite.sql("""
            SELECT lower(name) FROM sqlite_master WHERE type = 'table'
            AND name NOT IN ('grdb_migrations', 'sqlite_sequence', 'opsh_lua_migrations') ORDER BY 1
            """).split(separator: "\n").map(String.init) + ["opsh_migrations"]
        let onPostgres = try db.sql("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")
            .split(separator: "\n").map(String.init)
        #expect(onPostgres == onSQLite.sorted())

        // A database with tables of its own is refused and left as it was.
        let theirs = TestDatabase(engine: .postgresql, db: try server.makeDatabase())
        try theirs.sql("CREATE TABLE orders (id int); INSERT INTO orders VALUES (1)")
        let refused = try sandbox.opsh(["--create", "-e", "return 1"], on: theirs)
        #expect(refused.status == 3)
        #expect(refused.stderr.contains("has 1 table(s) but no opsh schema"), "\(refused.stderr)")
        #expect(try theirs.sql("SELECT string_agg(tablename, ',') FROM pg_tables WHERE schemaname = 'public'") == "orders")
    }

    /// PostgreSQL only: these are the server's ways around a read-only
    /// transaction (SQLite's --read-only is the file's read-only flag,
    /// readOnlyRefusesWrites). Each is refused with the server's reason;
    /// the rows stay.
    @Test func readOnlyHoldsAgainstThePostgresWaysAroundIt() throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(.postgresql)
        try db.sql("INSERT INTO telemetry (event, created_at) VALUES ('kept', 1)")
        let attacks = [
            ("DELETE FROM telemetry", "25006"),
            ("delete /* a comment */ FROM TELEMETRY", "25006"),
            ("SET transaction_read_only = off", "25001"),
            ("SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE", ""),
            ("COMMIT", ""),
            ("DELETE FROM telemetry", "25006"),
            ("DO $$ BEGIN DELETE FROM telemetry; END $$", "25006"),
            ("CREATE TABLE t (a int)", "25006"),
            ("SELECT nextval(pg_get_serial_sequence('telemetry', 'id'))", "25006"),
        ]
        let lua = attacks.map { "print(select(2, pcall(db.exec, \"\($0.0)\")))" }.joined(separator: "\n")
            + "\ndb.transaction(function() print(select(2, pcall(db.exec, 'DELETE FROM telemetry'))) end)"
        let run = try sandbox.opsh(["--read-only", "-e", lua], on: db)
        #expect(run.status == 0, "\(run.stderr)")
        let lines = run.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        for (offset, (sql, code)) in attacks.enumerated() where !code.isEmpty {
            #expect(lines[offset].contains("ERROR \(code)"), "\(sql): \(lines[offset])")
        }
        #expect(lines[attacks.count].contains("ERROR 25006"), "\(run.stdout)")
        #expect(try db.count("telemetry") == 1)
        #expect(try db.count("pg_tables", where: "tablename = 't'") == 0)
    }

    /// PostgreSQL only: its statements run on the server, which must not
    /// be left running one after opsh gives up (SQLite's run in opsh's own
    /// process: aTimeoutExits124AndRollsBackTheOpenTransaction). `--timeout`
    /// cancels the statement on the server.
    @Test func aTimeoutCancelsTheStatementOnTheServer() throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(.postgresql)
        let name = PostgresServer.databaseName(of: db.db)
        let sleeping = "SELECT count(*) FROM pg_stat_activity WHERE datname = '\(name)' AND query LIKE '%pg_sleep(30)%' AND state = 'active' AND pid <> pg_backend_pid()"
        let started = Date()
        let child = try sandbox.start(opshExecutable, ["--db", db.db, "--timeout", "3", "-e", "db.exec('SELECT pg_sleep(30)')"])
        // The control: while opsh waits, the server runs the statement.
        #expect(try waitUntil(10) { try db.sql(sleeping) == "1" })
        let run = sandbox.finish(child)
        #expect(run.status == 124, "\(run.stderr)")
        #expect(run.stderr.contains("timed out"))
        #expect(Date().timeIntervalSince(started) < 15)
        // After: the server is not left running it.
        #expect(try waitUntil(2) { try db.sql(sleeping) == "0" })
    }
}
