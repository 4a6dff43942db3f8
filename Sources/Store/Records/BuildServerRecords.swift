import Foundation
import GRDB
import TextCodec

/// A project of the build server, keyed by its bundle identifier.
public struct ProjectRecord: StoreRecord, Hashable {
    public static let databaseTableName = "projects"
    public static let primaryKeyColumns = ["bundleIdentifier"]

    public var bundleIdentifier: String
    public var name: String
    public var displayName: String
    /// Where builds check the sources out from: a path or a git URL.
    public var gitRepositoryURL: String
    public var createdAt: Date

    public init(bundleIdentifier: String, name: String, displayName: String? = nil,
                gitRepositoryURL: String, createdAt: Date = Date()) {
        self.bundleIdentifier = bundleIdentifier
        self.name = name
        self.displayName = displayName ?? name
        self.gitRepositoryURL = gitRepositoryURL
        self.createdAt = createdAt
    }
}

/// A way to build a project: a command run in a checkout.
public struct SchemeRecord: StoreRecord, Hashable {
    public static let databaseTableName = "schemes"
    public static let primaryKeyColumns = ["id"]
    public static let jsonColumns = ["platforms"]

    public var id: String
    public var projectBundleIdentifier: String
    public var name: String
    public var order: Int
    /// Run with `/bin/sh -c` in the checkout.
    public var buildCommand: String
    /// A JSON array of platform names.
    public var platforms: JSONText

    public init(id: String = makeIdentifier(), projectBundleIdentifier: String, name: String,
                order: Int = 0, buildCommand: String = "", platforms: [String] = []) {
        self.id = id
        self.projectBundleIdentifier = projectBundleIdentifier
        self.name = name
        self.order = order
        self.buildCommand = buildCommand
        self.platforms = JSONText(.array(platforms.map(JSON.string)))
    }
}

/// Where a build is in its life.
public enum BuildStatus: String, Codable, Sendable, CaseIterable, DatabaseValueConvertible {
    case queued, running, succeeded, failed, cancelled

    /// Whether the build has ended.
    public var isFinished: Bool {
        switch self {
        case .succeeded, .failed, .cancelled: return true
        case .queued, .running: return false
        }
    }
}

/// One build of a scheme at a version.
public struct BuildRecord: StoreRecord, Hashable {
    public static let allowedValues = ["status": BuildStatus.allCases.map(\.rawValue)]
    public static let databaseTableName = "builds"
    public static let primaryKeyColumns = ["id"]

    public var id: String
    public var schemeId: String
    /// The revision asked for: a tag (`1.4.0`), a branch or a commit.
    public var versionString: String
    /// 1, 2, 3 … per scheme.
    public var buildNumber: Int
    public var status: BuildStatus
    public var createdAt: Date
    public var startDate: Date?
    public var endDate: Date?
    public var exitCode: Int?
    /// 0…1, from `[n/m]` lines of the build's output.
    public var progress: Double
    /// The commit that was checked out.
    public var commitHash: String?
    public var runnerHost: String?
    public var runnerPid: Int?
    public var runnerStartedAt: Date?

    public init(id: String = makeIdentifier(), schemeId: String, versionString: String,
                buildNumber: Int, status: BuildStatus = .queued, createdAt: Date = Date(),
                startDate: Date? = nil, endDate: Date? = nil, exitCode: Int? = nil,
                progress: Double = 0, commitHash: String? = nil, runnerHost: String? = nil,
                runnerPid: Int? = nil, runnerStartedAt: Date? = nil) {
        self.id = id
        self.schemeId = schemeId
        self.versionString = versionString
        self.buildNumber = buildNumber
        self.status = status
        self.createdAt = createdAt
        self.startDate = startDate
        self.endDate = endDate
        self.exitCode = exitCode
        self.progress = progress
        self.commitHash = commitHash
        self.runnerHost = runnerHost
        self.runnerPid = runnerPid
        self.runnerStartedAt = runnerStartedAt
    }
}

/// How loud a build log line is.
public enum BuildLogLevel: String, Codable, Sendable, CaseIterable, DatabaseValueConvertible {
    case debug, info, warning, error
}

/// One line of a build's output.
public struct BuildLogRecord: StoreRecord, Hashable {
    public static let allowedValues = ["level": BuildLogLevel.allCases.map(\.rawValue)]
    public static let databaseTableName = "buildLogs"
    public static let primaryKeyColumns = ["id"]

    public var id: String
    public var buildId: String
    public var level: BuildLogLevel
    /// checkout, build, test …
    public var category: String
    public var content: String
    public var createdAt: Date

    public init(id: String = makeIdentifier(), buildId: String, level: BuildLogLevel = .info,
                category: String = "build", content: String, createdAt: Date = Date()) {
        self.id = id
        self.buildId = buildId
        self.level = level
        self.category = category
        self.content = content
        self.createdAt = createdAt
    }
}

/// What is known of a build process that died by a signal.
public struct CrashLogRecord: StoreRecord, Hashable {
    public static let databaseTableName = "crashLogs"
    public static let primaryKeyColumns = ["incidentIdentifier"]

    public var incidentIdentifier: String
    public var buildId: String
    /// The last lines of output before the crash.
    public var content: String
    public var signal: Int?
    public var createdAt: Date

    public init(incidentIdentifier: String = makeIdentifier(), buildId: String, content: String,
                signal: Int? = nil, createdAt: Date = Date()) {
        self.incidentIdentifier = incidentIdentifier
        self.buildId = buildId
        self.content = content
        self.signal = signal
        self.createdAt = createdAt
    }
}
