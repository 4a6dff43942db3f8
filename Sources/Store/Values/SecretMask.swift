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

extension SecretMask {
    /// `text` with the credentials of every URL in it masked: the password
    /// of `scheme://user:password@host` (`user:••••cret@host`), and a
    /// token given as the user of an http(s) or ftp URL
    /// (`https://••••abcd@host`, as GitHub's `https://TOKEN@github.com`).
    /// A plain user (`ssh://git@host`) stays, and so does the rest of the
    /// URL: a line still says where it went.
    public static func maskingURLCredentials(in text: String) -> String {
        guard text.contains("@"), text.contains("://") else { return text }
        var result = ""
        var rest = Substring(text)
        while let separator = rest.range(of: "://") {
            let scheme = rest[..<separator.lowerBound].reversed().prefix { $0.isLetter || $0.isNumber || "+-.".contains($0) }
            let schemeName = String(scheme.reversed()).lowercased()
            result += rest[..<separator.upperBound]
            let afterScheme = rest[separator.upperBound...]
            let authorityEnd = afterScheme.firstIndex { "/?#".contains($0) || $0.isWhitespace || "'\"<>`".contains($0) } ?? afterScheme.endIndex
            let authority = afterScheme[..<authorityEnd]
            guard let at = authority.lastIndex(of: "@") else {
                rest = afterScheme
                continue
            }
            let userInfo = authority[..<at]
            if userInfo.contains("••••") {
                result += userInfo  // masked already
            } else if let colon = userInfo.firstIndex(of: ":") {
                result += userInfo[...colon] + mask(String(userInfo[userInfo.index(after: colon)...]))
            } else if ["http", "https", "ftp", "ftps"].contains(schemeName), !userInfo.isEmpty {
                result += mask(String(userInfo))
            } else {
                result += userInfo
            }
            rest = afterScheme[at...]
        }
        return result + rest
    }
}
