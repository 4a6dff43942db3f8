import Foundation
import LuaRuntime
import Store
import TextCodec

/// Export and import of an aggregate as JSON: `export.project`,
/// `export.model` and the global `import`.
///
/// ```lua
/// local text, counts = export.project("com.example.app")        -- counts.builds, counts.buildLogs …
/// export.project("com.example.app", { logs = false, file = "/tmp/app.json" })
/// export.model("m1", { file = "/tmp/m1.json" })
/// import(text)                                  --> { projects = 1, schemes = 2, builds = 7, buildLogs = 300, crashLogs = 1 }
/// import{ file = "/tmp/app.json", replace = true }
/// ```
///
/// The document (``Transfer``) holds every column of every row as stored.
/// `import` checks the whole document before it writes, then writes in one
/// transaction (a savepoint inside `db.transaction`): every row or none.
/// Rows whose key exists are refused unless `replace = true`. A malformed
/// document is a bad argument: `bad argument #1 to 'import' (tables.builds[2]:
/// schemeId "s9" is not a row of schemes in the document)`.
enum TransferModule {
    static func install(in session: OpshSession) {
        install(engine: SessionTransfer(database: session.database), runtime: session.runtime,
                files: FileEffects(database: session.database), sandbox: session.options.sandbox)
    }

    /// The Lua functions, written once over the session's engine.
    static func install(engine: some TransferEngine, runtime: LuaRuntime, files: FileEffects, sandbox: Bool) {
        runtime.register(module: "export", [
            "project": { call in
                let id = try call.string(1)
                let options = try exportOptions(call, known: ["file", "logs", "overwrite"], sandbox: sandbox)
                var logs = true
                switch options.fields["logs"] ?? .nil {
                case .nil: break
                case let .boolean(flag): logs = flag
                case let value: throw call.argumentError(2, "logs: boolean expected, got \(value.typeName)")
                }
                let (text, summary) = try engine.exportProject(id, options: .init(logs: logs))
                return try exportResults(call, text: text, summary: summary, file: options.file,
                                         overwrite: options.fields["overwrite"], files: files)
            },
            "model": { call in
                let id = try call.string(1)
                let options = try exportOptions(call, known: ["file", "overwrite"], sandbox: sandbox)
                let (text, summary) = try engine.exportModel(id)
                return try exportResults(call, text: text, summary: summary, file: options.file,
                                         overwrite: options.fields["overwrite"], files: files)
            },
        ])
        runtime.register("import") { call in
            var text: String
            var optionIndex: Int32 = 2
            var options: [String: LuaValue] = [:]
            switch call.type(1) {
            case .string:
                text = try call.string(1)
            case .table:
                // import{ file = path, replace = … }
                options = try call.table(1)
                optionIndex = 1
                guard case let .string(path)? = options["file"] else {
                    throw call.argumentError(1, "file: a path expected, got \(options["file"]?.typeName ?? "nil")")
                }
                if sandbox { throw call.argumentError(1, "file: no files in the sandbox") }
                let expanded = (path as NSString).expandingTildeInPath
                guard let data = FileManager.default.contents(atPath: expanded) else {
                    throw LuaCallError.message("import: cannot read \(expanded)")
                }
                // Decoded as it is: bytes that are not UTF-8 would become other text.
                guard let decoded = String(validating: data, as: UTF8.self) else {
                    let invalid = TextBytes.firstInvalidUTF8(data).map { " (\($0))" } ?? ""
                    throw LuaCallError.message("import: \(expanded) is not UTF-8 text\(invalid); an export document is")
                }
                text = decoded
            default:
                throw call.typeError(1, expected: "string")
            }
            if optionIndex == 2, !call.isNoneOrNil(2) { options = try call.table(2) }
            let known = optionIndex == 1 ? ["file", "replace"] : ["replace"]
            for name in options.keys.sorted() where !known.contains(name) {
                throw call.argumentError(optionIndex, "unknown option '\(name)' (options: \(known.joined(separator: ", ")))")
            }
            var replace = false
            switch options["replace"] ?? .nil {
            case .nil: break
            case let .boolean(flag): replace = flag
            case let value: throw call.argumentError(optionIndex, "replace: boolean expected, got \(value.typeName)")
            }
            let summary: Transfer.Summary
            do {
                summary = try engine.importDocument(text, options: .init(replace: replace))
            } catch let TransferError.document(message) {
                throw call.argumentError(1, message)
            } catch let error as TransferError {
                // "import refused: 3 row(s) already exist (…)"
                throw LuaCallError.message(error.description)
            }
            return call.results(counts(summary, \.rows), counts(summary, \.replaced))
        }
    }

    static func counts(_ summary: Transfer.Summary, _ value: KeyPath<Transfer.Summary.Table, Int>) -> LuaValue {
        var table: [LuaValue: LuaValue] = [:]
        for entry in summary.tables { table[.string(entry.name)] = .integer(Int64(entry[keyPath: value])) }
        return .table(table)
    }

    static func exportOptions(_ call: LuaCall, known: [String], sandbox: Bool) throws -> (fields: [String: LuaValue], file: String?) {
        let options = call.isNoneOrNil(2) ? [:] : try call.table(2)
        for name in options.keys.sorted() where !known.contains(name) {
            throw call.argumentError(2, "unknown option '\(name)' (options: \(known.joined(separator: ", ")))")
        }
        switch options["file"] ?? .nil {
        case .nil: return (options, nil)
        case let .string(path) where !path.isEmpty:
            if sandbox { throw call.argumentError(2, "file: no files in the sandbox") }
            return (options, (path as NSString).expandingTildeInPath)
        case let value: throw call.argumentError(2, "file: a path expected, got \(value.typeName)")
        }
    }

    /// The text (or, with `file`, the path it was written to) and the rows
    /// per table. The file appears whole (``AtomicFile``); an existing file
    /// is replaced only with `overwrite = true` and only when it is itself
    /// an opsh export; under a dry run nothing is written and a third
    /// result says `{ dryRun = true, bytes = N }`.
    static func exportResults(_ call: LuaCall, text: String, summary: Transfer.Summary, file: String?,
                              overwrite: LuaValue?, files: FileEffects) throws -> Int32 {
        guard let file else { return call.results(.string(text), counts(summary, \.rows)) }
        var replace = false
        switch overwrite ?? .nil {
        case .nil: break
        case let .boolean(flag): replace = flag
        case let value: throw call.argumentError(2, "overwrite: boolean expected, got \(value.typeName)")
        }
        guard files.mayWrite else {
            FileHandle.standardError.write(Data("opsh: dry run: export not written (would write \(text.utf8.count) bytes to \(file))\n".utf8))
            return call.results(.string(file), counts(summary, \.rows),
                                .table(["dryRun": true, "bytes": .integer(Int64(text.utf8.count))]))
        }
        if replace && FileManager.default.fileExists(atPath: file) {
            try files.requireMayDelete("export", "overwrite = true replaces \(file)")
        }
        do {
            let replacing: ((String) -> Bool)? = replace ? { isExport($0) } : nil
            try AtomicFile.write(Data(text.utf8), to: file, replacing: replacing)
        } catch {
            throw LuaCallError.message("export: cannot write \(file): \(error)")
        }
        return call.results(.string(file), counts(summary, \.rows))
    }

    /// A regular file that starts as an opsh export does.
    static func isExport(_ path: String) -> Bool {
        var status = stat()
        guard lstat(path, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG,
              let handle = FileHandle(forReadingAtPath: path) else { return false }
        defer { try? handle.close() }
        let head = String(decoding: handle.readData(ofLength: 256), as: UTF8.self)
        return head.hasPrefix("{") && head.contains("\"format\"") && head.contains("\"\(Transfer.format)\"")
    }
}

/// What `export` and `import` need of a session's engine: Store's
/// ``Transfer`` runs on both; this says where (a snapshot to export from,
/// how the import's write is made atomic).
protocol TransferEngine {
    func exportProject(_ bundleIdentifier: String, options: Transfer.ExportOptions) throws -> (text: String, summary: Transfer.Summary)
    func exportModel(_ id: String) throws -> (text: String, summary: Transfer.Summary)
    func importDocument(_ text: String, options: Transfer.ImportOptions) throws -> Transfer.Summary
}

/// The session's: exports read on one snapshot of the database (SQLite's
/// read transaction; PostgreSQL's `REPEATABLE READ READ ONLY`); an import
/// checked first, then written in one write (``DatabaseSession/importDocument(_:options:)``).
struct SessionTransfer: TransferEngine {
    let database: any DatabaseSession

    func exportProject(_ bundleIdentifier: String, options: Transfer.ExportOptions) throws -> (text: String, summary: Transfer.Summary) {
        try database.exportSnapshot { db in try Transfer.exportProject(db, bundleIdentifier, options: options) }
    }

    func exportModel(_ id: String) throws -> (text: String, summary: Transfer.Summary) {
        try database.exportSnapshot { db in try Transfer.exportModel(db, id) }
    }

    func importDocument(_ text: String, options: Transfer.ImportOptions) throws -> Transfer.Summary {
        try database.importDocument(text, options: options)
    }
}
