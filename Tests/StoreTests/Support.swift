import Foundation
import GRDB
import Synchronization
@testable import Store

/// Collects values delivered on other threads, and waits for them.
final class Collector<Value: Sendable>: Sendable {
    private let values = Mutex<[Value]>([])

    func append(_ value: Value) { values.withLock { $0.append(value) } }

    var all: [Value] { values.withLock { $0 } }

    /// Waits until `condition` holds for the collected values, or `timeout`.
    @discardableResult
    func wait(timeout: TimeInterval = 5, until condition: ([Value]) -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if condition(all) { return true }
            usleep(2_000)
        }
        return condition(all)
    }
}

/// A store on a new file in `directory`, with a fast external-change poll.
func makeStore(in directory: TemporaryDirectory, name: String = "opsh.sqlite") throws -> Store {
    try Store.open(path: directory.file(name), options: StoreOptions(externalChangePollInterval: 0.02))
}

/// A project with one scheme, inserted; returns the scheme.
@discardableResult
func seedProject(_ store: Store, id: String = "com.example.app", scheme: String = "App") throws -> SchemeRecord {
    try store.client.write { db in
        if try store.projects.records.get(db, id) == nil {
            try store.projects.records.insert(db, ProjectRecord(bundleIdentifier: id, name: "App", gitRepositoryURL: "/srv/repos/app"))
        }
        return try store.schemes.records.insert(db, SchemeRecord(projectBundleIdentifier: id, name: scheme, buildCommand: "make"))
    }
}

func fileBytes(_ path: String) -> Data {
    FileManager.default.contents(atPath: path) ?? Data()
}
