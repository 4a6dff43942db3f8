import Foundation
import LuaRuntime
import Store

/// Runs a chunk of Lua and prints what it returns (the shell's `> 1+1`,
/// `opsh -e`, `.read`, a script's return values).
public struct ChunkRunner {
    public let runtime: LuaRuntime
    public var printer: ValuePrinter
    /// Where returned values go instead of stdout (the shell's `.output
    /// FILE`); what the chunk itself prints still goes to stdout.
    public var resultsFile: AtomicFile.Writer?
    /// Pages returned values taller than the screen once the chunk has
    /// ended (the shell's; nil: never, as in batch runs).
    public var pager: Pager?

    public init(runtime: LuaRuntime, printer: ValuePrinter) {
        self.runtime = runtime
        self.printer = printer
    }

    /// Runs `code` with `arguments` as `...` and prints the values it
    /// returns on stdout (or to ``resultsFile``).
    ///
    /// - returns: the status the chunk gave `os.exit`, or nil when it
    ///   returned: either way it ended as the script meant, and the caller
    ///   ends the run the same way (commit by the mode's rule, summary,
    ///   audit row), then exits with that status.
    /// - throws: `LuaError` from the chunk, ``PrintError`` when a value
    ///   cannot be printed in the chosen mode.
    @discardableResult
    public func run(_ code: String, chunkName: String, arguments: [LuaValue] = [], printResults: Bool = true,
                    environment: LuaReference? = nil) throws -> Int32? {
        try exitStatus {
            try runPrinting(code, chunkName: chunkName, arguments: arguments, printResults: printResults, environment: environment)
        }
    }

    /// Runs a chunk the shell compiled and kept (``ChunkAssembler``), as
    /// ``run(_:chunkName:arguments:printResults:environment:)`` runs code.
    public func run(_ function: LuaReference, environment: LuaReference? = nil) throws -> Int32? {
        try exitStatus { try runShowingResults(function, environment: environment) }
    }

    /// Runs `body`; the status a chunk gave `os.exit` (which ends it as a
    /// `LuaError` carrying it), or nil when it returned.
    private func exitStatus(_ body: () throws -> Bool) throws -> Int32? {
        do {
            _ = try body()
            return nil
        } catch let error as LuaError {
            guard let status = error.exitStatus else { throw error }
            fflush(nil)
            return status
        }
    }

    /// Runs `code` as ``run(_:chunkName:arguments:printResults:)`` does
    /// and says whether it returned anything to show (SQL at the prompt
    /// says "no rows changed" otherwise).
    public func runShowingResults(_ code: String, chunkName: String, arguments: [LuaValue]) throws -> Bool {
        try runPrinting(code, chunkName: chunkName, arguments: arguments, printResults: true)
    }

    /// Runs a compiled chunk as ``run(_:environment:)`` does and says
    /// whether it returned anything to show (a `db.exec` typed at the
    /// prompt says what it did otherwise: `WriteAtThePrompt`).
    public func runShowingResults(_ function: LuaReference, environment: LuaReference? = nil) throws -> Bool {
        let printer = self.printer
        let text = try runtime.run(compiled: function, environment: environment) { stack, first, count in
            try printer.render(stack.state, first: first, count: count)
        }
        try show(text)
        return text != nil
    }

    @discardableResult
    private func runPrinting(_ code: String, chunkName: String, arguments: [LuaValue], printResults: Bool,
                             environment: LuaReference? = nil) throws -> Bool {
        let printer = self.printer
        let text = try runtime.execute(code, chunkName: chunkName, arguments: arguments, environment: environment) { stack, first, count in
            printResults ? try printer.render(stack.state, first: first, count: count) : nil
        }
        try show(text)
        return text != nil
    }

    /// Writes what a chunk returned, rendered: to the results file
    /// (`.output`), the pager, or the terminal.
    private func show(_ text: String?) throws {
        if let text {
            if let resultsFile {
                fflush(nil)
                try resultsFile.write(Data((text + "\n").utf8))
            } else if let pager, pager.keeps(text) {
                // Shown by the pager once the chunk has ended.
            } else {
                try Self.printInterruptibly(text)
            }
        }
        fflush(nil)
    }

    /// Writes `text` to stdout in blocks, stopping at Ctrl-C: a terminal
    /// takes long to show a million lines. A write that fails (a full
    /// disk under `> out.json`) throws: the run must not say it succeeded.
    static func printInterruptibly(_ text: String) throws {
        fflush(nil)
        let bytes = Array((text + "\n").utf8)
        var offset = 0
        while offset < bytes.count {
            if PrintCancellation.isRequested {
                let note = "\n(printing stopped by Ctrl-C)\n"
                _ = note.withCString { write(1, $0, strlen($0)) }
                return
            }
            let end = min(offset + 65536, bytes.count)
            let written = bytes[offset..<end].withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno == EINTR { continue }
                throw StandardOutputFailure(reason: String(cString: strerror(errno)))
            }
            offset += written
        }
    }

    /// Runs the file at `path` (a `#!` line is skipped, as `lua` does).
    @discardableResult
    public func runFile(_ path: String, arguments: [LuaValue] = [], printResults: Bool = true) throws -> Int32? {
        let code = try Self.readScript(path)
        return try run(code, chunkName: "@\(path)", arguments: arguments, printResults: printResults)
    }

    /// The text of a script file, with a first `#` line turned into a
    /// comment so line numbers stay right.
    public static func readScript(_ path: String) throws -> String {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw ScriptFileError(path: path, reason: String(cString: strerror(errno)))
        }
        defer { close(descriptor) }
        var data = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = read(descriptor, &buffer, buffer.count)
            if count < 0 {
                if errno == EINTR { continue }
                throw ScriptFileError(path: path, reason: String(cString: strerror(errno)))
            }
            if count == 0 { break }
            data.append(contentsOf: buffer[..<count])
        }
        return LuaRuntime.scriptText(data)
    }

    /// Reads a script from standard input.
    public static func readStandardInput() -> String {
        LuaRuntime.scriptText(FileHandle.standardInput.readDataToEndOfFile())
    }
}

/// A script file that cannot be read.
public struct ScriptFileError: Error, CustomStringConvertible {
    public let path: String
    public let reason: String
    public var description: String { "cannot read \(path): \(reason)" }
}

/// Standard output could not be written (a full disk, an I/O error): what
/// the run returned did not all arrive.
public struct StandardOutputFailure: Error, CustomStringConvertible {
    public let reason: String
    public var description: String { "cannot write the results to standard output: \(reason)" }
}
