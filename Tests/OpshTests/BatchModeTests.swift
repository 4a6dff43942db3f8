import Foundation
import Testing

/// `opsh -e`, `opsh run FILE`, `opsh run -` as cron runs them: exit
/// statuses, output on the right stream, dry runs, timeouts, the lock.
@Suite struct BatchModeTests {
    static let insertProject = """
        db.exec("INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt) VALUES (?, 'App', 'App', 'https://example.com/app.git', 0)", ...)
        """

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
                usleep(500_000)
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
                io.open("\(flag)", "w"):close()
                db.transaction(function()
                  \(Self.insertProject.replacingOccurrences(of: "...", with: "'com.example.signal'"))
                  while true do pcall(function() while true do end end) end
                end)
                """]))
            #expect(waitUntil(5) { FileManager.default.fileExists(atPath: flag) })
            usleep(100_000)
            kill(process.pid, signal)
            let result = sandbox.finish(process)
            #expect(result.status == status, "\(result.stderr)")
            #expect(result.stderr.contains("rolled back"))
        }
        #expect(try sandbox.sqlite("SELECT count(*) FROM projects") == "0")
    }

    @Test func aDryRunReportsChangesAndLeavesTheRowsAsTheyWere() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        try sandbox.sqlite("INSERT INTO projects VALUES ('com.example.kept', 'Kept', 'Kept', 'u', 1)")
        let before = try sandbox.sqlite("SELECT * FROM projects ORDER BY 1")
        let script = try sandbox.script("repair.lua", """
            \(Self.insertProject.replacingOccurrences(of: "...", with: "'com.example.new'"))
            db.exec("UPDATE projects SET name = 'Renamed' WHERE bundleIdentifier = 'com.example.kept'")
            return db.value("SELECT count(*) FROM projects")
            """)
        let result = try sandbox.opsh(["run", "--dry-run", script])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "2\n")
        #expect(result.stderr.contains("projects: 1 inserted, 1 updated, 0 deleted"))
        #expect(try sandbox.sqlite("SELECT * FROM projects ORDER BY 1") == before)
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

    @Test func readOnlyRefusesWrites() throws {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        let result = try sandbox.opsh(["--read-only", "-e", "db.exec(\"DELETE FROM projects\")"])
        #expect(result.status == 1)
        #expect(result.stderr.contains("readonly"))
    }
}
