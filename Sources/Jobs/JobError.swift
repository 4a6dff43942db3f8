import Store

/// Why the job manager refused or could not do something.
public enum JobError: Error, Equatable, Sendable, CustomStringConvertible {
    case unknownBuild(String)
    case unknownScheme(String)
    case schemeHasNoBuildCommand(schemeId: String, name: String)
    case projectHasNoRepository(project: String)
    case invalidVersion(String)
    /// `start` of a build that is not queued.
    case notQueued(id: String, status: BuildStatus)
    /// `start` of a build this manager already runs or has queued.
    case alreadyStarted(String)
    /// `start` of a queued build another job manager holds (an `opsh
    /// runner` claimed it, or another opsh started it).
    case heldByAnother(id: String, host: String, pid: Int)
    /// `delete` of a running build.
    case buildIsRunning(String)
    /// `cancel` of a build another process runs.
    case runByAnotherProcess(id: String, host: String, pid: Int)
    /// `wait` for a queued build that nobody started.
    case notStarted(String)
    case timedOut(id: String, seconds: Double)
    /// `markStale` of a build that is not running.
    case notRunning(id: String, status: BuildStatus)
    /// `markStale` of a build whose runner is alive.
    case runnerAlive(id: String, host: String, pid: Int)

    public var description: String {
        switch self {
        case let .unknownBuild(id):
            return "no build with id \(id)"
        case let .unknownScheme(id):
            return "no scheme with id \(id)"
        case let .schemeHasNoBuildCommand(id, name):
            return "scheme '\(name)' (\(id)) has no build command; set schemes.buildCommand first"
        case let .projectHasNoRepository(project):
            return "project \(project) has no git repository; set projects.gitRepositoryURL first"
        case let .invalidVersion(version):
            return "invalid version '\(version)': expected a tag, branch or commit name"
        case let .notQueued(id, status):
            return "build \(id) is \(status.rawValue), not queued; only a queued build can be started"
        case let .alreadyStarted(id):
            return "build \(id) is already started"
        case let .heldByAnother(id, host, pid):
            return "build \(id) was claimed first by pid \(pid) on \(host) (an opsh runner, or another opsh), which runs it; jobs.follow shows its log"
        case let .buildIsRunning(id):
            return "build \(id) is running; cancel it first"
        case let .runByAnotherProcess(id, host, pid):
            return "build \(id) is run by another opsh (pid \(pid) on \(host)); cancel it there, or markStale it if that process is gone"
        case let .notStarted(id):
            return "build \(id) is queued but was not started; start it first"
        case let .timedOut(id, seconds):
            return "build \(id) did not finish within \(seconds) s"
        case let .notRunning(id, status):
            return "build \(id) is \(status.rawValue), not running"
        case let .runnerAlive(id, host, pid):
            return "build \(id) is run by pid \(pid) on \(host), which is alive; pass force to mark it stale anyway"
        }
    }
}
