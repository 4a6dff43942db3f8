import Foundation
import Testing

/// What opsh writes itself (a build's checkout lines, the command it
/// runs, why a checkout failed; git's errors) masks a repository URL's
/// credentials and the configuration's API keys, as the prompt masks them
/// (issue "Every hole found by attack", item 28).
@Suite struct BuildLogMaskingTests {
    static let token = "tok-SECRET-5e1d2c3b"
    static let apiKey = "sk-live-SECRET-7f3a9c21"

    /// A port nothing listens on (bound, then closed): connecting is refused at once.
    static func closedPort() throws -> UInt16 {
        let server = try SilentServer()
        return server.port
    }

    @Test(arguments: Engine.allCases)
    func credentialsAndTheAPIKeyNeverReachTheBuildLogOrGitErrors(_ engine: Engine) throws {
        let fixture = try BuildFixture(engine)
        let port = try Self.closedPort()
        let url = "http://deploy:\(Self.token)@127.0.0.1:\(port)/app.git"
        try fixture.sql("""
            INSERT INTO configuration (id, api_key, base_url, created_at, updated_at) VALUES ('default', '\(Self.apiKey)', 'https://x', 0, 0);
            INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt)
            VALUES ('com.example.remote', 'Remote', 'Remote', '\(url)', 0)
            """)
        let remote = try fixture.scheme("Remote", "echo never", project: "com.example.remote")
        let usesKey = try fixture.scheme("UsesKey", "test -n '\(Self.apiKey)' && echo used the key")

        let result = try fixture.lua("""
            local remote, usesKey = ...
            local a = jobs.wait(jobs.start{ scheme = remote, version = '1.0.0' }, 60)
            local b = jobs.wait(jobs.start{ scheme = usesKey, version = '1.0.0' }, 60)
            print(a.status, a.id) print(b.status, b.id)
            """, [remote, usesKey])
        #expect(result.status == 0, "\(result.stderr)")
        let lines = result.stdout.split(separator: "\n").map { $0.split(whereSeparator: \.isWhitespace).map(String.init) }
        #expect(lines.map(\.first) == ["failed", "succeeded"], "\(result.stdout)")
        guard lines.count == 2 else { return }
        let remoteLog = try fixture.log(lines[0][1]), keyLog = try fixture.log(lines[1][1])
        #expect(!remoteLog.contains(Self.token), "\(remoteLog)")
        #expect(!keyLog.contains(Self.apiKey), "\(keyLog)")
        #expect(try fixture.sql("SELECT count(*) FROM buildLogs WHERE content LIKE '%SECRET%'") == "0")
        // Control: the lines still say where and what, with the secrets masked as the prompt masks them.
        #expect(remoteLog.contains("checking out '1.0.0' of http://deploy:••••2c3b@127.0.0.1:\(port)/app.git"), "\(remoteLog)")
        #expect(remoteLog.contains("checkout failed:"), "\(remoteLog)")
        #expect(keyLog.contains("test -n '\\''••••9c21'\\'' && echo used the key"), "\(keyLog)")
        #expect(keyLog.contains("used the key"), "\(keyLog)")

        // git.versions and git.branches raise errors without the token.
        for function in ["versions", "branches"] {
            let failed = try fixture.lua("git.\(function)(...)", [url])
            #expect(failed.status == 1, "\(function): \(failed.stderr)")
            #expect(!failed.stderr.contains(Self.token), "\(function): \(failed.stderr)")
            #expect(failed.stderr.contains("http://deploy:••••2c3b@127.0.0.1:\(port)/app.git"), "\(function): \(failed.stderr)")
        }
    }
}
