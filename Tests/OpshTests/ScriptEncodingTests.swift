import Foundation
import Testing

/// Script files as `lua5.4` reads them (issue 13, item 13): a UTF-8
/// byte-order mark and a `#!` line are skipped, line numbers stay right.
@Suite struct ScriptEncodingTests {
    static let bom = Data([0xEF, 0xBB, 0xBF])

    @Test func aByteOrderMarkAndAShebangAreSkipped() throws {
        let sandbox = try Sandbox()
        let path = sandbox.root + "/scripts/bom.lua"
        try (Self.bom + Data("#!/usr/bin/env opsh\nprint('ran')\nerror('on line 3')\n".utf8)).write(to: URL(fileURLWithPath: path))
        let result = try sandbox.opsh(["run", path])
        #expect(result.stdout == "ran\n")
        #expect(result.status == 1)
        #expect(result.stderr.contains("bom.lua:3: on line 3"), "\(result.stderr)")
        // From standard input too.
        let piped = try sandbox.opsh(["run", "-"], stdin: String(decoding: Self.bom + Data("return 'piped'\n".utf8), as: UTF8.self))
        #expect(piped.status == 0, "\(piped.stderr)")
        #expect(piped.stdout == "piped\n")
        // Control: the mark is what was skipped; the same text without it runs the same.
        try Data("print('ran')\n".utf8).write(to: URL(fileURLWithPath: path))
        #expect(try sandbox.opsh(["run", path]).stdout == "ran\n")
    }

    @Test func theShellReadsAFileWithAByteOrderMark() throws {
        let sandbox = try Sandbox()
        let path = sandbox.root + "/scripts/bom.lua"
        try (Self.bom + Data("print('read with a mark')\n".utf8)).write(to: URL(fileURLWithPath: path))
        let terminal = try PseudoTerminal(arguments: ["--db", sandbox.database, "--create"], environment: sandbox.environment)
        terminal.expect("opsh> ")
        terminal.send(".read \(path)\r")
        terminal.expect("read with a mark")
        terminal.expect("opsh> ")
        terminal.send("\u{4}")
        #expect(terminal.waitForExit(timeout: 15) == 0)
    }
}
