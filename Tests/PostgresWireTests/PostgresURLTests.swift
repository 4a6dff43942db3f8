import Testing
@testable import PostgresWire

/// URLs as libpq reads them, and the refusals with their reasons.
@Suite struct PostgresURLTests {
    @Test func tcpURLWithEveryPart() throws {
        let url = try PostgresURL("postgresql://alice:s3cret@db.example:6432/builds")
        #expect(url.user == "alice")
        #expect(url.password == "s3cret")
        #expect(url.endpoint == .tcp(host: "db.example", port: 6432))
        #expect(url.database == "builds")
        #expect(url.sslMode == .prefer)
        // The password never shows in the URL's description.
        #expect(url.description == "postgresql://alice:***@db.example:6432/builds")
    }

    @Test func postgresSchemeIsTheSame() throws {
        #expect(try PostgresURL("postgres://alice@localhost/x") == PostgresURL("postgresql://alice@localhost/x"))
    }

    @Test func emptyHostIsTheDefaultSocketFolder() throws {
        let url = try PostgresURL("postgresql://alice@/opsh")
        #expect(url.endpoint == .unixSocket(path: "/var/run/postgresql/.s.PGSQL.5432"))
    }

    @Test func hostParameterNamesTheSocketFolder() throws {
        let url = try PostgresURL("postgresql://root@/opsh?host=/tmp/pg%20dir&port=5433")
        #expect(url.endpoint == .unixSocket(path: "/tmp/pg dir/.s.PGSQL.5433"))
        #expect(url.user == "root")
        #expect(url.database == "opsh")
    }

    @Test func queryParametersOverrideAndPercentDecode() throws {
        let url = try PostgresURL("postgresql://ignored@h/db?user=bob&password=p%40ss%3Aw%2Fd&dbname=other&application_name=x&sslmode=disable")
        #expect(url.user == "bob")
        #expect(url.password == "p@ss:w/d")
        #expect(url.database == "other")
        #expect(url.applicationName == "x")
        #expect(url.sslMode == .disable)
    }

    @Test func passwordMayHoldAnAtSign() throws {
        let url = try PostgresURL("postgresql://bob:a@b@host/db")
        #expect(url.user == "bob")
        #expect(url.password == "a@b")
        #expect(url.endpoint == .tcp(host: "host", port: 5432))
    }

    @Test func ipv6Host() throws {
        let url = try PostgresURL("postgresql://u@[::1]:5439/d")
        #expect(url.endpoint == .tcp(host: "::1", port: 5439))
    }

    @Test func databaseDefaultsToTheUser() throws {
        #expect(try PostgresURL("postgresql://carol@host").database == "carol")
    }

    @Test func refusals() throws {
        func message(_ text: String) -> String {
            do {
                _ = try PostgresURL(text)
                return "accepted"
            } catch {
                return "\(error)"
            }
        }
        #expect(message("mysql://u@h/d") == "invalid PostgreSQL URL: a PostgreSQL URL starts with postgresql:// or postgres:// (or give keyword/value settings: host=… dbname=…)")
        #expect(message("postgresql://u@h:54x2/d") == "invalid PostgreSQL URL: the port “54x2” is not a number from 1 to 65535 (at character 18 of the URL)")
        #expect(message("postgresql://u@h:70000/d") == "invalid PostgreSQL URL: the port “70000” is not a number from 1 to 65535 (at character 18 of the URL)")
        #expect(message("postgresql://u@h/d%zz") == "invalid PostgreSQL URL: the database name: “%” must be followed by two hexadecimal digits (a percent-encoded byte) (at character 19 of the URL)")
        #expect(message("postgresql://u@h/d?sslcrl=x") == "invalid PostgreSQL URL: the parameter “sslcrl” is not supported (known: host, hostaddr, port, user, password, passfile, dbname, service, options, application_name, fallback_application_name, connect_timeout, target_session_attrs, load_balance_hosts, sslmode, sslrootcert, sslcert, sslkey, sslnegotiation, channel_binding) (at character 20 of the URL)")
        #expect(message("postgresql://u@h/d?sslnegotiation=tls") == "invalid PostgreSQL URL: sslnegotiation “tls” is not one of postgres, direct (at character 35 of the URL)")
        #expect(message("postgresql://u@h/d?channel_binding=must") == "invalid PostgreSQL URL: channel_binding “must” is not one of disable, prefer, require (at character 36 of the URL)")
        #expect(message("postgresql://u@h/d?sslmode=sometimes").hasPrefix("invalid PostgreSQL URL: sslmode “sometimes” is not one of"))
        #expect(message("postgresql://u@a,b,c/d?port=1,2") == "invalid PostgreSQL URL: 2 ports for 3 host(s): give one port for all, or one for each host (at character 29 of the URL)")
        // A bad escape in the password says where, not what the password is.
        let password = message("postgresql://u:hunter%2@h/d")
        #expect(password.contains("the password") && !password.contains("hunter"))
    }

    /// Every sslmode is taken (TLSTests connect with each); the TLS
    /// parameters keep libpq's defaults when the URL does not name them.
    @Test func tlsParametersWithLibpqsDefaults() throws {
        for mode in ["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] {
            #expect(try PostgresURL("postgresql://u@h/d?sslmode=\(mode)").sslMode.rawValue == mode)
        }
        let plain = try PostgresURL("postgresql://u@h/d")
        #expect(plain.sslMode == .prefer)
        #expect(plain.sslRootCert == nil && plain.sslCert == nil && plain.sslKey == nil)
        #expect(plain.sslNegotiation == .postgres)
        #expect(plain.channelBinding == .prefer)
        let named = try PostgresURL("postgresql://u@h/d?sslrootcert=/etc/ca%20file.pem&sslcert=/c.crt&sslkey=/c.key&sslnegotiation=direct&channel_binding=require&sslmode=verify-ca")
        #expect(named.sslRootCert == "/etc/ca file.pem")
        #expect(named.sslCert == "/c.crt")
        #expect(named.sslKey == "/c.key")
        #expect(named.sslNegotiation == .direct)
        #expect(named.channelBinding == .require)
        #expect(named.sslMode == .verifyCA)
        // libpq: sslrootcert=system makes verify-full the default.
        #expect(try PostgresURL("postgresql://u@h/d?sslrootcert=system").sslMode == .verifyFull)
        #expect(try PostgresURL("postgresql://u@h/d?sslrootcert=system&sslmode=require").sslMode == .require)
    }
}

/// The digests password logins use, against their standards' test vectors.
@Suite struct DigestTests {
    @Test func sha256() {
        #expect(hexString(SHA256.hash(Array("abc".utf8))) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(hexString(SHA256.hash([])) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        let twoBlocks = Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8)
        #expect(hexString(SHA256.hash(twoBlocks)) == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
    }

    @Test func hmacSHA256() {
        // RFC 4231, test case 2.
        let mac = HMACSHA256.authenticate(Array("what do ya want for nothing?".utf8), key: Array("Jefe".utf8))
        #expect(hexString(mac) == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    }

    @Test func pbkdf2() {
        // RFC 7914, section 11: PBKDF2-HMAC-SHA256("passwd", "salt", 1), first 32 bytes.
        let key = pbkdf2SHA256(password: Array("passwd".utf8), salt: Array("salt".utf8), iterations: 1)
        #expect(hexString(key) == "55ac046e56e3089fec1691c22544b605f94185216dde0465e68b9d57c20dacbc")
    }

    @Test func md5Digest() {
        #expect(hexString(md5(Array("".utf8))) == "d41d8cd98f00b204e9800998ecf8427e")
        #expect(hexString(md5(Array("The quick brown fox jumps over the lazy dog".utf8))) == "9e107d9d372bb6826bd81d3542a419d6")
    }
}
