/// Walks a command line the POSIX/GNU way: `--name value`, `--name=value`,
/// `-x value`, `-xVALUE`, `--` ends the options, and `-` alone is an
/// operand (stdin).
///
/// Each command owns its options (``OptionSpec``) and decides what a
/// value means; the scanner only splits the words and names the option
/// each belongs to, so every command reports the same errors the same way.
struct ArgumentScanner {
    enum Item {
        /// An option of the spec, with its value when it takes one.
        case option(OptionSpec, value: String?)
        /// `-h` or `--help`.
        case help
        /// A word that is not an option.
        case operand(String)
    }

    private var words: ArraySlice<String>
    private let options: [OptionSpec]
    private let command: CommandHelp
    private var optionsEnded = false

    init(_ words: ArraySlice<String>, options: [OptionSpec], command: CommandHelp) {
        self.words = words
        self.options = options
        self.command = command
    }

    /// The words not scanned yet (a script's own arguments, after its file).
    var remaining: [String] { Array(words) }

    mutating func next() throws -> Item? {
        guard let word = words.popFirst() else { return nil }
        if optionsEnded || word == "-" || !word.hasPrefix("-") { return .operand(word) }
        if word == "--" {
            optionsEnded = true
            return try next()
        }
        if word == "--help" || word == "-h" { return .help }
        if word.hasPrefix("--") {
            let body = word.dropFirst(2)
            let name = body.prefix { $0 != "=" }
            let inline = body.count > name.count ? String(body.dropFirst(name.count + 1)) : nil
            guard let spec = options.first(where: { $0.long.map { $0 == name } ?? false }) else {
                throw UsageError("unknown option '--\(name)'", command: command)
            }
            return try item(spec, spelled: "--\(name)", inline: inline)
        }
        // A short option: `-e CODE`, `-eCODE`, `-q`.
        let letter = word.dropFirst().first!
        guard let spec = options.first(where: { $0.short == letter }) else {
            throw UsageError("unknown option '-\(letter)'", command: command)
        }
        let rest = String(word.dropFirst(2))
        if !spec.takesValue && !rest.isEmpty {
            throw UsageError("'-\(letter)' takes no value (got '\(word)')", command: command)
        }
        return try item(spec, spelled: "-\(letter)", inline: rest.isEmpty ? nil : rest)
    }

    private mutating func item(_ spec: OptionSpec, spelled: String, inline: String?) throws -> Item {
        guard spec.takesValue else {
            if inline != nil { throw UsageError("'\(spelled)' takes no value", command: command) }
            return .option(spec, value: nil)
        }
        if let inline { return .option(spec, value: inline) }
        guard let value = words.popFirst() else {
            throw UsageError("missing value for '\(spelled) <\(spec.valueName!)>'", command: command)
        }
        return .option(spec, value: value)
    }
}
