import Foundation
import Testing

/// `--timeout` and `--memory-limit` hold under `--sandbox`: a script that
/// loops or allocates without end is stopped with the documented exit code
/// (124 for the time limit, 1 with "not enough memory" for memory), and
/// neither `pcall` nor a coroutine gets it out of that.
@Suite struct SandboxLimitTests {
    /// Endless loops, each with its own way of trying to survive.
    static let endless: [(String, String)] = [
        ("a plain loop", "while true do end"),
        ("pcall around the loop, in a loop", "while true do pcall(function() while true do end end) end"),
        ("error handler that restarts", "local function f() while true do end end while true do xpcall(f, function() return f() end) end"),
        ("a loop inside a coroutine.wrap", "coroutine.wrap(function() while true do end end)()"),
        ("a loop inside coroutine.resume, resumed again", "local co = coroutine.create(function() while true do pcall(function() while true do end end) end end) while true do coroutine.resume(co) end"),
        ("nested coroutines", "coroutine.wrap(function() coroutine.wrap(function() while true do end end)() end)()"),
        ("string work in a loop", "local s = '' while true do s = string.rep('x', 1000):gsub('x', 'y') end"),
        ("a loop in a __gc", "setmetatable({}, { __gc = function() while true do end end }) collectgarbage() while true do end"),
    ]

    @Test func theTimeLimitStopsEveryEndlessLoop() throws {
        let scratch = try Scratch()
        // All at once (the suite's time); a watchdog outside opsh ends each
        // after 15 s if the limit fails.
        let start = Date()
        let children = try Self.endless.map { _, code in
            try scratch.spawn("/usr/bin/timeout", ["-s", "KILL", "15", opshExecutable] + scratch.withDatabase(["--sandbox", "--timeout", "1", "-e", code]))
        }
        var stopped = 0, byInterrupt = 0
        for ((name, _), child) in zip(Self.endless, children) {
            let result = scratch.finish(child)
            let seconds = Date().timeIntervalSince(start)
            #expect(result.status == 124 && result.stderr.contains("timed out"), "\(name): exit \(result.status) after \(seconds) s: \(result.stderr)")
            if result.status == 124 { stopped += 1 }
            // The interrupt says "timed out; any open transaction was rolled
            // back"; the backstop (Lua ran no hook) "timed out after 1.0 s".
            if result.stderr.contains("rolled back") { byInterrupt += 1 }
        }
        reportFigure("sandbox + --timeout 1: \(stopped)/\(Self.endless.count) endless loops stopped with exit 124 (pcall, xpcall, coroutines, __gc): \(byInterrupt) by the interrupt, \(stopped - byInterrupt) by the 3 s backstop")
    }

    @Test func theMemoryLimitHoldsAndPcallCannotGetPastIt() throws {
        let scratch = try Scratch()
        let grow = "local function grow() local t = {} while true do t[#t + 1] = string.rep('x', 1024) .. #t end end "

        // Growing without end: stopped with the limit named.
        let plain = try scratch.opsh(["--sandbox", "--memory-limit", "16", "-e", grow + "grow()"])
        #expect(plain.status == 1 && plain.stderr.contains("not enough memory (the memory limit is 16777216 bytes)"), "exit \(plain.status): \(plain.stderr)")

        // In a coroutine: the same.
        let coroutine = try scratch.opsh(["--sandbox", "--memory-limit", "16", "-e", grow + "coroutine.wrap(grow)()"])
        #expect(coroutine.status == 1 && coroutine.stderr.contains("not enough memory"), "exit \(coroutine.status): \(coroutine.stderr)")

        // pcall catches the error (Lua's rule), but the allocation failed: the
        // heap never passed the limit, however often the script retries; the
        // time limit then ends it. (A fixed number of retries, each printed,
        // then a loop: on a busy machine a count of retries within the time
        // limit said more about the machine than about the limit.)
        let retry = try scratch.run("/usr/bin/timeout", ["-s", "KILL", "30", opshExecutable] + scratch.withDatabase(["--sandbox", "--memory-limit", "16", "--timeout", "5", "-e", grow + """
            local worst = 0
            for i = 1, 3 do
              local ok, e = pcall(grow)
              assert(not ok and tostring(e):find("not enough memory"), tostring(e))
              worst = math.max(worst, collectgarbage("count"))
              assert(worst <= 16 * 1024, "heap " .. worst .. " KiB past the limit")
              print(i, worst)
            end
            while true do end
            """]))
        #expect(retry.status == 124, "exit \(retry.status): \(retry.stderr)")
        let lines = retry.stdout.split(separator: "\n")
        let retries = lines.last.flatMap { Int($0.split(separator: "\t").first ?? "") } ?? 0
        let worstKiB = lines.last.flatMap { Double($0.split(separator: "\t").last ?? "") } ?? 0
        #expect(retries == 3, "\(retry.stdout)")
        reportFigure("sandbox + --memory-limit 16: endless growth stopped with exit \(plain.status) naming the limit (also in a coroutine: exit \(coroutine.status)); \(retries) growths caught by pcall, heap at most \(Int(worstKiB)) KiB of 16,384, then --timeout: exit \(retry.status)")
    }
}
