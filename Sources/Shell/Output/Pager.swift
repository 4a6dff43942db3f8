import Foundation
import Store

/// Output taller than the screen goes through `$PAGER` (default
/// `less -SRFX`), as psql pages its results: the shell's returned values,
/// `help()` and anything else printed in one piece at the prompt.
///
/// Only when standard output is a terminal, and only what a chunk typed at
/// the prompt prints (``collecting(_:_:)``): the text is kept until the
/// chunk has ended — committed or rolled back — so a pager left open holds
/// no transaction and no lock; once one piece is kept, the rest of the
/// chunk's output follows it, in order. While the pager runs, opsh ignores
/// Ctrl-C (the pager, in the same process group, gets it) and waits for
/// it to exit, so `q` or Ctrl-C there leaves the prompt as it was: no
/// chunk is interrupted, no line is cleared twice.
public struct Pager: Sendable {
    /// `.pager on|off|auto`.
    public enum Mode: String, CaseIterable, Sendable {
        /// Page what is taller than the screen (the default).
        case auto
        /// Page everything printed at the terminal.
        case on
        /// Never page.
        case off
    }

    public static let defaultCommand = "less -SRFX"

    public var mode: Mode
    /// The shell command that pages: `$PAGER`, else ``defaultCommand``.
    public var command: String

    /// What the running chunk printed for the pager (shared by the copies
    /// of this pager that the runner and the shell's `print` hold).
    private final class Kept: @unchecked Sendable {
        var collecting = false
        var texts: [String] = []
    }
    private let kept = Kept()

    public init(mode: Mode = .auto, environment: EnvironmentVariables = .process) {
        self.mode = mode
        let pager = environment["PAGER"]?.trimmingCharacters(in: .whitespaces) ?? ""
        command = pager.isEmpty ? Self.defaultCommand : pager
    }

    /// Whether `text` goes through the pager: stdout is a terminal, and
    /// either `.pager on`, or `auto` and the text has more lines than the
    /// screen has rows for it (one is kept for the prompt). `auto` leaves a
    /// `TERM=dumb` terminal alone (an editor's shell buffer, where less
    /// cannot draw).
    public func wants(_ text: Substring) -> Bool {
        guard mode != .off, command != "cat" else { return false }
        // One line (most of what print writes) fits any screen: no system call.
        if mode == .auto, text.utf8.lazy.filter({ $0 == UInt8(ascii: "\n") }).prefix(2).count < 2 { return false }
        guard Terminal.isTerminal(1) else { return false }
        if mode == .on { return true }
        if EnvironmentVariables.process["TERM"] == "dumb" { return false }
        guard let rows = Terminal.height(descriptor: 1) else { return false }
        var lines = 0
        for byte in text.utf8 where byte == UInt8(ascii: "\n") {
            lines += 1
            if lines >= rows { return true }
        }
        return false
    }

    /// Runs a chunk (`body`), keeping for the pager what it prints that
    /// ``keeps(_:)`` takes, and shows that once `body` has returned.
    public static func collecting(_ pager: Pager?, _ body: () -> Void) {
        guard let pager else { return body() }
        pager.kept.collecting = true
        pager.kept.texts = []
        body()
        pager.kept.collecting = false
        let texts = pager.kept.texts
        pager.kept.texts = []
        guard !texts.isEmpty else { return }
        let text = texts.joined()
        if !pager.show(text) { Terminal.write(text, to: 1) }
    }

    /// Keeps `text` (with its newline) for the pager when a chunk runs and
    /// either the text is taller than the screen or something before it
    /// was kept; false: the caller prints it now.
    public func keeps(_ text: String) -> Bool {
        guard kept.collecting, !kept.texts.isEmpty || wants(text[...]) else { return false }
        kept.texts.append(text.hasSuffix("\n") ? text : text + "\n")
        return true
    }

    /// Shows `text` in the pager and waits for it to exit. False when the
    /// pager could not be started (the caller prints the text itself).
    public func show(_ text: String) -> Bool {
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else { return false }
        _ = fcntl(ends[1], F_SETFD, FD_CLOEXEC)
        // The pager reads the text on its stdin; Ctrl-C is its to handle.
        var ignore = sigaction()
        ignore.__sigaction_handler.sa_handler = SIG_IGN
        sigemptyset(&ignore.sa_mask)
        var savedInterrupt = sigaction(), savedPipe = sigaction()
        sigaction(SIGINT, &ignore, &savedInterrupt)
        sigaction(SIGPIPE, &ignore, &savedPipe)
        defer {
            sigaction(SIGINT, &savedInterrupt, nil)
            sigaction(SIGPIPE, &savedPipe, nil)
        }
        guard let child = Self.spawn(command, input: ends[0]) else {
            close(ends[0])
            close(ends[1])
            return false
        }
        close(ends[0])
        fflush(nil)
        // The pager reads as it shows: `q` before the end closes the pipe
        // (EPIPE, SIGPIPE ignored), which ends the writing.
        Terminal.write(text.hasSuffix("\n") ? text : text + "\n", to: ends[1])
        close(ends[1])
        var status: Int32 = 0
        while waitpid(child, &status, 0) < 0 && errno == EINTR {}
        // 127: the shell found no such command ($PAGER misspelt), and read
        // nothing: the caller prints the text after the shell's message.
        let exitedWith = (status & 0x7f) == 0 ? (status >> 8) & 0xff : -1
        return exitedWith != 127 && exitedWith != 126
    }

    /// `/bin/sh -c COMMAND` with `input` as its stdin and the signals a
    /// pager expects back at their defaults.
    private static func spawn(_ command: String, input: Int32) -> pid_t? {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, input, 0)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGINT, SIGPIPE, SIGTERM, SIGHUP, SIGQUIT, SIGWINCH] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        var unblocked = sigset_t()
        sigemptyset(&unblocked)
        posix_spawnattr_setsigmask(&attributes, &unblocked)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))
        let words: [String] = ["/bin/sh", "-c", command]
        let argv = words.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var child: pid_t = 0
        guard posix_spawn(&child, "/bin/sh", &actions, &attributes, argv, environ) == 0 else { return nil }
        return child
    }
}
