/// An error the server reported (an ErrorResponse message): a statement that
/// failed, a refused login, a cancelled query.
///
/// Its ``code`` is the SQLSTATE (`42P01` undefined table, `42601` syntax
/// error, `23505` unique violation, `57014` query cancelled, `28P01` wrong
/// password; the list is in PostgreSQL's documentation, appendix A), which
/// is what a program should test, not the message, which the server
/// translates. ``description`` reads like psql's report and quotes the
/// statement:
///
///     ERROR 42P01: relation "nope" does not exist (at character 15 of: SELECT * FROM nope)
///
/// After a statement's error the connection is still usable: the client
/// reads up to the server's ReadyForQuery before throwing. Inside a
/// transaction block the transaction is failed
/// (``PostgresConnection/transactionStatus`` is `.failed`) until a ROLLBACK
/// (or a ROLLBACK TO SAVEPOINT).
public struct PostgresError: Error, Sendable, Equatable, CustomStringConvertible {
    /// `ERROR`, `FATAL` or `PANIC` (never translated: the `V` field).
    public var severity: String
    /// The SQLSTATE: five characters.
    public var code: String
    /// The primary message.
    public var message: String
    public var detail: String?
    public var hint: String?
    /// Where in the statement the error is: a 1-based character offset into
    /// ``sql`` (characters, not bytes), as the server counts them.
    public var position: Int?
    /// The statement that failed, when the error is about one.
    public var sql: String?
    /// In ``PostgresConnection/pipeline(_:)``: the index (from 0) of the
    /// step that failed; the steps before it ran, the ones after it did not.
    /// nil for every other call.
    public var step: Int?
    /// In a pipeline: the command tags of the steps before ``step``, which
    /// completed (what a caller needs to know what they did: `COMMIT` or
    /// `ROLLBACK`, say).
    public var completedCommandTags: [String] = []
    /// Every field of the message, by its one-letter code (`S`, `V`, `C`,
    /// `M`, `D`, `H`, `P`, `W` where, `s` schema, `t` table, `c` column,
    /// `n` constraint, …).
    public var fields: [Character: String]

    init(fields: [Character: String], sql: String?) {
        self.fields = fields
        severity = fields["V"] ?? fields["S"] ?? "ERROR"
        code = fields["C"] ?? "XX000"
        message = fields["M"] ?? "(no message)"
        detail = fields["D"]
        hint = fields["H"]
        position = fields["P"].flatMap { Int($0) }
        self.sql = sql
    }

    /// The constraint a violation names (`23505`, `23503`, …), if any.
    public var constraint: String? { fields["n"] }

    public var description: String {
        var text = "\(severity) \(code): \(message)"
        if let sql {
            if let position {
                text += " (at character \(position) of: \(sql))"
            } else {
                text += " (in: \(sql))"
            }
        }
        if let detail { text += "\nDETAIL: \(detail)" }
        if let hint { text += "\nHINT: \(hint)" }
        return text
    }
}

/// A message the server sent without failing anything: `RAISE NOTICE`,
/// "table does not exist, skipping" and the like. The connection collects
/// them (``PostgresConnection/takeNotices()``) and never prints them: what
/// to show is the caller's decision.
public struct PostgresNotice: Sendable, Equatable, CustomStringConvertible {
    /// `NOTICE`, `WARNING`, `INFO`, `LOG` or `DEBUG`.
    public var severity: String
    public var code: String
    public var message: String
    public var detail: String?
    public var hint: String?

    init(fields: [Character: String]) {
        severity = fields["V"] ?? fields["S"] ?? "NOTICE"
        code = fields["C"] ?? "00000"
        message = fields["M"] ?? ""
        detail = fields["D"]
        hint = fields["H"]
    }

    public var description: String { "\(severity): \(message)" }
}

/// An error on the client's side: a URL it cannot use, a server it cannot
/// reach, a login method it does not speak, a connection that broke.
public enum PostgresClientError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The URL is malformed; the message says what and where.
    case invalidURL(String)
    /// A keyword/value string, a service file or a `PG*` variable is
    /// malformed, or names a service no file defines; the message says
    /// what and where.
    case invalidConnectionString(String)
    /// Something this client deliberately does not do (TLS, GSSAPI, COPY
    /// FROM STDIN); the message says what and what to do instead.
    case unsupported(String)
    /// The server could not be reached: refused, no such socket, closed
    /// before it answered.
    case connectionFailed(String)
    /// Connecting (and logging in) took longer than `seconds`: the URL's
    /// `connect_timeout`, or the caller's shorter limit.
    case timedOut(String, seconds: Double)
    /// The login could not proceed on the client's side (no password in
    /// the URL, a server that failed to prove it knows the password).
    /// A wrong password is the server's ``PostgresError`` `28P01`.
    case authentication(String)
    /// The connection is closed (by ``PostgresConnection/close()``, by the
    /// server, or after a protocol failure); open a new one.
    case connectionClosed(String)
    /// The server sent something this client did not expect.
    case protocolViolation(String)

    public var description: String {
        switch self {
        case .invalidURL(let message): return "invalid PostgreSQL URL: \(message)"
        case .invalidConnectionString(let message): return "invalid PostgreSQL connection settings: \(message)"
        case .unsupported(let message): return "not supported: \(message)"
        case .connectionFailed(let message): return "could not connect to PostgreSQL: \(message)"
        case .timedOut(let message, let seconds): return "could not connect to PostgreSQL: \(message) within \(formatSeconds(seconds)) seconds"
        case .authentication(let message): return "PostgreSQL authentication failed: \(message)"
        case .connectionClosed(let message): return "the PostgreSQL connection is closed: \(message)"
        case .protocolViolation(let message): return "PostgreSQL protocol error: \(message)"
        }
    }
}
