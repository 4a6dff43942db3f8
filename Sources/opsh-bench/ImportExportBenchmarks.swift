import Foundation

/// Issue 26: a CSV file into a table, and a table out as CSV, beside
/// sqlite3 doing the same on the same file and schema.
///
/// Import: opsh's `.import FILE TABLE` path (``CopyRequest/file(_:into:)``
/// then the session's copy: prepared INSERTs in one write) run as
/// `db.copy(table, FILE, { header = true, columns = … })`, the same
/// request; sqlite3's `.import --csv --skip 1`. Each into a fresh copy of a
/// database opsh made (the telemetry table with its indexes and JSON
/// check). Export: `opsh --csv -e 'return db.query(…)'` and `sqlite3 -csv`,
/// output to a file.
enum ImportExportBenchmarks {
    static let rows = 300_000
    static let rounds = 3

    static func run(directory: String, opsh: String) throws -> String {
        var lines = ["### Import and export of CSV beside sqlite3 (issue 26)", ""]
        guard let sqlite3 = StartupBenchmarks.which("sqlite3") else { return (lines + ["sqlite3 is not installed: not measured."]).joined(separator: "\n") }
        let csv = directory + "/events.csv"
        var text = "id,event,properties,session_id,created_at\n"
        text.reserveCapacity(rows * 48)
        for i in 1...rows { text += "\(i),ev\(i % 17),\"{\"\"n\"\": \(i)}\",s\(i % 100),\(1_795_000_000 + i).25\n" }
        try text.write(toFile: csv, atomically: true, encoding: .utf8)
        let template = directory + "/template.sqlite"
        _ = try StartupBenchmarks.time([opsh, "--db", template, "--create", "-e", "return 1"])

        var opshImport: [Double] = [], sqliteImport: [Double] = []
        var opshExport: [Double] = [], sqliteExport: [Double] = []
        let exported = directory + "/exported.sqlite"
        let csvFlag = (try? StartupBenchmarks.time([opsh, "--db", template, "--csv", "-e", "return 1"])) != nil
        for round in 0..<rounds {
            for side in ["opsh", "sqlite3"] {
                let database = directory + "/import-\(side)-\(round).sqlite"
                try FileManager.default.copyItem(atPath: template, toPath: database)
                if side == "opsh" {
                    opshImport.append(try StartupBenchmarks.time([opsh, "--db", database, "-e",
                        "return db.copy('telemetry', '\(csv)', { header = true, columns = { 'id', 'event', 'properties', 'session_id', 'created_at' } })"]))
                } else {
                    sqliteImport.append(try StartupBenchmarks.time([sqlite3, database, ".import --csv --skip 1 \(csv) telemetry"]))
                }
                try check(sqlite3, database)
                if round == 0, side == "opsh" { try FileManager.default.copyItem(atPath: database, toPath: exported) }
                for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: database + suffix) }
            }
            let query = "SELECT * FROM telemetry ORDER BY id"
            if csvFlag {
                opshExport.append(try StartupBenchmarks.time([opsh, "--db", exported, "--csv", "-e", "return db.query('\(query)')"], stdout: directory + "/opsh.csv"))
            }
            sqliteExport.append(try StartupBenchmarks.time([sqlite3, "-csv", "-header", exported, query], stdout: directory + "/sqlite3.csv"))
        }
        let opshIn = Distribution(opshImport).median, sqliteIn = Distribution(sqliteImport).median
        lines += [
            "\(rows.formatted()) rows of `telemetry` (id, event, JSON properties, session id, a real), \(String(format: "%.1f", Double(text.utf8.count) / 1e6)) MB of CSV; elapsed to exit, median of \(rounds) rounds taken round-robin; every import was checked (count and sum of ids). Ratio: sqlite3's time / opsh's, so 1× is sqlite3's speed.",
            "",
            "| operation | opsh | sqlite3 | ratio | target | |",
            "| --- | --- | --- | --- | --- | --- |",
            row("import (`.import FILE TABLE`: one write, all or none)", opshIn, sqliteIn),
        ]
        if csvFlag {
            lines.append(row("export (`opsh --csv -e` against `sqlite3 -csv`)", Distribution(opshExport).median, Distribution(sqliteExport).median))
        } else {
            lines.append("| export | not measured: this opsh has no `--csv` | \(milliseconds(Distribution(sqliteExport).median)) | | ≥ 0.5× | not met |")
        }
        return lines.joined(separator: "\n")
    }

    static func row(_ name: String, _ opsh: Double, _ sqlite: Double) -> String {
        let ratio = sqlite / opsh
        return "| \(name) | \(milliseconds(opsh)) | \(milliseconds(sqlite)) | \(String(format: "%.2f×", ratio)) | ≥ 0.5× | \(ratio >= 0.5 ? "met" : "not met") |"
    }

    static func milliseconds(_ seconds: Double) -> String { String(format: "%.0f ms", seconds * 1000) }

    /// The import landed whole: every row, every id.
    static func check(_ sqlite3: String, _ database: String) throws {
        let result = PostgresBenchmarks.shell([sqlite3, database, "SELECT count(*) || ' ' || sum(id) FROM telemetry"], directory: NSTemporaryDirectory())
        let expected = "\(rows) \(rows * (rows + 1) / 2)"
        guard result.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == expected else {
            throw NSError(domain: "opsh-bench", code: 1, userInfo: [NSLocalizedDescriptionKey: "import into \(database): \(result.stdout) \(result.stderr), expected \(expected)"])
        }
    }
}
