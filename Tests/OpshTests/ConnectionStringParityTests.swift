import Foundation
import Testing

/// libpq's connection conventions, with psql as the reference (issue 25,
/// item 6): each case runs `psql -X -At -w -d CONNECTION -c QUERY` and
/// `opsh --db CONNECTION -e 'print(db.value(QUERY))'` with the same
/// environment (HOME a folder of the case's own, `PG*` variables set per
/// case, the case's password and service files written there) and expects
/// the same server, role and database from both, or both to refuse.
///
/// PostgreSQL only: these are PostgreSQL's conventions (an SQLite `--db` is
/// a file's path). The servers: ``PostgresPasswordServer`` (TCP on
/// 127.0.0.1, password logins for `scram_user` and `md5_user`; its socket
/// trusts the superuser), and a second throwaway server whose every session
/// is read-only (`default_transaction_read_only = on`), for
/// `target_session_attrs`. psql's libpq here is PostgreSQL 15's, which has
/// no `load_balance_hosts` (PostgreSQL 16): PostgresWireTests holds that.
@Suite struct ConnectionStringParityTests {
    /// What both print: role, database, the server's socket folder (which
    /// server), and the TCP port (or `socket`).
    static let query = "SELECT current_user || '|' || current_database() || '|' || current_setting('unix_socket_directories') || '|' || coalesce(inet_server_port()::text, 'socket')"

    struct File: Sendable {
        var path: String
        var text: String
        var mode: Int16 = 0o600
    }

    enum Outcome: Sendable {
        /// Both reach this role, database, server (`PW` or `RO`) and
        /// transport (`tcp` or `socket`).
        case reaches(user: String, database: String, server: String, tcp: Bool)
        /// Both fail; psql's and opsh's messages contain these.
        case refused(psql: String, opsh: String)
    }

    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        /// The connection string, with {PORT} (the password server's TCP
        /// port), {DEAD} (a port nothing listens on), {PW} and {RO} (the
        /// servers' socket folders), {ROOT} (the superuser), {HOME}.
        var connection: String
        var environment: [String: String] = [:]
        var files: [File] = []
        /// An expression both must also agree on (`current_setting(…)`).
        var also: String? = nil
        var outcome: Outcome
        var testDescription: String { name }
    }

    static let scram = "user=scram_user password='scram secret'"

    static let cases: [Case] = [
        // URLs
        Case(name: "postgresql:// URL with every part", connection: "postgresql://scram_user:scram%20secret@127.0.0.1:{PORT}/parity",
             outcome: .reaches(user: "scram_user", database: "parity", server: "PW", tcp: true)),
        Case(name: "postgres:// is the same", connection: "postgres://scram_user:scram%20secret@127.0.0.1:{PORT}/parity",
             outcome: .reaches(user: "scram_user", database: "parity", server: "PW", tcp: true)),
        Case(name: "URL query parameters", connection: "postgresql://127.0.0.1:{PORT}?user=scram_user&password=scram%20secret&dbname=parity",
             outcome: .reaches(user: "scram_user", database: "parity", server: "PW", tcp: true)),
        Case(name: "URL with a percent-encoded socket folder", connection: "postgresql://{ROOT}@{PW_ENCODED}:{PORT}/paritymulti",
             outcome: .reaches(user: "{ROOT}", database: "paritymulti", server: "PW", tcp: false)),
        // Keyword/value strings
        Case(name: "keyword/value", connection: "host=127.0.0.1 port={PORT} \(scram) dbname=parity",
             outcome: .reaches(user: "scram_user", database: "parity", server: "PW", tcp: true)),
        Case(name: "keyword/value: blanks around =, a backslash-escaped space, a quoted value",
             connection: "  host = 127.0.0.1   port={PORT} user = scram_user password=scram\\ secret dbname = 'parity' ",
             outcome: .reaches(user: "scram_user", database: "parity", server: "PW", tcp: true)),
        Case(name: "keyword/value: a quote and a backslash escaped in quotes",
             connection: "host=127.0.0.1 port={PORT} \(scram) dbname=parity application_name='it\\'s a \\\\ name'",
             also: "current_setting('application_name')",
             outcome: .reaches(user: "scram_user", database: "parity", server: "PW", tcp: true)),
        Case(name: "keyword/value: an unterminated quote is refused",
             connection: "host=127.0.0.1 port={PORT} dbname='parity",
             outcome: .refused(psql: "unterminated quoted string", opsh: "is not closed")),
        // The environment
        Case(name: "PG* variables fill a bare postgresql://", connection: "postgresql://",
             environment: ["PGHOST": "127.0.0.1", "PGPORT": "{PORT}", "PGUSER": "scram_user", "PGPASSWORD": "scram secret", "PGDATABASE": "parity"],
             outcome: .reaches(user: "scram_user", database: "parity", server: "PW", tcp: true)),
        Case(name: "the string beats the environment", connection: "host=127.0.0.1 dbname=parity",
             environment: ["PGHOST": "/nowhere", "PGPORT": "{PORT}", "PGUSER": "scram_user", "PGPASSWORD": "scram secret", "PGDATABASE": "scram_user"],
             outcome: .reaches(user: "scram_user", database: "parity", server: "PW", tcp: true)),
        Case(name: "the database defaults to the user", connection: "host=127.0.0.1 port={PORT} \(scram)",
             outcome: .reaches(user: "scram_user", database: "scram_user", server: "PW", tcp: true)),
        Case(name: "the database defaults to PGUSER", connection: "postgresql://127.0.0.1:{PORT}",
             environment: ["PGUSER": "scram_user", "PGPASSWORD": "scram secret"],
             outcome: .reaches(user: "scram_user", database: "scram_user", server: "PW", tcp: true)),
        Case(name: "PGAPPNAME, PGOPTIONS, PGSSLMODE and PGCONNECT_TIMEOUT", connection: "host=127.0.0.1 port={PORT} \(scram) dbname=parity",
             environment: ["PGAPPNAME": "nightly report", "PGOPTIONS": "-c work_mem=5MB", "PGSSLMODE": "disable", "PGCONNECT_TIMEOUT": "7"],
             also: "current_setting('application_name') || ' ' || current_setting('work_mem')",
             outcome: .reaches(user: "scram_user", database: "parity", server: "PW", tcp: true)),
        Case(name: "a PGCONNECT_TIMEOUT that is not a number is refused", connection: "host=127.0.0.1 port={PORT} \(scram) dbname=parity",
             environment: ["PGCONNECT_TIMEOUT": "soon"],
             outcome: .refused(psql: "connect_timeout", opsh: "connect_timeout “soon” is not a number of seconds (in the environment variable PGCONNECT_TIMEOUT)")),
        Case(name: "PGSSLMODE=require against a server without TLS is refused", connection: "host=127.0.0.1 port={PORT} \(scram) dbname=parity",
             environment: ["PGSSLMODE": "require"],
             outcome: .refused(psql: "server does not support SSL", opsh: "the server does not support SSL (TLS), but sslmode=require requires it")),
        Case(name: "a wrong password is refused", connection: "host=127.0.0.1 port={PORT} user=scram_user password=wrong dbname=parity",
             outcome: .refused(psql: "password authentication failed", opsh: "password authentication failed")),
        // The password file
        Case(name: "~/.pgpass, an exact line", connection: "host=127.0.0.1 port={PORT} user=scram_user dbname=parity",
             files: [File(path: ".pgpass", text: "# host:port:database:user:password\n127.0.0.1:{PORT}:parity:scram_user:scram secret\n")],
             outcome: .reaches(user: "scram_user", database: "parity", server: "PW", tcp: true)),
        Case(name: "~/.pgpass, wildcards", connection: "postgresql://scram_user@127.0.0.1:{PORT}/parity",
             files: [File(path: ".pgpass", text: "*:*:*:md5_user:md5 secret\n*:*:*:scram_user:scram secret\n")],
             outcome: .reaches(user: "scram_user", database: "parity", server: "PW", tcp: true)),
        Case(name: "~/.pgpass, escapes in fields and in the password", connection: "host=127.0.0.1 port={PORT} user=scram_user dbname=parity",
             files: [File(path: ".pgpass", text: "127.0.0.1\\:{PORT}:*:*:not this one\n127.0.0.1:{PORT}:par\\ity:scram_user:scram\\ secret\n")],
             outcome: .reaches(user: "scram_user", database: "parity", server: "PW", tcp: true)),
        Case(name: "~/.pgpass, the first matching line wins", connection: "host=127.0.0.1 port={PORT} user=scram_user dbname=parity",
             files: [File(path: ".pgpass", text: "*:*:parity:scram_user:wrong\n*:*:*:scram_user:scram secret\n")],
             outcome: .refused(psql: "password retrieved from file \"{HOME}/.pgpass\"",
                               opsh: "password authentication failed for user \"scram_user\"\nHINT: the password was read from the password file {HOME}/.pgpass")),
        Case(name: "~/.pgpass readable by others is ignored, with a warning", connection: "host=127.0.0.1 port={PORT} user=scram_user dbname=parity",
             files: [File(path: ".pgpass", text: "*:*:*:scram_user:scram secret\n", mode: 0o644)],
             outcome: .refused(psql: "has group or world access", opsh: "has group or world access")),
        Case(name: "PGPASSFILE names another file", connection: "host=127.0.0.1 port={PORT} user=scram_user dbname=parity",
             environment: ["PGPASSFILE": "{HOME}/secrets/pgpass"],
             files: [File(path: ".pgpass", text: "*:*:*:scram_user:wrong\n"), File(path: "secrets/pgpass", text: "*:*:*:scram_user:scram secret\n")],
             outcome: .reaches(user: "scram_user", database: "parity", server: "PW", tcp: true)),
        // Services
        Case(name: "service= from ~/.pg_service.conf", connection: "service=nightly",
             files: [File(path: ".pg_service.conf", text: "# services\n[other]\nhost=/nowhere\n\n[nightly]\n  host=127.0.0.1\nport={PORT}\nuser=scram_user\npassword=scram secret\ndbname=parity   \n")],
             outcome: .reaches(user: "scram_user", database: "parity", server: "PW", tcp: true)),
        Case(name: "PGSERVICE and PGSERVICEFILE; the string beats the service", connection: "dbname=scram_user",
             environment: ["PGSERVICE": "nightly", "PGSERVICEFILE": "{HOME}/conf/services"],
             files: [File(path: "conf/services", text: "[nightly]\nhost=127.0.0.1\nport={PORT}\nuser=scram_user\npassword=scram secret\ndbname=parity\n")],
             outcome: .reaches(user: "scram_user", database: "scram_user", server: "PW", tcp: true)),
        Case(name: "the service beats the environment", connection: "postgresql://",
             environment: ["PGSERVICE": "nightly", "PGDATABASE": "scram_user", "PGHOST": "/nowhere"],
             files: [File(path: ".pg_service.conf", text: "[nightly]\nhost=127.0.0.1\nport={PORT}\nuser=scram_user\npassword=scram secret\ndbname=parity\n")],
             outcome: .reaches(user: "scram_user", database: "parity", server: "PW", tcp: true)),
        Case(name: "PGSYSCONFDIR/pg_service.conf when the user's file lacks the service", connection: "service=nightly",
             environment: ["PGSYSCONFDIR": "{HOME}/etc"],
             files: [File(path: ".pg_service.conf", text: "[other]\nhost=/nowhere\n"),
                     File(path: "etc/pg_service.conf", text: "[nightly]\nhost=127.0.0.1\nport={PORT}\nuser=scram_user\npassword=scram secret\ndbname=parity\n")],
             outcome: .reaches(user: "scram_user", database: "parity", server: "PW", tcp: true)),
        Case(name: "a service no file defines is refused", connection: "service=missing dbname=parity",
             environment: ["PGSYSCONFDIR": "{HOME}/etc"],
             outcome: .refused(psql: "definition of service \"missing\" not found", opsh: "service “missing” is not defined")),
        // Several hosts
        Case(name: "several hosts, the first down", connection: "host=127.0.0.1,127.0.0.1 port={DEAD},{PORT} \(scram) dbname=parity",
             outcome: .reaches(user: "scram_user", database: "parity", server: "PW", tcp: true)),
        Case(name: "a URL with several hosts, the first down", connection: "postgresql://scram_user:scram%20secret@127.0.0.1:{DEAD},127.0.0.1:{PORT}/parity",
             outcome: .reaches(user: "scram_user", database: "parity", server: "PW", tcp: true)),
        Case(name: "several hosts from PGHOST and PGPORT", connection: "dbname=parity",
             environment: ["PGHOST": "/nowhere,127.0.0.1", "PGPORT": "{PORT}", "PGUSER": "scram_user", "PGPASSWORD": "scram secret"],
             outcome: .reaches(user: "scram_user", database: "parity", server: "PW", tcp: true)),
        Case(name: "the first host never answers: connect_timeout passes to the next",
             connection: "host=127.0.0.1,127.0.0.1 port={SILENT},{PORT} connect_timeout=2 \(scram) dbname=parity",
             outcome: .reaches(user: "scram_user", database: "parity", server: "PW", tcp: true)),
        Case(name: "every host down: refused", connection: "host=127.0.0.1,/nowhere port={DEAD} \(scram) dbname=parity",
             outcome: .refused(psql: "Connection refused",
                               opsh: "could not connect to PostgreSQL: no server among the 2 host(s) tried: 127.0.0.1:{DEAD}: Connection refused; /nowhere/.s.PGSQL.{DEAD}: No such file or directory")),
        Case(name: "ports that do not pair with the hosts are refused", connection: "host=127.0.0.1,127.0.0.1,127.0.0.1 port={DEAD},{PORT} \(scram) dbname=parity",
             outcome: .refused(psql: "could not match 2 port numbers to 3 hosts", opsh: "2 ports for 3 host(s)")),
        // target_session_attrs: {RO}'s sessions are read-only, {PW}'s are not.
        Case(name: "target_session_attrs=read-write passes over a read-only server",
             connection: "host={RO},{PW} port=5432,{PORT} user={ROOT} dbname=paritymulti target_session_attrs=read-write",
             outcome: .reaches(user: "{ROOT}", database: "paritymulti", server: "PW", tcp: false)),
        Case(name: "target_session_attrs=read-only passes over a writable server",
             connection: "host={PW},{RO} port={PORT},5432 user={ROOT} dbname=paritymulti target_session_attrs=read-only",
             outcome: .reaches(user: "{ROOT}", database: "paritymulti", server: "RO", tcp: false)),
        Case(name: "PGTARGETSESSIONATTRS=read-write with only a read-only server: refused",
             connection: "host={RO} port=5432 user={ROOT} dbname=paritymulti",
             environment: ["PGTARGETSESSIONATTRS": "read-write"],
             outcome: .refused(psql: "session is read-only",
                               opsh: "no server with target_session_attrs=read-write among the 1 host(s) tried: Unix socket {RO}/.s.PGSQL.5432: session is read-only")),
        Case(name: "target_session_attrs=primary takes the first primary",
             connection: "postgresql://{ROOT}@/paritymulti?host={RO},{PW}&port=5432,{PORT}&target_session_attrs=primary",
             outcome: .reaches(user: "{ROOT}", database: "paritymulti", server: "RO", tcp: false)),
        Case(name: "target_session_attrs=standby with no standby: refused",
             connection: "host={PW},{RO} port={PORT},5432 user={ROOT} dbname=paritymulti target_session_attrs=standby",
             outcome: .refused(psql: "server is not in hot standby mode", opsh: "server is not in hot standby mode")),
        Case(name: "target_session_attrs=prefer-standby with no standby takes any",
             connection: "host=/nowhere,{PW},{RO} port=5432,{PORT},5432 user={ROOT} dbname=paritymulti target_session_attrs=prefer-standby",
             outcome: .reaches(user: "{ROOT}", database: "paritymulti", server: "PW", tcp: false)),
    ]

    @Test(arguments: cases)
    func psqlAndOpshReachTheSameServer(_ testCase: Case) throws {
        let servers = try ParityServers.shared()
        let folder = try Sandbox()
        let home = folder.root + "/home"
        func fill(_ text: String) -> String { servers.fill(text, home: home) }
        for file in testCase.files {
            let path = home + "/" + file.path
            try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try fill(file.text).write(toFile: path, atomically: false, encoding: .utf8)
            chmod(path, mode_t(file.mode))
        }
        var environment = folder.environment
        for (name, value) in testCase.environment { environment[name] = fill(value) }
        let connection = fill(testCase.connection)
        let query = Self.query + (testCase.also.map { " || '|' || \($0)" } ?? "")

        let psql = try ChildProcess.start(servers.psql, ["-X", "-At", "-w", "-d", connection, "-c", query],
                                          environment: environment).finish()
        let opsh = try ChildProcess.start(opshExecutable, ["--db", connection, "-e", "print(db.value([[\(query)]]))"],
                                          environment: environment).finish()
        switch testCase.outcome {
        case let .reaches(user, database, server, tcp):
            let socketFolder = server == "PW" ? servers.passwordSocketFolder : servers.readOnlySocketFolder
            var expected = "\(fill(user))|\(database)|\(socketFolder)|\(tcp ? String(servers.port) : "socket")"
            if testCase.also != nil { expected += "|" }
            #expect(psql.status == 0, "psql: \(psql.stderr)")
            #expect(psql.stdout.hasPrefix(expected), "psql: \(psql.stdout)")
            #expect(opsh.status == 0, "opsh: \(opsh.stderr)")
            #expect(opsh.stdout == psql.stdout, "opsh: \(opsh.stdout) \(opsh.stderr)")
        case let .refused(psqlSays, opshSays):
            #expect(psql.status != 0, "psql: \(psql.stdout)")
            #expect(psql.stderr.contains(fill(psqlSays)), "psql: \(psql.stderr)")
            #expect(opsh.status != 0, "opsh: \(opsh.stdout)")
            #expect(opsh.stderr.contains(fill(opshSays)), "opsh: \(opsh.stderr)")
        }
        // The password never shows, whatever the form.
        #expect(!opsh.stderr.contains("scram secret") && !opsh.stdout.contains("scram secret"), "\(opsh.stderr)")
    }
}

/// Which engine a `--db` names: PostgreSQL for a URL or libpq's keyword/value
/// settings, never for `PG*` variables alone (README: with no `--db`, the
/// default SQLite database), nor for a file whose name holds an `=`.
@Suite struct ConnectionStringEngineChoiceTests {
    @Test func pgVariablesAloneKeepTheDefaultSQLiteDatabase() throws {
        let servers = try ParityServers.shared()
        let folder = try Sandbox()
        var environment = folder.environment
        environment.merge(["PGHOST": "127.0.0.1", "PGPORT": String(servers.port), "PGUSER": "scram_user",
                           "PGPASSWORD": "scram secret", "PGDATABASE": "parity"]) { $1 }
        let alone = try folder.run(opshExecutable, ["-e", "return db.engine"], environment: environment)
        #expect(alone.status == 0, "\(alone.stderr)")
        #expect(alone.stdout == "sqlite\n")
        // Control: a bare postgresql:// takes everything from them.
        let bare = try folder.run(opshExecutable, ["--db", "postgresql://", "-e", "return db.engine"], environment: environment)
        #expect(bare.status == 0, "\(bare.stderr)")
        #expect(bare.stdout == "postgresql\n")
    }

    @Test func keywordValueSettingsChoosePostgresAndAFileWithAnEqualsSignStaysSQLite() throws {
        let servers = try ParityServers.shared()
        let folder = try Sandbox()
        let settings = "host=127.0.0.1 port=\(servers.port) user=scram_user password='scram secret' dbname=parity"
        let postgres = try folder.run(opshExecutable, ["--db", settings, "-e", "return db.engine"])
        #expect(postgres.status == 0, "\(postgres.stderr)")
        #expect(postgres.stdout == "postgresql\n")
        let file = folder.root + "/data/builds=2026.sqlite"
        let sqlite = try folder.run(opshExecutable, ["--db", file, "--create", "-e", "return db.engine"])
        #expect(sqlite.status == 0, "\(sqlite.stderr)")
        #expect(sqlite.stdout == "sqlite\n")
        #expect(FileManager.default.fileExists(atPath: file))
    }
}

/// `--timeout` covers every host tried, `connect_timeout` each one.
@Suite struct SeveralHostsTimeLimitTests {
    @Test func theTimeoutCoversEveryHostTried() throws {
        let first = try SilentServer(), second = try SilentServer()
        let folder = try Sandbox()
        let hosts = "host=127.0.0.1,127.0.0.1 port=\(first.port),\(second.port) user=someone dbname=x connect_timeout=2 sslmode=disable"
        let started = Date()
        let run = try folder.run(opshExecutable, ["--db", hosts, "--timeout", "3", "-e", "return 1"])
        #expect(run.status == 124, "\(run.stderr)")
        #expect(run.stderr.contains("timed out after 3 s (--timeout) connecting to postgresql://someone@127.0.0.1:\(first.port),127.0.0.1:\(second.port)/x"), "\(run.stderr)")
        #expect(run.stderr.contains("127.0.0.1:\(first.port): no answer to the start-up message within 2 seconds; 127.0.0.1:\(second.port): no answer to the start-up message within "), "\(run.stderr)")
        #expect(Date().timeIntervalSince(started) < 9)
        // Control: without --timeout, each host's connect_timeout ends its
        // turn, and the failure names both: exit 3.
        let control = try folder.run(opshExecutable, ["--db", hosts, "-e", "return 1"])
        #expect(control.status == 3, "\(control.stderr)")
        #expect(control.stderr.contains("no server among the 2 host(s) tried: 127.0.0.1:\(first.port): no answer to the start-up message within 2 seconds; 127.0.0.1:\(second.port): no answer to the start-up message within 2 seconds"), "\(control.stderr)")
    }
}

/// The servers of ``ConnectionStringParityTests``, made once per test process.
final class ParityServers: Sendable {
    let passwordServer: PostgresPasswordServer
    let readOnlyServer: PostgresServer
    /// The password server's TCP port, and one nothing listens on.
    let port: Int
    let deadPort: Int
    let passwordSocketFolder: String
    let readOnlySocketFolder: String
    let superuser: String
    let psql: String
    /// A TCP port where something takes the connection and never answers.
    let silent: SilentServer

    static func shared() throws -> ParityServers { try made.get() }
    private static let made: Result<ParityServers, any Error> = Result { try ParityServers() }

    private init() throws {
        passwordServer = try PostgresPasswordServer.shared()
        port = passwordServer.port
        deadPort = try PostgresPasswordServer.freePort()
        silent = try SilentServer()
        passwordSocketFolder = passwordServer.directory
        superuser = try sh("id -un")
        psql = try sh("ls -d /usr/lib/postgresql/*/bin/psql | sort -V | tail -n 1")
        readOnlySocketFolder = "/tmp/opsh-pgro-\(getpid())"
        readOnlyServer = try PostgresServer.start(in: readOnlySocketFolder, listen: [])
        atexit {
            if case .success(let servers) = ParityServers.made { servers.readOnlyServer.stop() }
        }
        // Databases with opsh's schema, made by their owners.
        // Which server a session reached: its socket folder, a setting only
        // the superuser and this role may read.
        try passwordServer.sql("GRANT pg_read_all_settings TO scram_user")
        try passwordServer.sql("CREATE DATABASE parity OWNER scram_user")
        try passwordServer.sql("CREATE DATABASE scram_user OWNER scram_user")
        try passwordServer.sql("CREATE DATABASE paritymulti")
        try readOnlyServer.sql("CREATE DATABASE paritymulti")
        let owners = [
            passwordServer.tcpURL(user: "scram_user", password: "scram secret").replacingOccurrences(of: "/opsh", with: "/parity"),
            passwordServer.tcpURL(user: "scram_user", password: "scram secret").replacingOccurrences(of: "/opsh", with: "/scram_user"),
            passwordServer.socketURL.replacingOccurrences(of: "/opsh?", with: "/paritymulti?"),
            readOnlyServer.url(of: "paritymulti"),
        ]
        for url in owners {
            let made = try ChildProcess.start(opshExecutable, ["--db", url, "--create", "-e", "return 1"],
                                              environment: ProcessInfo.processInfo.environment).finish()
            guard made.status == 0 else { throw ParitySetupFailed(step: "opsh --db \(url) --create", output: made.stderr) }
        }
        // From now on every session of the second server is read-only.
        try readOnlyServer.sql("ALTER SYSTEM SET default_transaction_read_only = on")
        try readOnlyServer.sql("SELECT pg_reload_conf()")
    }

    func fill(_ text: String, home: String) -> String {
        text.replacingOccurrences(of: "{PORT}", with: String(port))
            .replacingOccurrences(of: "{DEAD}", with: String(deadPort))
            .replacingOccurrences(of: "{SILENT}", with: String(silent.port))
            .replacingOccurrences(of: "{PW_ENCODED}", with: passwordSocketFolder.replacingOccurrences(of: "/", with: "%2F"))
            .replacingOccurrences(of: "{PW}", with: passwordSocketFolder)
            .replacingOccurrences(of: "{RO}", with: readOnlySocketFolder)
            .replacingOccurrences(of: "{ROOT}", with: superuser)
            .replacingOccurrences(of: "{HOME}", with: home)
    }
}

struct ParitySetupFailed: Error, CustomStringConvertible {
    var step: String
    var output: String
    var description: String { "\(step) failed: \(output)" }
}
