import Foundation
import Testing

/// `--memory-limit` holds for what bindings push too (issue 13, item 5):
/// a BLOB or rows returned by `db.*` count, and SQLite itself refuses a
/// value longer than the limit, so the process's peak stays near it.
@Suite struct MemoryLimitTests {
    /// Runs `body` and prints the process's peak resident size (VmHWM, KiB)
    /// after it, whether or not it failed.
    static func measured(_ body: String) -> String {
        """
        local ok, err = pcall(function() \(body) end)
        local status = io.open('/proc/self/status'):read('a')
        print(ok, tostring(err):match('not enough memory[^\\n]*') or tostring(err):match('string or blob too big') or err,
              tonumber(status:match('VmHWM:%s*(%d+)')))
        """
    }

    func peak(_ sandbox: Sandbox, _ arguments: [String]) throws -> (ok: Bool, message: String, kib: Int) {
        let result = try sandbox.opsh(arguments)
        #expect(result.status == 0, "\(result.stderr)")
        let fields = result.stdout.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "\t").map(String.init)
        return (fields.first == "true", fields.dropFirst().first ?? "", Int(fields.last ?? "") ?? -1)
    }

    @Test func valuesThatBindingsPushCountAgainstTheLimit() throws {
        let sandbox = try Sandbox()
        let baseline = try peak(sandbox, ["-e", Self.measured("return 1")])
        // Eight 3 MB BLOBs held at once: 24 MB, past a 10 MiB limit.
        let held = "local t = {0,0,0,0,0,0,0,0} for i = 1, 8 do t[i] = db.value('SELECT randomblob(3000000)') end"
        let limited = try peak(sandbox, ["--memory-limit", "10", "-e", Self.measured(held)])
        #expect(!limited.ok)
        #expect(limited.message.contains("not enough memory (the memory limit is 10485760 bytes)"), "\(limited.message)")
        // Rows count too.
        let rows = "local t = {} for i = 1, 100 do t[i] = db.query('WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000) SELECT randomblob(1000) AS b FROM c') end"
        let manyRows = try peak(sandbox, ["--memory-limit", "10", "-e", Self.measured(rows)])
        #expect(!manyRows.ok)
        #expect(manyRows.message.contains("not enough memory"), "\(manyRows.message)")
        // One value longer than the limit is refused by SQLite before it is made.
        let huge = try peak(sandbox, ["--memory-limit", "10", "-e", Self.measured("return db.value('SELECT randomblob(100000000)')")])
        #expect(!huge.ok)
        #expect(huge.message.contains("string or blob too big"), "\(huge.message)")
        // The peak stays within the limit and one value being fetched
        // (README: at most twice the limit) above opsh's own size.
        for run in [limited, manyRows, huge] {
            #expect(run.kib - baseline.kib < 2 * 10 * 1024 + 4096, "peak \(run.kib) KiB, baseline \(baseline.kib) KiB")
        }
        // Control: without the limit the same script holds its 24 MB.
        let free = try peak(sandbox, ["-e", Self.measured(held)])
        #expect(free.ok)
        #expect(free.kib - baseline.kib > 20 * 1024, "peak \(free.kib) KiB, baseline \(baseline.kib) KiB")
    }
}
