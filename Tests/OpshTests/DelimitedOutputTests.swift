import Foundation
import Testing

/// `--csv` and `--tsv` for `-e` and `run` (issue 26, "Import, dump,
/// restore"): the rows a chunk returns, every one, on stdout. One body,
/// both engines: either engine's rows come out alike.
@Suite struct DelimitedOutputTests {
    static let chunk = """
        return db.query("SELECT 1 AS id, 'a,b' AS name, 'say \\"hi\\"' AS quote, NULL AS missing, ? AS text, CAST(2.5 AS REAL) AS ratio, ? AS token",
                        "two\\nlines\\tand a tab \\\\ a backslash", "s3cr3t-value-1234")
        """

    @Test(arguments: Engine.allCases) func csvAndTsvOfTheReturnedRows(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let csv = try sandbox.opsh(["--csv", "-e", Self.chunk], on: database)
        #expect(csv.status == 0, "\(csv.stderr)")
        // A secret's value is masked as everywhere opsh prints it.
        #expect(csv.stdout == "id,name,quote,missing,text,ratio,token\n"
            + "1,\"a,b\",\"say \"\"hi\"\"\",,\"two\nlines\tand a tab \\ a backslash\",2.5,••••1234\n", "\(csv.stdout)")
        let tsv = try sandbox.opsh(["--tsv", "-e", Self.chunk], on: database)
        #expect(tsv.status == 0, "\(tsv.stderr)")
        #expect(tsv.stdout == "id\tname\tquote\tmissing\ttext\tratio\ttoken\n"
            + "1\ta,b\tsay \"hi\"\t\ttwo\\nlines\\tand a tab \\\\ a backslash\t2.5\t••••1234\n", "\(tsv.stdout)")
        // Control: without either, the same rows as a table.
        let table = try sandbox.opsh(["-e", Self.chunk], on: database)
        #expect(table.status == 0 && table.stdout.contains("| id |") && !table.stdout.contains("id,name"), "\(table.stdout)")
    }

    /// `opsh run --csv FILE` (options before the file, or before `run`):
    /// every row, not the shell's first 200.
    @Test(arguments: Engine.allCases) func runPrintsEveryRowAsCsv(_ engine: Engine) throws {
        let sandbox = try Sandbox()
        let database = try sandbox.createdDatabase(engine)
        let script = try sandbox.script("export.lua", """
            return db.query("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000) SELECT i AS id, i * 2 AS twice FROM n")
            """)
        let result = try sandbox.opsh(["run", "--csv", script], on: database)
        #expect(result.status == 0, "\(result.stderr)")
        let lines = result.stdout.split(separator: "\n")
        #expect(lines.count == 1001 && lines.first == "id,twice" && lines.last == "1000,2000", "\(lines.prefix(3)) … \(lines.suffix(2))")
    }

    @Test func oneOutputFormatAtATime() throws {
        let sandbox = try Sandbox()
        let result = try sandbox.opsh(["--csv", "--json", "-e", "return 1"], database: false)
        #expect(result.status == 2)
        #expect(result.stderr.contains("--json, --csv and --tsv each choose how values are printed: give one"), "\(result.stderr)")
    }
}
