import Foundation
import Testing
import TestSupport

/// TLS to PostgreSQL through the real opsh (`-e` with a `--db` URL), against
/// a server the tests start with certificates they make (PostgresTLSServer),
/// and against the password server, which has no TLS. One engine only, not
/// one body per engine: TLS is PostgreSQL's (SQLite has no connection to
/// encrypt). psql (libpq) is the reference for what each setting means.
@Suite struct PostgresTLSTests {
    let sandbox: Sandbox
    let server: PostgresTLSServer

    init() throws {
        sandbox = try Sandbox()
        server = try Self.prepared.get()
    }

    /// The TLS server, with opsh's schema in its database `opsh`.
    static let prepared: Result<PostgresTLSServer, any Error> = Result {
        let server = try PostgresTLSServer.shared()
        let sandbox = try Sandbox()
        let created = try sandbox.opsh(["--db", server.socketURL, "--create", "-e", "return 1"], database: false)
        guard created.status == 0 else { throw SchemaNotCreated(stderr: created.stderr) }
        return server
    }

    /// The password server (TCP without TLS), with opsh's schema, which
    /// `scram_user` may read and write.
    static let passwordServerWithSchema: Result<PostgresPasswordServer, any Error> = Result {
        let server = try PostgresPasswordServer.shared()
        let sandbox = try Sandbox()
        let created = try sandbox.opsh(["--db", server.socketURL, "--create", "-e", "return 1"], database: false)
        guard created.status == 0 else { throw SchemaNotCreated(stderr: created.stderr) }
        try server.sql("GRANT pg_read_all_data, pg_write_all_data TO scram_user")
        return server
    }

    /// Whether the session is encrypted, as the server sees it.
    static let probe = "print(db.value('SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()'))"

    func opsh(_ url: String, _ script: String = probe) throws -> TestFolder.Result {
        try sandbox.opsh(["--db", url, "-e", script], database: false)
    }

    /// The run worked and the server saw TLS (1) or clear text (0).
    func expectConnected(_ run: TestFolder.Result, encrypted: Bool, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(run.status == 0, "\(run.stderr)", sourceLocation: sourceLocation)
        #expect(run.stdout == (encrypted ? "1\n" : "0\n"), "\(run.stdout)\(run.stderr)", sourceLocation: sourceLocation)
    }

    /// The run was refused (exit 3: could not connect) for `reason`.
    func expectRefused(_ run: TestFolder.Result, _ reason: String, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(run.status == 3, "\(run.stdout)\(run.stderr)", sourceLocation: sourceLocation)
        #expect(run.stderr.contains(reason), "\(run.stderr)", sourceLocation: sourceLocation)
        #expect(run.stdout.isEmpty, sourceLocation: sourceLocation)
    }

    @Test func verifyFullWithTheRightRootReachesTheServerEncrypted() throws {
        let url = server.url("sslmode=verify-full&sslrootcert=\(server.file("root.crt"))")
        expectConnected(try opsh(url), encrypted: true)
        // psql agrees: the same URL, encrypted.
        let psql = try server.psql(url, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        #expect(psql.stdout == "t\n", "\(psql.stderr)")
    }

    @Test func aWrongCAIsRefusedWithTheReason() throws {
        let refused = try opsh(server.url("sslmode=verify-full&sslrootcert=\(server.file("other-root.crt"))"))
        expectRefused(refused, "localhost:\(server.port): SSL error: certificate verify failed: ")
        // psql refuses it too.
        #expect(try server.psql(server.url("sslmode=verify-full&sslrootcert=\(server.file("other-root.crt"))"), "SELECT 1")
            .stderr.contains("certificate verify failed"))
        // Control: the CA that signed the server's certificate.
        expectConnected(try opsh(server.url("sslmode=verify-ca&sslrootcert=\(server.file("root.crt"))")), encrypted: true)
        // Roots are checked whenever there are some, as libpq does: require too.
        expectRefused(try opsh(server.url("sslmode=require&sslrootcert=\(server.file("other-root.crt"))")), "certificate verify failed")
    }

    /// sslrootcert=system: the system's CA store, which does not hold the
    /// test's CA; verify-full by default, and only verify-full (libpq 16).
    @Test func systemRootsAreTheSystemsStoreAndVerifyFullOnly() throws {
        expectRefused(try opsh(server.url("sslrootcert=system")), "localhost:\(server.port): SSL error: certificate verify failed: ")
        expectRefused(try opsh(server.url("sslrootcert=system&sslmode=require")),
                      "weak sslmode \"require\" may not be used with sslrootcert=system (use \"verify-full\")")
    }

    @Test func aWrongHostNameIsRefusedWithTheReason() throws {
        let root = server.file("root.crt")
        // The certificate names localhost only; 127.0.0.1 is the same server.
        let refused = try opsh(server.url(host: "127.0.0.1", "sslmode=verify-full&sslrootcert=\(root)"))
        expectRefused(refused, "127.0.0.1:\(server.port): server certificate for DNS:localhost does not match host name \"127.0.0.1\" (sslmode=verify-full)")
        #expect(try server.psql(server.url(host: "127.0.0.1", "sslmode=verify-full&sslrootcert=\(root)"), "SELECT 1")
            .stderr.contains("does not match host name \"127.0.0.1\""))
        // Controls: the name it carries, and verify-ca (the chain, not the name).
        expectConnected(try opsh(server.url(host: "localhost", "sslmode=verify-full&sslrootcert=\(root)")), encrypted: true)
        expectConnected(try opsh(server.url(host: "127.0.0.1", "sslmode=verify-ca&sslrootcert=\(root)")), encrypted: true)
    }

    @Test func requireAgainstAServerWithoutTLSIsRefusedAndPreferConnectsInClear() throws {
        let plain = try Self.passwordServerWithSchema.get()
        let url = plain.tcpURL(user: "scram_user", password: "scram secret")
        expectRefused(try opsh(url + "?sslmode=require"),
                      "127.0.0.1:\(plain.port): the server does not support SSL (TLS), but sslmode=require requires it")
        // prefer (the default) asks, hears no, and goes on in clear text.
        expectConnected(try opsh(url + "?sslmode=prefer"), encrypted: false)
        expectConnected(try opsh(url), encrypted: false)
        // Control: require against the server with TLS.
        expectConnected(try opsh(server.url("sslmode=require")), encrypted: true)
        expectConnected(try opsh(server.url()), encrypted: true)
        expectConnected(try opsh(server.url("sslmode=disable")), encrypted: false)
    }

    @Test func aClientCertificateLogsIn() throws {
        let certificate = server.file("client.crt"), key = server.file("client.key")
        let url = server.url(user: "cert_user", "sslmode=verify-full&sslrootcert=\(server.file("root.crt"))")
        let loggedIn = try opsh(url + "&sslcert=\(certificate)&sslkey=\(key)",
                                "print(db.value('SELECT client_dn FROM pg_stat_ssl WHERE pid = pg_backend_pid()'))")
        #expect(loggedIn.status == 0, "\(loggedIn.stderr)")
        #expect(loggedIn.stdout == "/CN=cert_user\n")
        // Without it, the server's `cert` line refuses the role.
        expectRefused(try opsh(url), "connection requires a valid client certificate")
        // A key others may read is refused before it is used, as libpq does.
        let loose = sandbox.root + "/loose.key"
        try FileManager.default.copyItem(atPath: key, toPath: loose)
        chmod(loose, 0o644)
        expectRefused(try opsh(url + "&sslcert=\(certificate)&sslkey=\(loose)"),
                      "private key file \"\(loose)\" has group or world access; file must have permissions u=rw (0600) or less")
        chmod(loose, 0o600)
        expectConnected(try opsh(url + "&sslcert=\(certificate)&sslkey=\(loose)"), encrypted: true)
    }

    /// libpq's defaults: ~/.postgresql/root.crt, postgresql.crt and
    /// postgresql.key, used when they exist.
    @Test func theFilesInHomeAreTheDefaults() throws {
        let url = server.url(user: "cert_user", "sslmode=verify-full")
        expectRefused(try opsh(url), "root certificate file \"\(sandbox.root)/home/.postgresql/root.crt\" does not exist")
        let folder = sandbox.root + "/home/.postgresql"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: server.file("root.crt"), toPath: folder + "/root.crt")
        expectRefused(try opsh(url), "connection requires a valid client certificate")
        try FileManager.default.copyItem(atPath: server.file("client.crt"), toPath: folder + "/postgresql.crt")
        try FileManager.default.copyItem(atPath: server.file("client.key"), toPath: folder + "/postgresql.key")
        expectConnected(try opsh(url), encrypted: true)
    }

    @Test func channelBindingRequireNeedsSCRAMOverTLS() throws {
        let password = PostgresTLSServer.scramPassword
        // SCRAM-SHA-256-PLUS: the server checks the binding to its certificate.
        expectConnected(try opsh(server.url(user: "scram_user", password: password, "channel_binding=require")), encrypted: true)
        // Without TLS there is nothing to bind to.
        expectRefused(try opsh(server.url(user: "scram_user", password: password, "channel_binding=require&sslmode=disable")),
                      "channel binding is required (channel_binding=require), but the connection is not encrypted (TLS)")
        // Control: the same login without the requirement, in clear text.
        expectConnected(try opsh(server.url(user: "scram_user", password: password, "sslmode=disable")), encrypted: false)
        // A role the server trusts logs in without SCRAM: not bound, refused.
        expectRefused(try opsh(server.url("channel_binding=require")),
                      "channel binding required (channel_binding=require), but server authenticated client without channel binding")
        #expect(try server.psql(server.url("channel_binding=require"), "SELECT 1")
            .stderr.contains("channel binding required, but server authenticated client without channel binding"))
    }

    /// allow: clear text first, TLS when the server refuses clear text.
    @Test func allowTriesTLSWhenTheServerRefusesClearText() throws {
        expectConnected(try opsh(server.url(user: "tls_only_user", "sslmode=allow")), encrypted: true)
        expectRefused(try opsh(server.url(user: "tls_only_user", "sslmode=disable")), "no encryption")
        expectConnected(try opsh(server.url("sslmode=allow")), encrypted: false)
    }

    /// sslnegotiation=direct needs PostgreSQL 17; this server is older, and
    /// says so by closing the connection at the TLS ClientHello.
    @Test func directNegotiationIsRefusedWithTheReason() throws {
        expectRefused(try opsh(server.url("sslnegotiation=direct")),
                      "weak sslmode \"prefer\" may not be used with sslnegotiation=direct (use \"require\", \"verify-ca\", or \"verify-full\")")
        let version = try server.sql("SHOW server_version_num")
        if Int(version) ?? 0 >= 170_000 {
            expectConnected(try opsh(server.url("sslmode=require&sslnegotiation=direct")), encrypted: true)
        } else {
            expectRefused(try opsh(server.url("sslmode=require&sslnegotiation=direct")), "sslnegotiation=direct needs PostgreSQL 17 or later")
        }
        expectConnected(try opsh(server.url("sslmode=require&sslnegotiation=postgres")), encrypted: true)
    }
}

struct SchemaNotCreated: Error {
    let stderr: String
}
