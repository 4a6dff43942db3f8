import Foundation
import Testing
@testable import PostgresWire

/// How connection parameters are read, as libpq reads them: keyword/value
/// strings, host lists, the environment, services and the password file.
/// ConnectionStringParityTests (OpshTests) holds the same against psql and
/// a real server; these pin the details psql cannot show.
@Suite struct ConnectionParametersTests {
    /// A home folder of the test's own, removed afterwards.
    final class Home {
        let path = NSTemporaryDirectory() + "opsh-conn-" + UUID().uuidString
        init() throws { try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true) }
        deinit { try? FileManager.default.removeItem(atPath: path) }
        func write(_ name: String, _ text: String, mode: mode_t = 0o600) throws {
            try text.write(toFile: path + "/" + name, atomically: false, encoding: .utf8)
            chmod(path + "/" + name, mode)
        }
    }

    func parse(_ text: String, _ variables: [String: String] = [:], home: String = "/nonexistent") throws -> PostgresURL {
        try PostgresURL(text, environment: ConnectionEnvironment(variables: variables, home: home, operatingSystemUser: "osuser"))
    }

    func message(_ text: String, _ variables: [String: String] = [:]) -> String {
        do {
            _ = try parse(text, variables)
            return "accepted"
        } catch {
            return "\(error)"
        }
    }

    @Test func keywordValueQuotingAndEscapes() throws {
        let url = try parse(#"  host = db.example port=6432 dbname='my builds' user=al\ ice password='it\'s \\ here'"#)
        #expect(url.hosts == [PostgresURL.Host(name: "db.example", port: 6432)])
        #expect(url.database == "my builds")
        #expect(url.user == "al ice")
        #expect(url.password == #"it's \ here"#)
        // The last of a keyword given twice counts.
        #expect(try parse("dbname=a dbname=b").database == "b")
        // An empty quoted value is a value.
        #expect(try parse("host=h user=''").user == "osuser")
    }

    @Test func keywordValueRefusalsSayWhere() {
        #expect(message("host=h dbname='x") == "invalid PostgreSQL connection settings: the quoted value of dbname is not closed with “'” (at character 15 of the connection string)")
        #expect(message("host=h dbname") == "invalid PostgreSQL connection settings: “dbname” has no “=VALUE” (settings are KEYWORD=VALUE, separated by spaces) (at character 8 of the connection string)")
        #expect(message("host=h frobnicate=1") == "invalid PostgreSQL connection settings: the parameter “frobnicate” is not supported (known: \(PostgresURL.knownParameters)) (at character 8 of the connection string)")
        #expect(message("host=h port=0") == "invalid PostgreSQL connection settings: the port “0” is not a number from 1 to 65535 (at character 13 of the connection string)")
        // A bad value names the variable it came from; the password never shows.
        #expect(message("host=h", ["PGPORT": "fifty"]) == "invalid PostgreSQL connection settings: the port “fifty” is not a number from 1 to 65535 (in the environment variable PGPORT)")
        #expect(!message("host=h dbname='x password=hunter2").contains("hunter2"))
        #expect(message("host=h password=correct horse") == "invalid PostgreSQL connection settings: the text after the password's value has no “=VALUE” (a value with spaces goes in single quotes: password='…') (at character 25 of the connection string)")
    }

    @Test func whatNamesAServerRatherThanAFile() {
        for text in ["postgresql://h/d", "postgres://", "host=h", "  dbname = x", "service=nightly", "sslmode=require host=h"] {
            #expect(PostgresURL.isConnectionString(text), "\(text)")
        }
        // Paths, even with an "=" in them, stay files: only libpq's keywords count.
        for text in ["", "opsh.sqlite", "/tmp/a=b.sqlite", "builds=2024.sqlite", "./host=x", "~/data/x.sqlite"] {
            #expect(!PostgresURL.isConnectionString(text), "\(text)")
        }
    }

    @Test func precedenceIsStringThenServiceThenEnvironmentThenDefaults() throws {
        let home = try Home()
        try home.write(".pg_service.conf", "[nightly]\nhost=service.example\nport=6000\ndbname=from_service\n")
        let environment = ["PGSERVICE": "nightly", "PGHOST": "env.example", "PGPORT": "7000", "PGDATABASE": "from_env", "PGUSER": "env_user"]
        let url = try parse("dbname=from_string", environment, home: home.path)
        #expect(url.database == "from_string")
        #expect(url.hosts == [PostgresURL.Host(name: "service.example", port: 6000)])
        #expect(url.user == "env_user")
        // Without the service, the environment; without that, the defaults.
        let environmentOnly = try parse("postgresql://", environment.filter { $0.key != "PGSERVICE" }, home: home.path)
        #expect(environmentOnly.hosts == [PostgresURL.Host(name: "env.example", port: 7000)])
        #expect(environmentOnly.database == "from_env")
        let defaults = try parse("postgresql://")
        #expect(defaults.hosts == [PostgresURL.Host(name: PostgresURL.defaultSocketDirectory, port: 5432)])
        #expect(defaults.user == "osuser")
        #expect(defaults.database == "osuser")
        #expect(defaults.applicationName == "opsh")
        #expect(defaults.passFile == "/nonexistent/.pgpass")
        #expect(defaults.targetSessionAttributes == .any)
    }

    @Test func everyVariableLibpqReads() throws {
        let url = try parse("postgresql://", [
            "PGHOST": "h", "PGPORT": "6543", "PGUSER": "u", "PGDATABASE": "d", "PGPASSWORD": "p",
            "PGPASSFILE": "/secrets/pgpass", "PGAPPNAME": "nightly", "PGCONNECT_TIMEOUT": "3",
            "PGOPTIONS": "-c work_mem=5MB", "PGSSLMODE": "disable", "PGTARGETSESSIONATTRS": "read-write",
            "PGLOADBALANCEHOSTS": "random",
        ])
        #expect(url.hosts == [PostgresURL.Host(name: "h", port: 6543)])
        #expect((url.user, url.database, url.password) == ("u", "d", "p"))
        #expect(url.passFile == "/secrets/pgpass")
        #expect(url.applicationName == "nightly")
        #expect(url.connectTimeout == 3)
        #expect(url.options == "-c work_mem=5MB")
        #expect(url.sslMode == .disable)
        #expect(url.targetSessionAttributes == .readWrite)
        #expect(url.loadBalanceHosts)
    }

    @Test func servicesFromTheUsersFileThenTheSystemFolder() throws {
        let home = try Home()
        try FileManager.default.createDirectory(atPath: home.path + "/etc", withIntermediateDirectories: true)
        try home.write(".pg_service.conf", "# mine\n[mine]\n  host = ignored-blanks-kept-in-keyword\n")
        try home.write("etc/pg_service.conf", "[shared]\nhost=shared.example\n[after]\nhost=after.example\n")
        let url = try parse("service=shared", ["PGSYSCONFDIR": home.path + "/etc"], home: home.path)
        #expect(url.host == "shared.example")
        // A service no file defines, and a line that is not KEYWORD=VALUE.
        #expect(message("service=absent", ["PGSYSCONFDIR": "/nowhere", "PGSERVICEFILE": "/nowhere/s.conf"])
                == "invalid PostgreSQL connection settings: service “absent” is not defined in /nowhere/s.conf nor /nowhere/pg_service.conf (at character 9 of the connection string)")
        try home.write("bad.conf", "[x]\nhost\n")
        #expect(message("service=x", ["PGSERVICEFILE": home.path + "/bad.conf"])
                == "invalid PostgreSQL connection settings: a line of service “x” is not KEYWORD=VALUE (service file \(home.path)/bad.conf, line 2)")
    }

    @Test func hostListsPairWithPortLists() throws {
        let pairs = try parse("host=a,b,/tmp/pg port=1,2,3").hosts
        #expect(pairs == [.init(name: "a", port: 1), .init(name: "b", port: 2), .init(name: "/tmp/pg", port: 3)])
        #expect(pairs[2].endpoint == .unixSocket(path: "/tmp/pg/.s.PGSQL.3"))
        #expect(try parse("host=a,b port=7").hosts.map(\.port) == [7, 7])
        // An empty entry is the default host or port.
        #expect(try parse("host=a, port=,9").hosts == [.init(name: "a", port: 5432), .init(name: PostgresURL.defaultSocketDirectory, port: 9)])
        let url = try parse("postgresql://u:pw@a:1,[::1]:2,c/db?target_session_attrs=read-write")
        #expect(url.hosts == [.init(name: "a", port: 1), .init(name: "::1", port: 2), .init(name: "c", port: 5432)])
        // The description lists them, and hides the password.
        #expect(url.description == "postgresql://u:***@a:1,[::1]:2,c/db?target_session_attrs=read-write")
        #expect(try parse("host=/s,/t port=1 password=pw dbname=d user=u").description == "postgresql://u:***@/d?host=/s,/t&port=1,1")
        #expect(try parse("hostaddr=10.0.0.1 host=db.example").hosts[0].endpoint == .tcp(host: "10.0.0.1", port: 5432))
        #expect(message("host=a,b hostaddr=10.0.0.1") == "invalid PostgreSQL connection settings: 1 host address(es) for 2 host name(s): name as many of each (at character 19 of the connection string)")
        #expect(message("host=a target_session_attrs=sometimes").hasPrefix("invalid PostgreSQL connection settings: target_session_attrs “sometimes” is not one of any, read-write, read-only, primary, standby, prefer-standby"))
        #expect(message("host=a load_balance_hosts=yes").hasPrefix("invalid PostgreSQL connection settings: load_balance_hosts “yes” is not disable or random"))
    }

    /// psql 15's libpq has no load_balance_hosts (PostgreSQL 16), so the
    /// parity table cannot hold it: the order is seen in the failure, which
    /// names the hosts as they were tried.
    @Test func loadBalanceHostsTriesTheHostsInARandomOrder() throws {
        func orders(_ text: String) throws -> Set<String> {
            let url = try parse(text)
            var seen = Set<String>()
            for _ in 0..<20 {
                do {
                    _ = try PostgresConnection(url: url)
                } catch {
                    seen.insert("\(error)")
                }
            }
            return seen
        }
        let hosts = "host=/nowhere/a,/nowhere/b,/nowhere/c,/nowhere/d"
        let random = try orders(hosts + " load_balance_hosts=random")
        #expect(random.count > 1, "\(random)")
        // Control: without it, always the order written.
        let written = try orders(hosts)
        #expect(written.count == 1)
        #expect(written.first?.hasPrefix("could not connect to PostgreSQL: no server among the 4 host(s) tried: /nowhere/a/.s.PGSQL.5432: ") == true, "\(written)")
    }

    @Test func passwordFileLinesAsLibpqMatchesThem() {
        func lookup(_ text: String, host: String = "db.example", port: String = "5432", database: String = "builds", user: String = "alice") -> String? {
            let lines = Array(text.utf8).split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
            return PassFile.password(inLines: lines, host: host, port: port, database: database, user: user)
        }
        #expect(lookup("db.example:5432:builds:alice:s3cret") == "s3cret")
        #expect(lookup("#db.example:5432:builds:alice:commented\n*:*:*:alice:any") == "any")
        #expect(lookup("other:5432:builds:alice:no\ndb.example:*:builds:*:yes") == "yes")
        #expect(lookup("db.example:5433:builds:alice:no") == nil)
        // Escapes: "\:" and "\\" in fields and in the password.
        #expect(lookup(#"h\:1:*:*:*:p\:w\\d"#, host: "h:1") == #"p:w\d"#)
        #expect(lookup(#"*:*:*:alice:pw:trailing"#) == "pw")
        // A prefix is not a match.
        #expect(lookup("db:5432:builds:alice:no") == nil)
        // The default socket folder (or none) matches "localhost"; another folder itself.
        #expect(PassFile.matchingName(of: .init(name: PostgresURL.defaultSocketDirectory)) == "localhost")
        #expect(PassFile.matchingName(of: .init(name: "/tmp/pg")) == "/tmp/pg")
        #expect(PassFile.matchingName(of: .init(name: "", address: "10.0.0.1")) == "10.0.0.1")
    }

    @Test func aPasswordFileOthersCanReadIsIgnored() throws {
        let home = try Home()
        try home.write("pgpass", "*:*:*:*:s3cret\n", mode: 0o600)
        let host = PostgresURL.Host(name: "h")
        #expect(PassFile.password(in: home.path + "/pgpass", host: host, database: "d", user: "u") == "s3cret")
        // Control above; now readable by the group: ignored (the warning goes to stderr).
        chmod(home.path + "/pgpass", 0o640)
        #expect(PassFile.password(in: home.path + "/pgpass", host: host, database: "d", user: "u") == nil)
        #expect(PassFile.password(in: home.path, host: host, database: "d", user: "u") == nil)
    }
}
