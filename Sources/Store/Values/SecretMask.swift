/// Masks values of fields that hold secrets (the configuration's
/// `api_key`, a `token`, a `password`) wherever the shell prints them:
/// `••••` and the last four characters, so an operator can tell keys apart
/// without the screen (or a terminal log) holding them.
public enum SecretMask {
    /// Whether a field or column of this name holds a secret: names like
    /// `api_key`, `apiKey`, `token`, `accessToken`, `client_secret`,
    /// `password`. Counters such as `total_tokens` are not secrets.
    public static func isSecret(_ name: String) -> Bool {
        let folded = String(name.lowercased().filter { $0.isLetter || $0.isNumber })
        if folded.isEmpty { return false }
        for word in ["apikey", "secret", "password", "passwd", "privatekey", "credential", "accesskey"]
        where folded.contains(word) {
            return true
        }
        return folded.hasSuffix("token") || folded == "auth" || folded.hasSuffix("authorization")
    }

    /// `sk-live-abcdef1234` → `••••1234`; short values are masked fully.
    public static func mask(_ value: String) -> String {
        let characters = Array(value)
        guard characters.count >= 12 else { return "••••" }
        return "••••" + String(characters.suffix(4))
    }
}
