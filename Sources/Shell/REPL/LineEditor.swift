@preconcurrency import CReadline
import Foundation

/// GNU readline through its callback interface: the shell's loop polls
/// stdin together with other descriptors (events, signals) and feeds
/// readline one character at a time, so it can print above the line being
/// typed (ARCHITECTURE.md, decision 2).
///
/// readline is one per process, so its C callbacks reach the one editor
/// through ``LineEditor/current``.
final class LineEditor {
    nonisolated(unsafe) static var current: LineEditor?
    nonisolated(unsafe) fileprivate static var candidates: [String] = []
    nonisolated(unsafe) fileprivate static var nextCandidate = 0

    /// Called with each line entered (nil: end of input, Ctrl-D).
    var onLine: (String?) -> Void = { _ in }
    /// Candidates replacing `word`, given the text before the cursor.
    var complete: (_ word: String, _ before: String) -> [String] = { _, _ in [] }

    private(set) var isShowing = false

    init() {
        rl_readline_name = UnsafePointer(strdup("opsh"))
        // opsh handles signals itself (SignalWatcher).
        rl_catch_signals = 0
        // A resize too (``WindowResizes``, then ``resize()``).
        rl_catch_sigwinch = 0
        let breaks = UnsafePointer(strdup(" \t\n\"'`@$><=;|&{(,[+-*/%^~#)}]"))
        rl_basic_word_break_characters = breaks
        rl_completer_word_break_characters = breaks
        rl_attempted_completion_function = attemptCompletion
        LineEditor.current = self
    }

    /// Shows `prompt` and starts reading a line.
    func show(prompt: String) {
        rl_callback_handler_install(prompt, lineHandler)
        isShowing = true
    }

    /// Stops reading (the terminal goes back to normal mode).
    func hide() {
        guard isShowing else { return }
        rl_callback_handler_remove()
        isShowing = false
    }

    /// Reads the characters waiting on stdin.
    func readInput() {
        rl_callback_read_char()
    }

    /// The window was resized: readline reads the new size and draws the
    /// line being typed again for it.
    func resize() {
        if isShowing {
            rl_resize_terminal()
        } else {
            rl_reset_screen_size()
        }
    }

    /// Ctrl-C at the prompt: drop the line being typed.
    func discardLine() {
        rl_callback_sigcleanup()
        rl_free_line_state()
        hide()
        Terminal.write("\n", to: 1)
    }

    /// Prints what `body` prints above the line being typed, then draws the
    /// prompt and the line again.
    func printAbove(_ body: () -> Void) {
        guard isShowing else {
            body()
            return
        }
        rl_clear_visible_line()
        fflush(nil)
        body()
        fflush(nil)
        rl_on_new_line()
        rl_redisplay()
    }

    fileprivate func receive(_ line: UnsafeMutablePointer<CChar>?) {
        hide()
        let text = line.map { String(cString: $0) }
        free(line)
        onLine(text)
    }
}

private let lineHandler: @convention(c) (UnsafeMutablePointer<CChar>?) -> Void = { line in
    LineEditor.current?.receive(line)
}

private let attemptCompletion: @convention(c) (UnsafePointer<CChar>?, Int32, Int32)
    -> UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = { text, _, end in
    rl_attempted_completion_over = 1
    rl_completion_append_character = 0
    guard let editor = LineEditor.current, let text, let buffer = rl_line_buffer else { return nil }
    let before = buffer.withMemoryRebound(to: UInt8.self, capacity: Int(end)) {
        String(decoding: UnsafeBufferPointer(start: $0, count: Int(end)), as: UTF8.self)
    }
    LineEditor.candidates = editor.complete(String(cString: text), before)
    LineEditor.nextCandidate = 0
    guard !LineEditor.candidates.isEmpty else { return nil }
    return rl_completion_matches(text, completionGenerator)
}

private let completionGenerator: @convention(c) (UnsafePointer<CChar>?, Int32) -> UnsafeMutablePointer<CChar>? = { _, state in
    if state == 0 { LineEditor.nextCandidate = 0 }
    guard LineEditor.nextCandidate < LineEditor.candidates.count else { return nil }
    defer { LineEditor.nextCandidate += 1 }
    return strdup(LineEditor.candidates[LineEditor.nextCandidate])
}
