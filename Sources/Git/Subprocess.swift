import CSpawn
import Foundation
import TextCodec
#if canImport(Glibc)
import Glibc
#endif

/// How a child process ended.
public enum Termination: Sendable, Hashable, CustomStringConvertible {
    /// It called `exit` with this status.
    case exited(Int32)
    /// A signal killed it.
    case signaled(Int32)

    /// The decoded `waitpid` status.
    public init(waitStatus status: Int32) {
        let signal = status & 0x7f
        self = signal == 0 ? .exited((status >> 8) & 0xff) : .signaled(signal)
    }

    /// The status a shell would report: the exit status, or 128 + the signal.
    public var exitCode: Int32 {
        switch self {
        case .exited(let code): return code
        case .signaled(let signal): return 128 + signal
        }
    }

    public var description: String {
        switch self {
        case .exited(let code): return "exit code \(code)"
        case .signaled(let signal): return "killed by signal \(Subprocess.signalName(signal)) (\(signal))"
        }
    }
}

/// A child process started by ``Subprocess/spawn(executable:arguments:environment:directory:newProcessGroup:)``.
public struct SpawnedProcess: Sendable {
    public let pid: pid_t
    /// The read end of the child's standard output (close-on-exec; the
    /// caller reads and closes it).
    public let standardOutput: Int32
    /// The read end of the child's standard error (-1 when merged into
    /// standard output).
    public let standardError: Int32
    /// Whether the child leads its own process group (whose id is `pid`).
    public let hasOwnProcessGroup: Bool
}

/// A child process that could not be started.
public struct SubprocessError: Error, Equatable, Sendable, CustomStringConvertible {
    public var executable: String
    public var reason: String

    public var description: String { "cannot run \(executable): \(reason)" }
}

/// Child processes, started with `posix_spawn` and an argument vector (never
/// a shell string), stdin from /dev/null and stdout/stderr on pipes.
///
/// Git runs its commands through it, and the job runner its builds, each in
/// its own process group so that a cancel reaches every process of the build.
public enum Subprocess {
    /// Starts `executable` (an absolute path, or a name looked up in `PATH`).
    ///
    /// - parameters:
    ///   - arguments: the arguments after `argv[0]` (which is `executable`).
    ///   - environment: the child's whole environment.
    ///   - directory: the child's working directory (nil: this process's).
    ///   - newProcessGroup: put the child in a new process group whose id is
    ///     its pid, so that `kill(-pid, …)` reaches it and its descendants.
    ///   - mergeStandardError: send standard error into the standard output
    ///     pipe (`2>&1`), so that lines keep the order they were printed in;
    ///     ``SpawnedProcess/standardError`` is then -1.
    public static func spawn(
        executable: String, arguments: [String], environment: [String: String],
        directory: String? = nil, newProcessGroup: Bool = false, mergeStandardError: Bool = false
    ) throws(SubprocessError) -> SpawnedProcess {
        var output: [Int32] = [-1, -1]
        var errors: [Int32] = [-1, -1]
        // O_CLOEXEC from the start: a child spawned concurrently on another
        // thread must not inherit these ends (it would keep a pipe open and
        // delay the end of file).
        guard makePipe(&output) else { throw SubprocessError(executable: executable, reason: lastError("pipe")) }
        guard makePipe(&errors) else {
            close(output[0]); close(output[1])
            throw SubprocessError(executable: executable, reason: lastError("pipe"))
        }

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, output[1], 1)
        posix_spawn_file_actions_adddup2(&actions, mergeStandardError ? output[1] : errors[1], 2)
        if let directory {
            _ = directory.withCString { opsh_spawn_addchdir(&actions, $0) }
        }

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF
        if newProcessGroup {
            flags |= POSIX_SPAWN_SETPGROUP
            posix_spawnattr_setpgroup(&attributes, 0)
        }
        // A clean signal state: nothing blocked, and the signals a parent
        // may ignore (SIGPIPE is ignored by many runtimes) back to default.
        var mask = sigset_t()
        sigemptyset(&mask)
        posix_spawnattr_setsigmask(&attributes, &mask)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGPIPE, SIGINT, SIGTERM, SIGQUIT, SIGHUP, SIGCHLD, SIGALRM, SIGUSR1, SIGUSR2, SIGTSTP, SIGTTIN, SIGTTOU] {
            sigaddset(&defaults, signal)
        }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(flags))

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var pid: pid_t = 0
        let status = executable.contains("/")
            ? posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
            : posix_spawnp(&pid, executable, &actions, &attributes, argv, envp)
        close(output[1])
        close(errors[1])
        guard status == 0 else {
            close(output[0])
            close(errors[0])
            var reason = String(cString: strerror(status))
            if let directory, status == ENOENT, !FileManager.default.fileExists(atPath: directory) {
                reason = "the working directory \(directory) does not exist"
            }
            throw SubprocessError(executable: executable, reason: reason)
        }
        if mergeStandardError { close(errors[0]) }
        return SpawnedProcess(pid: pid, standardOutput: output[0], standardError: mergeStandardError ? -1 : errors[0],
                              hasOwnProcessGroup: newProcessGroup)
    }

    /// Blocks until `pid` has ended, without reaping it: the zombie keeps
    /// its pid (and its process group id) reserved until ``reap(_:)``, so
    /// that signalling the group in between cannot hit a stranger.
    public static func waitForExit(_ pid: pid_t) {
        var info = siginfo_t()
        while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) != 0 && errno == EINTR {}
    }

    /// Reaps `pid` (blocking until it ends) and returns how it ended.
    public static func reap(_ pid: pid_t) -> Termination {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 {
            if errno != EINTR { return .exited(-1) }
        }
        return Termination(waitStatus: status)
    }

    /// Sends `signal` to the process group `group`; false if it has no
    /// process left.
    @discardableResult
    public static func signalGroup(_ group: pid_t, _ signal: Int32) -> Bool {
        kill(-group, signal) == 0
    }

    /// `SIGSEGV`, `SIGKILL` … or `SIG<n>` for a number without a name here.
    public static func signalName(_ signal: Int32) -> String {
        let names: [Int32: String] = [
            SIGHUP: "SIGHUP", SIGINT: "SIGINT", SIGQUIT: "SIGQUIT", SIGILL: "SIGILL", SIGTRAP: "SIGTRAP",
            SIGABRT: "SIGABRT", SIGBUS: "SIGBUS", SIGFPE: "SIGFPE", SIGKILL: "SIGKILL", SIGUSR1: "SIGUSR1",
            SIGSEGV: "SIGSEGV", SIGUSR2: "SIGUSR2", SIGPIPE: "SIGPIPE", SIGALRM: "SIGALRM", SIGTERM: "SIGTERM",
            SIGCHLD: "SIGCHLD", SIGCONT: "SIGCONT", SIGSTOP: "SIGSTOP", SIGTSTP: "SIGTSTP", SIGTTIN: "SIGTTIN",
            SIGTTOU: "SIGTTOU", SIGXCPU: "SIGXCPU", SIGXFSZ: "SIGXFSZ", SIGSYS: "SIGSYS",
        ]
        return names[signal] ?? "SIG\(signal)"
    }

    /// A pipe whose both ends are close-on-exec from the start.
    private static func makePipe(_ fds: inout [Int32]) -> Bool {
        fds.withUnsafeMutableBufferPointer { opsh_pipe_cloexec($0.baseAddress) } == 0
    }

    private static func lastError(_ call: String) -> String {
        "\(call): \(String(cString: strerror(errno)))"
    }
}

/// Cuts a byte stream into lines: `\n` ends a line, a `\r` before it is
/// dropped, bytes that are not UTF-8 become U+FFFD, a NUL becomes `␀`
/// (``VisibleText/nulPicture``: neither engine keeps text after a NUL,
/// so `nul:\0:after` would be stored or read as `nul:`), and a line
/// longer than `maxLineLength` bytes is cut into pieces of that length.
public struct LineSplitter: Sendable {
    public let maxLineLength: Int
    private var partial: [UInt8] = []

    public init(maxLineLength: Int = 64 * 1024) {
        self.maxLineLength = max(1, maxLineLength)
    }

    /// Feeds bytes; calls `emit` for each completed line.
    public mutating func feed(_ bytes: UnsafeRawBufferPointer, _ emit: (String) -> Void) {
        guard var start = bytes.baseAddress, bytes.count > 0 else { return }
        var remaining = bytes.count
        while remaining > 0 {
            guard let newline = memchr(start, 0x0A, remaining) else {
                partial.append(contentsOf: UnsafeRawBufferPointer(start: start, count: remaining))
                while partial.count > maxLineLength {
                    Array(partial.prefix(maxLineLength)).withUnsafeBytes { emitPiece($0, emit) }
                    partial.removeFirst(maxLineLength)
                }
                return
            }
            let length = newline - UnsafeMutableRawPointer(mutating: start)
            if partial.isEmpty {
                emitLine(UnsafeRawBufferPointer(start: start, count: length), emit)
            } else {
                partial.append(contentsOf: UnsafeRawBufferPointer(start: start, count: length))
                partial.withUnsafeBytes { emitLine($0, emit) }
                partial.removeAll(keepingCapacity: true)
            }
            start = UnsafeRawPointer(newline + 1)
            remaining -= length + 1
        }
    }

    /// Emits what is left after the last newline, if anything.
    public mutating func finish(_ emit: (String) -> Void) {
        guard !partial.isEmpty else { return }
        partial.withUnsafeBytes { emitLine($0, emit) }
        partial.removeAll()
    }

    private func emitLine(_ line: UnsafeRawBufferPointer, _ emit: (String) -> Void) {
        var line = line
        if let last = line.last, last == 0x0D { line = UnsafeRawBufferPointer(rebasing: line.dropLast()) }
        var offset = 0
        repeat {
            let end = min(line.count, offset + maxLineLength)
            emitPiece(UnsafeRawBufferPointer(rebasing: line[offset..<end]), emit)
            offset = end
        } while offset < line.count
    }

    private func emitPiece(_ bytes: UnsafeRawBufferPointer, _ emit: (String) -> Void) {
        let text = String(decoding: bytes, as: UTF8.self)
        guard let base = bytes.baseAddress, bytes.count > 0, memchr(base, 0, bytes.count) != nil else { return emit(text) }
        emit(String(String.UnicodeScalarView(text.unicodeScalars.map { $0 == "\0" ? VisibleText.nulPicture : $0 })))
    }
}
