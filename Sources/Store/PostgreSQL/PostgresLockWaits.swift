import Foundation
import PostgresWire

/// Who holds the locks a statement of the session waits for, named as
/// SQLite's lock error and `.locks` name the processes holding the file's
/// lock (issue 24, item 24; ARCHITECTURE.md, "PostgreSQL: the session").
///
/// `--busy-timeout` is the session's `lock_timeout`: a statement that
/// waits longer for a lock fails with SQLSTATE 55P03, which opsh reports as
/// "database is locked" (exit 3, as on SQLite). By then the statement no
/// longer waits, so the server can no longer say for whom: the witness
/// asks while it still waits. When a statement has waited a tenth of a
/// second (less for a shorter busy timeout), and again each time its wait
/// doubles, the connection calls back (``PostgresConnection/whileWaiting``)
/// and the witness asks the server, on a connection of its own (opened at
/// the first such wait, then kept), for the sessions `pg_blocking_pids`
/// names; the lock error names the last it heard of. A long query that
/// waits for no lock costs a question for each doubling of its time, and
/// the shell says nothing of a lock for it: only an answer naming a
/// blocker is a lock wait (a query that computes is not waiting).
final class LockWitness {
    private let url: PostgresURL
    private var side: PostgresConnection?
    /// The sessions blocking the statement that runs now, once asked.
    private(set) var blockers: String?
    /// Whether the last answer named a blocker: `blockers` keeps the last
    /// one heard of for the lock error, this says whether one blocks now.
    private var isBlockedNow = false

    init(url: PostgresURL) {
        self.url = url
    }

    /// When to ask, for a busy timeout of `seconds`.
    static func delay(forBusyTimeout seconds: Double) -> Double {
        min(max(seconds / 4, 0.005), 0.1)
    }

    /// Before each statement: nothing known yet.
    func reset() {
        blockers = nil
        isBlockedNow = false
    }

    /// The shell's notice of a long wait (``DatabaseSession/announceLockWaits(after:_:)``).
    var announcement: (after: Double, say: @Sendable (String) -> Void)?
    private var announced = false
    private var lastWaited = 0.0

    /// Says once per wait that it has lasted past the announcement's time,
    /// naming the sessions that block it, and only while the server names
    /// one (`pg_blocking_pids`): a statement that runs long without one
    /// waits for no lock. (A wait shorter than the last one seen is a new
    /// exchange's.)
    func announceIfLong(waited: Double, timeout: Double) {
        if waited < lastWaited { announced = false }
        lastWaited = waited
        guard let announcement, !announced, waited >= announcement.after,
              isBlockedNow, let blockers else { return }
        announced = true
        announcement.say(LockWaitNotice.sentence(holders: "held by " + blockers, waited: waited, timeout: timeout))
    }

    /// Asks which sessions block `processID` now (the session's own
    /// backend, waiting).
    func look(at processID: Int32) {
        do {
            if side?.isOpen != true { side = try PostgresConnection(url: url, timeLimit: 2) }
            let result = try side!.query("""
                SELECT \(Self.columns) FROM pg_catalog.pg_stat_activity a
                WHERE a.pid = ANY (pg_catalog.pg_blocking_pids($1::int)) ORDER BY a.pid
                """, [.integer(Int64(processID))])
            let sessions = Self.describe(result)
            isBlockedNow = !sessions.isEmpty
            if !sessions.isEmpty { blockers = sessions.joined(separator: ", ") }
        } catch {
            isBlockedNow = false
            side?.close()
            side = nil
        }
    }

    deinit { side?.close() }

    /// A session's pid, program, role, state, how long in it, and its
    /// statement (the one holding the lock, or its last).
    static let columns = """
        a.pid, coalesce(nullif(a.application_name, ''), a.backend_type), a.usename::text, a.state,
        extract(epoch FROM pg_catalog.now() - coalesce(a.state_change, a.xact_start))::bigint,
        pg_catalog.left(a.query, 120)
        """

    /// "session 4242 (psql, user alice, idle in transaction for 12 s: LOCK TABLE telemetry;)".
    static func describe(_ result: PostgresResult) -> [String] {
        result.rows.map { row in
            func text(_ index: Int) -> String? {
                if case let .text(value) = row[index] { return value }
                return nil
            }
            var pid = "?"
            if case let .integer(value) = row[0] { pid = String(value) }
            var parts: [String] = [visible(text(1) ?? "?")]
            if let role = text(2) { parts.append("user " + visible(role)) }
            if let state = text(3) {
                var phrase = state
                if case let .integer(seconds) = row[4] { phrase += " for \(seconds) s" }
                parts.append(phrase)
            }
            let statement = text(5).map { ": " + visible($0) } ?? ""
            return "session \(pid) (\(parts.joined(separator: ", "))\(statement))"
        }
    }

    /// Text from the server for a terminal: white space folded into
    /// spaces, other control characters shown as `\u{…}`.
    static func visible(_ text: String) -> String {
        var out = ""
        var lastWasSpace = false
        for scalar in text.unicodeScalars {
            if scalar == "\n" || scalar == "\r" || scalar == "\t" || scalar == " " {
                if !lastWasSpace { out.append(" ") }
                lastWasSpace = true
                continue
            }
            lastWasSpace = false
            if scalar.value < 0x20 || scalar.value == 0x7F || (0x80...0x9F).contains(scalar.value) {
                out += "\\u{\(String(scalar.value, radix: 16))}"
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out.trimmingCharacters(in: .whitespaces)
    }
}

extension PostgresDatabase {
    /// `.locks` on PostgreSQL: the other sessions of this database that
    /// hold more than a read's lock on one of its tables, or that another
    /// session waits for; nil when there are none.
    public func lockHolders() throws -> String? {
        let result = try connection.query("""
            SELECT \(LockWitness.columns),
                   pg_catalog.string_agg(DISTINCT l.mode || ' on ' || coalesce(c.relname::text, l.locktype), ', ')
            FROM pg_catalog.pg_locks l
            JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
            LEFT JOIN pg_catalog.pg_class c ON c.oid = l.relation
            LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
            WHERE l.granted AND l.pid <> pg_catalog.pg_backend_pid() AND a.datname = pg_catalog.current_database()
              -- Other clients' sessions: not the server's own workers
              -- (autovacuum analyzing a catalog table is nobody's lock).
              AND a.backend_type = 'client backend'
              AND ((l.locktype = 'relation' AND l.mode <> 'AccessShareLock'
                    AND n.nspname NOT IN ('pg_catalog', 'information_schema'))
                   OR l.pid IN (SELECT pg_catalog.unnest(pg_catalog.pg_blocking_pids(w.pid))
                                FROM pg_catalog.pg_stat_activity w WHERE w.wait_event_type = 'Lock'))
            GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY 1
            """)
        let sessions = LockWitness.describe(result)
        guard !sessions.isEmpty else { return nil }
        let locks = result.rows.map { row -> String in
            if case let .text(value) = row[6] { return LockWitness.visible(value) }
            return "locks"
        }
        return "held by " + zip(sessions, locks).map { "\($0) holding \($1)" }.joined(separator: "; ")
    }
}
