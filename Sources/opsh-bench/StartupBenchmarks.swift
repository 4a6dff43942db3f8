import Foundation

/// Start-up to result: `opsh -e 'return 1'` on an existing database, side
/// by side with the tools an operator would otherwise reach for.
enum StartupBenchmarks {
    struct Peer {
        var name: String
        var command: [String]
    }

    static let runs = 30

    /// A Markdown table of medians and ratios to sqlite3 (target: opsh
    /// ≤ 2× sqlite3). `executable` is this bench binary: the release
    /// `opsh` sits next to it.
    static func run(directory: String, executable: String) throws -> String {
        let opsh = URL(fileURLWithPath: executable).deletingLastPathComponent().appendingPathComponent("opsh").path
        let database = directory + "/startup.sqlite"
        var lines = ["### Start-up to result (median of \(runs) runs)", ""]
        guard FileManager.default.isExecutableFile(atPath: opsh) else {
            return (lines + ["opsh not found next to \(executable): build it with `./scripts/build-release opsh`"])
                .joined(separator: "\n")
        }
        // Create and migrate the database first: start-up on an existing one.
        _ = try time([opsh, "--db", database, "--create", "-e", "return 1"])

        let peers = [
            Peer(name: "`opsh -e 'return 1'`", command: [opsh, "--db", database, "-e", "return 1"]),
            Peer(name: "`sqlite3 FILE 'select 1'`", command: [which("sqlite3"), database, "select 1"].compactMap { $0 }),
            Peer(name: "`lua5.4 -e 'print(1)'`", command: [which("lua5.4"), "-e", "print(1)"].compactMap { $0 }),
            Peer(name: "`python3 -c 'print(1)'`", command: [which("python3"), "-c", "print(1)"].compactMap { $0 }),
            // Not the target's command: one that connects to the database
            // and installs a repository module, for what a real one-liner costs.
            Peer(name: "`opsh -e 'return projects.count()'`", command: [opsh, "--db", database, "-e", "return projects.count()"]),
        ]
        let installed = peers.filter { peer in
            (peer.command.count > 1 || peer.name.contains("opsh")) && FileManager.default.isExecutableFile(atPath: peer.command[0])
        }
        for peer in installed { for _ in 0..<3 { _ = try time(peer.command) } }  // warm the page cache
        // Round-robin: a slow spell of the machine falls on every command
        // alike, not on whichever ran during it.
        var samples: [String: [Double]] = [:]
        for _ in 0..<runs {
            for peer in installed { samples[peer.name, default: []].append(try time(peer.command)) }
        }
        var medians: [String: Double] = [:]
        var rows: [(String, Double?)] = []
        for peer in peers {
            let median = samples[peer.name].map { Distribution($0).median }
            medians[peer.name] = median
            rows.append((peer.name, median))
        }
        let sqlite = medians[peers[1].name]
        lines.append("| command | median | vs sqlite3 |")
        lines.append("| --- | --- | --- |")
        for (name, median) in rows {
            guard let median else {
                lines.append("| \(name) | not installed | |")
                continue
            }
            let ratio = sqlite.map { String(format: "%.1f×", median / $0) } ?? ""
            lines.append("| \(name) | \(String(format: "%.1f ms", median * 1000)) | \(ratio) |")
        }
        if let sqlite, let opshTime = medians[peers[0].name] {
            let verdict = opshTime <= 1.5 * sqlite ? "met" : "not met"
            lines.append("")
            lines.append("Target (issue 27): opsh ≤ 1.5× sqlite3 — \(verdict) (\(String(format: "%.2f×", opshTime / sqlite))).")
        }
        lines.append("")
        // scripts/build-release leaves the shipped, stripped executable in
        // .build/opsh and the linker's map in .build/opsh.map.
        let build = URL(fileURLWithPath: executable).deletingLastPathComponent().deletingLastPathComponent()
        lines += ExecutableSize.table(executable: build.appendingPathComponent("opsh").path, unstripped: opsh,
                                      map: build.appendingPathComponent("opsh.map").path)
        return lines.joined(separator: "\n")
    }

    /// Seconds from spawn to exit, output discarded (or stdout written to
    /// `stdout`, a file made anew); a failing command throws.
    static func time(_ command: [String], stdout: String = "/dev/null") throws -> Double {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, stdout, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        let argv = command.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let start = now()
        var pid: pid_t = 0
        let status = posix_spawn(&pid, command[0], &actions, nil, argv, environ)
        guard status == 0 else { throw POSIXError(POSIXErrorCode(rawValue: status) ?? .EIO) }
        var exitStatus: Int32 = 0
        waitpid(pid, &exitStatus, 0)
        let elapsed = now() - start
        guard exitStatus == 0 else {
            throw NSError(domain: "opsh-bench", code: Int(exitStatus),
                          userInfo: [NSLocalizedDescriptionKey: "\(command.joined(separator: " ")) failed (status \(exitStatus))"])
        }
        return elapsed
    }

    static func which(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        for folder in path.split(separator: ":") {
            let candidate = "\(folder)/\(name)"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }
}
