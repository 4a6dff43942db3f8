import LuaRuntime

/// Decides what the lines typed so far are, as `lua.c` does: an
/// expression (`1+1` runs as `return 1+1`; `=x` too), a statement, a
/// chunk that needs more lines, or a syntax error.
struct ChunkAssembler {
    enum Verdict {
        /// Run this code.
        case run(String)
        /// Read another line (continuation prompt).
        case incomplete
        case failed(LuaError)
    }

    let runtime: LuaRuntime
    let chunkName: String

    func assess(_ text: String) -> Verdict {
        var text = text
        if text.hasPrefix("=") { text = "return " + text.dropFirst() }
        let asExpression = "return " + text + ";"
        if case .compiled = runtime.compile(asExpression, chunkName: chunkName) {
            runtime.stack.pop()
            return .run(asExpression)
        }
        switch runtime.compile(text, chunkName: chunkName) {
        case .compiled:
            runtime.stack.pop()
            return .run(text)
        case .incomplete:
            return .incomplete
        case let .failed(error):
            return .failed(error)
        }
    }
}
