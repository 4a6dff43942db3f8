/// The shell's prompt says where the operator is (issue 16, "Where am I"):
/// the database, an environment label (`OPSH_ENV`, red on a colour
/// terminal) and the modes, as psql shows the database and Rails' console
/// the environment: `production backend.sqlite [dry-run] opsh> `.
public struct PromptLabel: Sendable {
    public var database: String
    public var environment: String?
    public var modes: [String]
    public var colour: Bool

    public init(database: String, environment: String?, modes: [String], colour: Bool) {
        self.database = database
        self.environment = environment.flatMap { $0.isEmpty ? nil : $0 }
        self.modes = modes
        self.colour = colour
    }

    /// The prompt. Colour escapes are wrapped in readline's markers
    /// (\u{1}…\u{2}) so that it counts only visible characters.
    public var prompt: String {
        var parts: [String] = []
        if let environment {
            parts.append(colour ? "\u{1}\u{1B}[1;31m\u{2}\(environment)\u{1}\u{1B}[0m\u{2}" : environment)
        }
        parts.append(database)
        if !modes.isEmpty { parts.append("[" + modes.joined(separator: ", ") + "]") }
        return parts.joined(separator: " ") + " opsh> "
    }

    /// The same in words, for the banner.
    public var sentence: String {
        var words = "opsh on \(database)"
        if let environment { words += " in \(environment)" }
        if !modes.isEmpty { words += " (\(modes.joined(separator: ", ")))" }
        return words
    }
}
