import Glibc

/// The state of the session's transaction, as the server reports it in every
/// ReadyForQuery.
public enum PostgresTransactionStatus: Character, Sendable {
    /// Not in a transaction block: each statement commits on its own.
    case idle = "I"
    /// In a transaction block (after BEGIN).
    case inTransaction = "T"
    /// In a failed transaction block: every statement is refused (25P02)
    /// until ROLLBACK, or ROLLBACK TO a savepoint set before the failure.
    case failed = "E"
}

/// One connection to a PostgreSQL server, used from one thread at a time.
///
/// Opening it connects (Unix socket or TCP, with TLS), starts the session (role,
/// database, `application_name`, `client_encoding` UTF8, `DateStyle` ISO)
/// and logs in (trust, cleartext password, md5 or SCRAM-SHA-256). Then:
///
///     let connection = try PostgresConnection(url: "postgresql://alice@/opsh?host=/tmp/pg")
///     let result = try connection.query("SELECT id, name FROM builds WHERE id = $1", [.integer(42)])
///     for row in result.rows { print(row[0], row[1]) }
///     try connection.simpleQuery("BEGIN; SET LOCAL statement_timeout = '5s'")
///
/// **Calls block.** Every call writes its messages and reads until the
/// server is ready for the next query; nothing runs in the background and
/// nothing is initialised before the first connection is opened. To stop a
/// query that runs too long, call ``PostgresCanceller/cancel()`` (from
/// ``canceller``) on another thread: the query fails with SQLSTATE `57014`
/// and the connection goes on.
///
/// **Statements are prepared once.** ``query(_:_:)`` prepares each SQL text
/// as a named statement the first time (Parse, Describe: one round trip),
/// and afterwards only binds and executes it (one round trip). A statement
/// whose result columns changed under it (an ALTER TABLE; the server's
/// `0A000` "cached plan must not change result type") is prepared again and
/// run again transparently when no transaction block was open; inside one,
/// the transaction is already failed, so the error is thrown (with a hint)
/// and the statement is prepared again on its next run, after the ROLLBACK.
///
/// **Errors keep the connection.** A statement's ``PostgresError`` is
/// thrown after the server's ReadyForQuery: the next call works. A broken
/// socket or a protocol violation closes the connection
/// (``PostgresClientError/connectionClosed(_:)`` from then on).
///
/// **What arrives on the side is kept, not printed**: notices
/// (``takeNotices()``), notifications from LISTEN (``waitForNotification(timeout:)``),
/// and parameter changes (``serverParameters``).
///
/// TLS follows the URL's `sslmode` and its files as libpq does
/// (``TLSSettings``), and SCRAM binds to the TLS session when it can.
///
/// COPY FROM STDIN runs through ``copyIn(_:from:)``; a COPY FROM STDIN sent
/// through the other calls is refused (a CopyFail, and the server's error).
///
/// Not done: GSSAPI and SSPI logins, COPY TO STDOUT's data (read and dropped), and
/// results fetched in portions (every row of a result is read in the call
/// that runs it; ``query(_:_:eachRow:)`` hands each out in place instead of
/// collecting it).
public final class PostgresConnection {
    /// What the connection was opened with.
    public let url: PostgresURL
    /// The host it reached, of ``PostgresURL/hosts`` (HostSelection.swift).
    public internal(set) var connectedHost: PostgresURL.Host
    /// The password for the login to ``connectedHost``: the URL's, else
    /// the password file's line for that host (``passwordFile``).
    public internal(set) var loginPassword: String?
    /// The password file ``loginPassword`` came from, if it did.
    var passwordFile: String?
    /// The server's run-time parameters: `server_version`, `TimeZone`,
    /// `integer_datetimes`, `standard_conforming_strings`, … as reported at
    /// start-up and whenever they change.
    public internal(set) var serverParameters: [String: String] = [:]
    /// The server process serving this connection (`pg_backend_pid()`).
    public internal(set) var processID: Int32 = 0
    var secretKey: Int32 = 0
    /// The transaction state after the last call.
    public internal(set) var transactionStatus: PostgresTransactionStatus = .idle
    /// How many exchanges (each ended by the server's ReadyForQuery) this
    /// connection has had: a caller that remembers it knows whether anything
    /// else ran on the connection since.
    public internal(set) var exchangeCount = 0
    /// Statements kept prepared on the server; past this many the least
    /// recently used one is closed. 0 turns the cache off: each query is
    /// parsed again as the unnamed statement (two round trips a query).
    public var statementCacheCapacity = 256 {
        didSet { evictStatements(keeping: statementCacheCapacity) }
    }

    var socket: Socket?
    let inbox = Inbox()
    var outbox: [UInt8] = []
    /// The cycles (a Sync, a simple Query) ``outbox`` starts: what
    /// ``send(includingCloses:)`` tells ``cancelFence``.
    var cyclesInOutbox = 0
    /// Shared with this connection's cancellers (``canceller``): a cancel is
    /// sent only while a cycle is unanswered, and nothing is written while
    /// one is being sent.
    let cancelFence = CancelFence()
    var notices: [PostgresNotice] = []
    var notifications: [PostgresNotification] = []
    private var statements: [StatementKey: PreparedStatement] = [:]
    private var statementCounter = 0
    private var useCounter: UInt64 = 0

    /// Opens a connection: see ``PostgresURL`` for the syntax.
    public convenience init(url: String) throws {
        try self.init(url: try PostgresURL(url))
    }

    /// Opens a connection to `url` within its `connect_timeout`, or within
    /// `timeLimit` seconds when that is shorter (a caller's own deadline,
    /// such as opsh's `--timeout`): connecting and the start-up (login)
    /// together. Running out of time throws
    /// ``PostgresClientError/timedOut(_:seconds:)``. Of several hosts, the
    /// first that answers and suits the URL's `target_session_attrs` is
    /// taken (HostSelection.swift); `timeLimit` covers them all,
    /// `connect_timeout` each.
    ///
    /// `settings` are run-time parameters for the session, sent in the
    /// start-up message (`lock_timeout`, say): they are the session's
    /// defaults, which `RESET` returns to.
    public init(url: PostgresURL, timeLimit: Double? = nil, settings: [(name: String, value: String)] = []) throws {
        self.url = url
        connectedHost = url.hosts[0]
        try openOneOfTheHosts(timeLimit: timeLimit, settings: settings)
    }

    /// A connection over a stream that is already open (`descriptor`, which
    /// it then owns), logging in as `url` says: for the `pg-wire` fuzz
    /// target, which plays the server (fuzz/README.md).
    init(adopting descriptor: Int32, url: PostgresURL) throws {
        self.url = url
        connectedHost = url.hosts[0]
        loginPassword = url.password
        let socket = Socket.adopting(descriptor)
        self.socket = socket
        do {
            try startUp(deadline: monotonicSeconds() + 5, limit: 5, settings: [])
        } catch {
            socket.close()
            self.socket = nil
            throw error
        }
    }

    /// Whether the server has closed this idle connection (its goodbye
    /// waits unread), found without waiting: a poll with no timeout, and a
    /// read only when something is there (a notice, a notification, the
    /// goodbye). A connection found closed is closed here too.
    public func serverHasHungUp() -> Bool {
        guard let socket else { return true }
        guard (try? socket.poll(timeout: 0)) == true else { return false }
        do {
            _ = try waitForNotification(timeout: 0.001)
        } catch {
            close()
        }
        return !isOpen
    }

    /// The TLS a cancel request needs: the connection's, when it is encrypted.
    var cancelTLS: TLSSettings?

    /// Whether the connection is encrypted (TLS).
    public var isEncrypted: Bool { socket?.tls != nil }

    deinit { close() }

    /// Whether the connection can still be used.
    public var isOpen: Bool { socket != nil }

    /// The server's version string (`server_version`, e.g. `15.18 (Debian 15.18-0+deb12u1)`).
    public var serverVersion: String? { serverParameters["server_version"] }

    /// What another thread needs to cancel this connection's running query.
    public var canceller: PostgresCanceller {
        PostgresCanceller(endpoint: connectedHost.endpoint, processID: processID, secretKey: secretKey, timeout: url.connectTimeout, tls: cancelTLS,
                          fence: cancelFence)
    }

    /// Cancels the running query: ``PostgresCanceller/cancel()`` on
    /// ``canceller``. Call it from another thread than the one waiting in
    /// the query (this object is not shared between threads; a canceller is).
    public func cancel() throws {
        try canceller.cancel()
    }

    /// Says goodbye (Terminate) and closes the socket. Safe to repeat.
    public func close() {
        guard let socket else { return }
        var goodbye: [UInt8] = []
        Frontend.terminate(into: &goodbye)
        try? socket.send(goodbye)
        socket.close()
        self.socket = nil
        statements.removeAll()
        cancelFence.closed()
    }

    /// The notices received since the last call, oldest first.
    public func takeNotices() -> [PostgresNotice] {
        defer { notices.removeAll() }
        return notices
    }

    /// Run once before the next call that sends a statement (``query(_:_:)``,
    /// ``simpleQuery(_:)``, ``pipeline(_:)``, ``copyIn(_:from:)``), and
    /// cleared first: what a caller queued must reach the server before
    /// anything else does (opsh's deferred writes, PostgresDatabase+Pipeline).
    /// Its error is the call's.
    public var beforeNextCall: (() throws -> Void)?

    /// Asked as each pipeline or extended-protocol statement is about to
    /// be written (``query(_:_:)``, ``pipeline(_:)``, ``sendPipeline(_:)``;
    /// after ``beforeNextCall``): a step to run first in the same exchange,
    /// or nil. The step is hidden from the caller: its rows and result are
    /// dropped, and step numbers (`eachRow`'s, ``PostgresError/step``) are
    /// the caller's own. opsh's session pins its `search_path` this way
    /// for its own statements (PostgresOwnPath).
    public var prelude: (() -> (sql: String, parameters: [PostgresValue])?)?

    /// How many times the server may have rolled back on this connection:
    /// each `ROLLBACK` command tag (a ROLLBACK, ROLLBACK TO SAVEPOINT, a
    /// COMMIT of a failed transaction) and each error. A setting made in a
    /// transaction is undone when it rolls back: a caller that keeps track
    /// of what it set compares this count.
    public internal(set) var rollbackCount = 0

    /// How many `COMMIT` command tags (a COMMIT, an END) this connection
    /// has read. A COMMIT runs the deferred triggers of the transaction,
    /// and one of them may move a session setting (`set_config(…, false)`):
    /// a caller that keeps track of what it set compares this count too.
    public internal(set) var commitCount = 0

    /// How many statements are prepared on the server now.
    public var preparedStatementCount: Int { statements.count }

    // MARK: Start-up and login

    /// The start-up message and the login, until the server is ready for
    /// queries. A server that closes the connection (or resets it) before
    /// that was never reached: that is a failure to connect, said so, not
    /// a connection that closed later.
    func startUp(deadline: Double, limit: Double, settings: [(name: String, value: String)]) throws {
        do {
            try logIn(deadline: deadline, limit: limit, settings: settings)
        } catch PostgresClientError.connectionClosed(let reason) {
            throw PostgresClientError.connectionFailed(
                "\(connectedHost.endpoint): \(reason == Self.closedByPeer ? "the server" : reason + ":") closed the connection before it answered the start-up message (is a PostgreSQL server listening there, and does it accept this client?)")
        }
    }

    /// ``Socket/receive(into:)``'s reason when the peer closed the connection.
    static let closedByPeer = "the server closed the connection"

    private func logIn(deadline: Double, limit: Double, settings: [(name: String, value: String)]) throws {
        guard let socket else { return }
        try socket.send(Frontend.startup([
            ("user", url.user),
            ("database", url.database),
            ("application_name", url.applicationName),
            ("client_encoding", "UTF8"),
            ("DateStyle", "ISO"),
        ] + (url.options.map { [("options", $0)] } ?? []) + settings.map { ($0.name, $0.value) }))
        var scram: SCRAMSHA256Client? = nil
        /// channel_binding=require: only a SCRAM-SHA-256-PLUS login (libpq's messages).
        func requireNoChannelBinding(_ code: Int32) throws {
            guard url.channelBinding == .require, !(scram?.isBound ?? false) else { return }
            throw PostgresClientError.authentication(code == 0
                ? "channel binding required (channel_binding=require), but server authenticated client without channel binding"
                : "channel binding required (channel_binding=require) but not supported by server's authentication request")
        }
        func requirePassword(_ method: String) throws -> String {
            guard let password = loginPassword else {
                throw PostgresClientError.authentication(
                    "the server asks role \"\(url.user)\" for a password (\(method)) and none was given (postgresql://USER:PASSWORD@…, password=, PGPASSWORD, or a line in the password file \(url.passFile ?? "~/.pgpass"))")
            }
            return password
        }
        while true {
            guard let (type, body) = try readFrame(deadline: deadline) else {
                throw PostgresClientError.timedOut("\(connectedHost.endpoint): no answer to the start-up message", seconds: limit)
            }
            if try handleAsynchronous(type, body) { continue }
            var reader = BodyReader(body)
            switch type {
            case Backend.authentication:
                let code = try reader.int32()
                startOutbox()
                switch code {
                case 0:
                    try requireNoChannelBinding(code)
                case 3:
                    try requireNoChannelBinding(code)
                    Frontend.password(try requirePassword("password"), into: &outbox)
                case 5:
                    try requireNoChannelBinding(code)
                    let salt = Array(try reader.take(4))
                    Frontend.password(md5PasswordResponse(user: url.user, password: try requirePassword("md5"), salt: salt), into: &outbox)
                case 10:
                    var mechanisms: [String] = []
                    while reader.remaining > 1 { mechanisms.append(try reader.cString()) }
                    let client = try SCRAMSHA256Client.choosing(from: mechanisms, password: try requirePassword("scram-sha-256"),
                                                                 channelBinding: url.channelBinding, tls: socket.tls)
                    Frontend.saslInitialResponse(mechanism: client.chosenMechanism, data: client.clientFirstMessage, into: &outbox)
                    scram = client
                case 11:
                    guard scram != nil else { throw PostgresClientError.protocolViolation("SASL continue before SASL start") }
                    Frontend.saslResponse(try scram!.clientFinalMessage(serverFirst: reader.rest()), into: &outbox)
                case 12:
                    guard let client = scram else { throw PostgresClientError.protocolViolation("SASL final before SASL start") }
                    try client.verify(serverFinal: reader.rest())
                default:
                    try requireNoChannelBinding(code)
                    throw PostgresClientError.unsupported(
                        "the server asks for \(unsupportedAuthenticationName(code)) authentication; this client speaks trust, password, md5 and scram-sha-256 (change the pg_hba.conf line for this role)")
                }
                if !outbox.isEmpty { try socket.send(outbox) }
            case Backend.backendKeyData:
                processID = try reader.int32()
                secretKey = try reader.int32()
            case Backend.negotiateProtocolVersion:
                break  // the server speaks an older 3.x minor: nothing this client uses
            case Backend.errorResponse:
                throw PostgresError(fields: try Backend.fields(body), sql: nil)
            case Backend.readyForQuery:
                transactionStatus = PostgresTransactionStatus(rawValue: Character(Unicode.Scalar(try reader.byte()))) ?? .idle
                return
            default:
                throw PostgresClientError.protocolViolation("unexpected message \(Character(Unicode.Scalar(type))) during start-up")
            }
        }
    }

    // MARK: Queries

    /// Runs one statement with parameters `$1`, `$2`, … through the extended
    /// protocol, preparing it on the server the first time its SQL text
    /// (with these kinds of parameters) is seen.
    ///
    /// - Parameters:
    ///   - sql: One statement, its parameters written `$1`, `$2`, ….
    ///   - parameters: Their values (see ``PostgresValue`` for the types
    ///     they take on the server).
    /// - Returns: The columns (names, type OIDs) and every row; the command
    ///   tag tells how many rows an INSERT, UPDATE or DELETE touched.
    /// - Throws: ``PostgresError`` for what the server refused (the
    ///   connection stays usable), ``PostgresClientError`` for the rest.
    @discardableResult
    public func query(_ sql: String, _ parameters: [PostgresValue] = []) throws -> PostgresResult {
        var rows: [[PostgresValue]] = []
        var result = try query(sql, parameters) { rows.append(try $0.values()) }
        result.rows = rows
        return result
    }

    /// Runs one statement as ``query(_:_:)`` does, handing each row to
    /// `eachRow` as it is read, in place in the receive buffer, instead of
    /// collecting decoded rows: what a caller that turns rows into its own
    /// values (the `db` module's Lua tables) uses to skip the
    /// ``PostgresValue``s in between.
    ///
    /// Every row is read in this one call (one round trip, as
    /// ``query(_:_:)``); `eachRow` sees them in order, each valid only
    /// during its call (``PostgresDataRow``).
    ///
    /// - Returns: The columns and the command tag; its ``PostgresResult/rows``
    ///   is empty.
    /// - Throws: As ``query(_:_:)``: a statement that fails after some rows
    ///   (a division by zero in row 1,000) throws once the server is ready
    ///   again, after `eachRow` saw the rows before the failure. If
    ///   `eachRow` throws, it is not called again, the rest of the result is
    ///   read and dropped, and its error is thrown: the connection stays
    ///   usable either way. A statement gone stale (see ``query(_:_:)``) is
    ///   run again transparently only when no row was handed out yet.
    @discardableResult
    public func query(_ sql: String, _ parameters: [PostgresValue] = [],
                      eachRow: (PostgresDataRow) throws -> Void) throws -> PostgresResult {
        try checkUsable(sql)
        guard parameters.count <= 65_535 else {
            throw PostgresClientError.unsupported("\(parameters.count) parameters: the protocol carries at most 65,535 per statement")
        }
        if let first = askPrelude() {
            do {
                return try pipeline([(sql, parameters)], prelude: first) { _, row in try eachRow(row) }[0]
            } catch let error as PostgresError where error.code == "25001" && transactionStatus == .idle {
                // A statement that runs only alone (VACUUM, CREATE INDEX
                // CONCURRENTLY), refused before it ran, and the step with it:
                // the step alone, then the statement alone.
                _ = try pipeline([first], prelude: nil) { _, _ in }
            }
        }
        let key = StatementKey(sql: sql, parameterTypes: parameters.map(\.parameterTypeOID))
        if let statement = statements[key] {
            var delivered = false
            do {
                return try execute(statement, sql: sql, parameters: parameters) { row in
                    delivered = true
                    try eachRow(row)
                }
            } catch var error as PostgresError where (error.code == "0A000" || error.code == "26000") && !delivered {
                // The prepared statement went stale: its result changed
                // (ALTER TABLE) or it was deallocated (DISCARD ALL). Forget
                // it; run it again now only if nothing else was lost.
                forgetStale(key, code: error.code)
                guard transactionStatus == .idle else {
                    if error.hint == nil {
                        error.hint = "The statement is prepared again when it next runs; roll back the transaction first."
                    }
                    throw error
                }
            }
        }
        let statement = try prepare(key)
        return try execute(statement, sql: sql, parameters: parameters, eachRow: eachRow)
    }

    /// Runs one or more statements separated by `;` through the simple
    /// protocol: no parameters, results in text (decoded by type as
    /// ``PostgresValue`` says), one result per statement. What BEGIN,
    /// SAVEPOINT, SET and scripts of DDL need.
    ///
    /// Several statements without an explicit BEGIN run as one implicit
    /// transaction: if one fails, none of them took effect.
    @discardableResult
    public func simpleQuery(_ sql: String) throws -> [PostgresResult] {
        try checkUsable(sql)
        return try exchange {
            startOutbox()
            Frontend.query(sql, into: &outbox)
            cyclesInOutbox += 1
            // Queued Closes wait for the next extended cycle: they need a Sync.
            try send(includingCloses: false)
            var results: [PostgresResult] = []
            var columns: [PostgresColumn] = []
            var binary: [Bool] = []
            var rows: [[PostgresValue]] = []
            var failure: [Character: String]? = nil
            while true {
                let (type, body) = try nextMessage()
                switch type {
                case Backend.rowDescription:
                    columns = try Backend.rowDescription(body)
                    binary = Array(repeating: false, count: columns.count)
                    rows = []
                case Backend.dataRow:
                    rows.append(try Backend.dataRow(body, columns: columns, binary: binary))
                case Backend.commandComplete:
                    var reader = BodyReader(body)
                    results.append(PostgresResult(columns: columns, rows: rows, commandTag: try reader.cString()))
                    columns = []; binary = []; rows = []
                case Backend.emptyQueryResponse:
                    results.append(PostgresResult(columns: [], rows: [], commandTag: ""))
                case Backend.errorResponse:
                    failure = try Backend.fields(body)
                default:
                    if try handleCopy(type, extended: false) { continue }
                    if try finishCycle(type, body) {
                        if let failure { throw PostgresError(fields: failure, sql: sql) }
                        return results
                    }
                }
            }
        }
    }

    func checkUsable(_ sql: String, runningQueued: Bool = true) throws {
        if runningQueued, let work = beforeNextCall {
            beforeNextCall = nil
            try work()
        }
        guard socket != nil else { throw PostgresClientError.connectionClosed("it was closed (open a new connection)") }
        if Self.containsNUL(sql) {
            throw PostgresClientError.unsupported("the SQL text contains a NUL character, which the protocol cannot carry")
        }
    }

    /// Whether `text` holds a NUL byte: `memchr` over the string's own
    /// UTF-8 when it is contiguous (a native string is). `utf8.contains`
    /// goes byte by byte, and was a quarter of a `db.exec` loop's time on
    /// the client when each script statement carried a 1.5 KB check text
    /// in its round trip.
    static func containsNUL(_ text: String) -> Bool {
        if let found = text.utf8.withContiguousStorageIfAvailable({ bytes -> Bool in
            guard let base = bytes.baseAddress else { return false }
            return memchr(base, 0, bytes.count) != nil
        }) {
            return found
        }
        return text.utf8.contains(0)
    }

    // MARK: Prepared statements

    struct StatementKey: Hashable {
        var sql: String
        var parameterTypes: [UInt32]
    }

    final class PreparedStatement {
        let name: String
        /// Its columns, in the formats Bind asks for.
        let layout: PostgresRowLayout
        let resultFormats: [Int16]
        var lastUse: UInt64 = 0
        var columns: [PostgresColumn] { layout.columns }

        init(name: String, columns: [PostgresColumn]) {
            self.name = name
            layout = PostgresRowLayout(columns: columns, binary: columns.map { PostgresType.prefersBinary($0.typeOID) })
            resultFormats = layout.resultFormats
        }
    }

    /// Parse and Describe, then Sync: the statement's result columns, which
    /// decide the formats Bind asks for.
    private func prepare(_ key: StatementKey) throws -> PreparedStatement {
        let cached = statementCacheCapacity > 0
        var name = ""
        if cached {
            statementCounter += 1
            name = "opsh_\(statementCounter)"
        }
        return try exchange {
            startOutbox()
            if cached { queueEviction(keeping: statementCacheCapacity - 1) }
            Frontend.parse(name: name, sql: key.sql, parameterTypes: key.parameterTypes, into: &outbox)
            Frontend.describeStatement(name, into: &outbox)
            appendSync()
            try send()
            var columns: [PostgresColumn] = []
            var failure: [Character: String]? = nil
            while true {
                let (type, body) = try nextMessage()
                switch type {
                case Backend.parseComplete, Backend.closeComplete, Backend.parameterDescription, Backend.noData:
                    break
                case Backend.rowDescription:
                    columns = try Backend.rowDescription(body)
                case Backend.errorResponse:
                    failure = try Backend.fields(body)
                default:
                    if try finishCycle(type, body) {
                        if let failure { throw PostgresError(fields: failure, sql: key.sql) }
                        let statement = PreparedStatement(name: name, columns: columns)
                        if cached { statements[key] = statement }
                        return statement
                    }
                }
            }
        }
    }

    /// Bind, Execute, Sync: one round trip. Each row goes to `eachRow`
    /// (see ``query(_:_:eachRow:)`` for what its errors do).
    private func execute(_ statement: PreparedStatement, sql: String, parameters: [PostgresValue],
                         eachRow: (PostgresDataRow) throws -> Void) throws -> PostgresResult {
        useCounter += 1
        statement.lastUse = useCounter
        return try exchange {
            startOutbox()
            Frontend.bind(statement: statement.name, parameters: parameters, resultFormats: statement.resultFormats, into: &outbox)
            Frontend.execute(into: &outbox)
            appendSync()
            try send()
            let layout = statement.layout
            var tag = ""
            var failure: [Character: String]? = nil
            var rowFailure: Error? = nil
            while true {
                let (type, body) = try nextMessage()
                switch type {
                case Backend.dataRow:
                    try PostgresDataRow.check(body, layout: layout)
                    guard rowFailure == nil else { continue }
                    do {
                        try eachRow(PostgresDataRow(layout: layout, body: body))
                    } catch {
                        rowFailure = error
                    }
                case Backend.bindComplete, Backend.closeComplete, Backend.emptyQueryResponse, Backend.portalSuspended:
                    break
                case Backend.commandComplete:
                    var reader = BodyReader(body)
                    tag = try reader.cString()
                case Backend.errorResponse:
                    failure = try Backend.fields(body)
                default:
                    if try handleCopy(type, extended: true) { continue }
                    if try finishCycle(type, body) {
                        if let rowFailure { throw rowFailure }
                        if let failure { throw PostgresError(fields: failure, sql: sql) }
                        return PostgresResult(columns: statement.columns, rows: [], commandTag: tag)
                    }
                }
            }
        }
    }

    // MARK: Pipelines

    /// Runs several statements in one round trip: each step's messages
    /// (Parse and Describe when its statement is not prepared yet, Bind,
    /// Execute) are written together, followed by one Sync, and the
    /// results are read back in order.
    ///
    /// What psql's ON_ERROR_ROLLBACK does around each statement
    /// (`SAVEPOINT s`, the statement, `RELEASE SAVEPOINT s`; or `BEGIN READ
    /// ONLY`, `SAVEPOINT s`, the statement, `COMMIT`) costs one round trip
    /// instead of three or four.
    ///
    /// - Returns: one result per step, when every step succeeded.
    /// - Throws: the first failing step's ``PostgresError``, with
    ///   ``PostgresError/step`` its index: the steps before it ran, the
    ///   server skipped the ones after it (up to the Sync). The connection
    ///   stays usable and ``transactionStatus`` says what the failure left:
    ///   without a transaction block the steps ran as one implicit
    ///   transaction, which the failure rolled back (`.idle`); inside one
    ///   (open before, or opened by a step's BEGIN) it is `.failed` until a
    ///   ROLLBACK or ROLLBACK TO SAVEPOINT.
    ///
    /// **The statement cache works as in ``query(_:_:)``.** A step whose
    /// statement is prepared is only bound and executed. A statement first
    /// seen here is prepared in the pipeline, under its cache name, and
    /// used by every later step with the same SQL; on that first run its
    /// results come as text (its columns are not known when Bind is
    /// written), decoded to the same values as the binary form later runs
    /// ask for.
    ///
    /// **Stale statements** (`0A000` after an ALTER TABLE changed a
    /// statement's result columns, `26000` after DEALLOCATE or DISCARD): the
    /// statement is forgotten either way, and prepared again the next time
    /// it runs. If the stale step is the first one and no transaction block
    /// is open afterwards, nothing ran, and the pipeline is run again at
    /// once, transparently, as ``query(_:_:)`` does. Otherwise steps before
    /// it ran (a SAVEPOINT, a BEGIN) and the error is thrown with its index
    /// and a hint: roll back (to the savepoint) and run the pipeline again.
    ///
    /// `26000` means DEALLOCATE ALL or DISCARD ALL: every cached statement
    /// is forgotten, not only the failed one (``query(_:_:)`` does the same).
    ///
    /// COPY FROM STDIN is refused as in ``query(_:_:)``, as the last step. A
    /// step starting with `COPY` anywhere else is refused before anything
    /// is sent: the server would read the next step's Bind as the copy's
    /// data and end the session (`FATAL 08P01`).
    @discardableResult
    public func pipeline(_ steps: [(sql: String, parameters: [PostgresValue])]) throws -> [PostgresResult] {
        var rows: [[[PostgresValue]]] = Array(repeating: [], count: steps.count)
        var results = try pipeline(steps) { step, row in rows[step].append(try row.values()) }
        for index in results.indices { results[index].rows = rows[index] }
        return results
    }

    /// Runs a pipeline as ``pipeline(_:)`` does, handing each row to
    /// `eachRow` with the index of its step, in place, as
    /// ``query(_:_:eachRow:)`` does; the results have no rows.
    ///
    /// A step that fails after some rows, or `eachRow` throwing, is
    /// thrown once the server is ready again, as in ``query(_:_:eachRow:)``
    /// (`eachRow`'s error first: the rest is read and dropped). A stale
    /// first step is run again only when no row was handed out yet.
    @discardableResult
    public func pipeline(_ steps: [(sql: String, parameters: [PostgresValue])],
                         eachRow: (Int, PostgresDataRow) throws -> Void) throws -> [PostgresResult] {
        guard !steps.isEmpty else { return [] }
        for (index, step) in steps.enumerated() {
            try checkUsable(step.sql)
            guard step.parameters.count <= 65_535 else {
                throw PostgresClientError.unsupported("\(step.parameters.count) parameters: the protocol carries at most 65,535 per statement")
            }
            // (The first byte first: a statement that starts with neither
            // space nor c is no COPY, and this runs for every step.)
            if index < steps.count - 1, step.sql.utf8.first.map({ $0 == UInt8(ascii: "c") || $0 == UInt8(ascii: "C") || $0 <= 32 }) == true,
               step.sql.drop(while: \.isWhitespace).prefix(4).lowercased() == "copy" {
                // A COPY FROM STDIN would read the next step's Bind as its
                // data: the server ends the session (FATAL 08P01).
                throw PostgresClientError.unsupported("COPY in a pipeline: only as its last step (step \(index) of \(steps.count))")
            }
        }
        return try pipeline(steps, prelude: askPrelude(), eachRow: eachRow)
    }

    /// The ``prelude``'s step, unless the transaction has failed: then only
    /// a rollback runs, and the step waits for the next call.
    func askPrelude() -> (sql: String, parameters: [PostgresValue])? {
        transactionStatus == .failed ? nil : prelude?()
    }

    /// ``pipeline(_:eachRow:)`` with `first` (the ``prelude``'s step, hidden) before `steps`.
    private func pipeline(_ steps: [(sql: String, parameters: [PostgresValue])], prelude first: (sql: String, parameters: [PostgresValue])?,
                          eachRow: (Int, PostgresDataRow) throws -> Void) throws -> [PostgresResult] {
        let all = first.map { [$0] + steps } ?? steps
        let hidden = first == nil ? 0 : 1
        var delivered = false
        do {
            return try runPipeline(all, hidden: hidden) { step, row in
                delivered = true
                try eachRow(step, row)
            }
        } catch let stale as StaleFirstStep {
            // Forgotten already; nothing ran: prepare it again in a new run.
            // (Rows handed out before the failure cannot be taken back.)
            guard !delivered else { throw stale.error }
            return try runPipeline(all, hidden: hidden, eachRow: eachRow)
        }
    }

    /// Thrown by runPipeline when the first step's cached statement was
    /// stale and nothing ran: the pipeline can simply run again. `error`
    /// is what to throw otherwise.
    struct StaleFirstStep: Error {
        var error: PostgresError
    }

    /// A statement parsed in the pipeline being run: its columns arrive
    /// with the answer to its Describe.
    final class FreshStatement {
        let key: StatementKey
        let name: String
        var parsed = false
        var columns: [PostgresColumn]? = nil
        /// Its columns, all in text (Bind asked for no formats).
        var layout: PostgresRowLayout? = nil

        init(key: StatementKey, name: String) {
            self.key = key
            self.name = name
        }
    }

    struct PlannedStep {
        let sql: String
        let key: StatementKey
        /// Bound with its binary result formats.
        let cached: PreparedStatement?
        /// Prepared in this pipeline; results come as text.
        let fresh: FreshStatement?
    }

    private func runPipeline(_ steps: [(sql: String, parameters: [PostgresValue])], hidden: Int,
                             eachRow: (Int, PostgresDataRow) throws -> Void) throws -> [PostgresResult] {
        let plan = try writePipeline(steps)
        return try readPipeline(plan, hidden: hidden, eachRow: eachRow)
    }

    /// Writes a pipeline's messages and its Sync: its plan, to read its
    /// results with.
    func writePipeline(_ steps: [(sql: String, parameters: [PostgresValue])]) throws -> [PlannedStep] {
        let caching = statementCacheCapacity > 0
        if statementsDropped {
            // Every statement cached, also those parsed in the pipeline
            // that dropped them: each is parsed again as it is sent.
            statementsDropped = false
            evictStatements(keeping: 0)
        }
        var plan: [PlannedStep] = []
        plan.reserveCapacity(steps.count)
        var fresh: [StatementKey: FreshStatement] = [:]
        startOutbox()
        for step in steps {
            let key = StatementKey(sql: step.sql, parameterTypes: step.parameters.map(\.parameterTypeOID))
            if caching, let statement = statements[key] {
                useCounter += 1
                statement.lastUse = useCounter
                Frontend.bind(statement: statement.name, parameters: step.parameters, resultFormats: statement.resultFormats, into: &outbox)
                plan.append(PlannedStep(sql: step.sql, key: key, cached: statement, fresh: nil))
            } else if caching, let statement = fresh[key] {
                // Parsed by an earlier step of this pipeline.
                Frontend.bind(statement: statement.name, parameters: step.parameters, resultFormats: [], into: &outbox)
                plan.append(PlannedStep(sql: step.sql, key: key, cached: nil, fresh: statement))
            } else {
                var name = ""
                if caching {
                    statementCounter += 1
                    name = "opsh_\(statementCounter)"
                }
                let statement = FreshStatement(key: key, name: name)
                if caching { fresh[key] = statement }
                Frontend.parse(name: name, sql: step.sql, parameterTypes: key.parameterTypes, into: &outbox)
                Frontend.describeStatement(name, into: &outbox)
                // No result formats: every column in text, since the
                // columns are not known yet.
                Frontend.bind(statement: name, parameters: step.parameters, resultFormats: [], into: &outbox)
                plan.append(PlannedStep(sql: step.sql, key: key, cached: nil, fresh: statement))
            }
            Frontend.execute(into: &outbox)
        }
        appendSync()
        try exchange { try send() }
        return plan
    }

    /// Reads the results of a pipeline ``writePipeline(_:)`` sent; its
    /// first `hidden` steps (a ``prelude``'s) are left out of what the
    /// caller sees.
    func readPipeline(_ plan: [PlannedStep], hidden: Int = 0, eachRow: (Int, PostgresDataRow) throws -> Void) throws -> [PostgresResult] {
        let caching = statementCacheCapacity > 0
        return try exchange {
            var results: [PostgresResult] = []
            results.reserveCapacity(plan.count)
            var index = 0
            var failure: (fields: [Character: String], step: Int)? = nil
            var rowFailure: Error? = nil
            func current() throws -> PlannedStep {
                guard index < plan.count else {
                    throw PostgresClientError.protocolViolation("more results than the pipeline's \(plan.count) statements")
                }
                return plan[index]
            }
            func columns(of step: PlannedStep) -> [PostgresColumn] {
                step.cached?.columns ?? step.fresh?.columns ?? []
            }
            readLoop: while true {
                let (type, body) = try nextMessage()
                switch type {
                case Backend.parseComplete:
                    try current().fresh?.parsed = true
                case Backend.rowDescription:
                    if let statement = try current().fresh {
                        let described = try Backend.rowDescription(body)
                        statement.columns = described
                        statement.layout = PostgresRowLayout(columns: described, binary: Array(repeating: false, count: described.count))
                    }
                case Backend.noData:
                    if let statement = try current().fresh { statement.columns = [] }
                case Backend.parameterDescription, Backend.bindComplete, Backend.closeComplete, Backend.portalSuspended:
                    break
                case Backend.dataRow:
                    let step = try current()
                    guard let layout = step.cached?.layout ?? step.fresh?.layout else {
                        throw PostgresClientError.protocolViolation("a row for a statement that returns none")
                    }
                    try PostgresDataRow.check(body, layout: layout)
                    guard rowFailure == nil, index >= hidden else { continue readLoop }
                    do {
                        try eachRow(index - hidden, PostgresDataRow(layout: layout, body: body))
                    } catch {
                        rowFailure = error
                    }
                case Backend.commandComplete:
                    let step = try current()
                    var reader = BodyReader(body)
                    results.append(PostgresResult(columns: columns(of: step), rows: [], commandTag: try reader.cString()))
                    index += 1
                case Backend.emptyQueryResponse:
                    let step = try current()
                    results.append(PostgresResult(columns: columns(of: step), rows: [], commandTag: ""))
                    index += 1
                case Backend.errorResponse:
                    if failure == nil { failure = (try Backend.fields(body), index) }
                default:
                    if try handleCopy(type, extended: true) { continue readLoop }
                    if try finishCycle(type, body) { break readLoop }
                }
            }

            // What this pipeline prepared joins the cache (even when a
            // later step failed: prepared statements outlive transactions).
            // Their last use is their last step's.
            var joined: [StatementKey: PreparedStatement] = [:]
            for step in plan {
                guard caching, let statement = step.fresh else { continue }
                if let prepared = joined[step.key] {
                    useCounter += 1
                    prepared.lastUse = useCounter
                } else if statement.parsed, let described = statement.columns, statements[step.key] == nil {
                    let prepared = PreparedStatement(name: statement.name, columns: described)
                    useCounter += 1
                    prepared.lastUse = useCounter
                    statements[step.key] = prepared
                    joined[step.key] = prepared
                } else if statement.parsed, statement.columns == nil {
                    Frontend.closeStatement(statement.name, into: &pendingCloses)
                }
            }
            evictStatements(keeping: statementCacheCapacity)

            if let rowFailure { throw rowFailure }
            let shown = Array(results.dropFirst(min(hidden, results.count)))
            guard let failure else { return shown }
            var error = PostgresError(fields: failure.fields, sql: plan[failure.step].sql)
            error.step = max(failure.step - hidden, 0)
            error.completedCommandTags = shown.prefix(max(failure.step - hidden, 0)).map(\.commandTag)
            let failed = plan[failure.step]
            if let statement = failed.cached, error.code == "0A000" || error.code == "26000" {
                if statements[failed.key] === statement { forgetStale(failed.key, code: error.code) }
                // Stale at the first step (or the hidden one before it) outside a
                // transaction block: nothing ran (the hidden step's setting was
                // rolled back with the implicit transaction).
                if failure.step <= hidden, transactionStatus == .idle { throw StaleFirstStep(error: error) }
                if error.hint == nil {
                    error.hint = "The statement is prepared again when it next runs; roll back (to the savepoint) first."
                }
            }
            throw error
        }
    }

    /// A stale statement: `0A000` (its result columns changed) is that
    /// statement's alone; `26000` (it no longer exists) comes from
    /// DEALLOCATE ALL or DISCARD ALL, which dropped every statement the
    /// cache holds, so all are forgotten: each would fail once otherwise,
    /// and inside a transaction each failure is the caller's.
    private func forgetStale(_ key: StatementKey, code: String) {
        if code == "26000" {
            evictStatements(keeping: 0)
        } else {
            forget(key)
        }
    }

    private func forget(_ key: StatementKey) {
        guard let statement = statements.removeValue(forKey: key) else { return }
        // Closing a statement the server no longer has is not an error.
        Frontend.closeStatement(statement.name, into: &pendingCloses)
    }

    private var pendingCloses: [UInt8] = []

    /// Queues Close messages for the least recently used statements until
    /// at most `keeping` remain; they go out with the next Parse.
    private func queueEviction(keeping: Int) {
        while statements.count > max(keeping, 0) {
            guard let (key, _) = statements.min(by: { $0.value.lastUse < $1.value.lastUse }) else { break }
            forget(key)
        }
        outbox += pendingCloses
        pendingCloses.removeAll()
    }

    /// Forgets every statement the cache holds (their Close goes out with
    /// the next Parse): each is parsed again where it is next sent. For a
    /// pipeline that must prepare its steps in order, after a statement
    /// of the caller's dropped them (DEALLOCATE ALL).
    public func forgetPreparedStatements() {
        evictStatements(keeping: 0)
    }

    private func evictStatements(keeping: Int) {
        while statements.count > max(keeping, 0) {
            guard let (key, _) = statements.min(by: { $0.value.lastUse < $1.value.lastUse }) else { break }
            forget(key)
        }
    }

    // MARK: The exchange

    /// Runs one request/response cycle; a client-side failure in the middle
    /// (socket, protocol) leaves the connection in an unknown state, so it
    /// is closed.
    func exchange<T>(_ body: () throws -> T) throws -> T {
        exchangeStarted = monotonicSeconds()
        nextWatch = whileWaiting.map { exchangeStarted + $0.after }
        do {
            return try body()
        } catch let error as PostgresClientError {
            socket?.close()
            socket = nil
            statements.removeAll()
            cancelFence.closed()
            throw error
        }
    }

    /// An empty outbox for a new cycle.
    func startOutbox() {
        outbox.removeAll(keepingCapacity: true)
        cyclesInOutbox = 0
    }

    func send(includingCloses: Bool = true) throws {
        guard let socket else { throw PostgresClientError.connectionClosed("it was closed") }
        if includingCloses, !pendingCloses.isEmpty {
            outbox = pendingCloses + outbox
            pendingCloses.removeAll()
        }
        socketWrites += 1
        // Waits while a cancel is being sent (CancelFence: it must not
        // reach what this write starts).
        cancelFence.beforeWriting(cycles: cyclesInOutbox)
        cyclesInOutbox = 0
        try socket.send(outbox)
    }

    /// Sync, counted: every extended-protocol cycle ends with one, so the
    /// count is the number of extended round trips.
    private func appendSync() {
        syncsSent += 1
        cyclesInOutbox += 1
        Frontend.sync(into: &outbox)
    }

    /// Sync messages sent since the connection opened (tests read it to
    /// count round trips).
    internal private(set) var syncsSent = 0
    /// Writes to the socket for queries since the connection opened (a
    /// cycle is one write; the start-up's are not counted).
    internal private(set) var socketWrites = 0

    /// COPY started by a statement: FROM STDIN is refused (CopyFail, and a
    /// Sync again in the extended protocol, since the server ignores the
    /// Sync it received during the copy); TO STDOUT's data is dropped.
    private func handleCopy(_ type: UInt8, extended: Bool) throws -> Bool {
        switch type {
        case Backend.copyInResponse:
            startOutbox()
            Frontend.copyFail("COPY FROM STDIN is not supported by opsh's PostgreSQL client", into: &outbox)
            if extended {
                appendSync()
                // The server ignored the Sync it received during the copy:
                // this one ends the cycle that one began.
                cyclesInOutbox -= 1
            }
            try send(includingCloses: false)
            return true
        case Backend.copyOutResponse, Backend.copyData, Backend.copyDone:
            return true
        default:
            return false
        }
    }

    /// ReadyForQuery ends a cycle (true); anything else here is unexpected.
    func finishCycle(_ type: UInt8, _ body: UnsafeRawBufferPointer) throws -> Bool {
        guard type == Backend.readyForQuery else {
            throw PostgresClientError.protocolViolation("unexpected message \(Character(Unicode.Scalar(type)))")
        }
        var reader = BodyReader(body)
        let status = Character(Unicode.Scalar(try reader.byte()))
        guard let value = PostgresTransactionStatus(rawValue: status) else {
            throw PostgresClientError.protocolViolation("unknown transaction status \(status)")
        }
        transactionStatus = value
        exchangeCount += 1
        cancelFence.answered()
        return true
    }

    /// Set by a command tag of a statement that drops prepared statements
    /// (`DEALLOCATE`, `DISCARD ALL`), until the next pipeline is written:
    /// the server's own word that the cache no longer holds.
    private var statementsDropped = false

    /// A command tag that says prepared statements were dropped.
    static func isDeallocateTag(_ body: UnsafeRawBufferPointer) -> Bool {
        (body.count >= 10 && body.prefix(10).elementsEqual("DEALLOCATE".utf8))
            || (body.count >= 11 && body.prefix(11).elementsEqual("DISCARD ALL".utf8))
    }

    /// The next message that is not a notice, a notification or a parameter
    /// change (those are kept as they pass). Its body is valid until the
    /// next call.
    /// A command tag that starts with `ROLLBACK`.
    static func isRollbackTag(_ body: UnsafeRawBufferPointer) -> Bool {
        body.count >= 8 && body.prefix(8).elementsEqual("ROLLBACK".utf8)
    }

    /// A command tag that starts with `COMMIT`.
    static func isCommitTag(_ body: UnsafeRawBufferPointer) -> Bool {
        body.count >= 6 && body.prefix(6).elementsEqual("COMMIT".utf8)
    }

    func nextMessage() throws -> (UInt8, UnsafeRawBufferPointer) {
        while true {
            guard let (type, body) = try readFrame(deadline: nil) else { continue }
            if try handleAsynchronous(type, body) { continue }
            if type == Backend.errorResponse || (type == Backend.commandComplete && Self.isRollbackTag(body)) { rollbackCount &+= 1 }
            else if type == Backend.commandComplete && Self.isCommitTag(body) { commitCount &+= 1 }
            else if type == Backend.commandComplete && Self.isDeallocateTag(body) { statementsDropped = true }
            return (type, body)
        }
    }

    /// Called in an exchange that has waited ``whileWaiting``'s `after`
    /// seconds for the server, on the waiting thread, and again each time
    /// the wait doubles (after 2×, 4×, …), while the wait goes on: for a
    /// caller that wants to look, from a connection of its own, at what the
    /// statement waits for (opsh names the sessions holding the locks it
    /// waits on). It must not use this connection.
    /// The action is given the seconds the exchange has waited.
    public var whileWaiting: (after: Double, action: (Double) -> Void)?
    private var exchangeStarted = 0.0
    /// When ``whileWaiting`` is called next in this exchange.
    private var nextWatch: Double?

    /// The next frame of any type; nil if `deadline` (monotonic seconds)
    /// passed first.
    private func readFrame(deadline: Double?) throws -> (UInt8, UnsafeRawBufferPointer)? {
        while true {
            if let frame = try inbox.nextFrame() { return frame }
            guard let socket else { throw PostgresClientError.connectionClosed("it was closed") }
            if let deadline {
                let left = deadline - monotonicSeconds()
                guard left > 0, try socket.poll(timeout: left) else { return nil }
            } else if let watch = whileWaiting, let next = nextWatch {
                let left = next - monotonicSeconds()
                if try left <= 0 || !socket.poll(timeout: left) {
                    watch.action(monotonicSeconds() - exchangeStarted)
                    nextWatch = exchangeStarted + 2 * max(monotonicSeconds() - exchangeStarted, watch.after)
                    continue
                }
            }
            try inbox.fill(from: socket)
        }
    }

    /// Messages that can arrive at any time. True when `type` was one.
    /// A FATAL error (the server is ending this session: shut down,
    /// terminated by an administrator) closes the connection and is thrown.
    private func handleAsynchronous(_ type: UInt8, _ body: UnsafeRawBufferPointer) throws -> Bool {
        switch type {
        case Backend.noticeResponse:
            notices.append(PostgresNotice(fields: try Backend.fields(body)))
            return true
        case Backend.notificationResponse:
            var reader = BodyReader(body)
            let pid = try reader.int32()
            let channel = try reader.cString()
            let payload = try reader.cString()
            notifications.append(PostgresNotification(channel: channel, payload: payload, processID: pid))
            return true
        case Backend.parameterStatus:
            var reader = BodyReader(body)
            let name = try reader.cString()
            serverParameters[name] = try reader.cString()
            return true
        case Backend.errorResponse:
            let fields = try Backend.fields(body)
            let severity = fields["V"] ?? fields["S"] ?? ""
            if severity == "FATAL" || severity == "PANIC" {
                socket?.close()
                socket = nil
                statements.removeAll()
                throw PostgresError(fields: fields, sql: nil)
            }
            // An ordinary error belongs to the cycle: the caller's switch
            // records it. Put it back by reporting "not asynchronous".
            return false
        default:
            return false
        }
    }

    // MARK: Notifications

    /// Notifications already received and not yet returned.
    public var pendingNotificationCount: Int { notifications.count }

    /// Returns the oldest notification received on a channel this session
    /// LISTENs to, waiting up to `timeout` seconds for one to arrive; nil
    /// when none came.
    ///
    /// It only reads: it sends no query, so the session never sits in a
    /// transaction while waiting (a listener holding a transaction open
    /// keeps the server's notification queue from being cleaned up, and
    /// the queue filling up makes every NOTIFY's commit fail). Notifications
    /// that arrive during other calls are queued and returned first.
    /// Call it outside a transaction block: inside one, the server holds
    /// notifications back until the block ends.
    public func waitForNotification(timeout: Double) throws -> PostgresNotification? {
        if !notifications.isEmpty { return notifications.removeFirst() }
        guard socket != nil else { throw PostgresClientError.connectionClosed("it was closed") }
        let deadline = monotonicSeconds() + max(timeout, 0)
        return try exchange {
            while notifications.isEmpty {
                guard let (type, body) = try readFrame(deadline: deadline) else { return nil }
                guard try handleAsynchronous(type, body) else {
                    throw PostgresClientError.protocolViolation("unexpected message \(Character(Unicode.Scalar(type))) while idle")
                }
            }
            return notifications.removeFirst()
        }
    }
}

/// A NOTIFY received on a LISTENed channel.
public struct PostgresNotification: Sendable, Equatable {
    public var channel: String
    public var payload: String
    /// The server process of the session that sent it.
    public var processID: Int32
}
