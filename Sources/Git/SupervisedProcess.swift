import CSpawn
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A child process that nothing it starts outlives: it runs under a
/// supervisor of its own (`CSpawn/opsh_supervise.c`), a child subreaper
/// that kills every descendant it has when told to, or when opsh is gone
/// however it ended (ARCHITECTURE.md, "Build runners and the queue").
///
/// Git runs every command this way (`git ls-remote` on a remote that
/// never answers can be stopped, and is killed with opsh), and the job
/// runner its builds (a daemon a build detached with `setsid` dies with
/// the build).
///
/// ```swift
/// let process = try SupervisedProcess.start(executable: "/bin/sh", arguments: ["-c", "make"],
///                                           environment: env, directory: workspace)
/// // … read process.standardOutput to its end …
/// let ended = process.waitForExit()   // how the child ended
/// process.end()                       // and everything it left behind is killed
/// ```
public final class SupervisedProcess: @unchecked Sendable {
    /// The child (it leads its own process group).
    public let pid: pid_t
    /// The read end of the child's standard output (close-on-exec; the
    /// caller reads and closes it).
    public let standardOutput: Int32
    /// The read end of its standard error; -1 when merged into standard output.
    public let standardError: Int32

    private let supervisor: pid_t
    private let control: Int32
    private let report: Int32
    /// Held while the report pipe is read (by one thread at a time).
    private let readLock = NSLock()
    private let stateLock = NSLock()
    // Guarded by `stateLock`:
    private var termination: Termination?
    private var gone = false
    private var reaped = false

    private init(pid: pid_t, standardOutput: Int32, standardError: Int32, supervisor: opsh_supervised) {
        self.pid = pid
        self.standardOutput = standardOutput
        self.standardError = standardError
        self.supervisor = supervisor.supervisor
        self.control = supervisor.control
        self.report = supervisor.report
    }

    deinit {
        end()
        close(control)
        close(report)
    }

    /// A cgroup (v2) the child enters before it execs: descriptors of its
    /// `cgroup.procs` and `cgroup.kill` opened for writing (kill: -1 on a
    /// kernel before 5.14).
    public struct Cgroup: Sendable {
        public var procs: Int32
        public var kill: Int32

        public init(procs: Int32, kill: Int32) {
            self.procs = procs
            self.kill = kill
        }
    }

    /// Starts `executable` (an absolute path, or a name looked up in the
    /// `PATH` of `environment`) with stdin from /dev/null and its output
    /// on pipes (`mergeStandardError`: stderr into the stdout pipe, so
    /// lines keep the order they were printed in).
    public static func start(executable: String, arguments: [String], environment: [String: String],
                             directory: String? = nil, mergeStandardError: Bool = false,
                             cgroup: Cgroup? = nil) throws(SubprocessError) -> SupervisedProcess {
        guard let path = resolve(executable, path: environment["PATH"]) else {
            throw SubprocessError(executable: executable, reason: "not found in PATH")
        }
        var output: [Int32] = [-1, -1]
        var errors: [Int32] = [-1, -1]
        guard output.withUnsafeMutableBufferPointer({ opsh_pipe_cloexec($0.baseAddress) }) == 0 else {
            throw SubprocessError(executable: executable, reason: "pipe: \(String(cString: strerror(errno)))")
        }
        if !mergeStandardError, errors.withUnsafeMutableBufferPointer({ opsh_pipe_cloexec($0.baseAddress) }) != 0 {
            close(output[0]); close(output[1])
            throw SubprocessError(executable: executable, reason: "pipe: \(String(cString: strerror(errno)))")
        }
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var supervised = opsh_supervised()
        let status = (directory ?? "").withCString { directoryText in
            opsh_supervise(path, argv, envp, directory == nil ? nil : directoryText,
                           output[1], mergeStandardError ? output[1] : errors[1],
                           cgroup?.procs ?? -1, cgroup?.kill ?? -1, &supervised)
        }
        close(output[1])
        if !mergeStandardError { close(errors[1]) }
        guard status == 0 else {
            close(output[0])
            if !mergeStandardError { close(errors[0]) }
            throw SubprocessError(executable: executable, reason: String(cString: strerror(status)))
        }
        // The first report says whether the child started.
        let first = readReport(supervised.report)
        guard let first, first.kind == Int32(OPSH_SUPERVISED_STARTED) else {
            let process = SupervisedProcess(pid: -1, standardOutput: output[0], standardError: mergeStandardError ? -1 : errors[0],
                                            supervisor: supervised)
            process.end()
            close(output[0])
            if !mergeStandardError { close(errors[0]) }
            var reason = first.map { String(cString: strerror($0.value)) } ?? "its supervisor ended"
            if first?.kind == Int32(OPSH_SUPERVISED_CHDIR_FAILED), let directory {
                reason = FileManager.default.fileExists(atPath: directory)
                    ? "cannot enter the working directory \(directory): \(reason)"
                    : "the working directory \(directory) does not exist"
            }
            throw SubprocessError(executable: executable, reason: reason)
        }
        return SupervisedProcess(pid: first.value, standardOutput: output[0],
                                 standardError: mergeStandardError ? -1 : errors[0], supervisor: supervised)
    }

    /// Blocks until the child has exited (its descendants may still run)
    /// and returns how it ended; nil when `timeout` passed first.
    public func waitForExit(timeout: TimeInterval? = nil) -> Termination? {
        readLock.lock()
        defer { readLock.unlock() }
        let deadline = timeout.map { Date().addingTimeInterval($0) }
        while exitStatus == nil, !isGone {
            guard readNextReport(until: deadline) else { break }
        }
        return exitStatus
    }

    /// How the child ended, once a ``waitForExit(timeout:)`` saw it; never blocks.
    public var exitStatus: Termination? { stateLock.withLock { termination } }

    private var isGone: Bool { stateLock.withLock { gone } }

    /// SIGTERM to the child and every process it started.
    public func terminateAll() {
        send(UInt8(ascii: "T"))
    }

    /// SIGKILL to the child and every process it started, until none is
    /// left; does not wait (``end(patience:)`` does).
    public func killAll() {
        send(UInt8(ascii: "K"))
    }

    /// ``killAll()``, then waits (up to `patience`) until the child and
    /// every process it started are gone, and reaps the supervisor.
    public func end(patience: TimeInterval = 10) {
        send(UInt8(ascii: "K"))
        readLock.lock()
        defer { readLock.unlock() }
        let deadline = Date().addingTimeInterval(patience)
        while !isGone {
            guard readNextReport(until: deadline) else { break }
        }
        let (wasReaped, gone) = stateLock.withLock { () -> (Bool, Bool) in
            defer { reaped = true }
            return (reaped, self.gone)
        }
        guard !wasReaped else { return }
        let supervisor = self.supervisor
        if gone {
            var status: Int32 = 0
            while waitpid(supervisor, &status, 0) < 0 && errno == EINTR {}
        } else {
            // A process that does not die (stuck in the kernel): reaped when it does.
            Thread.detachNewThread {
                var status: Int32 = 0
                while waitpid(supervisor, &status, 0) < 0 && errno == EINTR {}
            }
        }
    }

    private func send(_ command: UInt8) {
        var byte = command
        // A supervisor that has exited: EPIPE, not SIGPIPE.
        _ = Glibc.send(control, &byte, 1, Int32(MSG_NOSIGNAL))
    }

    /// Reads one report (`readLock` held); false when the pipe ended or the deadline passed.
    private func readNextReport(until deadline: Date?) -> Bool {
        var descriptor = pollfd(fd: report, events: Int16(POLLIN), revents: 0)
        while true {
            let wait = deadline.map { Int32(max(0, min(1_000, $0.timeIntervalSinceNow * 1000))) } ?? 1_000
            let ready = poll(&descriptor, 1, wait)
            if ready < 0 && errno == EINTR { continue }
            if ready > 0 { break }
            if let deadline, Date() >= deadline { return false }
        }
        guard let message = Self.readReport(report) else {
            stateLock.withLock { gone = true }
            return false
        }
        stateLock.withLock {
            switch message.kind {
            case Int32(OPSH_SUPERVISED_EXITED): termination = Termination(waitStatus: message.value)
            case Int32(OPSH_SUPERVISED_GONE): gone = true
            default: break
            }
        }
        return true
    }

    private static func readReport(_ fd: Int32) -> (kind: Int32, value: Int32)? {
        var message: [Int32] = [0, 0]
        var got = 0
        while got < 8 {
            let count = message.withUnsafeMutableBytes { read(fd, $0.baseAddress! + got, 8 - got) }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { return nil }
            got += count
        }
        return (message[0], message[1])
    }

    /// `executable` as a path to exec: as given when it has a slash, else
    /// the first match in `path`'s folders.
    static func resolve(_ executable: String, path: String?) -> String? {
        if executable.contains("/") { return executable }
        for folder in (path ?? "/usr/local/bin:/usr/bin:/bin").split(separator: ":") {
            let candidate = String(folder) + "/" + executable
            if access(candidate, X_OK) == 0 { return candidate }
        }
        return nil
    }
}
