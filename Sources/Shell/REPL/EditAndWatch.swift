import Foundation
import LuaRuntime

/// psql's `\e` and `\watch` (issue 26): the last chunk in the operator's
/// editor, run when saved; the last chunk again every few seconds, drawn
/// over the screen, until Ctrl-C. Both run the chunk as if typed: the
/// same transaction, question, undo and audit.
extension REPL {
    /// `\e`: the last chunk in `$VISUAL` or `$EDITOR` (else `vi`), in a
    /// file opsh makes and removes; run when the editor saved a change.
    func editLastChunk() -> Bool {
        let directory = NSTemporaryDirectory() + "opsh-edit-XXXXXX"
        var template = Array(directory.utf8CString)
        guard mkdtemp(&template) != nil else {
            console.error("cannot make a file to edit in: \(String(cString: strerror(errno)))")
            return true
        }
        let folder = String(cString: template)
        let path = folder + "/chunk.lua"
        defer {
            unlink(path)
            rmdir(folder)
        }
        let original = lastChunk ?? ""
        let made = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard made >= 0 else {
            console.error("cannot write \(path): \(String(cString: strerror(errno)))")
            return true
        }
        let bytes = Array((original.isEmpty ? "" : original + "\n").utf8)
        _ = bytes.withUnsafeBytes { write(made, $0.baseAddress, $0.count) }
        close(made)

        let environment = ProcessInfo.processInfo.environment
        let editor = [environment["VISUAL"], environment["EDITOR"]].compactMap { $0 }.first { !$0.isEmpty } ?? "vi"
        // As psql runs it: the editor's words through the shell, the file
        // as its last argument (passed as "$1", never spliced into the text).
        let status = Self.runInTerminal("/bin/sh", ["sh", "-c", "exec \(editor) \"$1\"", "sh", path])
        guard status == 0 else {
            console.error("the editor (\(editor)) ended with status \(status); nothing was run")
            return true
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            console.error("cannot read \(path) back; nothing was run")
            return true
        }
        let edited = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        if edited.isEmpty || edited == original.trimmingCharacters(in: .whitespacesAndNewlines) {
            console.note("unchanged: nothing was run")
            return true
        }
        print(edited)
        return runAsTyped(edited)
    }

    /// `\watch [SECONDS]`: the last chunk again every SECONDS (default 2),
    /// the screen cleared before each, until Ctrl-C or an error.
    func watchLastChunk(_ argument: String?) -> Bool {
        guard let chunk = lastChunk else {
            console.error("\\watch runs the last chunk again: type one first")
            return true
        }
        let seconds = argument.map { Double($0) } ?? 2
        guard let seconds, seconds >= 0.1, seconds.isFinite else {
            console.error("usage: \\watch [SECONDS] (0.1 or more)")
            return true
        }
        // Ctrl-C stops it wherever it lands: in the chunk (which it may
        // interrupt, or which may end first) or in the wait.
        signalWatcher?.reset()
        while true {
            // Drawn in place: home, clear, then what watch(1) shows on top.
            Terminal.write("\u{1B}[H\u{1B}[2J", to: 1)
            let time = ISO8601DateFormatter.string(from: Date(), timeZone: TimeZone(identifier: "UTC")!,
                                                   formatOptions: [.withInternetDateTime])
            print("Every \(seconds) s: \(ChunkTransactions.excerpt(chunk))   \(time)   (Ctrl-C stops)\n")
            lastChunkFailed = false
            let goOn = runAsTyped(chunk)
            if !goOn || lastChunkFailed { return goOn }
            if signalWatcher?.received ?? 0 != 0 {
                takeIdleInterrupt()
                return true
            }
            // Wait for the next round, or Ctrl-C (a signal while no chunk
            // runs arrives on the REPL's pipe).
            var descriptor = pollfd(fd: idleSignalsRead, events: Int16(POLLIN), revents: 0)
            let deadline = Date().addingTimeInterval(seconds)
            while deadline.timeIntervalSinceNow > 0 {
                let ready = poll(&descriptor, 1, Int32(max(1, min(0.1, deadline.timeIntervalSinceNow) * 1000)))
                if ready > 0 {
                    var byte: UInt8 = 0
                    _ = read(idleSignalsRead, &byte, 1)
                    if Int32(byte) != SIGINT { _ = withUnsafeBytes(of: &byte) { write(idleSignalsWrite, $0.baseAddress, 1) } }
                    return true
                }
                if signalWatcher?.received ?? 0 != 0 {
                    takeIdleInterrupt()
                    return true
                }
            }
        }
    }

    /// Takes the Ctrl-C that stopped the watch off the REPL's pipe, if it
    /// went there (it found no Lua running): it was the watch's, not the
    /// prompt's. Another signal stays for the REPL.
    private func takeIdleInterrupt() {
        var descriptor = pollfd(fd: idleSignalsRead, events: Int16(POLLIN), revents: 0)
        guard poll(&descriptor, 1, 0) > 0 else { return }
        var byte: UInt8 = 0
        _ = read(idleSignalsRead, &byte, 1)
        if Int32(byte) != SIGINT { _ = withUnsafeBytes(of: &byte) { write(idleSignalsWrite, $0.baseAddress, 1) } }
    }

    /// Runs `program` with the terminal (the editor), waiting for it.
    static func runInTerminal(_ program: String, _ arguments: [String]) -> Int32 {
        var child: pid_t = 0
        let argv = arguments.map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        guard posix_spawn(&child, program, nil, nil, argv, environ) == 0 else { return 127 }
        var status: Int32 = 0
        while waitpid(child, &status, 0) < 0, errno == EINTR {}
        return (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    }
}
