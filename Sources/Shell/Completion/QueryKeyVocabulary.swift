import Store

/// Query keys as a completer sees them: given the segments typed so far,
/// which words may follow (Store's ``QueryKeyGrammar`` has them). Ids
/// stand where the grammar wants one; they are not completed.
enum QueryKeyVocabulary {
    /// The words that may come after `segments` (complete ones).
    static func next(after segments: [String]) -> [String] {
        QueryKeyGrammar.root.following(segments)?.completions ?? []
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
