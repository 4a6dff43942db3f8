/// libpq's keyword/value connection strings, as psql takes them:
///
///     host=db.example port=6432 dbname=builds user=alice
///     host = /tmp/pg  dbname='my builds'  password='it\'s'
///
/// Settings are separated by whitespace; spaces around `=` are allowed. A
/// value is either unquoted (up to the next whitespace) or in single
/// quotes; in both, a backslash takes the next character as it is (`\'`,
/// `\\`, `\ `). The same keyword twice: the last one counts.
enum KeywordValueString {
    /// Every keyword libpq knows (PostgreSQL 17). A string that starts with
    /// one of them and `=` is a connection string, not a file's path
    /// (``PostgresURL/isConnectionString(_:)``); which of them this client
    /// honours is ``PostgresURL``'s business, so a keyword it does not (yet)
    /// take is refused there by name rather than taken for a path here.
    static let libpqKeywords: Set<String> = [
        "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "service",
        "connect_timeout", "client_encoding", "options", "application_name", "fallback_application_name",
        "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout",
        "replication", "require_auth", "channel_binding", "target_session_attrs", "load_balance_hosts",
        "sslmode", "sslnegotiation", "sslcompression", "sslcert", "sslkey", "sslpassword", "sslcertmode",
        "sslrootcert", "sslcrl", "sslcrldir", "sslsni", "requirepeer", "ssl_min_protocol_version",
        "ssl_max_protocol_version", "gssencmode", "krbsrvname", "gsslib", "gssdelegation",
    ]

    /// Whether `text` starts (after blanks) with a keyword libpq knows,
    /// followed by `=`.
    static func startsWithKnownKeyword(_ text: String) -> Bool {
        // Most --db values are file paths: no `=`, no keyword set built.
        guard text.utf8.contains(UInt8(ascii: "=")) else { return false }
        let trimmed = text.drop { $0.isWhitespace }
        let keyword = trimmed.prefix { $0 != "=" && !$0.isWhitespace }
        guard libpqKeywords.contains(String(keyword)) else { return false }
        return trimmed.dropFirst(keyword.count).drop { $0.isWhitespace }.first == "="
    }

    /// The settings of `text`, in order, each with the offsets of its
    /// keyword and value. Malformed text throws
    /// ``PostgresClientError/invalidConnectionString(_:)`` naming the
    /// character; a value (a password) is never quoted in the message.
    static func settings(_ text: String) throws -> [ConnectionSetting] {
        let characters = Array(text)
        func fail(_ message: String, at offset: Int) -> PostgresClientError {
            .invalidConnectionString("\(message) (at character \(offset + 1) of the connection string)")
        }
        var settings: [ConnectionSetting] = []
        var index = 0
        func skipBlanks() { while index < characters.count, characters[index].isWhitespace { index += 1 } }
        while true {
            skipBlanks()
            guard index < characters.count else { break }
            let keywordStart = index
            while index < characters.count, characters[index] != "=", !characters[index].isWhitespace { index += 1 }
            let keyword = String(characters[keywordStart..<index])
            skipBlanks()
            guard index < characters.count, characters[index] == "=" else {
                // After a password, the stray word may be the rest of it: not quoted.
                if settings.last?.keyword == "password" {
                    throw fail("the text after the password's value has no “=VALUE” (a value with spaces goes in single quotes: password='…')", at: keywordStart)
                }
                throw fail("“\(visible(keyword))” has no “=VALUE” (settings are KEYWORD=VALUE, separated by spaces)", at: keywordStart)
            }
            guard !keyword.isEmpty else { throw fail("“=” without a keyword before it", at: index) }
            index += 1
            skipBlanks()
            let valueStart = index
            var value = ""
            if index < characters.count, characters[index] == "'" {
                index += 1
                while true {
                    guard index < characters.count else {
                        throw fail("the quoted value of \(keyword) is not closed with “'”", at: valueStart)
                    }
                    let character = characters[index]
                    if character == "\\" {
                        index += 1
                        if index < characters.count { value.append(characters[index]); index += 1 }
                    } else if character == "'" {
                        index += 1
                        break
                    } else {
                        value.append(character)
                        index += 1
                    }
                }
            } else {
                while index < characters.count, !characters[index].isWhitespace {
                    if characters[index] == "\\" {
                        index += 1
                        if index < characters.count { value.append(characters[index]); index += 1 }
                    } else {
                        value.append(characters[index])
                        index += 1
                    }
                }
            }
            settings.append(ConnectionSetting(keyword, value, from: .keywordValue(keyword: keywordStart, value: valueStart)))
        }
        return settings
    }

    /// `text` with control characters shown as escapes, for a message.
    static func visible(_ text: String) -> String {
        var shown = ""
        for scalar in text.unicodeScalars {
            if scalar.value < 0x20 || scalar.value == 0x7F {
                shown += "\\u{\(String(scalar.value, radix: 16))}"
            } else {
                shown.unicodeScalars.append(scalar)
            }
        }
        return shown
    }
}
