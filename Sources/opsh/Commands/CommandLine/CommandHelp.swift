/// What `--help` prints for a command, laid out as swift-argument-parser
/// and most GNU tools do: overview, discussion, usage, then aligned
/// columns of arguments, options and subcommands.
struct CommandHelp {
    /// `opsh run`.
    let name: String
    let abstract: String
    /// One line per form.
    let usage: String
    /// Made when help is shown: a run that shows none (`opsh -e`) does not
    /// build the text (ARCHITECTURE.md, "Start-up").
    private let makeDiscussion: @Sendable () -> String
    var discussion: String { makeDiscussion() }
    /// (`<file>`, what it is).
    var arguments: [(String, String)] = []
    var options: [OptionSpec] = []
    var subcommands: [(String, String)] = []

    init(name: String, abstract: String, usage: String, discussion: @autoclosure @escaping @Sendable () -> String = "",
         arguments: [(String, String)] = [], options: [OptionSpec] = [], subcommands: [(String, String)] = []) {
        self.name = name
        self.abstract = abstract
        self.usage = usage
        makeDiscussion = discussion
        self.arguments = arguments
        self.options = options
        self.subcommands = subcommands
    }

    func render(width: Int = 80) -> String {
        var lines = ["OVERVIEW: \(abstract)", ""]
        let discussion = discussion
        if !discussion.isEmpty { lines += [discussion, ""] }
        lines.append("USAGE: " + usage.split(separator: "\n").joined(separator: "\n       "))
        lines.append("")
        if !arguments.isEmpty {
            lines.append("ARGUMENTS:")
            lines += arguments.flatMap { Self.column($0.0, $0.1, width: width) }
            lines.append("")
        }
        lines.append("OPTIONS:")
        for option in options {
            var text = option.help
            if let value = option.defaultValue { text += " (default: \(value))" }
            lines += Self.column(option.synopsis, text, width: width)
        }
        lines += Self.column("-h, --help", "Show help information.", width: width)
        if !subcommands.isEmpty {
            lines += ["", "SUBCOMMANDS:"]
            lines += subcommands.flatMap { Self.column($0.0, $0.1, width: width) }
            lines += ["", "  See '\(name) help <subcommand>' for detailed help."]
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// `  left                    text wrapped at width`: the text starts at
    /// column 26, or on the next line when `left` is wider.
    private static func column(_ left: String, _ text: String, width: Int) -> [String] {
        let indent = 26
        var lines: [String] = []
        var line = "  " + left
        if line.count >= indent - 1 {
            lines.append(line)
            line = ""
        }
        line += String(repeating: " ", count: indent - line.count)
        var lineHasWords = false
        for word in text.split(separator: " ") {
            if lineHasWords && line.count + 1 + word.count > width {
                lines.append(line)
                line = String(repeating: " ", count: indent)
                lineHasWords = false
            }
            line += (lineHasWords ? " " : "") + word
            lineHasWords = true
        }
        lines.append(line)
        return lines
    }
}
