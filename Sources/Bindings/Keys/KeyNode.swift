import Store

/// One step of the Lua key builder (`key.project(id).latestBuilds(3)`).
///
/// A node may name a complete key (``key``), lead on to further nodes by
/// field (``field(_:)``) or by call (``callable``), or both:
/// `key.build(id)` is a key and `.logs` continues it. The builder mirrors
/// the textual vocabulary of ``QueryKeyParser``: field names are its
/// words, ids are call arguments, so no script ever concatenates a key.
final class KeyNode: Sendable {
    enum Kind: Sendable {
        case projects, projectsAll
        case project(String), projectSchemes(String), projectLatestBuilds(String)
        case schemes([String]), schemesBuilds([String]), schemeBuildIds([String])
        case build(String), buildLogs(String), buildLogIds(String, debug: Bool), buildLogCategory(String, debug: Bool)
        case buildCrashLogs(String)
        case models, modelsAll
        case model(String), session(String), telemetry
        case config
        /// A key with nothing after it.
        case leaf
    }

    /// How a callable node is called, for messages.
    enum CallShape {
        /// `(n)` a limit.
        case limit
        /// `("1.2.0")` a version.
        case version
        /// `{ debug = true, category = "build" }`.
        case logOptions
        /// `(name)` a category.
        case category
        /// `(id)` a configuration id.
        case configurationID
    }

    let kind: Kind
    /// The complete key this node names, if it names one.
    let key: QueryKey?
    /// The text so far (`project."com.example.app".latestBuilds`), for messages.
    let text: String

    init(_ kind: Kind, key: QueryKey?, text: String) {
        self.kind = kind
        self.key = key
        self.text = text
    }

    static func leaf(_ key: QueryKey) -> KeyNode {
        KeyNode(.leaf, key: key, text: key.description)
    }

    static func project(_ id: String) -> KeyNode {
        KeyNode(.project(id), key: .project(id), text: "project.\(QueryKeyPrinter.id(id))")
    }

    static func schemes(_ ids: [String]) -> KeyNode {
        KeyNode(.schemes(ids), key: nil, text: "schemes." + ids.map(QueryKeyPrinter.id).joined(separator: ","))
    }

    static func build(_ id: String) -> KeyNode {
        KeyNode(.build(id), key: .build(id), text: "build.\(QueryKeyPrinter.id(id))")
    }

    static func model(_ id: String) -> KeyNode {
        KeyNode(.model(id), key: .model(id), text: "model.\(QueryKeyPrinter.id(id))")
    }

    static func session(_ id: String) -> KeyNode {
        KeyNode(.session(id), key: .session(id), text: "session.\(QueryKeyPrinter.id(id))")
    }

    static let projects = KeyNode(.projects, key: nil, text: "projects")
    static let models = KeyNode(.models, key: nil, text: "models")
    static let telemetry = KeyNode(.telemetry, key: nil, text: "telemetry")
    static let config = KeyNode(.config, key: .configuration("default"), text: "config")

    /// The field names that continue this node.
    var fieldNames: [String] {
        switch kind {
        case .projects: return ["all", "versionStrings"]
        case .projectsAll, .projectSchemes, .schemesBuilds, .buildCrashLogs, .modelsAll: return ["ids"]
        case .project: return ["detail", "schemes", "buildVersionStrings", "latestBuilds"]
        case .schemes: return ["builds"]
        case .build: return ["logs", "crashLogs"]
        case .buildLogs: return ["ids"]
        case let .buildLogIds(_, debug): return debug ? ["category"] : ["debug", "category"]
        case .models: return ["all"]
        case .model: return ["usage"]
        case .session: return ["generations"]
        case .telemetry: return ["counts"]
        case .projectLatestBuilds, .schemeBuildIds, .buildLogCategory, .config, .leaf: return []
        }
    }

    /// What a call of this node takes, if it can be called.
    var callShape: CallShape? {
        switch kind {
        case .projectLatestBuilds: return .limit
        case .schemeBuildIds: return .version
        case .buildLogs: return .logOptions
        case .buildLogCategory: return .category
        case .config: return .configurationID
        default: return nil
        }
    }

    /// The node a field leads to, nil when `name` does not continue it.
    func field(_ name: String) -> KeyNode? {
        let next = text + "." + name
        switch (kind, name) {
        case (.projects, "all"): return KeyNode(.projectsAll, key: nil, text: next)
        case (.projects, "versionStrings"): return .leaf(.projectVersionStrings)
        case (.projectsAll, "ids"): return .leaf(.allProjectIds)
        case let (.project(id), "detail"): return .leaf(.projectDetail(id))
        case let (.project(id), "schemes"): return KeyNode(.projectSchemes(id), key: nil, text: next)
        case let (.project(id), "buildVersionStrings"): return .leaf(.projectBuildVersionStrings(id))
        case let (.project(id), "latestBuilds"): return KeyNode(.projectLatestBuilds(id), key: nil, text: next)
        case let (.projectSchemes(id), "ids"): return .leaf(.projectSchemeIds(id))
        case let (.schemes(ids), "builds"): return KeyNode(.schemesBuilds(ids), key: nil, text: next)
        case let (.schemesBuilds(ids), "ids"):
            return KeyNode(.schemeBuildIds(ids), key: .schemeBuildIds(ids, version: nil), text: next)
        case let (.build(id), "logs"): return KeyNode(.buildLogs(id), key: nil, text: next)
        case let (.build(id), "crashLogs"): return KeyNode(.buildCrashLogs(id), key: nil, text: next)
        case let (.buildLogs(id), "ids"): return Self.logIds(id, debug: false, category: nil)
        case let (.buildLogIds(id, false), "debug"): return Self.logIds(id, debug: true, category: nil)
        case let (.buildLogIds(id, debug), "category"):
            return KeyNode(.buildLogCategory(id, debug: debug), key: nil, text: next)
        case let (.buildCrashLogs(id), "ids"): return .leaf(.buildCrashLogIds(id))
        case (.models, "all"): return KeyNode(.modelsAll, key: nil, text: next)
        case (.modelsAll, "ids"): return .leaf(.allModelIds)
        case let (.model(id), "usage"): return .leaf(.modelUsage(id))
        case let (.session(id), "generations"): return .leaf(.sessionGenerations(id))
        case (.telemetry, "counts"): return .leaf(.telemetryCounts)
        default: return nil
        }
    }

    static func logIds(_ id: String, debug: Bool, category: String?) -> KeyNode {
        let key = QueryKey.buildLogIds(id, includeDebug: debug, category: category)
        return KeyNode(category == nil ? .buildLogIds(id, debug: debug) : .leaf, key: key, text: key.description)
    }

    /// How the rest of an incomplete key can go on, for messages.
    var continuation: String {
        var ways = fieldNames.map { ".\($0)" }
        switch callShape {
        case .limit: ways.append("(n), e.g. latestBuilds(5)")
        case .version: ways.append("(\"1.2.0\")")
        case .logOptions: ways.append("{ debug = true, category = \"build\" }")
        case .category: ways.append("(\"build\")")
        case .configurationID: ways.append("(id)")
        case nil: break
        }
        return ways.joined(separator: " or ")
    }
}
