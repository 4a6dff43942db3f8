import Foundation
import Testing

/// Builds get an allow-listed environment (PATH, HOME, LANG, TZ, their
/// own OPSH_BUILD_* and what their scheme declares in `passEnvironment`),
/// not opsh's whole one: a database password, the run's reason or a
/// token in the operator's shell reach no build (issue "Every hole found
/// by attack", item 27).
@Suite struct BuildEnvironmentTests {
    /// What the operator's shell holds: secrets, and what a scheme may ask for.
    static let operatorEnvironment = [
        "PGPASSWORD": "pg-secret-4711", "OPSH_REASON": "reason-secret-4711", "API_TOKEN": "token-secret-4711",
        "DEPLOY_KEY": "declared-value-4711", "TZ": "Europe/Berlin", "LANG": "C.UTF-8",
    ]

    /// The variables of an `env` dump.
    static func variables(_ path: String) -> [String: String] {
        let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        var found: [String: String] = [:]
        for line in text.split(separator: "\n") {
            guard let equals = line.firstIndex(of: "=") else { continue }
            found[String(line[..<equals])] = String(line[line.index(after: equals)...])
        }
        return found
    }

    @Test(arguments: Engine.allCases)
    func buildsGetAnAllowListedEnvironmentAndWhatTheirSchemeDeclares(_ engine: Engine) throws {
        let fixture = try BuildFixture(engine)
        let dumps = fixture.root + "/env"
        try FileManager.default.createDirectory(atPath: dumps, withIntermediateDirectories: true)
        let declaring = try fixture.scheme("Declaring", "env > '\(dumps)/declaring-'\"$OPSH_BUILD_NUMBER\"")
        let plain = try fixture.scheme("Plain", "env > '\(dumps)/plain-'\"$OPSH_BUILD_NUMBER\"")
        try fixture.sql("UPDATE schemes SET passEnvironment = '[\"DEPLOY_KEY\", \"NOT_SET_ANYWHERE\"]' WHERE id = '\(declaring)'")

        // jobs.start, in an opsh started from the operator's shell.
        let started = try fixture.lua("""
            for _, scheme in ipairs{...} do assert(jobs.wait(jobs.start{ scheme = scheme, version = '1.0.0' }, 60).status == 'succeeded') end
            """, [declaring, plain], environment: Self.operatorEnvironment)
        #expect(started.status == 0, "\(started.stderr)")
        // opsh runner, started from the same shell.
        let queued = [try fixture.enqueue(declaring), try fixture.enqueue(plain)]
        let runner = try fixture.startRunner(environment: Self.operatorEnvironment)
        let ended = try queued.map { try fixture.waitForEnd($0) }
        let said = fixture.stop(runner)
        #expect(ended == ["succeeded", "succeeded"], "\(said.stderr)")

        for (name, declares) in [("declaring-1", true), ("plain-1", false), ("declaring-2", true), ("plain-2", false)] {
            let seen = Self.variables(dumps + "/" + name)
            #expect(!seen.isEmpty, "\(name): no dump")
            for secret in ["PGPASSWORD", "OPSH_REASON", "API_TOKEN", "XDG_DATA_HOME", "XDG_CONFIG_HOME"] {
                #expect(seen[secret] == nil, "\(name): \(secret) reached the build")
            }
            #expect(!seen.values.contains { $0.contains("secret-4711") }, "\(name): \(seen)")
            // The allow list, and the build's own variables.
            #expect(seen["PATH"] == "/usr/local/bin:/usr/bin:/bin", "\(name): \(seen)")
            #expect(seen["HOME"] == fixture.root + "/home", "\(name): \(seen)")
            #expect(seen["TZ"] == "Europe/Berlin" && seen["LANG"] == "C.UTF-8", "\(name): \(seen)")
            #expect(seen["OPSH_BUILD_ID"] != nil && seen["OPSH_BUILD_NUMBER"] == String(name.last!), "\(name): \(seen)")
            // Control: a variable the scheme declares reaches its builds, with its value.
            #expect(seen["DEPLOY_KEY"] == (declares ? "declared-value-4711" : nil), "\(name): \(seen)")
            #expect(seen["NOT_SET_ANYWHERE"] == nil, "\(name)")
        }
    }

    @Test(arguments: Engine.allCases)
    func aSchemeThatDeclaresSomethingThatIsNoVariableNameIsRefusedSayingWhat(_ engine: Engine) throws {
        let fixture = try BuildFixture(engine)
        let scheme = try fixture.scheme("Bad", "echo never")
        try fixture.sql("UPDATE schemes SET passEnvironment = '[\"GOOD\", \"PATH=/evil\"]' WHERE id = '\(scheme)'")
        let result = try fixture.lua("local b = jobs.wait(jobs.start{ scheme = ..., version = '1.0.0' }, 60) print(b.status, b.id)", [scheme])
        #expect(result.status == 0, "\(result.stderr)")
        let fields = result.stdout.split(whereSeparator: \.isWhitespace).map(String.init)
        #expect(fields.first == "failed", "\(result.stdout)")
        let log = try fixture.log(fields.last ?? "")
        #expect(log.contains("scheme Bad's passEnvironment: 'PATH=/evil' is not a variable name"), "\(log)")
        #expect(!log.contains("never"))
        let notJSON = try? fixture.sql("UPDATE schemes SET passEnvironment = 'GOOD' WHERE id = '\(scheme)'")
        #expect(notJSON == nil, "the database took passEnvironment that is not JSON")
    }

    /// `--sandbox` keeps what a scheme's builds get of their runner's
    /// environment as it keeps their command, whatever the route: SQLite's
    /// TEMP triggers on the session's connections refuse the write,
    /// PostgreSQL's check after each statement (`PostgresSandbox`) rolls it
    /// back.
    @Test(arguments: Engine.allCases)
    func theSandboxRefusesWritingWhatABuildGetsOfTheEnvironment(_ engine: Engine) throws {
        let fixture = try BuildFixture(engine)
        let scheme = try fixture.scheme("Plain", "true")
        let write = "db.exec([[UPDATE schemes SET passEnvironment = '[\"PGPASSWORD\"]' WHERE id = ?]], ...)"
        let refused = try fixture.folder.opsh(["--sandbox", "-e", "local function body(...) \(write) end return body('\(scheme)')"],
                                              on: fixture.database)
        #expect(refused.status == 1, "\(refused.stderr)")
        #expect(refused.stderr.contains("sandbox: the passEnvironment of a scheme cannot be written"), "\(refused.stderr)")
        #expect(try fixture.sql("SELECT passEnvironment FROM schemes WHERE id = '\(scheme)'") == "[]")
        // Control: without the sandbox the same write goes through.
        let allowed = try fixture.folder.opsh(["-e", "local function body(...) \(write) end return body('\(scheme)')"],
                                              on: fixture.database)
        #expect(allowed.status == 0, "\(allowed.stderr)")
        #expect(try fixture.sql("SELECT passEnvironment FROM schemes WHERE id = '\(scheme)'") == "[\"PGPASSWORD\"]")
    }
}
