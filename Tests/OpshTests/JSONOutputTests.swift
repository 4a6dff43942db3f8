import Foundation
import Testing

/// One rule for JSON everywhere (issue 13, item 10): `--json`, the shell's
/// `.mode json` and `json.encode` refuse bytes that are not UTF-8, NaN and
/// infinities with their place, and never change a byte silently.
@Suite struct JSONOutputTests {
    static let refused: [(code: String, message: String)] = [
        ("return '\\xff\\xfe'", "cannot encode a string that is not valid UTF-8 at $"),
        ("return db.value('SELECT x\\'00ff\\'')", "cannot encode a string that is not valid UTF-8 at $"),
        ("return { rows = db.query('SELECT 1 AS id, x\\'ff\\' AS payload') }", "cannot encode a string that is not valid UTF-8 at $.rows[1].payload"),
        ("return 1/0", "cannot encode inf at $"),
        ("return { a = { 0/0 } }", "cannot encode NaN at $.a[1]"),
        ("return -1/0", "cannot encode -inf at $"),
    ]

    @Test func batchJSONAndJsonEncodeRefuseTheSameValuesWithTheirPlace() throws {
        let sandbox = try Sandbox()
        for (code, message) in Self.refused {
            let batch = try sandbox.opsh(["--json", "-e", code])
            #expect(batch.status == 1, "\(code): \(batch.stderr)")
            #expect(batch.stderr.contains(message), "\(code): \(batch.stderr)")
            #expect(batch.stdout == "", "\(code) printed \(batch.stdout)")
            let encoded = try sandbox.opsh(["-e", "return json.encode((function() \(code) end)())"])
            #expect(encoded.status == 1, "\(code): \(encoded.stderr)")
            #expect(encoded.stderr.contains(message), "json.encode of \(code): \(encoded.stderr)")
        }
        // Control: what JSON can hold goes through, bytes unchanged.
        let fine = try sandbox.opsh(["--json", "-e", "return 5.0, 'é ok', { 1, 2.5 }, db.query('SELECT 1 AS a, NULL AS b')"])
        #expect(fine.status == 0, "\(fine.stderr)")
        #expect(fine.stdout == "5.0\n\"é ok\"\n[1,2.5]\n[{\"a\":1,\"b\":null}]\n")
        let same = try sandbox.opsh(["-e", "return json.encode(5.0), json.encode('é ok')"])
        #expect(same.stdout == "5.0\t\"é ok\"\n")
    }

    @Test func theShellsJSONModeFollowsTheSameRule() throws {
        let sandbox = try Sandbox()
        let terminal = try PseudoTerminal(arguments: ["--db", sandbox.database, "--create"], environment: sandbox.environment)
        terminal.expect("opsh> ")
        terminal.send(".mode json\r")
        terminal.expect("opsh> ")
        terminal.send("'\\xff'\r")
        terminal.expect("cannot encode a string that is not valid UTF-8 at $")
        terminal.send("{ n = 1/0 }\r")
        terminal.expect("cannot encode inf at $.n")
        terminal.send("{ 'ok' }\r")
        terminal.expect("[\"ok\"]")
        terminal.expect("opsh> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit(timeout: 15) == 0)
    }

    /// One writer (issue "One data path"): what `json.encode` writes is what
    /// `--json` prints, byte for byte, for rows (columns in the query's
    /// order, NULL as null, fields a script added after them) and nested
    /// tables; the screen differs only where it must: secrets masked, and a
    /// table mixing items and fields shown as an object instead of refused.
    @Test func jsonEncodeAndTheScreenWriteTheSameText() throws {
        let sandbox = try Sandbox()
        let value = """
            (function()
              local rows = db.query("SELECT 2 AS zeta, NULL AS alpha, 'x' AS mid UNION ALL SELECT 1, 'a', NULL")
              rows[1].added = true
              return { rows = rows, n = 1.5, list = { 1, 'two' }, empty = json.object() }
            end)()
            """
        let expected = #"{"empty":{},"list":[1,"two"],"n":1.5,"rows":[{"zeta":2,"alpha":null,"mid":"x","added":true},{"zeta":1,"alpha":"a","mid":null}]}"#
        let encoded = try sandbox.opsh(["-e", "return json.encode(\(value))"])
        #expect(encoded.status == 0, "\(encoded.stderr)")
        #expect(encoded.stdout == expected + "\n")
        let printed = try sandbox.opsh(["--json", "-e", "return \(value)"])
        #expect(printed.status == 0, "\(printed.stderr)")
        #expect(printed.stdout == expected + "\n")

        // Secrets: masked on the screen, kept whole by json.encode (it makes data).
        let secret = "{ api_key = 'sk-live-0123456789abcd' }"
        #expect(try sandbox.opsh(["--json", "-e", "return \(secret)"]).stdout == #"{"api_key":"••••abcd"}"# + "\n")
        #expect(try sandbox.opsh(["-e", "return json.encode(\(secret))"]).stdout == #"{"api_key":"sk-live-0123456789abcd"}"# + "\n")

        // A table mixing items and fields: shown as an object; json.encode refuses it with the reason.
        let mixed = "{ 'a', 'b', name = 'n' }"
        #expect(try sandbox.opsh(["--json", "-e", "return \(mixed)"]).stdout == #"{"1":"a","2":"b","name":"n"}"# + "\n")
        let refused = try sandbox.opsh(["-e", "return json.encode(\(mixed))"])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("cannot encode the table at $: it mixes array items (1…n) and named fields"), "\(refused.stderr)")
    }
}
