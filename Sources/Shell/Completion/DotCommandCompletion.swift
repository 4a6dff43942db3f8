import Foundation

/// Completion on a dot-command line (`.schema proj⇥`): the command's name,
/// then its argument — a table for `.schema`, a mode for `.mode`, `on` or
/// `off` for `.timer`, a file for `.read` — as the registry
/// (``DotCommand/all``) says.
extension Completer {
    /// Candidates that replace `word`, given the line before the cursor
    /// (which starts with `.`).
    func dotCommandCandidates(word: String, before: String) -> [String] {
        let line = before.drop { $0 == " " || $0 == "\t" }
        guard let space = line.firstIndex(of: " ") else {
            // The word may lack the line's `\` (a word break for readline).
            let base = line.dropLast(word.count)
            return DotCommand.all.flatMap(\.names).filter { $0.hasPrefix(line) }.map { String($0.dropFirst(base.count)) }
        }
        let name = String(line[..<space])
        let argument = String(line[space...].drop { $0 == " " })
        guard let kind = DotCommand.named(name)?.argument else { return [] }
        let choices: [String]
        switch kind {
        case .none: return []
        case .table: choices = schema().keys.sorted()
        case .mode: choices = OutputMode.allCases.map(\.rawValue)
        case .onOff: choices = ["on", "off"]
        case .expanded: choices = ["on", "off", "auto"]
        case .rows: choices = ["all", "20", "200", "1000"]
        case .confirm: choices = ["off", "100", "1000"]
        case .pager: choices = Pager.Mode.allCases.map(\.rawValue)
        case .file: choices = Self.paths(startingWith: argument)
        }
        // The word may be only the end of the argument (readline breaks
        // words at `/` and `-`): offer what replaces it.
        let base = argument.dropLast(word.count)
        return choices.filter { $0.hasPrefix(argument) }.map { String($0.dropFirst(base.count)) }
    }

    /// Files and folders (with a `/`) whose path starts with `prefix`.
    static func paths(startingWith typed: String) -> [String] {
        let prefix = typed == "~" ? "~/" : typed
        let expanded = (prefix as NSString).expandingTildeInPath
        let folder: String, namePrefix: String
        if expanded.hasSuffix("/") {
            (folder, namePrefix) = (expanded, "")
        } else {
            folder = (expanded as NSString).deletingLastPathComponent
            namePrefix = (expanded as NSString).lastPathComponent
        }
        let listed = folder.isEmpty ? "." : folder
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: listed) else { return [] }
        // Offered as typed: `~/x` stays `~/x`, `x` stays relative.
        let typedFolder = prefix.hasSuffix("/") ? prefix : String(prefix.dropLast(namePrefix.count))
        return names.filter { $0.hasPrefix(namePrefix) && (!$0.hasPrefix(".") || namePrefix.hasPrefix(".")) }.sorted()
            .map { name in
                var isFolder: ObjCBool = false
                _ = FileManager.default.fileExists(atPath: (listed as NSString).appendingPathComponent(name), isDirectory: &isFolder)
                return typedFolder + name + (isFolder.boolValue ? "/" : "")
            }
    }
}
