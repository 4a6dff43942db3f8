import Foundation
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

    /// Each way a script might try to write, with its own sentence.
    static let readOnlyWrites: [(String, String)] = [
        ("SQL INSERT", #"db.exec("INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt) VALUES ('x', 'x', 'x', 'x', 0)")"#),
        ("SQL UPDATE", #"db.exec("UPDATE projects SET name = 'changed'")"#),
        ("SQL DELETE in a transaction", #"db.transaction(function() db.exec("DELETE FROM projects") end)"#),
        ("SQL DDL", #"db.exec("CREATE TABLE intruder (a)")"#),
        ("PRAGMA user_version", #"db.exec("PRAGMA user_version = 99") assert(db.value("PRAGMA user_version") == 99)"#),
        ("PRAGMA journal_mode", #"local mode = db.value("PRAGMA journal_mode = DELETE") assert(mode == "delete", mode)"#),
        ("repository insert", #"projects.insert{ bundleIdentifier = "com.x", name = "X", gitRepositoryURL = "/x" }"#),
        ("repository update", #"projects.update("com.example.app", { name = "changed" })"#),
        ("repository delete", #"projects.delete("com.example.app", { cascade = true })"#),
        ("telemetry cleanup", #"telemetry.cleanup{ olderThan = "0d" }"#),
        ("migrate.up of a Lua migration", #"migrate.up{ folder = arg.migrations }"#),
        ("ATTACH another file and write it", #"db.exec("ATTACH DATABASE ? AS other", arg.other) db.exec("INSERT INTO other.t VALUES (2)")"#),
        ("ATTACH a new file", #"db.exec("ATTACH DATABASE ? AS fresh", arg.fresh) db.exec("CREATE TABLE fresh.t (a)")"#),
        ("VACUUM INTO a new file", #"db.exec("VACUUM INTO ?", arg.fresh)"#),
        ("VACUUM", #"vacuum()"#),
    ]

    @Test func readOnlyRefusesEveryWrite() throws {
        let scratch = try Self.prepared()
        let other = scratch.root + "/other.sqlite"
        _ = try scratch.sqlite("CREATE TABLE t (a); INSERT INTO t VALUES (1);", file: other)
        let migrations = scratch.root + "/migrations"
        try FileManager.default.createDirectory(atPath: migrations, withIntermediateDirectories: true)
        try #"return { id = "900_intruder", up = function(db) db.exec("CREATE TABLE intruder (a)") end }"#
            .write(toFile: migrations + "/900_intruder.lua", atomically: true, encoding: .utf8)
        let before = fileBytes(scratch.database)
        let otherBefore = fileBytes(other)
        var refused = 0
        for (name, code) in Self.readOnlyWrites {
            let fresh = scratch.root + "/fresh-\(refused).sqlite"
            let prelude = "arg = { other = \(luaString(other)), fresh = \(luaString(fresh)), migrations = \(luaString(migrations)) }\n"
            let result = try scratch.opsh(["--read-only", "-e", prelude + code])
            #expect(result.status != 0, "\(name): succeeded under --read-only: \(result.stdout)")
            #expect(fileBytes(scratch.database) == before, "\(name): the database file changed")
            #expect(fileBytes(other) == otherBefore, "\(name): the attached file changed")
            let created = FileManager.default.fileExists(atPath: fresh) && (fileBytes(fresh)?.count ?? 0) > 0
            #expect(!created, "\(name): wrote \(fresh)")
            if result.status != 0 && fileBytes(scratch.database) == before && !created { refused += 1 }
        }
        #expect(try scratch.sqlite("SELECT name FROM projects") == "App")
        reportFigure("read-only: \(refused)/\(Self.readOnlyWrites.count) write routes refused, database file byte-identical after each")
    }

    /// Escape attempts: each must raise an error and leave no trace.
    static let sandboxEscapes: [(String, String)] = [
        ("io.open", #"io.open(arg.target, "w"):write("x")"#),
        ("io via _G", #"_G["io"].open(arg.target, "w")"#),
        ("os.execute", #"os.execute("touch " .. arg.target)"#),
        ("os.remove", #"os.remove(arg.victim)"#),
        ("os.rename", #"os.rename(arg.victim, arg.target)"#),
        ("os.getenv", #"assert(os.getenv("HOME"))"#),
        ("os.exit", #"os.exit(0)"#),
        ("require", #"require("io")"#),
        ("package.loadlib", #"package.loadlib("libc.so.6", "system")"#),
        ("package via require's upvalues", #"debug.getupvalue(require, 1)"#),
        ("debug.getregistry", #"debug.getregistry()"#),
        ("debug.sethook", #"debug.sethook(function() end, "l")"#),
        ("string.dump", #"string.dump(print)"#),
        ("string.dump through the string metatable", #"assert(getmetatable("").__index.dump)(function() end)"#),
        ("load of bytecode", #"assert(load("\27Lua\84\0\25\147\13\10\26\10\4\8\8\120\86"))()"#),
        ("load of bytecode with mode 'b'", #"assert(load("\27LuaT\0", "x", "b"))()"#),
        ("load of bytecode through a reader", #"local done = false assert(load(function() if done then return nil end done = true return "\27LuaT\0" end))()"#),
        ("dofile", #"dofile(arg.victim)"#),
        ("loadfile", #"assert(loadfile(arg.victim))"#),
        ("collectgarbage cannot reach files", #"assert(io)"#),
        ("backup to a file", #"backup(arg.target)"#),
        ("ATTACH a new file", #"db.exec("ATTACH DATABASE ? AS other", arg.target) db.exec("CREATE TABLE other.t (a)")"#),
        ("ATTACH an existing file and read it", #"db.exec("ATTACH DATABASE ? AS other", arg.other) assert(db.value("SELECT a FROM other.t") == 1)"#),
        ("ATTACH through db.query", #"db.query("ATTACH DATABASE ? AS other", arg.other) assert(db.value("SELECT a FROM other.t") == 1)"#),
        ("load_extension", #"db.value("SELECT load_extension('libc.so.6')")"#),
        ("VACUUM INTO a file", #"db.exec("VACUUM INTO ?", arg.target)"#),
        ("git reads a repository", #"git.versions(arg.repository)"#),
        ("jobs run a process", #"schemes.insert{ projectBundleIdentifier = "com.example.app", name = "S", buildCommand = "touch " .. arg.target } local s = schemes.list()[1] local b = jobs.start{ scheme = s.id, version = "1.0.0" } jobs.wait(b, 10)"#),
        ("migrate.up reads Lua files", #"migrate.up{ folder = arg.folder }"#),
        ("export writes a file", #"export.project("com.example.app", { file = arg.target })"#),
        ("import reads a file", #"import{ file = arg.victim }"#),
    ]

    @Test func sandboxRefusesEveryEscape() throws {
        let scratch = try Self.prepared()
        let victim = scratch.root + "/victim.lua"
        try "return 42".write(toFile: victim, atomically: true, encoding: .utf8)
        let folder = scratch.root + "/folder"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try #"return { id = "900_x", up = function(db) end }"#.write(toFile: folder + "/900_x.lua", atomically: true, encoding: .utf8)
        let other = scratch.root + "/other.sqlite"
        _ = try scratch.sqlite("CREATE TABLE t (a); INSERT INTO t VALUES (1);", file: other)
        let repository = scratch.root + "/repository"
        for arguments in [["init", "-q", repository], ["-C", repository, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "x"],
                          ["-C", repository, "tag", "v1.0.0"]] {
            let result = try scratch.run("/usr/bin/git", arguments)
            #expect(result.status == 0, "git \(arguments): \(result.stderr)")
        }
        // Each attempt works without --sandbox (so a refusal below is the sandbox's).
        let control = try scratch.opsh(["-e", "assert(#git.versions(\(luaString(repository))) == 1)"])
        #expect(control.status == 0, "\(control.stderr)")
        var refused = 0
        var escaped: [String] = []
        for (index, (name, code)) in Self.sandboxEscapes.enumerated() {
            let target = scratch.root + "/escaped-\(index)"
            let prelude = "arg = { target = \(luaString(target)), victim = \(luaString(victim)), folder = \(luaString(folder)), "
                + "other = \(luaString(other)), repository = \(luaString(repository)) }\n"
            let result = try scratch.opsh(["--sandbox", "-e", prelude + code])
            let traces = FileManager.default.fileExists(atPath: target) || !FileManager.default.fileExists(atPath: victim)
            if result.status != 0 && !traces {
                refused += 1
            } else {
                escaped.append(name)
                Issue.record("--sandbox: \(name) was not refused (status \(result.status), stdout \(result.stdout), stderr \(result.stderr))")
            }
            if !FileManager.default.fileExists(atPath: victim) {
                try "return 42".write(toFile: victim, atomically: true, encoding: .utf8)
            }
        }
        reportFigure("sandbox: \(refused)/\(Self.sandboxEscapes.count) escape attempts refused\(escaped.isEmpty ? "" : " (not refused: \(escaped.joined(separator: ", ")))")")
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
