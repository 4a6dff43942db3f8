import CSpawn
import Foundation

/// A child process for tests, started with `posix_spawn` (Foundation's
/// `Process` crashes now and then under parallel tests on this
/// toolchain): stdout and stderr on pipes, stdin from a pipe the caller
/// may keep writing to, or /dev/null.
public struct ChildProcess: Sendable {
    public let pid: pid_t
    /// Read ends of the child's stdout and stderr.
    public let standardOutput: Int32
    public let standardError: Int32
    /// Write end of the child's stdin, or -1 (stdin is /dev/null).
    public let standardInput: Int32

    /// Starts `executable` with `arguments`, `environment` (its whole
    /// environment) and `stdin` written to it; the stdin pipe is closed
    /// after that unless `keepingStdinOpen`.
    public static func start(_ executable: String, _ arguments: [String], environment: [String: String],
                             stdin: String? = nil, keepingStdinOpen: Bool = false) throws -> ChildProcess {
        ignoreBrokenPipes
        var output: [Int32] = [-1, -1], errors: [Int32] = [-1, -1], input: [Int32] = [-1, -1]
        let wantsInput = stdin != nil || keepingStdinOpen
        guard opsh_pipe_cloexec(&output) == 0, opsh_pipe_cloexec(&errors) == 0,
              !wantsInput || opsh_pipe_cloexec(&input) == 0 else { throw POSIXError(.EMFILE) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if wantsInput {
            posix_spawn_file_actions_adddup2(&actions, input[0], 0)
        } else {
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        }
        posix_spawn_file_actions_adddup2(&actions, output[1], 1)
        posix_spawn_file_actions_adddup2(&actions, errors[1], 2)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var mask = sigset_t()
        sigemptyset(&mask)
        posix_spawnattr_setsigmask(&attributes, &mask)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var spawned: pid_t = 0
        let status = executable.contains("/")
            ? posix_spawn(&spawned, executable, &actions, &attributes, argv, envp)
            : posix_spawnp(&spawned, executable, &actions, &attributes, argv, envp)
        let pid = spawned
        close(output[1]); close(errors[1])
        if wantsInput { close(input[0]) }
        guard status == 0 else {
            close(output[0]); close(errors[0])
            if wantsInput { close(input[1]) }
            throw POSIXError(POSIXErrorCode(rawValue: status) ?? .EIO)
        }
        let child = ChildProcess(pid: pid, standardOutput: output[0], standardError: errors[0],
                                 standardInput: wantsInput ? input[1] : -1)
        if let stdin { child.write(stdin) }
        if !keepingStdinOpen { child.closeInput() }
        // No test may hang the suite: a child still running after 60 s is killed.
        Thread.detachNewThread {
            Thread.sleep(forTimeInterval: 60)
            if kill(pid, 0) == 0 { kill(pid, SIGKILL) }
        }
        return child
    }

    /// A write to a child that has exited (killed after its 60 s, say) is
    /// EPIPE for the test that wrote, not a SIGPIPE that ends the whole
    /// test process. Children get the default action back (`setsigdefault`).
    private static let ignoreBrokenPipes: Void = { signal(SIGPIPE, SIG_IGN) }()

    /// Writes `text` to the child's stdin (ignored without a stdin pipe).
    public func write(_ text: String) {
        guard standardInput >= 0 else { return }
        let bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.write(standardInput, $0.baseAddress, $0.count) }
            if written < 0 { if errno == EINTR { continue } else { return } }
            offset += written
        }
    }

    public func closeInput() {
        if standardInput >= 0 { close(standardInput) }
    }

    /// Reads stdout and stderr to their end (at once, so that a full pipe
    /// cannot block the child), then reaps it.
    public func finish(stdoutPrefix: [UInt8] = []) -> TestFolder.Result {
        nonisolated(unsafe) var errorBytes: [UInt8] = []
        let done = DispatchSemaphore(value: 0)
        let errorDescriptor = standardError
        Thread.detachNewThread {
            errorBytes = readToEnd(errorDescriptor)
            done.signal()
        }
        let outputBytes = stdoutPrefix + readToEnd(standardOutput)
        done.wait()
        close(standardOutput)
        close(standardError)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let code: Int32 = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        return TestFolder.Result(status: code, stdout: String(decoding: outputBytes, as: UTF8.self),
                                 stderr: String(decoding: errorBytes, as: UTF8.self))
    }
}

/// Everything `descriptor` gives until end of file.
public func readToEnd(_ descriptor: Int32) -> [UInt8] {
    var bytes: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
        let count = read(descriptor, &buffer, buffer.count)
        if count > 0 { bytes += buffer[..<count]; continue }
        if count < 0 && errno == EINTR { continue }
        return bytes
    }
}

/// The first line `descriptor` gives (with its newline), read byte by byte
/// so that nothing after it is taken.
public func readFirstLine(_ descriptor: Int32) -> [UInt8] {
    var line: [UInt8] = []
    var byte: UInt8 = 0
    while true {
        let count = read(descriptor, &byte, 1)
        if count == 1 { line.append(byte); if byte == 10 { return line }; continue }
        if count < 0 && errno == EINTR { continue }
        return line
    }
}

/// What `descriptor` gives up to and including the line `last` (without its
/// newline), read byte by byte so that nothing after it is taken; all of
/// it if that line never comes.
public func readLines(_ descriptor: Int32, until last: String) -> [UInt8] {
    var bytes: [UInt8] = []
    while true {
        let line = readFirstLine(descriptor)
        bytes += line
        if line.isEmpty || line == Array((last + "\n").utf8) { return bytes }
    }
}
