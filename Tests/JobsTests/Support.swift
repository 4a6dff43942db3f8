import Foundation
import Jobs
import Store

/// A database, a git repository (tags 1.0.0 and 1.1.0, version.txt holding
/// the version), a project on it, and a job manager with a short grace.
struct Fixture {
    let directory = TemporaryDirectory()
    let store: Store
    let repository: String
    let jobs: JobManager

    init(maxConcurrentJobs: Int = 2, cancelGracePeriod: TimeInterval = 0.3, lingerAfterExit: TimeInterval = 1,
         configure: (inout JobManager.Configuration) -> Void = { _ in }) throws {
        store = try Store.open(path: directory.file("data/opsh.sqlite"))
        repository = directory.file("repo")
        try sh("""
            set -e
            git init -q -b main '\(repository)'
            cd '\(repository)'
            echo 1.0.0 > version.txt; git add version.txt; git commit -q -m one; git tag 1.0.0
            echo 1.1.0 > version.txt; git commit -q -am two; git tag -a 1.1.0 -m "release 1.1.0"
            """)
        var configuration = JobManager.Configuration()
        configuration.maxConcurrentJobs = maxConcurrentJobs
        configuration.cancelGracePeriod = cancelGracePeriod
        configuration.lingerAfterExit = lingerAfterExit
        configure(&configuration)
        jobs = JobManager(store: store, configuration: configuration)
        let repository = self.repository
        _ = try store.client.write { db in
            try store.projects.records.insert(db, ProjectRecord(bundleIdentifier: "com.example.app", name: "App",
                                                                gitRepositoryURL: repository))
        }
    }

    /// A scheme of the project whose build command is `command`.
    func scheme(_ command: String, name: String = "App") throws -> SchemeRecord {
        try store.client.write { db in
            try store.schemes.records.insert(db, SchemeRecord(projectBundleIdentifier: "com.example.app", name: name,
                                                              buildCommand: command))
        }
    }

    /// Every log line of a build, oldest first, read page by page.
    func allLogs(_ id: String) throws -> [BuildLogLine] {
        var lines: [BuildLogLine] = []
        var cursor: Int64 = 0
        while true {
            let page = try jobs.logs(id, after: cursor, limit: 500)
            guard let last = page.last else { return lines }
            lines += page
            cursor = last.cursor
        }
    }
}

/// Whether a process exists and is not a zombie.
func isRunning(_ pid: Int32) -> Bool {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
          let close = stat.lastIndex(of: ")") else { return false }
    let state = stat[stat.index(close, offsetBy: 2)]
    return state != "Z" && state != "X"
}
