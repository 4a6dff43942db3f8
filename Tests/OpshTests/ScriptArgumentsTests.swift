import Foundation
import Testing

/// A script gets all its arguments, however many, in `arg` and in `...`:
/// each was pushed onto Lua's stack without making room first, and past
/// about sixty of them `opsh run` wrote beyond the stack and crashed now
/// and then (found by the PostgreSQL guards' work, issue 24).
@Suite struct ScriptArgumentsTests {
    @Test func aScriptTakesManyArguments() throws {
        let sandbox = try Sandbox()
        let script = try sandbox.script("count.lua", "local n = select('#', ...) print(#arg, n, arg[500], (select(500, ...)))\n")
        let arguments = (1...500).map { "a\($0)" }
        for _ in 0..<3 {
            let run = try sandbox.opsh(["run", script] + arguments)
            #expect(run.status == 0, "\(run.stderr)")
            #expect(run.stdout == "500\t500\ta500\ta500\n", "\(run.stdout) \(run.stderr)")
        }
    }
}
