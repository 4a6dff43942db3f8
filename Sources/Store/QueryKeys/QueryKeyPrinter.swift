/// Prints keys in their canonical textual form: ids bare when they are
/// plain words, quoted otherwise; `parse(print(key)) == key`.
public enum QueryKeyPrinter {
    /// An id as it appears in a key.
    public static func id(_ text: String) -> String {
        isBare(text) ? text : quote(text)
    }

    /// `"text"` with inner quotes doubled.
    public static func quote(_ text: String) -> String {
        "\"" + text.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }

    static func isBare(_ text: String) -> Bool {
        !text.isEmpty && text.allSatisfy(QueryKeyParser.isWordCharacter)
    }

    /// A parameter word (`category`) followed by its value: bare words are
    /// glued (`categorybuild`), others quoted (`category"unit tests"`).
    static func parameter(_ word: String, _ value: String) -> String {
        word + id(value)
    }

    public static func print(_ key: QueryKey) -> String {
        switch key {
        case .allProjectIds: return "projects.all.ids"
        case .projectVersionStrings: return "projects.versionStrings"
        case .project(let id): return "project.\(Self.id(id))"
        case .projectDetail(let id): return "project.\(Self.id(id)).detail"
        case .projectSchemeIds(let id): return "project.\(Self.id(id)).schemes.ids"
        case .projectBuildVersionStrings(let id): return "project.\(Self.id(id)).buildVersionStrings"
        case let .projectLatestBuilds(id, limit): return "project.\(Self.id(id)).latestBuilds.limit\(limit)"
        case .scheme(let id): return "scheme.\(Self.id(id))"
        case let .schemeBuildIds(ids, version):
            return "schemes.\(ids.map(Self.id).joined(separator: ",")).builds.ids" + (version.map { "." + Self.id($0) } ?? "")
        case .build(let id): return "build.\(Self.id(id))"
        case let .buildLogIds(id, includeDebug, category):
            return "build.\(Self.id(id)).logs.ids" + (includeDebug ? ".debug" : "")
                + (category.map { "." + parameter("category", $0) } ?? "")
        case .buildCrashLogIds(let id): return "build.\(Self.id(id)).crashLogs.ids"
        case .buildLog(let id): return "buildLog.\(Self.id(id))"
        case .crashLog(let id): return "crashLog.\(Self.id(id))"
        case .allModelIds: return "models.all.ids"
        case .model(let id): return "model.\(Self.id(id))"
        case .modelUsage(let id): return "model.\(Self.id(id)).usage"
        case .session(let id): return "session.\(Self.id(id))"
        case .sessionGenerations(let id): return "session.\(Self.id(id)).generations"
        case .telemetryCounts: return "telemetry.counts"
        case .configuration(let id): return id == "default" ? "config" : "config.\(Self.id(id))"
        }
    }
}

extension QueryKey: CustomStringConvertible {
    /// The canonical textual form.
    public var description: String { QueryKeyPrinter.print(self) }
}
