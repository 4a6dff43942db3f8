import Foundation

/// The write end of the resize pipe, for the signal handler (which may only
/// call async-signal-safe functions such as `write`).
nonisolated(unsafe) private var resizePipeWrite: Int32 = -1

private let noteResize: @convention(c) (Int32) -> Void = { _ in
    var byte: UInt8 = 1
    let saved = errno
    _ = write(resizePipeWrite, &byte, 1)
    errno = saved
}

/// SIGWINCH as a readable descriptor: the terminal was resized. The shell's
/// loop polls it beside stdin and tells readline the new size at once, so
/// the line being typed wraps at the window's new edge (readline's own
/// handler is installed only while it reads a character, and a resize
/// usually comes while the shell waits). Tables need nothing from here:
/// they read the width when they are printed (`Terminal.width`).
final class WindowResizes {
    /// Readable when the window was resized since the last ``drain()``.
    let descriptor: Int32

    init() {
        var ends: [Int32] = [0, 0]
        pipe(&ends)
        for end in ends {
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
            _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK)
        }
        descriptor = ends[0]
        resizePipeWrite = ends[1]
        var action = sigaction()
        action.__sigaction_handler.sa_handler = noteResize
        sigemptyset(&action.sa_mask)
        action.sa_flags = SA_RESTART
        sigaction(SIGWINCH, &action, nil)
    }

    /// Reads what the handler wrote; returns whether there was a resize.
    @discardableResult
    func drain() -> Bool {
        var buffer = [UInt8](repeating: 0, count: 64)
        var resized = false
        while read(descriptor, &buffer, buffer.count) > 0 { resized = true }
        return resized
    }
}
