import Bindings
import Foundation
import LuaRuntime
import Store

/// The Lua issue's benchmarks: the SQL workload of `bench/sql-workload/`
/// from opsh's Lua next to its peers, and the cost of a Lua → Swift call.
enum LuaBenchmarks {
    static let rows = 200_000
    static let pointQueries = 20_000

    struct Timings {
        var insert: Double
        var scan: Double
        var point: Double
    }

    /// Runs every peer; a peer whose runtime is missing is reported so.
    static func sqlWorkload(directory: String, workloadFolder: String) throws -> String {
        var peers: [(String, Timings?, String)] = []
        peers.append(("opsh (Lua 5.4, db module)", try opsh(directory: directory, script: workloadFolder + "/opsh.lua"), ""))
        peers.append(peer("LuaDBI 0.7 (lua-dbi-sqlite3) on Lua 5.4", ["lua5.4", workloadFolder + "/luadbi.lua"], directory, "luadbi"))
        peers.append(peer("LuaSQL 2.6 (lua-sql-sqlite3) on Lua 5.4", ["lua5.4", workloadFolder + "/luasql.lua"], directory, "luasql"))
        peers.append(peer("CPython \(pythonVersion()) sqlite3", ["python3", workloadFolder + "/python.py"], directory, "python"))
        let compiled = directory + "/sql-workload-c"
        let compile = run(["cc", "-O2", "-o", compiled, workloadFolder + "/c.c", "-lsqlite3"])
        peers.append(compile == nil
            ? ("C, SQLite API (gcc -O2)", nil, "cc failed")
            : peer("C, SQLite API (gcc -O2)", [compiled], directory, "c"))

        let c = peers.last?.1
        var lines = [
            "Insert \(rows.formatted()) rows with parameters in one transaction, scan them summing a column, \(pointQueries.formatted()) point queries by primary key (`bench/sql-workload/`; CPU ms of each process; ratio = peer time / opsh time, so > 1 means opsh is faster).",
            "",
            "| runtime | insert | scan | point queries | insert ratio | scan ratio | point ratio |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        let opsh = peers[0].1!
        for (name, timings, note) in peers {
            guard let timings else {
                lines.append("| \(name) | — | — | — | \(note) | | |")
                continue
            }
            func ratio(_ peer: Double, _ mine: Double) -> String { String(format: "%.2f×", peer / mine) }
            lines.append("| \(name) | \(ms(timings.insert)) | \(ms(timings.scan)) | \(ms(timings.point)) | "
                + "\(ratio(timings.insert, opsh.insert)) | \(ratio(timings.scan, opsh.scan)) | \(ratio(timings.point, opsh.point)) |")
        }
        let luaAndPython = peers.dropFirst().dropLast().compactMap(\.1)
        let beatsAll = luaAndPython.allSatisfy { $0.insert > opsh.insert && $0.scan > opsh.scan && $0.point > opsh.point }
        lines.append("")
        lines.append("Target: opsh faster than every Lua and Python peer on all three — **\(beatsAll ? "met" : "not met")**."
            + (c.map { String(format: " opsh / C: insert %.2f×, scan %.2f×, point %.2f×.", opsh.insert / $0.insert, opsh.scan / $0.scan, opsh.point / $0.point) } ?? ""))
        return lines.joined(separator: "\n")
    }

    static func opsh(directory: String, script: String) throws -> Timings {
        let store = try Store.open(path: directory + "/sql-workload-opsh.sqlite")
        let session = try OpshSession(store: store)
        let values = try session.runtime.executeFile(script, arguments: [.integer(Int64(rows)), .integer(Int64(pointQueries))])
        guard let text = values.first?.stringValue, let timings = parse(text) else {
            throw LuaError(kind: .runtime, message: "opsh.lua returned \(values)")
        }
        return timings
    }

    static func peer(_ name: String, _ command: [String], _ directory: String, _ tag: String) -> (String, Timings?, String) {
        let file = directory + "/sql-workload-\(tag).sqlite"
        guard let output = run(command + [file, String(rows), String(pointQueries)]), let timings = parse(output) else {
            return (name, nil, "not installed or failed")
        }
        return (name, timings, "")
    }

    static func parse(_ text: String) -> Timings? {
        let fields = text.split(whereSeparator: { $0 == " " || $0 == "\n" }).compactMap { Double($0) }
        guard fields.count >= 4, fields[3] == expectedChecksum else { return nil }
        return Timings(insert: fields[0], scan: fields[1], point: fields[2])
    }

    /// Sum of qty over all rows plus over the point-queried rows: every
    /// peer must agree, or its figures do not count.
    static var expectedChecksum: Double {
        let sum = Double(rows) * Double(rows + 1) / 2
        let found = (1...pointQueries).reduce(0.0) { $0 + Double(($1 * 7919) % rows + 1) }
        return sum + found
    }

    static func pythonVersion() -> String {
        (run(["python3", "-c", "import platform; print(platform.python_version())"]) ?? "3").trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func ms(_ value: Double) -> String { String(format: "%.1f ms", value) }

    /// The cost of calling an empty Swift function from Lua, next to an
    /// empty Lua function and a C function of Lua's library.
    static func callCost() throws -> String {
        let lua = try LuaRuntime()
        lua.register("swiftNoop") { _ in 0 }
        let calls = 5_000_000
        func time(_ body: String) throws -> Double {
            let start = now()
            try lua.execute("local f = \(body) for i = 1, \(calls) do f() end")
            return (now() - start) / Double(calls)
        }
        let emptyLoop = try time("function() end")
        let swift = try time("swiftNoop")
        let c = try time("coroutine.running")
        return String(format: "Empty call from Lua, mean of %@ calls: Swift host function %.0f ns, Lua function %.0f ns, C function of Lua's library (`coroutine.running`) %.0f ns.",
                      calls.formatted(), swift * 1e9, emptyLoop * 1e9, c * 1e9)
    }

    /// Runs a command; its stdout, or nil when it cannot run or fails.
    static func run(_ command: [String]) -> String? {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = command
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        do { try process.run() } catch { return nil }
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return process.terminationStatus == 0 ? String(decoding: data, as: UTF8.self) : nil
    }
}
