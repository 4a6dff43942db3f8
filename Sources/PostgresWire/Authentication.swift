import Foundation

// Password authentication: the exchanges PostgreSQL's pg_hba.conf methods
// ask a client for. `trust` (and `peer` on a Unix socket) asks nothing: the
// server answers AuthenticationOk at once. `password` asks for the password
// in clear text (fine on a Unix socket, unwise over TCP without TLS).
// `md5` asks for a salted double MD5. `scram-sha-256` (the default since
// PostgreSQL 14) runs SCRAM, in which neither side sends the password and
// the server proves that it knows it too.
//
// GSSAPI, SSPI and Kerberos are not spoken: the connection fails with
// ``PostgresClientError/unsupported(_:)`` naming the method the server asked for.

/// md5 method: `"md5" + md5hex(md5hex(password + user) + salt)`.
func md5PasswordResponse(user: String, password: String, salt: [UInt8]) -> String {
    let inner = hexString(md5(Array(password.utf8) + Array(user.utf8)))
    return "md5" + hexString(md5(Array(inner.utf8) + salt))
}

/// The client's side of SCRAM-SHA-256 (RFC 5802 and RFC 7677), as
/// PostgreSQL runs it, with an empty user name in the messages (the server
/// takes the role from the start-up message), and over TLS bound to the
/// session as SCRAM-SHA-256-PLUS (tls-server-end-point, RFC 5929) when the
/// server offers it and `channel_binding` is not `disable`: then a man in
/// the middle holding another certificate cannot relay the login.
///
/// The exchange:
///
///     client-first   GS2,n=,r=CLIENT-NONCE
///     server-first   r=CLIENT-NONCE+SERVER-NONCE,s=SALT,i=ITERATIONS
///     client-final   c=BASE64(GS2 + BINDING),r=NONCE,p=PROOF
///     server-final   v=SERVER-SIGNATURE
///
/// GS2 is `n,,` (not binding), `y,,` (could bind, the server offered no
/// -PLUS) or `p=tls-server-end-point,,` (BINDING: the hash of the server's
/// certificate); `SaltedPassword = PBKDF2(password, salt, iterations)`,
/// `ClientKey = HMAC(SaltedPassword, "Client Key")`,
/// `PROOF = ClientKey XOR HMAC(SHA256(ClientKey), AuthMessage)`, and the
/// server's signature `HMAC(HMAC(SaltedPassword, "Server Key"), AuthMessage)`,
/// which the client checks: a server that does not know the password
/// cannot produce it.
///
/// The password is used as its UTF-8 bytes. (libpq first applies SASLprep,
/// which changes only passwords with unusual Unicode characters; the server
/// accepts the raw bytes when SASLprep would refuse them.)
struct SCRAMSHA256Client {
    static let mechanism = "SCRAM-SHA-256"
    static let plusMechanism = "SCRAM-SHA-256-PLUS"

    /// How the exchange is bound to the TLS session.
    enum ChannelBinding {
        /// `n`: not bound (no TLS, or channel_binding=disable).
        case none
        /// `y`: the client could bind, the server offered no -PLUS mechanism.
        case notOfferedByServer
        /// `p=tls-server-end-point`: bound to this hash of the server's certificate.
        case serverEndPoint([UInt8])
    }

    private let password: [UInt8]
    private let clientNonce: String
    private let binding: ChannelBinding
    private var clientFirstBare: String
    private var saltedPassword: [UInt8] = []
    private var authMessage = ""

    init(password: String, binding: ChannelBinding = .none) {
        var generator = SystemRandomNumberGenerator()
        let nonceBytes = (0..<18).map { _ in UInt8.random(in: 0...255, using: &generator) }
        self.password = Array(password.utf8)
        self.binding = binding
        clientNonce = Data(nonceBytes).base64EncodedString()
        clientFirstBare = "n=,r=\(clientNonce)"
    }

    /// The client for a server offering `mechanisms` (AuthenticationSASL),
    /// as libpq chooses: -PLUS over TLS unless `channel_binding=disable`;
    /// `require` refuses anything else, with the reason.
    static func choosing(from mechanisms: [String], password: String, channelBinding: PostgresURL.ChannelBinding,
                         tls: TLSSession?) throws -> SCRAMSHA256Client {
        if let tls, channelBinding != .disable, mechanisms.contains(plusMechanism) {
            guard let hash = tls.serverEndPoint else {
                throw PostgresClientError.authentication("could not compute the hash of the server's certificate for channel binding")
            }
            return SCRAMSHA256Client(password: password, binding: .serverEndPoint(hash))
        }
        if channelBinding == .require {
            throw PostgresClientError.authentication(tls == nil
                ? "channel binding is required (channel_binding=require), but the connection is not encrypted (TLS)"
                : "channel binding is required (channel_binding=require), but the server did not offer an authentication method that supports it (SCRAM-SHA-256-PLUS; offered: \(mechanisms.joined(separator: ", ")))")
        }
        if tls == nil, mechanisms.contains(plusMechanism) {
            throw PostgresClientError.protocolViolation("the server offered SCRAM-SHA-256-PLUS authentication over a connection without TLS")
        }
        guard mechanisms.contains(mechanism) else {
            throw PostgresClientError.unsupported("the server offers SASL mechanisms \(mechanisms.joined(separator: ", ")); this client speaks SCRAM-SHA-256 and SCRAM-SHA-256-PLUS")
        }
        return SCRAMSHA256Client(password: password, binding: tls != nil && channelBinding != .disable ? .notOfferedByServer : .none)
    }

    /// The mechanism this client runs.
    var chosenMechanism: String {
        if case .serverEndPoint = binding { return Self.plusMechanism }
        return Self.mechanism
    }

    /// Whether the exchange is bound to the TLS session.
    var isBound: Bool {
        if case .serverEndPoint = binding { return true }
        return false
    }

    /// RFC 5802's GS2 header.
    private var gs2Header: String {
        switch binding {
        case .none: return "n,,"
        case .notOfferedByServer: return "y,,"
        case .serverEndPoint: return "p=tls-server-end-point,,"
        }
    }

    /// The SASLInitialResponse's data.
    var clientFirstMessage: [UInt8] { Array("\(gs2Header)\(clientFirstBare)".utf8) }

    /// Answers the server-first-message (AuthenticationSASLContinue).
    mutating func clientFinalMessage(serverFirst data: [UInt8]) throws -> [UInt8] {
        let serverFirst = String(decoding: data, as: UTF8.self)
        var attributes: [Character: String] = [:]
        for part in serverFirst.split(separator: ",") {
            guard let key = part.first, part.dropFirst().first == "=" else { continue }
            attributes[key] = String(part.dropFirst(2))
        }
        guard let nonce = attributes["r"], nonce.hasPrefix(clientNonce), nonce.count > clientNonce.count else {
            throw PostgresClientError.authentication("the server's SCRAM nonce does not extend the client's")
        }
        guard let saltText = attributes["s"], let salt = Data(base64Encoded: saltText) else {
            throw PostgresClientError.authentication("the server's SCRAM message has no valid salt")
        }
        guard let iterationsText = attributes["i"], let iterations = Int(iterationsText), iterations > 0 else {
            throw PostgresClientError.authentication("the server's SCRAM message has no valid iteration count")
        }
        saltedPassword = pbkdf2SHA256(password: password, salt: Array(salt), iterations: iterations)
        let clientKey = HMACSHA256.authenticate(Array("Client Key".utf8), key: saltedPassword)
        let storedKey = SHA256.hash(clientKey)
        var bindingInput = Array(gs2Header.utf8)
        if case .serverEndPoint(let hash) = binding { bindingInput += hash }
        let withoutProof = "c=\(Data(bindingInput).base64EncodedString()),r=\(nonce)"
        authMessage = "\(clientFirstBare),\(serverFirst),\(withoutProof)"
        let signature = HMACSHA256.authenticate(Array(authMessage.utf8), key: storedKey)
        let proof = zip(clientKey, signature).map { $0 ^ $1 }
        return Array("\(withoutProof),p=\(Data(proof).base64EncodedString())".utf8)
    }

    /// Checks the server-final-message (AuthenticationSASLFinal).
    func verify(serverFinal data: [UInt8]) throws {
        let serverFinal = String(decoding: data, as: UTF8.self)
        if serverFinal.hasPrefix("e=") {
            throw PostgresClientError.authentication("the server refused the SCRAM exchange: \(serverFinal.dropFirst(2))")
        }
        guard serverFinal.hasPrefix("v="), let signature = Data(base64Encoded: String(serverFinal.dropFirst(2).prefix { $0 != "," })) else {
            throw PostgresClientError.authentication("the server's final SCRAM message has no signature")
        }
        let serverKey = HMACSHA256.authenticate(Array("Server Key".utf8), key: saltedPassword)
        let expected = HMACSHA256.authenticate(Array(authMessage.utf8), key: serverKey)
        guard Array(signature) == expected else {
            throw PostgresClientError.authentication("the server's SCRAM signature is wrong: it does not know the password (not the server you meant?)")
        }
    }
}

/// The names of the authentication requests this client does not answer.
func unsupportedAuthenticationName(_ code: Int32) -> String {
    switch code {
    case 2: return "Kerberos V5"
    case 6: return "SCM credentials"
    case 7, 8: return "GSSAPI"
    case 9: return "SSPI"
    default: return "authentication request \(code)"
    }
}
