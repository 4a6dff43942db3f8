import Bindings
import Foundation
import LuaRuntime
import Store

/// Each chunk typed at the prompt is one transaction (README, "A chunk is
/// a transaction"): it begins at the chunk's first write, lands whole when
/// the chunk ends, and is rolled back by an error or Ctrl-C. Before a chunk
/// that changed more rows than `.confirm N` commits, the shell shows what
/// it changed and asks. Every committed chunk keeps its changeset, so
/// `undo()` can take it back unless someone else changed those rows since.
public final class ChunkTransactions {
    /// Ask before committing more changed rows than this (`.confirm N`);
    /// nil: never ask (`.confirm off`).
    var confirmThreshold: Int? = 1000
    /// How long the question waits for an answer before rolling back.
    var answerTimeout: Double = 10
    /// Time spent waiting at the question, which `.timer` leaves out.
    var secondsAtQuestions = 0.0
    /// Committed chunks that changed rows, oldest first.
    private(set) var history: [CommittedChunk] = []
    /// Changesets kept in all; past ``memoryBudget`` the oldest are dropped.
    static let memoryBudget = 256 << 20
    /// The chunk undo() in the running chunk takes back, to mark once the
    /// running chunk commits.
    private var undoing: [Int] = []
    /// The shell's --dry-run on a private copy: chunks commit into the
    /// copy; nothing is asked.
    var dryRunCopy = false
    /// --max-changes: a chunk that changes more rows is rolled back.
    var changeLimit: Int?
    /// What the session's chunks changed in all (the dry run's report).
    public private(set) var total = ChangeSummary()
    /// The shell's --dry-run on a database too large to copy: each chunk
    /// re-applies the session's earlier changes and is rolled back.
    var dryRunReplay = false
    /// The session's changes so far, in ``dryRunReplay``.
    private var carried: Changeset?
    /// The REPL's pipe of signals that came while no Lua ran: Ctrl-C at
    /// the question arrives there (the chunk's Lua has returned).
    var signals: (read: Int32, write: Int32)?
    /// Why the last question was not answered yes.
    private var declined: Answer = .no

    struct CommittedChunk {
        let number: Int
        let code: String
        let summary: ChangeSummary
        var changeset: Changeset?
        var whyNoUndo: String?
        var undoneBy: Int?
    }

    let session: any LuaSession
    let console: Console
    private var nextNumber = 1
    private var database: any DatabaseSession { session.databaseSession }

    init(session: any LuaSession, console: Console) {
        self.session = session
        self.console = console
    }

    /// Runs `body` (a chunk) as one transaction, asks when it changed many
    /// rows, and remembers what it committed. Returns what it changed, or
    /// nil when the answer rolled it back.
    /// `describe` gets what the chunk changed before the note says it
    /// was committed (or kept in the dry run), not when it was rolled back.
    @discardableResult
    func run(code: String, describe: ((ChangeSummary) -> Void)? = nil, _ body: () throws -> Void) throws -> ChangeSummary? {
        if dryRunReplay {
            let summary = try replay(body)
            describe?(summary)
            return summary
        }
        undoing = []
        // A schema change always asks, whatever the threshold (README, "A
        // chunk is a transaction").
        let gate = dryRunCopy ? nil : CommitGate(
            needsAnswer: { [confirmThreshold] summary in
                !summary.schemaChanges.isEmpty || (confirmThreshold.map { summary.total > $0 } ?? false)
            },
            ask: { [unowned self] summary in ask(about: summary) })
        let (_, outcome) = try database.scope(.chunk, records: true, changeLimit: changeLimit, gate: gate, body)
        if outcome.declined {
            console.note(declined == .interrupted ? "Ctrl-C: rolled back, nothing was changed" : "rolled back: nothing was changed")
            return nil
        }
        // A chunk of a dry run that spans the session: kept in its
        // transaction, which is rolled back when the shell ends.
        if outcome.committed || database.isDryRun { describe?(outcome.summary) }
        if !outcome.committed, database.isDryRun, !outcome.summary.isEmpty {
            // Only counted (telemetry.cleanup's rows on the private copy):
            // the session's summary names them too.
            if dryRunCopy { total.add(outcome.summary) }
            console.note("dry run: " + outcome.summary.sentence)
            return outcome.summary
        }
        guard outcome.committed, !outcome.summary.isEmpty else { return outcome.summary }
        let number = nextNumber
        nextNumber += 1
        for undone in undoing {
            if let index = history.firstIndex(where: { $0.number == undone }) { history[index].undoneBy = number }
        }
        history.append(CommittedChunk(number: number, code: code, summary: outcome.summary,
                                      changeset: outcome.changeset, whyNoUndo: outcome.notRecorded))
        total.add(outcome.summary)
        dropOldChangesets()
        var note = (dryRunCopy ? "dry run (on the private copy): " : "committed: ") + outcome.summary.sentence
        if outcome.changeset != nil {
            note += " — undo() takes it back"
        } else if database.undoUnavailable == nil, let why = outcome.notRecorded {
            note += " — undo() cannot take it back: \(why)"
        }
        console.note(note)
        return outcome.summary
    }

    /// A chunk of a dry run on a database too large to copy.
    private func replay(_ body: () throws -> Void) throws -> ChangeSummary {
        do {
            let outcome = try database.replayScope(carrying: carried, changeLimit: changeLimit, body)
            carried = outcome.carried
            // What was only counted (telemetry.cleanup) is in no changeset.
            total = carried?.summary() ?? ChangeSummary()
            total.tables.add(database.rowsCountedInsteadOfChanged)
            guard !outcome.summary.isEmpty else { return outcome.summary }
            var note = "dry run: rolled back; it would have changed " + outcome.summary.sentence
            if let why = outcome.notCarried {
                note += " — later chunks do not see this: \(why)"
            }
            console.note(note)
            return outcome.summary
        } catch let error as ChangedSince {
            carried = nil
            total = ChangeSummary()
            total.tables.add(database.rowsCountedInsteadOfChanged)
            throw error
        }
    }

    // MARK: Asking

    /// Shows the changes and asks; true only for yes (or the table's name
    /// for a large delete or a schema change).
    private func ask(about summary: ChangeSummary) -> Bool {
        fflush(nil)
        let lines = ["this chunk changes \(summary.total) rows:"] + summary.tableLines
        Terminal.write(lines.joined(separator: "\n") + "\n", to: 1)
        let threshold = confirmThreshold ?? 0
        // A schema change, or a delete of more than ten times the
        // threshold from one table: typing its name, not a reflex "y".
        let schemaTable = summary.schemaChanges.first { $0.type == "table" }?.name ?? summary.schemaChanges.first?.table
        let bigDelete = summary.tables.filter { $0.value.deleted > 10 * threshold }
            .max { $0.value.deleted < $1.value.deleted }
        let nameToType = schemaTable ?? bigDelete?.key
        let question = schemaTable.map { "it changes the schema of \($0) (\(summary.schemaSentence)): type the table's name to commit, anything else rolls back: " }
            ?? bigDelete.map { "it deletes \($0.value.deleted) rows from \($0.key): type the table's name to commit, anything else rolls back: " }
            ?? "commit? [y/N] "
        Terminal.write(question, to: 1)
        let asked = DispatchTime.now().uptimeNanoseconds
        defer { secondsAtQuestions += Double(DispatchTime.now().uptimeNanoseconds - asked) / 1e9 }
        switch readAnswer() {
        case let .line(answer):
            declined = .no
            let trimmed = answer.trimmingCharacters(in: .whitespaces)
            if let nameToType { return trimmed == nameToType }
            return ["y", "yes"].contains(trimmed.lowercased())
        case .interrupted:
            declined = .interrupted
            Terminal.write("\n", to: 1)
            return false
        case .no, .noAnswer:
            declined = .noAnswer
            Terminal.write("\n", to: 1)
            console.note("no answer in \(Int(answerTimeout)) s: rolled back")
            return false
        }
    }

    /// How the question was answered.
    private enum Answer: Equatable {
        case line(String)
        case no
        /// None within ``answerTimeout``, or the end of input.
        case noAnswer
        /// Ctrl-C (or another signal): no, at once.
        case interrupted
    }

    /// A line from the terminal within ``answerTimeout``. Ctrl-C (SIGINT on
    /// the REPL's pipe, or the byte itself when the terminal is raw) is
    /// "no" at once; another signal too, and is passed on to the REPL.
    private func readAnswer() -> Answer {
        let deadline = Date().addingTimeInterval(answerTimeout)
        var bytes: [UInt8] = []
        while true {
            let left = deadline.timeIntervalSinceNow
            if session.runtime.interruptRequested != nil { return .interrupted }
            if left <= 0 { return .noAnswer }
            var descriptors = [pollfd(fd: 0, events: Int16(POLLIN), revents: 0),
                               pollfd(fd: signals?.read ?? -1, events: Int16(POLLIN), revents: 0)]
            let ready = poll(&descriptors, 2, Int32(min(left, 0.2) * 1000) + 1)
            if ready < 0 && errno != EINTR { return .noAnswer }
            guard ready > 0 else { continue }
            if descriptors[1].revents != 0, let signals {
                var signal: UInt8 = 0
                if read(signals.read, &signal, 1) == 1, Int32(signal) != SIGINT {
                    _ = write(signals.write, &signal, 1)  // SIGTERM: the REPL ends once the chunk has
                }
                return .interrupted
            }
            guard descriptors[0].revents != 0 else { continue }
            var byte: UInt8 = 0
            let count = read(0, &byte, 1)
            if count <= 0 { return .noAnswer }
            if byte == 3 { return .interrupted }
            if byte == 10 || byte == 13 { return .line(String(decoding: bytes, as: UTF8.self)) }
            bytes.append(byte)
        }
    }

    // MARK: undo()

    /// `undo([n])`: takes back the n-th last committed chunk (1, the last).
    func undo(_ call: LuaCall) throws -> Int32 {
        if let why = database.undoUnavailable { throw LuaCallError.message(why) }
        let n = try call.optionalInteger(1) ?? 1
        guard n >= 1 else { throw call.argumentError(1, "the n-th last chunk, 1 or more, expected") }
        guard !history.isEmpty else {
            throw LuaCallError.message("nothing to undo: no chunk of this session has changed data")
        }
        guard n <= history.count else {
            throw call.argumentError(1, "only \(history.count) chunk(s) of this session changed data")
        }
        let chunk = history[history.count - Int(n)]
        if let by = chunk.undoneBy {
            throw LuaCallError.message("chunk \(chunk.number) was already undone by chunk \(by); undo() takes back that undo")
        }
        guard let changeset = chunk.changeset else {
            throw LuaCallError.message("chunk \(chunk.number) cannot be undone: \(chunk.whyNoUndo ?? "its changes were not recorded")")
        }
        let summary = try database.apply(
            try changeset.inverted(), refusal: "undo changed nothing (chunk \(chunk.number): \(Self.excerpt(chunk.code)))")
        undoing.append(chunk.number)
        return call.results(.string("undoes chunk \(chunk.number) (\(Self.excerpt(chunk.code))): \(summary.sentence)"))
    }

    /// `.undo`: what `undo(n)` can take back, newest first, with the n
    /// that takes each back (or why it cannot).
    /// `undo.list()`: what `.undo` shows, or the reason there is no undo.
    func undoListOrRefusal() throws -> String {
        if let why = database.undoUnavailable { throw LuaCallError.message(why) }
        return undoList()
    }

    func undoList() -> String {
        if let why = database.undoUnavailable { return why }
        guard !history.isEmpty else { return "nothing to undo: no chunk of this session has changed data" }
        return history.reversed().enumerated().map { offset, chunk in
            let state: String
            if let by = chunk.undoneBy {
                state = "undone by chunk \(by)"
            } else if chunk.changeset == nil {
                state = "cannot be undone: \(chunk.whyNoUndo ?? "its changes were not recorded")"
            } else {
                state = "undo(\(offset + 1))"
            }
            return "\(state)  chunk \(chunk.number): \(Self.excerpt(chunk.code)) — \(chunk.summary.sentence)"
        }.joined(separator: "\n")
    }

    /// Frees the oldest changesets past the memory budget.
    private func dropOldChangesets() {
        var kept = history.reduce(0) { $0 + ($1.changeset?.byteCount ?? 0) }
        for index in history.indices where kept > Self.memoryBudget {
            guard let changeset = history[index].changeset else { continue }
            kept -= changeset.byteCount
            history[index].changeset = nil
            history[index].whyNoUndo = "its changeset was dropped to keep the shell's memory under \(Self.memoryBudget >> 20) MB"
        }
    }

    static func excerpt(_ code: String) -> String {
        let line = code.split(separator: "\n").first.map(String.init) ?? ""
        return line.count > 50 ? String(line.prefix(47)) + "…" : line
    }
}
