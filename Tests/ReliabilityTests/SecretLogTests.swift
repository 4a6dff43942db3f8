import Foundation
import Testing

/// The configuration's API key does not reach stderr or the build log by
/// another route than a value the script itself prints as a bare string.
@Suite struct SecretLogTests {
    static let secret = "sk-SECRET-123456"

    /// Failing scripts whose error carries a row or a table holding the key.
    /// (name, code, exit status): each fails with its error printed, but
    /// the last, which returns the row (printed, masked).
    static let failures: [(String, String, Int32)] = [
        ("error(row)", #"error(config.get())"#, 1),
        ("error(db.first row)", #"error(db.first("SELECT * FROM configuration"))"#, 1),
        ("error(table with api_key)", #"error({ api_key = db.value("SELECT api_key FROM configuration") })"#, 1),
        ("typo in a row's field", #"local r = db.first("SELECT * FROM configuration") return r.api_kee"#, 1),
        ("wrong type saved", #"local c = config.get() c.api_key = 5 config.save(c)"#, 1),
        ("duplicate insert of the key", #"db.exec("INSERT INTO configuration (id, api_key, base_url, created_at, updated_at) VALUES (?, ?, ?, 0, 0)", "default", db.value("SELECT api_key FROM configuration"), "https://x")"#, 1),
        ("watch callback raising its row", #"watch("SELECT * FROM configuration", function(rows) error(rows[1]) end) db.exec("UPDATE configuration SET base_url = 'https://y'") opsh.wait(1) error("end")"#, 1),
        ("a row in a returned error table, --json", #"return nil, config.get()"#, 0),
    ]

    static func prepared() throws -> Scratch {
        let scratch = try Scratch()
        #expect(try scratch.opsh(["-e", "return 1"]).status == 0)
        _ = try scratch.sqlite("INSERT INTO configuration (id, api_key, base_url, created_at, updated_at) VALUES ('default', '\(secret)', 'https://x', 0, 0)")
        return scratch
    }

    @Test func errorsThatCarryARowDoNotPrintTheKey() throws {
        let scratch = try Self.prepared()
        var clean = 0
        for (name, code, status) in Self.failures {
            let result = try scratch.opsh(["--json", "-e", code])
            // Each fails as expected, its error (carrying the row) printed.
            #expect(result.status == status, "\(name): exit \(result.status): \(result.stderr)")
            #expect(status == 0 || !result.stderr.isEmpty, "\(name): no error printed")
            let leaked = result.stderr.contains(Self.secret) || result.stdout.contains(Self.secret)
            #expect(!leaked, "\(name): the key is in the output: \(result.stdout) \(result.stderr)")
            if !leaked { clean += 1 }
        }
        reportFigure("secrets in logs: \(clean)/\(Self.failures.count) failing scripts whose error carries the configuration row keep the API key out of stderr/stdout")
    }

    /// A build runs with opsh's environment, not its database: a build that
    /// prints its whole environment logs no key.
    @Test func aBuildsLogDoesNotCarryTheKey() throws {
        let scratch = try Self.prepared()
        _ = try scratch.projectWithRepository()
        let result = try scratch.opsh(["-e", """
            local s = schemes.insert{ projectBundleIdentifier = "com.example.app", name = "Env", buildCommand = "env; echo done" }
            local b = jobs.wait(jobs.start{ scheme = s.id, version = "1.0.0" }, 60)
            assert(b.status == "succeeded", b.status)
            print(#jobs.logs(b.id, { tail = 10000, debug = true }))
            """])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(try scratch.sqlite("SELECT count(*) FROM buildLogs WHERE content = 'done'") == "1")
        let lines = try scratch.sqlite("SELECT count(*) FROM buildLogs")
        #expect(try scratch.sqlite("SELECT count(*) FROM buildLogs WHERE instr(content, '\(Self.secret)') > 0") == "0")
        #expect(!result.stdout.contains(Self.secret) && !result.stderr.contains(Self.secret))
        reportFigure("secrets in build logs: a build printing its environment (\(lines) log lines) logged no API key")
    }
}
