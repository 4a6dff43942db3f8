import Foundation
import LuaRuntime

/// The signal handler's only job: write the signal number to a pipe
/// (async-signal-safe). Handlers reset to the default at `exec`, so
/// programs a script starts still die of Ctrl-C.
nonisolated(unsafe) private var signalPipeWrite: Int32 = -1

private let forwardSignal: @convention(c) (Int32) -> Void = { signal in
    var byte = UInt8(truncatingIfNeeded: signal)
    let saved = errno
    _ = write(signalPipeWrite, &byte, 1)
    errno = saved
}

/// SIGINT, SIGTERM and SIGHUP for opsh: a thread reads the signal pipe and
/// interrupts the running chunk (`LuaRuntime.interrupt`). A signal that
/// finds no chunk running goes to `idle` (the shell clears its line; a
/// batch run exits at once).
public final class SignalWatcher: @unchecked Sendable {
    public let runtime: LuaRuntime
    private let idle: @Sendable (Int32) -> Void
    /// The last signal received (0: none).
    private let lastSignal = Mutex32()

    public init(runtime: LuaRuntime, idle: @escaping @Sendable (Int32) -> Void) {
        self.runtime = runtime
        self.idle = idle
        var ends: [Int32] = [0, 0]
        pipe(&ends)
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        _ = fcntl(ends[1], F_SETFL, fcntl(ends[1], F_GETFL) | O_NONBLOCK)
        signalPipeWrite = ends[1]
        let readEnd = ends[0]
        // A parent may have started opsh with these blocked (a thread
        // pool's mask is inherited through posix_spawn): unblock them.
        var mask = sigset_t()
        sigemptyset(&mask)
        for signal in [SIGINT, SIGTERM, SIGHUP] { sigaddset(&mask, signal) }
        pthread_sigmask(SIG_UNBLOCK, &mask, nil)
        for signal in [SIGINT, SIGTERM, SIGHUP] {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = forwardSignal
            sigemptyset(&action.sa_mask)
            action.sa_flags = SA_RESTART
            sigaction(signal, &action, nil)
        }
        // A plain POSIX thread: Foundation's `Thread` set up more than this
        // loop needs at every start (ARCHITECTURE.md, "Start-up"). It keeps
        // the watcher for the life of the process, as it reads forever.
        let context = Unmanaged.passRetained(SignalReader(watcher: self, readEnd: readEnd)).toOpaque()
        var thread = pthread_t()
        if pthread_create(&thread, nil, { context in
            let reader = Unmanaged<SignalReader>.fromOpaque(context!).takeRetainedValue()
            reader.run()
            return nil
        }, context) == 0 {
            pthread_detach(thread)
        } else {
            Unmanaged<SignalReader>.fromOpaque(context).release()
        }
    }

    /// The watcher's thread: reads the signal pipe until it closes.
    private final class SignalReader {
        let watcher: SignalWatcher
        let readEnd: Int32

        init(watcher: SignalWatcher, readEnd: Int32) {
            self.watcher = watcher
            self.readEnd = readEnd
        }

        func run() {
            var byte: UInt8 = 0
            while true {
                let count = read(readEnd, &byte, 1)
                if count < 0 && errno == EINTR { continue }
                if count <= 0 { return }
                watcher.handle(Int32(byte))
            }
        }
    }

    /// The signal that stopped the last chunk, if any.
    public var received: Int32 { lastSignal.value }

    public func reset() { lastSignal.value = 0 }

    private func handle(_ signal: Int32) {
        lastSignal.value = signal
        let reason: LuaInterruptReason = signal == SIGINT ? .interrupted : .terminated
        if signal == SIGINT { PrintCancellation.request() }
        if !runtime.interrupt(reason) { idle(signal) }
    }

    /// 128 + the signal number, as shells report a process killed by it.
    public static func exitCode(for reason: LuaInterruptReason, signal: Int32) -> Int32 {
        switch reason {
        case .timeout: return 124
        case .interrupted: return 130
        case .terminated: return signal == SIGHUP ? 129 : 143
        case .exit: return 0
        }
    }
}

/// An Int32 shared between threads.
final class Mutex32: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Int32 = 0
    var value: Int32 {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}
