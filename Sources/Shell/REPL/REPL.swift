import Bindings
import CLuaShim
import Foundation
import LuaRuntime
import Store

/// The interactive shell, shaped like `lua.c`'s REPL: read a line, add
/// lines while the chunk is incomplete, run it as an expression if it is
/// one (printing its value) or else as a statement, report errors, repeat.
///
/// One loop polls stdin, the session's event queue and the signal pipe:
/// events (watch callbacks, job logs) print above the line being typed,
/// Ctrl-C at the prompt clears the line, Ctrl-C during a chunk stops it.
public final class REPL {
    public struct Configuration {
        /// The history file (nil: no history kept).
        public var historyPath: String?
        /// `init.lua`, run before the first prompt (nil: none).
        public var initPath: String?
        public var mode: OutputMode = .table
        public var console = Console()
        /// A line shown at start (nil: none).
        public var banner: String?
        public var prompt = "opsh> "
        /// --dry-run on a private copy: chunks commit into the copy.
        public var dryRunCopy = false
        /// --dry-run on a database too large to copy (ChunkTransactions).
        public var dryRunReplay = false
        /// --max-changes: most rows a chunk may change.
        public var maxChanges: Int?
        public var continuationPrompt = "  ... "
        /// Around each chunk typed at the prompt (the audit trail): before
        /// it runs, with its text, and after with its text, start time and
        /// whether it failed.
        public var beforeChunk: ((_ code: String) -> Void)?
        public var afterChunk: ((_ code: String, _ startedAt: Double, _ failed: Bool) -> Void)?

        public init(historyPath: String?, initPath: String?) {
            self.historyPath = historyPath
            self.initPath = initPath
        }
    }

    let session: any LuaSession
    let configuration: Configuration
    let console: Console
    var runner: ChunkRunner
    /// Rows of a result shown at the prompt (`.rows`); nil: all. A file of
    /// `.output` gets every row.
    var rowLimit: Int? = 200
    /// Whether the shell said that the database file is gone.
    var warnedFileGone = false
    /// Files `.output` made in this session: the only ones it writes again.
    var outputFiles: [String: WrittenFileRecord] = [:]
    /// `.once FILE`: the results go back to the terminal after the next chunk.
    var outputOnce = false
    var catalog: any DatabaseCatalog { session.databaseSession.catalog }
    var timer = false
    /// Each chunk one transaction, with its confirmation and undo().
    public let chunks: ChunkTransactions
    /// The status a chunk gave `os.exit`: the shell leaves with it once
    /// that chunk has ended as a chunk ends.
    private var exitStatus: Int32?

    /// The last chunk typed (`\e`, `\watch`), and whether it failed.
    var lastChunk: String?
    var lastChunkFailed = false
    var idleSignalsRead: Int32 { idleSignals.read }
    var idleSignalsWrite: Int32 { idleSignals.write }
    var signalWatcher: SignalWatcher? { watcher }
    /// `.traceback on`: every error's traceback, not only those through
    /// the operator's own functions.
    var allTracebacks = false

    /// The prompt's `_ENV`, where top-level locals live on (nil: the
    /// environment could not be made; locals are the chunk's own).
    private var promptLocals: PromptLocals?

    private let editor = LineEditor()
    private var history: History!
    private var pending = ""
    private var enteredLine: String??
    /// Signals that arrived while no chunk ran.
    private let idleSignals: (read: Int32, write: Int32)
    private var watcher: SignalWatcher?

    public init(session: any LuaSession, configuration: Configuration) {
        self.session = session
        self.configuration = configuration
        self.console = configuration.console
        runner = ChunkRunner(runtime: session.runtime,
                             printer: ValuePrinter(mode: configuration.mode, unicode: Terminal.isUTF8))
        runner.printer.maximumRows = rowLimit
        runner.printer.showsPromptSummaries = true
        runner.pager = Pager()
        let chunks = ChunkTransactions(session: session, console: configuration.console)
        chunks.dryRunCopy = configuration.dryRunCopy
        chunks.dryRunReplay = configuration.dryRunReplay
        chunks.changeLimit = configuration.maxChanges
        OpshModule.installUndo(in: session.runtime, undo: { [unowned chunks] call in try chunks.undo(call) },
                               list: { [unowned chunks] call in call.results(.string(try chunks.undoListOrRefusal())) })
        self.chunks = chunks
        var ends: [Int32] = [0, 0]
        pipe(&ends)
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        _ = fcntl(ends[1], F_SETFL, fcntl(ends[1], F_GETFL) | O_NONBLOCK)
        idleSignals = (ends[0], ends[1])
        chunks.signals = idleSignals
        promptLocals = PromptLocals(runtime: session.runtime)
    }

    deinit {
        close(idleSignals.read)
        close(idleSignals.write)
    }

    /// Runs the shell until Ctrl-D, `.quit` or SIGTERM; returns the exit
    /// status.
    public func run() -> Int32 {
        let writeEnd = idleSignals.write
        watcher = SignalWatcher(runtime: session.runtime) { signal in
            var byte = UInt8(truncatingIfNeeded: signal)
            _ = write(writeEnd, &byte, 1)
        }
        history = History(path: configuration.historyPath, console: console)
        try? PagedPrint.install(on: session.runtime, pager: { [unowned self] in runner.pager },
                                printer: { [unowned self] in runner.printer })
        let completer = Completer(schema: { [unowned self] in catalog.schema() })
        let runtime = session.runtime
        editor.complete = { [unowned self] word, before in
            // A line that starts a chunk with `.` is a dot command.
            let start = before.drop(while: { $0 == " " || $0 == "\t" })
            if pending.isEmpty, start.hasPrefix(".") || start.hasPrefix("\\") {
                return completer.dotCommandCandidates(word: word, before: before)
            }
            return completer.candidates(word: word, before: before, runtime: runtime)
        }
        editor.onLine = { [unowned self] line in enteredLine = .some(line) }

        if let banner = configuration.banner { print(banner) }
        if let initPath = configuration.initPath { runInitFile(initPath) }
        if exitStatus == nil { deliverEvents() }

        var status: Int32 = 0
        let resizes = WindowResizes()
        if exitStatus == nil { editor.show(prompt: configuration.prompt) }
        // (The init file or a callback may have called os.exit already.)
        loop: while exitStatus == nil {
            var descriptors = [pollfd(fd: 0, events: Int16(POLLIN), revents: 0),
                               pollfd(fd: session.events.wakeDescriptor, events: Int16(POLLIN), revents: 0),
                               pollfd(fd: idleSignals.read, events: Int16(POLLIN), revents: 0),
                               pollfd(fd: resizes.descriptor, events: Int16(POLLIN), revents: 0)]
            if poll(&descriptors, 4, -1) < 0 {
                if errno == EINTR { continue }
                break
            }
            if descriptors[2].revents != 0 {
                var byte: UInt8 = 0
                _ = read(idleSignals.read, &byte, 1)
                let signal = Int32(byte)
                if signal == SIGINT {
                    pending = ""
                    editor.discardLine()
                    editor.show(prompt: configuration.prompt)
                } else {
                    status = 128 + signal
                    break loop
                }
            }
            if descriptors[3].revents != 0, resizes.drain() {
                editor.resize()
            }
            if descriptors[1].revents != 0 {
                editor.printAbove { deliverEvents() }
                if exitStatus != nil { break loop }
            }
            if descriptors[0].revents != 0 {
                editor.readInput()
                if let line = enteredLine {
                    enteredLine = nil
                    guard let line else {
                        // Ctrl-D: leave on a fresh line.
                        print("")
                        break loop
                    }
                    if !handle(line) { break loop }
                    if let exitStatus {
                        status = exitStatus
                        break loop
                    }
                    editor.show(prompt: pending.isEmpty ? configuration.prompt : configuration.continuationPrompt)
                }
            }
        }
        editor.hide()
        // Callbacks still queued (a watch's) run before the session goes,
        // as a chunk, inside the dry run that may span the session.
        deliverEvents()
        // os.exit from the init file or a callback: its status, as a typed one's.
        if let exitStatus { status = exitStatus }
        fflush(nil)
        publishResults()
        return status
    }

    /// Runs `text` as if typed at an empty prompt (`\e`, `\watch`);
    /// returns false to leave.
    func runAsTyped(_ text: String) -> Bool {
        pending = ""
        return handle(text)
    }

    /// Handles one entered line; returns false to leave.
    private func handle(_ line: String) -> Bool {
        if pending.isEmpty {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty { return true }
            // sqlite3's dot commands and psql's backslash ones, one registry.
            if trimmed.hasPrefix(".") || trimmed.hasPrefix("\\") {
                history.add(trimmed)
                return runDotCommand(trimmed)
            }
            // psql's and Python's way out, unless a global has the name.
            if ["exit", "quit"].contains(trimmed), ChunkAssembler.noGlobal(named: trimmed, in: session.runtime),
               promptLocals?.holds(trimmed) != true {
                history.add(trimmed)
                return false
            }
            pending = line
        } else {
            pending += "\n" + line
        }
        var assembler = ChunkAssembler(runtime: session.runtime, chunkName: "=stdin")
        if let promptLocals {
            assembler.isPromptLocal = { promptLocals.holds($0) }
            assembler.keepsLocals = true
        }
        let verdict = assembler.assess(pending)
        if case .incomplete = verdict { return true }
        lastChunk = pending
        switch verdict {
        case .incomplete:
            return true
        case let .failed(error):
            history.add(pending)
            pending = ""
            report(error)
        case let .run(compiled):
            history.add(pending)
            let typed = pending
            pending = ""
            declarePromptLocals(compiled.locals)
            runTyped(typed) {
                // Its values are the chunk's result only as an expression
                // (`db.exec(a); db.exec(b)` returns nothing).
                if compiled.code.hasPrefix("return "), WriteAtThePrompt.isWriteCall(typed) {
                    try runWrite(compiled.function, typed: typed)
                    return
                }
                try runChunk(code: typed) {
                    exitStatus = try runner.run(compiled.function, environment: promptLocals?.environment)
                }
            }
        case let .sql(statements):
            history.add(pending)
            let typed = pending
            pending = ""
            runTyped(typed) { try runSQL(statements, typed: typed) }
        }
        return true
    }

    /// Runs a chunk the operator typed (Lua or SQL): warned when writes
    /// cannot land, audited, timed, its error reported.
    private func runTyped(_ typed: String, _ body: () throws -> Void) {
        // Writes would go to a file nobody opens again: the session
        // refuses them (and says so); reads and backup() still work.
        if let problem = session.databaseSession.writeProblem, !warnedFileGone {
            warnedFileGone = true
            console.warning(problem + ". Writes are refused; backup(\"rescue.sqlite\") saves the copy opsh has open; start opsh again to use the file now at the path.")
        }
        configuration.beforeChunk?(typed)
        let startedAt = Date().timeIntervalSince1970
        var failed = false
        // What the chunk printed is paged once it has ended (its
        // transaction too): an open pager holds no lock.
        Pager.collecting(runner.pager) {
            timed {
                do {
                    try body()
                } catch {
                    failed = true
                    report(error)
                }
            }
        }
        lastChunkFailed = failed
        if outputOnce {
            outputOnce = false
            redirectResults(to: nil)
        }
        configuration.afterChunk?(typed, startedAt, failed)
    }

    /// Declares a chunk's top-level locals at the prompt (``PromptLocals``),
    /// with a note for each that hides a global or stays the chunk's own.
    private func declarePromptLocals(_ locals: TopLevelLocals?) {
        guard let promptLocals, let locals else { return }
        if !locals.keptLocal.isEmpty {
            console.note("\(locals.keptLocal.joined(separator: ", ")): a local with <const> or <close> stays local to its chunk")
        }
        for name in promptLocals.declare(locals.declared) {
            console.note("the local \(name) hides the global \(name) at this prompt (_G.\(name) reaches the global)")
        }
    }

    /// Runs a chunk as one transaction (``ChunkTransactions``).
    @discardableResult
    func runChunk(code: String, describe: ((ChangeSummary) -> Void)? = nil, _ body: () throws -> Void) throws -> ChangeSummary? {
        try chunks.run(code: code, describe: describe, body)
    }

    /// A `db.exec` call typed alone: what it did ("3 rows deleted from
    /// builds", ``WriteAtThePrompt``) instead of its raw values.
    private func runWrite(_ function: LuaReference, typed: String) throws {
        var writer = runner
        writer.printer.leavesWriteValuesToThePrompt = true
        var showed = true
        try runChunk(code: typed, describe: { summary in
            guard !showed else { return }
            print(WriteAtThePrompt.sentence(summary))
            fflush(nil)
        }) {
            do {
                showed = try writer.runShowingResults(function, environment: promptLocals?.environment)
            } catch let error as LuaError where error.exitStatus != nil {
                exitStatus = error.exitStatus
            }
        }
    }

    func timed(_ body: () -> Void) {
        let start = DispatchTime.now().uptimeNanoseconds
        chunks.secondsAtQuestions = 0
        body()
        if timer {
            // The chunk's own time: not the operator's at the question.
            let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9 - chunks.secondsAtQuestions
            print(String(format: "Run Time: %.3f s", max(0, seconds)))
        }
        fflush(nil)
    }

    /// The init file runs as a chunk (``runUntyped(_:onError:_:)``): what it
    /// writes is kept by the dry run's rules and audited like a typed
    /// chunk's, and rolled back when it fails.
    private func runInitFile(_ path: String) {
        guard access(path, F_OK) == 0 else { return }
        runUntyped("-- init file \(path)", onError: { [console] error in
            if let error = error as? ScriptFileError {
                console.warning("\(error); continuing without it")
                return
            }
            console.warning("the init file \(path) failed; continuing:")
            self.report(error)
        }) {
            exitStatus = try runner.runFile(path, printResults: false)
            return false
        }
    }

    /// What the audit trail names as the code of callbacks run at the prompt.
    static let callbacksCode = "-- callbacks run at the prompt (watch, jobs)"

    /// Runs the callbacks of queued events (a watch's, a followed job's) as
    /// a typed chunk runs (``ChunkTransactions``): one transaction, under
    /// `--max-changes` and `.confirm`, inside the dry run, with its audit
    /// row, its note and undo; a `db.rows` loop it leaves open is closed
    /// with it. Run outside a chunk, a callback's write committed at once,
    /// past every cap and without an audit row, and the shell's dry run on
    /// a file too large to copy kept it (scripts/reliability-attacks.md, 27u).
    private func deliverEvents() {
        guard !session.events.isEmpty else { return }
        runUntyped(Self.callbacksCode, onError: report) {
            var failed = false
            do {
                for error in try session.deliverEvents() {
                    failed = true
                    report(error)
                }
            } catch let error as LuaError where error.exitStatus != nil {
                // Ends the shell as a typed os.exit does: the chunk is
                // kept by the mode's rule, then the status (28a).
                exitStatus = error.exitStatus
            }
            return failed
        }
        fflush(nil)
    }

    /// Runs Lua the operator did not type at the prompt (callbacks, the
    /// init file) as a chunk, audited under `code`: `body` returns whether
    /// it failed without throwing.
    private func runUntyped(_ code: String, onError: (any Error) -> Void, _ body: () throws -> Bool) {
        configuration.beforeChunk?(code)
        let startedAt = Date().timeIntervalSince1970
        var failed = false
        do {
            try runChunk(code: code) { failed = try body() }
        } catch {
            failed = true
            onError(error)
        }
        configuration.afterChunk?(code, startedAt, failed)
    }

    /// Whether a traceback passes through a function someone wrote (one
    /// typed at the prompt, one in a file), not only the typed line itself
    /// and opsh's C functions: only then does it say more than the
    /// message's `stdin:1:` (`.traceback on` shows every one).
    static func reachesOperatorCode(_ traceback: String) -> Bool {
        traceback.split(separator: "\n").dropFirst().contains { line in
            let frame = line.trimmingCharacters(in: .whitespaces)
            return !frame.hasPrefix("[C]:") && !frame.hasSuffix(": in main chunk") && frame != "(...tail calls...)"
        }
    }

    /// Shows an error from a chunk, a printer or the database.
    func report(_ error: any Error) {
        if let error = error as? LuaError {
            switch error.kind {
            case let .interrupted(reason):
                let what = reason == .timeout ? "timed out" : "interrupted"
                if let note = error.note {
                    // What the call leaves running, not a rollback that kept nothing.
                    console.error("\(what): \(note)")
                } else {
                    console.error("\(what); the chunk was rolled back: nothing it changed was kept")
                }
            default:
                console.error(error.message)
                if let traceback = error.traceback, allTracebacks || Self.reachesOperatorCode(traceback) {
                    console.raw(traceback)
                }
            }
        } else {
            console.error("\(error)")
        }
        let message = (error as? LuaError)?.message ?? "\(error)"
        if let caret = SQLErrorCaret.lines(forMessage: message) { console.raw(caret) }
        for hint in session.databaseSession.hints(for: message) { console.error(hint) }
    }
}
