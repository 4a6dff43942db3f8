import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A session whose server connection is lost (issue 25, "Reconnect"):
/// outside a transaction the next statement connects again and says so;
/// a transaction in flight fails saying the server rolled it back, and
/// the statement after it works. PostgreSQL only: an SQLite file has no
/// connection that a server can end.
@Suite struct ReconnectTests {
    /// `pg_terminate_backend` of the session's own backend (what an
    /// operator's kill of the session does), once outside a transaction
    /// and once inside one.
    @Test func aSessionEndedByTheServerConnectsAgainAndATransactionInFlightSaysItWasRolledBack() throws {
        let sandbox = try Sandbox()
        let db = try sandbox.createdDatabase(.postgresql)
        let run = try sandbox.opsh(["-e", """
            local before = db.value("SELECT pg_backend_pid()")
            local ok, err = pcall(db.value, "SELECT pg_terminate_backend(pg_backend_pid())")
            print("terminated", ok)
            print("same backend", db.value("SELECT pg_backend_pid()") == before)
            local ok2, err2 = pcall(db.transaction, function()
              db.exec("INSERT INTO telemetry (event, created_at) VALUES ('lost', 1)")
              db.value("SELECT pg_terminate_backend(pg_backend_pid())")
            end)
            print("transaction", ok2, err2)
            db.exec("INSERT INTO telemetry (event, created_at) VALUES ('after', 1)")
            print("lost rows", db.value("SELECT count(*) FROM telemetry WHERE event = 'lost'"))
            """], on: db)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("terminated\tfalse"), "\(run.stdout)")
        #expect(run.stdout.contains("same backend\tfalse"), "\(run.stdout)")
        #expect(run.stdout.contains("transaction\tfalse"), "\(run.stdout)")
        #expect(run.stdout.contains("the server rolled the transaction back, nothing of it was kept"), "\(run.stdout)")
        #expect(run.stdout.contains("lost rows\t0"), "\(run.stdout)")
        #expect(run.stderr.contains("opsh: note: the connection to postgresql://"), "\(run.stderr)")
        #expect(run.stderr.contains("connected again (server process"), "\(run.stderr)")
        #expect(try db.count("telemetry", where: "event = 'after'") == 1)
        // The run's audit row was written after all that.
        #expect(try db.sql("SELECT count(*) FROM opsh_audit WHERE status = 0") == "1")
    }

    /// The server restarted (fast shutdown: every session cut) between two
    /// statements of a script: the second runs on a new connection, the
    /// run ends 0 and its audit row is written. Control: the same script
    /// without the restart says nothing about connecting again.
    @Test func aServerRestartBetweenTwoStatementsOfAScriptIsNotAnError() throws {
        let server = try PostgresServer.start(in: "/tmp/opsh-pgr-\(getpid())-\(UInt16.random(in: 0...UInt16.max))", listen: [])
        defer { server.stop() }
        let sandbox = try Sandbox()
        let db = TestDatabase(engine: .postgresql, db: try server.makeDatabase())
        #expect(try sandbox.opsh(["--create", "-e", "return 1"], on: db).status == 0)
        let ready = sandbox.root + "/ready"
        let go = sandbox.root + "/go"
        let script = """
            print(db.value("SELECT 1"))
            io.open("\(ready)", "w"):close()
            while not io.open("\(go)") do opsh.wait(0.05) end
            db.exec("INSERT INTO telemetry (event, created_at) VALUES ('after restart', 1)")
            print(db.value("SELECT 2"))
            """
        let child = try sandbox.start(opshExecutable, ["--db", db.db, "-e", script])
        #expect(waitUntil(30) { FileManager.default.fileExists(atPath: ready) })
        try server.halt()
        try server.resume()
        try Data().write(to: URL(fileURLWithPath: go))
        let started = Date()
        let result = sandbox.finish(child)
        #expect(Date().timeIntervalSince(started) < 20, "the script took \(Date().timeIntervalSince(started)) s after the restart")
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "1\n2\n", "\(result.stdout)")
        #expect(result.stderr.contains("was lost (the server restarted or ended the session); connected again"), "\(result.stderr)")
        #expect(try db.count("telemetry", where: "event = 'after restart'") == 1)
        #expect(try db.sql("SELECT count(*) FROM opsh_audit WHERE status = 0") == "1",
                "\((try? db.sql("SELECT mode, status, code FROM opsh_audit")) ?? "")")

        // Control: no restart, no note.
        try FileManager.default.removeItem(atPath: ready)
        let quiet = try sandbox.opsh(["-e", script], on: db)
        #expect(quiet.status == 0 && quiet.stdout == "1\n2\n", "\(quiet.stderr)")
        #expect(!quiet.stderr.contains("connected again"), "\(quiet.stderr)")
    }
}
