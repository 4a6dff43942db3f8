import Foundation
import Testing

/// opsh(1) and the completion scripts (issue 26): made from the same
/// help as `--help` and `help()`, so every subcommand and option is in
/// them; each is checked by the tool that reads it (groff/man, bash,
/// zsh, fish: whichever is installed).
@Suite struct ManualAndCompletionTests {
    static let subcommands = ["shell", "run", "migrate", "runs", "runner", "runners", "man", "completion"]

    /// Every option's long name, from each subcommand's `--help`.
    func optionsInHelp(_ sandbox: Sandbox) throws -> Set<String> {
        var options: Set<String> = []
        for subcommand in Self.subcommands {
            let help = try sandbox.opsh([subcommand, "--help"], database: false)
            #expect(help.status == 0, "\(help.stderr)")
            let pattern = try NSRegularExpression(pattern: "--[a-z][a-z-]+")
            let text = help.stdout as NSString
            for match in pattern.matches(in: help.stdout, range: NSRange(location: 0, length: text.length)) {
                options.insert(text.substring(with: match.range))
            }
        }
        #expect(options.contains("--db") && options.contains("--overdue") && options.contains("--lock"))
        return options
    }

    func tool(_ name: String) -> String? {
        ["/usr/bin/", "/bin/", "/usr/local/bin/"].map { $0 + name }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    @Test func theManualPageHasEverySubcommandOptionAndFunction() throws {
        let sandbox = try Sandbox()
        let man = try sandbox.opsh(["man"], database: false)
        #expect(man.status == 0, "\(man.stderr)")
        #expect(man.stdout.hasPrefix(".\\\""))
        #expect(man.stdout.contains(".TH OPSH 1"))
        let page = try sandbox.script("opsh.1", man.stdout)
        // groff reads it without a warning, and what it renders names
        // everything --help names, and help()'s functions.
        guard let groff = tool("groff") else { return }
        let rendered = try sandbox.run(groff, ["-man", "-Tutf8", "-ww", "-P", "-cbou", page])
        #expect(rendered.status == 0 && rendered.stderr.isEmpty, "\(rendered.stderr)")
        let text = rendered.stdout
        for subcommand in Self.subcommands { #expect(text.contains("opsh \(subcommand)"), "no \(subcommand) in the page") }
        for option in try optionsInHelp(sandbox) { #expect(text.contains(option), "no \(option) in the page") }
        for function in ["db.query(", "builds.list", "audit.", "help(", "backup("] {
            #expect(text.contains(function), "no \(function) in the page")
        }
        #expect(text.contains("EXIT STATUS") && text.contains("124"))
        if let manCommand = tool("man") {
            let shown = try sandbox.run(manCommand, ["-l", page], environment: sandbox.environment.merging(["MANPAGER": "cat", "PAGER": "cat"]) { $1 })
            #expect(shown.status == 0, "\(shown.stderr)")
            #expect(shown.stdout.contains("OPSH(1)"))
        }
    }

    @Test func bashCompletesSubcommandsOptionsAndFiles() throws {
        let sandbox = try Sandbox()
        let script = try sandbox.opsh(["completion", "bash"], database: false)
        #expect(script.status == 0, "\(script.stderr)")
        let path = try sandbox.script("opsh.bash", script.stdout)
        guard let bash = tool("bash") else { return }
        let syntax = try sandbox.run(bash, ["-n", path])
        #expect(syntax.status == 0, "\(syntax.stderr)")
        for option in try optionsInHelp(sandbox) { #expect(script.stdout.contains(option), "no \(option) in the script") }
        for subcommand in Self.subcommands { #expect(script.stdout.contains(subcommand)) }
        // What bash offers, as it asks the function for it.
        func complete(_ words: [String]) throws -> [String] {
            let quoted = words.map { "'\($0)'" }.joined(separator: " ")
            let run = try sandbox.run(bash, ["-c", """
                cd '\(sandbox.root)/scripts' && source '\(path)'
                COMP_WORDS=(\(quoted)); COMP_CWORD=\(words.count - 1)
                _opsh; printf '%s\\n' "${COMPREPLY[@]}"
                """])
            #expect(run.status == 0, "\(run.stderr)")
            return run.stdout.split(separator: "\n").map(String.init).sorted()
        }
        #expect(try complete(["opsh", "ru"]) == ["run", "runner", "runners", "runs"])
        #expect(try complete(["opsh", "runs", "--o"]) == ["--overdue"])
        #expect(try complete(["opsh", "run", "--lo"]) == ["--lock"])
        #expect(try complete(["opsh", "--read"]) == ["--read-only"])
        #expect(try complete(["opsh", "run", "--db", "opsh.b"]) == ["opsh.bash"])
        #expect(try complete(["opsh", "completion", ""]) == ["bash", "fish", "zsh"])
    }

    @Test func zshAndFishScriptsParse() throws {
        let sandbox = try Sandbox()
        for shell in ["zsh", "fish"] {
            let script = try sandbox.opsh(["completion", shell], database: false)
            #expect(script.status == 0, "\(script.stderr)")
            for option in try optionsInHelp(sandbox) {
                #expect(script.stdout.contains(option.dropFirst(2)), "no \(option) in the \(shell) script")
            }
            let path = try sandbox.script("opsh.\(shell)", script.stdout)
            guard let program = tool(shell) else { continue }
            let syntax = try sandbox.run(program, ["-n", path])
            #expect(syntax.status == 0, "\(shell): \(syntax.stderr)")
            guard shell == "fish" else { continue }
            // What fish offers, as it asks the script (`complete -C`).
            func complete(_ line: String) throws -> [String] {
                let run = try sandbox.run(program, ["--no-config", "-c", "source '\(path)'; complete -C '\(line)'"])
                #expect(run.status == 0, "\(run.stderr)")
                return run.stdout.split(separator: "\n").map { String($0.prefix { $0 != "\t" }) }.sorted()
            }
            #expect(try complete("opsh ru") == ["run", "runner", "runners", "runs"])
            #expect(try complete("opsh runs --o") == ["--overdue"])
            #expect(try complete("opsh --read") == ["--read-only"])
            #expect(try complete("opsh completion ") == ["bash", "fish", "zsh"])
        }
    }

    @Test func aShellWithoutCompletionIsAUsageError() throws {
        let sandbox = try Sandbox()
        let result = try sandbox.opsh(["completion", "tcsh"], database: false)
        #expect(result.status == 2)
        #expect(result.stderr.contains("no completion for 'tcsh' (there are: bash, zsh, fish)"))
        let missing = try sandbox.opsh(["completion"], database: false)
        #expect(missing.status == 2)
        #expect(missing.stderr.contains("missing the shell: bash, zsh or fish"))
    }
}
