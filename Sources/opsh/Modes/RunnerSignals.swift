import Foundation

/// The signal handler's only job: write the signal number to a pipe
/// (async-signal-safe); a thread reads it and tells the runner.
nonisolated(unsafe) private var runnerSignalPipe: Int32 = -1

private let forwardRunnerSignal: @convention(c) (Int32) -> Void = { signal in
    var byte = UInt8(truncatingIfNeeded: signal)
    let saved = errno
    _ = write(runnerSignalPipe, &byte, 1)
    errno = saved
}

/// SIGTERM, SIGINT and SIGHUP for `opsh runner`: each one received is
/// passed to `handle` on a thread of its own (never in the handler).
/// Build commands do not inherit the handlers (they reset at `exec`).
enum RunnerSignals {
    static func install(_ handle: @escaping @Sendable (Int32) -> Void) {
        var ends: [Int32] = [0, 0]
        pipe(&ends)
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        _ = fcntl(ends[1], F_SETFL, fcntl(ends[1], F_GETFL) | O_NONBLOCK)
        runnerSignalPipe = ends[1]
        let readEnd = ends[0]
        let signals = [SIGINT, SIGTERM, SIGHUP]
        // A parent may have started opsh with these blocked: unblock them.
        var mask = sigset_t()
        sigemptyset(&mask)
        for signal in signals { sigaddset(&mask, signal) }
        pthread_sigmask(SIG_UNBLOCK, &mask, nil)
        for signal in signals {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = forwardRunnerSignal
            sigemptyset(&action.sa_mask)
            action.sa_flags = SA_RESTART
            sigaction(signal, &action, nil)
        }
        let thread = Thread {
            var byte: UInt8 = 0
            while true {
                let count = read(readEnd, &byte, 1)
                if count < 0 && errno == EINTR { continue }
                if count <= 0 { return }
                handle(Int32(byte))
            }
        }
        thread.name = "opsh runner signals"
        thread.start()
    }
}
