import Foundation
import LuaRuntime
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `--read-only` and `--sandbox` hold against every route tried, and files
/// that may hold secrets are created owner-only.
@Suite struct SecurityTests {
    /// A migrated database with one project, checkpointed so that the main
    /// file holds everything.
    static func prepared() throws -> Scratch {
        let scratch = try Scratch()
        let created = try scratch.opsh(["-e", """
            projects.insert{ bundleIdentifier = "com.example.app", name = "App", gitRepositoryURL = "/srv/app" }
            db.exec("INSERT INTO telemetry (event, created_at) VALUES ('old', 0)")
            """])
        #expect(created.status == 0, "\(created.stderr)")
        _ = try scratch.sqlite("PRAGMA wal_checkpoint(TRUNCATE)")
        return scratch
    }

    /// Each way a script might try to write, with the reason it is refused
    /// for under --read-only. (ATTACH-and-write, VACUUM INTO and changing
    /// the journal mode are not listed: opsh allows none of them even
    /// without --read-only, so no control run could show them working.)
    static let readOnlyWrites: [(name: String, code: String, reason: String)] = [
        ("SQL INSERT", #"db.exec("INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt) VALUES ('x', 'x', 'x', 'x', 0)")"#, "attempt to write a readonly database"),
        ("SQL UPDATE", #"db.exec("UPDATE projects SET name = 'changed'")"#, "attempt to write a readonly database"),
        ("SQL DELETE in a transaction", #"db.transaction(function() db.exec("DELETE FROM projects") end)"#, "attempt to write a readonly database"),
        ("SQL DDL", #"db.exec("CREATE TABLE intruder (a)")"#, "attempt to write a readonly database"),
        ("PRAGMA user_version", #"db.exec("PRAGMA user_version = 99") assert(db.value("PRAGMA user_version") == 99)"#, "attempt to write a readonly database"),
        ("repository insert", #"projects.insert{ bundleIdentifier = "com.x", name = "X", gitRepositoryURL = "/x" }"#, "attempt to write a readonly database"),
        ("repository update", #"projects.update("com.example.app", { name = "changed" })"#, "attempt to write a readonly database"),
        ("repository delete", #"projects.delete("com.example.app", { cascade = true })"#, "attempt to write a readonly database"),
        ("telemetry cleanup", #"assert(telemetry.cleanup{ olderThan = "0d" }.deleted == 1)"#, "attempt to write a readonly database"),
        ("migrate.up of a Lua migration", #"migrate.up{ folder = arg.migrations }"#, "cannot migrate a database opened read-only"),
        ("VACUUM", #"vacuum()"#, "vacuum is refused under --read-only: it writes to the database's files"),
        ("checkpoint", #"checkpoint("truncate")"#, "checkpoint is refused under --read-only: it writes to the database's files"),
    ]

    @Test func readOnlyRefusesEveryWriteWithItsReason() throws {
        let scratch = try Self.prepared()
        let migrations = scratch.root + "/migrations"
        try FileManager.default.createDirectory(atPath: migrations, withIntermediateDirectories: true)
        try #"return { id = "900_intruder", up = function(db) db.exec("CREATE TABLE intruder (a)") end }"#
            .write(toFile: migrations + "/900_intruder.lua", atomically: true, encoding: .utf8)
        let before = fileBytes(scratch.database)
        var refused = 0
        for (index, write) in Self.readOnlyWrites.enumerated() {
            let prelude = "arg = { migrations = \(luaString(migrations)) }\n"
            let result = try scratch.opsh(["--read-only", "-e", prelude + write.code])
            #expect(result.status != 0, "\(write.name): succeeded under --read-only: \(result.stdout)")
            #expect(result.stderr.contains(write.reason), "\(write.name): \(result.stderr)")
            #expect(fileBytes(scratch.database) == before, "\(write.name): the database file changed")
            if result.status != 0 && result.stderr.contains(write.reason) && fileBytes(scratch.database) == before { refused += 1 }
            // Control: the same write works without --read-only (on a copy).
            let copy = scratch.root + "/control-\(index).sqlite"
            try FileManager.default.copyItem(atPath: scratch.database, toPath: copy)
            let control = try scratch.run(opshExecutable, ["--db", copy, "-e", prelude + write.code])
            #expect(control.status == 0, "\(write.name) without --read-only: \(control.stderr)")
        }
        #expect(try scratch.sqlite("SELECT name FROM projects") == "App")
        reportFigure("read-only: \(refused)/\(Self.readOnlyWrites.count) write routes refused with their reason, database file byte-identical after each (each works without --read-only)")
    }

    /// Escape attempts: each must be refused with its reason and leave no
    /// trace, and each works without --sandbox (its control run), so the
    /// refusal is the sandbox's. `BYTECODE` is real `string.dump` output.
    static let sandboxEscapes: [(name: String, code: String, reason: String)] = [
        ("io.open", #"io.open(arg.target, "w"):write("x")"#, "attempt to index a nil value (global 'io')"),
        ("io via _G", #"_G["io"].open(arg.target, "w"):close()"#, "attempt to index a nil value (field 'io')"),
        ("os.execute", #"assert(os.execute("touch " .. arg.target))"#, "attempt to call a nil value (field 'execute')"),
        ("os.remove", #"assert(os.remove(arg.victim))"#, "attempt to call a nil value (field 'remove')"),
        ("os.rename", #"assert(os.rename(arg.victim, arg.target))"#, "attempt to call a nil value (field 'rename')"),
        ("os.getenv", #"assert(os.getenv("HOME"))"#, "attempt to call a nil value (field 'getenv')"),
        ("require", #"assert(require("io"))"#, "attempt to call a nil value (global 'require')"),
        ("package.loadlib", #"assert(package.loadlib("libc.so.6", "system"))"#, "attempt to index a nil value (global 'package')"),
        ("package via require's upvalues", #"debug.getupvalue(require, 1)"#, "attempt to index a nil value (global 'debug')"),
        ("debug.getregistry", #"debug.getregistry()"#, "attempt to index a nil value (global 'debug')"),
        ("debug.sethook", #"debug.sethook(function() end, "l")"#, "attempt to index a nil value (global 'debug')"),
        ("string.dump", #"string.dump(function() end)"#, "attempt to call a nil value (field 'dump')"),
        ("string.dump through the string metatable", #"assert(getmetatable("").__index.dump)(function() end)"#, "assertion failed!"),
        ("load of bytecode", #"assert(assert(load(BYTECODE))() == 42)"#, "attempt to load a binary chunk (mode is 't')"),
        ("load of bytecode with mode 'b'", #"assert(assert(load(BYTECODE, "x", "b"))() == 42)"#, "attempt to load a binary chunk (mode is 't')"),
        ("load of bytecode through a reader", #"local done = false assert(assert(load(function() if done then return nil end done = true return BYTECODE end))() == 42)"#, "attempt to load a binary chunk (mode is 't')"),
        ("dofile", #"assert(dofile(arg.victim) == 42)"#, "attempt to call a nil value (global 'dofile')"),
        ("loadfile", #"assert(loadfile(arg.victim))"#, "attempt to call a nil value (global 'loadfile')"),
        ("backup to a file", #"backup(arg.target)"#, "backup is not available in --sandbox"),
        ("ATTACH an existing file and read it", #"db.exec("ATTACH DATABASE ? AS other", arg.other) assert(db.value("SELECT a FROM other.t") == 1)"#, "too many attached databases - max 0"),
        ("ATTACH through db.query", #"db.query("ATTACH DATABASE ? AS other", arg.other) assert(db.value("SELECT a FROM other.t") == 1)"#, "too many attached databases - max 0"),
        ("git reads a repository", #"assert(#git.versions(arg.repository) == 1)"#, "git.versions is not available in --sandbox"),
        ("jobs run a process", #"local s = schemes.insert{ projectBundleIdentifier = "com.example.app", name = "S", buildCommand = "touch " .. arg.target } local b = jobs.start{ scheme = s.id, version = "1.0.0" } assert(jobs.wait(b, 30).status == "succeeded")"#, "sandbox: the buildCommand of a scheme cannot be written"),
        ("migrate.up reads Lua files", #"migrate.up{ folder = arg.folder }"#, "migrations from files are not available in --sandbox"),
        ("export writes a file", #"export.project("com.example.app", { file = arg.target })"#, "file: no files in the sandbox"),
        ("import reads a file", #"import{ file = arg.document, replace = true }"#, "file: no files in the sandbox"),
    ]

    @Test func sandboxRefusesEveryEscapeWithItsReason() throws {
        let bytecode = try LuaRuntime().execute("return string.dump(function() return 42 end)")
        guard case let .bytes(dumped)? = bytecode.first else {
            Issue.record("string.dump gave \(bytecode)")
            return
        }
        let bytecodeLiteral = "\"" + dumped.map { "\\" + String($0) }.joined() + "\""
        var refused = 0
        var escaped: [String] = []
        for (index, escape) in Self.sandboxEscapes.enumerated() {
            let scratch = try Scratch()
            let victim = scratch.root + "/victim.lua"
            try "return 42".write(toFile: victim, atomically: true, encoding: .utf8)
            let folder = scratch.root + "/folder"
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            try #"return { id = "900_x", up = function(db) end }"#.write(toFile: folder + "/900_x.lua", atomically: true, encoding: .utf8)
            let other = scratch.root + "/other.sqlite"
            _ = try scratch.sqlite("CREATE TABLE t (a); INSERT INTO t VALUES (1);", file: other)
            let repository = try scratch.projectWithRepository()
            let document = scratch.root + "/app.json"
            #expect(try scratch.opsh(["-e", "export.project('com.example.app', { file = \(luaString(document)) })"]).status == 0)
            let target = scratch.root + "/escaped-\(index)"
            let prelude = "arg = { target = \(luaString(target)), victim = \(luaString(victim)), folder = \(luaString(folder)), "
                + "other = \(luaString(other)), repository = \(luaString(repository)), document = \(luaString(document)) } "
                + "BYTECODE = \(bytecodeLiteral)\n"
            let result = try scratch.opsh(["--sandbox", "-e", prelude + escape.code])
            let traces = FileManager.default.fileExists(atPath: target) || !FileManager.default.fileExists(atPath: victim)
            #expect(result.stderr.contains(escape.reason), "\(escape.name): \(result.stderr)")
            if result.status != 0 && !traces && result.stderr.contains(escape.reason) {
                refused += 1
            } else {
                escaped.append(escape.name)
                Issue.record("--sandbox: \(escape.name) was not refused (status \(result.status), stdout \(result.stdout), stderr \(result.stderr))")
            }
            // Control: the same attempt works without --sandbox.
            let control = try scratch.opsh(["-e", prelude + escape.code])
            #expect(control.status == 0, "\(escape.name) without --sandbox: \(control.stderr)")
        }
        reportFigure("sandbox: \(refused)/\(Self.sandboxEscapes.count) escape attempts refused with their reason (each works without --sandbox)\(escaped.isEmpty ? "" : "; not refused: \(escaped.joined(separator: ", "))")")
    }

    /// The API key never appears in printed rows or records, as a table or as JSON.
    @Test func secretsAreMaskedInOutput() throws {
        let scratch = try Self.prepared()
        _ = try scratch.sqlite("INSERT INTO configuration (id, api_key, base_url, created_at, updated_at) VALUES ('default', 'sk-SECRET-123456', 'https://x', 0, 0)")
        let routes = ["return config.get()", "return db.query('SELECT * FROM configuration')",
                      "return db.first('SELECT * FROM configuration')", "return query('config')",
                      "print(db.first('SELECT * FROM configuration'))"]
        var masked = 0, tried = 0
        for mode in [[], ["--json"]] {
            for code in routes {
                let result = try scratch.opsh(mode + ["-e", code])
                tried += 1
                #expect(result.status == 0, "\(code): \(result.stderr)")
                let leaked = result.stdout.contains("SECRET") || result.stderr.contains("SECRET")
                #expect(!leaked, "\(mode) \(code) printed the key: \(result.stdout)")
                if !leaked && result.status == 0 { masked += 1 }
            }
        }
        reportFigure("secrets: API key masked in \(masked)/\(tried) outputs (config.get, db.query, db.first, query key, print of a row; as a table and --json)")
    }

    @Test func backupsAreOwnerOnly() throws {
        let scratch = try Self.prepared()
        let target = scratch.root + "/backup.sqlite"
        let result = try scratch.opsh(["-e", "backup(\(luaString(target)))"])
        #expect(result.status == 0, "\(result.stderr)")
        let mode = try FileManager.default.attributesOfItem(atPath: target)[.posixPermissions] as? Int
        #expect(mode == 0o600, "backup mode \(String(mode ?? -1, radix: 8))")
        let rotated = scratch.root + "/rotated"
        try FileManager.default.createDirectory(atPath: rotated, withIntermediateDirectories: true)
        let second = try scratch.opsh(["-e", "backup(\(luaString(rotated + "/b1.sqlite")), { keep = 2 })"])
        #expect(second.status == 0, "\(second.stderr)")
        for file in try FileManager.default.contentsOfDirectory(atPath: rotated) {
            let mode = try FileManager.default.attributesOfItem(atPath: rotated + "/" + file)[.posixPermissions] as? Int
            #expect(mode == 0o600, "\(file): mode \(String(mode ?? -1, radix: 8))")
        }
    }
}

/// `text` as a Lua string literal.
func luaString(_ text: String) -> String {
    "\"" + text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
}
