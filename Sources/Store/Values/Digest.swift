import PostgresWire

/// SHA-256 for the core's callers (a script's digest, a workspace's name):
/// the one implementation there is, PostgresWire's.
public enum Digest {
    /// The SHA-256 of `bytes` as 64 lowercase hexadecimal digits.
    public static func sha256Hex(_ bytes: some Sequence<UInt8>) -> String {
        SHA256.hex(bytes)
    }
}
