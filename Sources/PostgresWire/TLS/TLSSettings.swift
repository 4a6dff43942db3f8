import Glibc

/// What TLS does for one connection: the URL's `sslmode`, `sslrootcert`,
/// `sslcert`, `sslkey`, `sslnegotiation`, with the meanings libpq (and so
/// psql) gives them, which the TLS tests compare with psql:
///
/// | sslmode | encrypted | server certificate checked |
/// | --- | --- | --- |
/// | `disable` | never | – |
/// | `allow` | only when the server refuses a clear-text login | against the roots, when there are roots |
/// | `prefer` (default) | when the server agrees; clear text when it says no | against the roots, when there are roots |
/// | `require` | always | against the roots, when there are roots |
/// | `verify-ca` | always | against the roots (they must exist) |
/// | `verify-full` | always | against the roots, and the host name against its names |
///
/// The roots are `sslrootcert` (`system`: the system's store, and then only
/// `verify-full`), or `~/.postgresql/root.crt` when it exists. The client
/// presents `sslcert` (default `~/.postgresql/postgresql.crt`) when the
/// file exists, with `sslkey` (default `~/.postgresql/postgresql.key`),
/// which must not be readable by group or others. A Unix socket is never
/// encrypted, whatever the mode (libpq does not ask there either: only the
/// socket's owner reaches it).
struct TLSSettings: Sendable {
    private(set) var mode: PostgresURL.SSLMode
    let negotiation: PostgresURL.SSLNegotiation
    /// The host the certificate must name (verify-full) and the SNI.
    let host: String
    let rootCertificate: String?
    let clientCertificate: String?
    let clientKey: String?

    /// The settings of `url` for one of its hosts (the first when not
    /// said); nil when it is never encrypted (sslmode disable, a Unix
    /// socket). The certificate must name the host's name, not the
    /// `hostaddr` connected to, as in libpq. Throws for a combination
    /// libpq refuses.
    init?(_ url: PostgresURL, host target: PostgresURL.Host? = nil) throws {
        let target = target ?? url.hosts[0]
        guard case .tcp(let address, _) = target.endpoint, url.sslMode != .disable else {
            if url.sslNegotiation == .direct, url.sslMode == .disable {
                throw Self.weakMode(url.sslMode, "sslnegotiation=direct", use: "\"require\", \"verify-ca\", or \"verify-full\"")
            }
            return nil
        }
        if url.sslNegotiation == .direct, [.allow, .prefer].contains(url.sslMode) {
            throw Self.weakMode(url.sslMode, "sslnegotiation=direct", use: "\"require\", \"verify-ca\", or \"verify-full\"")
        }
        if url.sslRootCert == "system", url.sslMode != .verifyFull {
            throw Self.weakMode(url.sslMode, "sslrootcert=system", use: "\"verify-full\"")
        }
        mode = url.sslMode
        negotiation = url.sslNegotiation
        self.host = target.name.isEmpty ? address : target.name
        rootCertificate = url.sslRootCert
        clientCertificate = url.sslCert
        clientKey = url.sslKey
    }

    private static func weakMode(_ mode: PostgresURL.SSLMode, _ setting: String, use: String) -> PostgresClientError {
        .invalidURL("weak sslmode \"\(mode.rawValue)\" may not be used with \(setting) (use \(use))")
    }

    /// Whether the first attempt is encrypted (all but `allow`).
    var startsEncrypted: Bool { mode != .allow }

    /// Whether a login the server refused is tried again the other way:
    /// `prefer` in clear text after TLS, `allow` with TLS after clear text.
    func triesAgain(wasEncrypted: Bool) -> Bool {
        mode == .prefer && wasEncrypted || mode == .allow && !wasEncrypted
    }

    /// The same checks with encryption required: for the cancel request of
    /// a connection that is encrypted (it must not go in clear text).
    func requiringEncryption() -> TLSSettings {
        var settings = self
        if [.allow, .prefer].contains(mode) { settings.mode = .require }
        return settings
    }

    /// What the handshake uses, read from the files now.
    struct Files {
        var verifyChain = false
        var rootFile: String?
        var systemRoots = false
        var certificateFile: String?
        var keyPEM: [UInt8]?
    }

    /// Finds and checks the files, as libpq does when it starts TLS.
    func files() throws -> Files {
        var files = Files()
        if rootCertificate == "system" {
            files.systemRoots = true
            files.verifyChain = true
        } else {
            let path = try rootCertificate ?? Self.inHome("root.crt", needed: mode == .verifyCA || mode == .verifyFull,
                                                             for: "root certificate file")
            if let path, Self.exists(path) {
                files.rootFile = path
                files.verifyChain = true
            } else if mode == .verifyCA || mode == .verifyFull {
                throw PostgresClientError.connectionFailed(
                    "root certificate file \"\(path ?? "~/.postgresql/root.crt")\" does not exist; either provide the file "
                        + "(sslrootcert=FILE), use the system's trusted roots with sslrootcert=system, "
                        + "or change sslmode to disable server certificate verification")
            }
        }
        if let certificate = try clientCertificate ?? Self.inHome("postgresql.crt", needed: false, for: ""), Self.exists(certificate) {
            files.certificateFile = certificate
            let key = try clientKey ?? Self.inHome("postgresql.key", needed: true, for: "private key file")!
            files.keyPEM = try Self.readPrivateKey(key)
        }
        return files
    }

    /// `~/.postgresql/NAME`, with the home folder from HOME or the user's
    /// entry; nil when there is none (an error when the file is `needed`).
    private static func inHome(_ name: String, needed: Bool, for what: String) throws -> String? {
        var home = getenv("HOME").map { String(cString: $0) } ?? ""
        if home.isEmpty, let entry = getpwuid(geteuid()), let directory = entry.pointee.pw_dir {
            home = String(cString: directory)
        }
        if home.isEmpty {
            if needed { throw PostgresClientError.connectionFailed("could not get home directory to locate \(what)") }
            return nil
        }
        return home + "/.postgresql/" + name
    }

    private static func exists(_ path: String) -> Bool {
        var status = stat()
        return stat(path, &status) == 0
    }

    /// The key's bytes, refused (as libpq refuses it) when it is not a
    /// regular file or group or others may read it: 0600 or less for a
    /// file of one's own, 0640 or less for root's. The permissions are
    /// those of the file read (fstat on the open descriptor).
    static func readPrivateKey(_ path: String) throws -> [UInt8] {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            let code = errno
            if code == ENOENT {
                throw PostgresClientError.connectionFailed("certificate present, but not private key file \"\(path)\"")
            }
            throw PostgresClientError.connectionFailed("could not open private key file \"\(path)\": \(Socket.errorText(code))")
        }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            throw PostgresClientError.connectionFailed("could not stat private key file \"\(path)\": \(Socket.errorText(errno))")
        }
        guard status.st_mode & S_IFMT == S_IFREG else {
            throw PostgresClientError.connectionFailed("private key file \"\(path)\" is not a regular file")
        }
        let loose = status.st_uid == 0 ? status.st_mode & 0o037 != 0 : status.st_mode & 0o077 != 0
        if loose {
            throw PostgresClientError.connectionFailed(
                "private key file \"\(path)\" has group or world access; file must have permissions u=rw (0600) or less "
                    + "if owned by the current user, or permissions u=rw,g=r (0640) or less if owned by root")
        }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16_384)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            guard count >= 0 else {
                throw PostgresClientError.connectionFailed("could not read private key file \"\(path)\": \(Socket.errorText(errno))")
            }
            if count == 0 { return bytes }
            bytes += chunk[..<count]
            guard bytes.count <= 1 << 20 else {
                throw PostgresClientError.connectionFailed("private key file \"\(path)\" is larger than 1 MiB: not a key")
            }
        }
    }
}

extension PostgresClientError {
    /// A deadline ran out (no fallback for that: the time is gone).
    var isTimeout: Bool {
        if case .timedOut = self { return true }
        return false
    }
}
