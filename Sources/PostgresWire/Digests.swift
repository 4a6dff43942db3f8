import COpenSSL

// The digests opsh computes, all OpenSSL's (EVP, through COpenSSL): SHA-256
// for the audit trail (script digests, the rows' hash chain) and SCRAM,
// HMAC-SHA-256 and PBKDF2-HMAC-SHA-256 for SCRAM-SHA-256 (RFC 5802,
// RFC 7677), MD5 for the older `md5` login. No cryptography of opsh's own
// (ARCHITECTURE.md, "PostgreSQL: names, types, the client library").
//
// OpenSSL fails these only when it cannot allocate a few bytes; opsh stops
// then, as it does when Swift cannot allocate.

/// SHA-256 (FIPS 180-4), OpenSSL's: one function for the client's
/// authentication and the audit trail alike.
public enum SHA256 {
    public static func hash(_ bytes: some Sequence<UInt8>) -> [UInt8] {
        let input = Array(bytes)
        var digest = [UInt8](repeating: 0, count: 32)
        let done = input.withUnsafeBytes { raw in
            digest.withUnsafeMutableBufferPointer { opsh_sha256(raw.baseAddress, raw.count, $0.baseAddress) }
        }
        precondition(done == 1, "OpenSSL could not compute a SHA-256 digest (out of memory)")
        return digest
    }

    /// The digest as 64 lowercase hexadecimal digits.
    public static func hex(_ bytes: some Sequence<UInt8>) -> String {
        hexString(hash(bytes))
    }
}

/// HMAC-SHA-256 (RFC 2104), OpenSSL's.
enum HMACSHA256 {
    static func authenticate(_ message: some Sequence<UInt8>, key: [UInt8]) -> [UInt8] {
        let input = Array(message)
        var mac = [UInt8](repeating: 0, count: 32)
        let done = key.withUnsafeBytes { key in
            input.withUnsafeBytes { data in
                mac.withUnsafeMutableBufferPointer {
                    opsh_hmac_sha256(key.baseAddress, key.count, data.baseAddress, data.count, $0.baseAddress)
                }
            }
        }
        precondition(done == 1, "OpenSSL could not compute an HMAC-SHA-256 (out of memory)")
        return mac
    }
}

/// PBKDF2 with HMAC-SHA-256 (RFC 8018), one 32-byte block: SCRAM's
/// SaltedPassword, OpenSSL's.
func pbkdf2SHA256(password: [UInt8], salt: [UInt8], iterations: Int) -> [UInt8] {
    var key = [UInt8](repeating: 0, count: 32)
    let done = password.withUnsafeBytes { password in
        salt.withUnsafeBytes { salt in
            key.withUnsafeMutableBufferPointer {
                opsh_pbkdf2_sha256(password.baseAddress, password.count, salt.baseAddress, salt.count,
                                   Int32(clamping: iterations), $0.baseAddress)
            }
        }
    }
    precondition(done == 1, "OpenSSL could not compute PBKDF2-HMAC-SHA-256 (out of memory)")
    return key
}

/// MD5 (RFC 1321), OpenSSL's: only for PostgreSQL's `md5` login.
func md5(_ bytes: [UInt8]) -> [UInt8] {
    var digest = [UInt8](repeating: 0, count: 16)
    let done = bytes.withUnsafeBytes { raw in
        digest.withUnsafeMutableBufferPointer { opsh_md5(raw.baseAddress, raw.count, $0.baseAddress) }
    }
    precondition(done == 1, "OpenSSL could not compute an MD5 digest (out of memory)")
    return digest
}

/// Bytes as lowercase hexadecimal digits.
func hexString(_ bytes: some Sequence<UInt8>) -> String {
    let digits = Array("0123456789abcdef".utf8)
    var out: [UInt8] = []
    for byte in bytes {
        out.append(digits[Int(byte >> 4)])
        out.append(digits[Int(byte & 0x0f)])
    }
    return String(decoding: out, as: UTF8.self)
}
