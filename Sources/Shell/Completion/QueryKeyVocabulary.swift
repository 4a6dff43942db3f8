/// The words of query keys (Store's `QueryKeyParser`), as a completer
/// needs them: given the segments typed so far, which words may follow.
/// Ids stand where the grammar wants one; they are not completed.
enum QueryKeyVocabulary {
    static let roots = ["projects", "project", "scheme", "schemes", "build", "buildLog", "crashLog",
                        "models", "model", "session", "telemetry", "config"]

    /// The words that may come after `segments` (complete ones).
    static func next(after segments: [String]) -> [String] {
        guard let root = segments.first else { return roots }
        let rest = Array(segments.dropFirst())
        switch root {
        case "projects":
            switch rest.count {
            case 0: return ["all", "versionStrings"]
            case 1 where rest[0] == "all": return ["ids"]
            default: return []
            }
        case "project":
            switch rest.count {
            case 1: return ["detail", "schemes", "buildVersionStrings", "latestBuilds"]
            case 2 where rest[1] == "schemes": return ["ids"]
            case 2 where rest[1] == "latestBuilds": return ["limit5", "limit10", "limit20"]
            default: return []
            }
        case "schemes":
            switch rest.count {
            case 1: return ["builds"]
            case 2 where rest[1] == "builds": return ["ids"]
            default: return []
            }
        case "build":
            switch rest.count {
            case 1: return ["logs", "crashLogs"]
            case 2: return ["ids"]
            case 3 where rest[1] == "logs": return ["debug", "category"]
            case 4 where rest[1] == "logs" && rest[3] == "debug": return ["category"]
            default: return []
            }
        case "models":
            switch rest.count {
            case 0: return ["all"]
            case 1: return ["ids"]
            default: return []
            }
        case "model": return rest.count == 1 ? ["usage"] : []
        case "session": return rest.count == 1 ? ["generations"] : []
        case "telemetry": return rest.isEmpty ? ["counts"] : []
        default: return []
        }
    }

    /// Completions of a partly typed key: whole keys that extend `typed`.
    static func complete(_ typed: String) -> [String] {
        let segments = split(typed)
        let done = Array(segments.dropLast())
        let partial = segments.last ?? ""
        let base = typed.dropLast(partial.count)
        return next(after: done).filter { $0.hasPrefix(partial) }.map { base + $0 }
    }

    /// Splits on `.` outside quotes.
    static func split(_ key: String) -> [String] {
        var segments: [String] = []
        var current = ""
        var quoted = false
        for character in key {
            if character == "\"" { quoted.toggle() }
            if character == ".", !quoted {
                segments.append(current)
                current = ""
            } else {
                current.append(character)
            }
        }
        segments.append(current)
        return segments
    }
}
