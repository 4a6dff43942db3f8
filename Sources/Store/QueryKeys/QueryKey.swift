/// A name for a piece of data that can be fetched once or observed
/// (the build server's query keys, ARCHITECTURE.md, plus keys for the analytics side).
///
/// Keys have a textual form (see ``QueryKeyParser`` for the grammar and
/// ``description`` for the canonical printing), and
/// `QueryKey(parsing: key.description) == key` holds for every key.
public enum QueryKey: Hashable, Sendable {
    /// `projects.all.ids`: every project's bundle identifier.
    case allProjectIds
    /// `projects.versionStrings`: for each project, the versions it has builds of.
    case projectVersionStrings
    /// `project.{id}`: one project.
    case project(String)
    /// `project.{id}.detail`: a project with its scheme ids and recent build ids.
    case projectDetail(String)
    /// `project.{id}.schemes.ids`: a project's scheme ids, in order.
    case projectSchemeIds(String)
    /// `project.{id}.buildVersionStrings`: versions with builds, newest first.
    case projectBuildVersionStrings(String)
    /// `project.{id}.latestBuilds.limit{N}`: the N most recent builds.
    /// N must be in ``latestBuildsLimits`` (what the grammar parses); build
    /// it with ``latestBuilds(project:limit:)`` to have that checked.
    case projectLatestBuilds(String, limit: Int)
    /// `scheme.{id}`: one scheme.
    case scheme(String)
    /// `schemes.{id,…}.builds.ids[.{version}]`: build ids of schemes, newest first.
    case schemeBuildIds([String], version: String?)
    /// `build.{id}`: one build.
    case build(String)
    /// `build.{id}.logs.ids[.debug][.category{c}]`: log line ids, oldest
    /// first; debug lines only with `.debug`.
    case buildLogIds(String, includeDebug: Bool, category: String?)
    /// `build.{id}.crashLogs.ids`: a build's crash log ids, newest first.
    case buildCrashLogIds(String)
    /// `buildLog.{id}`: one log line.
    case buildLog(String)
    /// `crashLog.{id}`: one crash log.
    case crashLog(String)

    /// `models.all.ids`: every model id.
    case allModelIds
    /// `model.{id}`: one model.
    case model(String)
    /// `model.{id}.usage`: a model's usage, one row per day.
    case modelUsage(String)
    /// `session.{id}`: one generation session.
    case session(String)
    /// `session.{id}.generations`: a session's generations in sequence.
    case sessionGenerations(String)
    /// `telemetry.counts`: event name → number of events.
    case telemetryCounts
    /// `config.{id}`: a configuration row with its settings and policies.
    case configuration(String)
}

extension QueryKey {
    /// The tables whose changes can change the key's value: exactly those
    /// its ``fetch(_:)`` reads (a test checks it with SQLite's authorizer).
    public var observedTables: Set<String> {
        switch self {
        case .allProjectIds, .project: return ["projects"]
        case .projectVersionStrings, .projectDetail: return ["projects", "schemes", "builds"]
        // A project's builds are found through its schemes' project column:
        // the projects table itself is not read.
        case .projectBuildVersionStrings, .projectLatestBuilds: return ["schemes", "builds"]
        case .projectSchemeIds, .scheme: return ["schemes"]
        case .schemeBuildIds, .build: return ["builds"]
        case .buildLogIds, .buildLog: return ["buildLogs"]
        case .buildCrashLogIds, .crashLog: return ["crashLogs"]
        case .allModelIds, .model: return ["model_metadata"]
        case .modelUsage: return ["model_usage_stats"]
        case .session: return ["generation_sessions"]
        case .sessionGenerations: return ["generations"]
        case .telemetryCounts: return ["telemetry"]
        case .configuration: return ["configuration", "routing_policies", "analytics_config", "storage_config"]
        }
    }
}

extension QueryKey {
    /// The limits `project.{id}.latestBuilds.limit{N}` may carry: the range
    /// the parser accepts. The Lua builder, this type's builder and `fetch`
    /// use it too, so that a key built anywhere prints as a key that parses.
    public static let latestBuildsLimits: ClosedRange<Int> = 1...1_000_000

    /// `project.{id}.latestBuilds.limit{N}`, refusing a limit the key grammar
    /// does not parse back, with the parser's own error for that text.
    public static func latestBuilds(project id: String, limit: Int) throws(QueryKeyError) -> QueryKey {
        let key = QueryKey.projectLatestBuilds(id, limit: limit)
        if let error = key.limitError { throw error }
        return key
    }

    /// For a `latestBuilds` key whose limit is out of range: the error the
    /// parser gives for its printed form (pointing at the number).
    var limitError: QueryKeyError? {
        guard case let .projectLatestBuilds(_, limit) = self, !Self.latestBuildsLimits.contains(limit) else { return nil }
        let text = description
        let digits = String(limit).count
        return QueryKeyError(key: text, position: text.count - digits + 1,
                             expected: Self.latestBuildsLimitExpectation)
    }

    static let latestBuildsLimitExpectation =
        "a whole number from \(latestBuildsLimits.lowerBound) to \(latestBuildsLimits.upperBound) after 'limit'"
}
