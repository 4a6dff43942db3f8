import Foundation
import Testing

/// The systemd units in contrib/systemd (docs/runners.md, "Under systemd"):
/// each one as systemd itself reads it, `systemd-analyze verify` (Debian's
/// `systemd` package; scripts/setup installs it for CI), with opsh's
/// executable where the unit names /usr/local/bin/opsh (verify checks that
/// ExecStart= can run). A warning is a failure: systemd ignores a setting
/// it cannot read and starts the unit without it.
@Suite struct SystemdUnitTests {
    static let analyze = "/usr/bin/systemd-analyze"
    static let units = DocsTests.root + "/contrib/systemd"

    static func unitFiles() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: units)
            .filter { $0.hasSuffix(".service") || $0.hasSuffix(".timer") }.sorted()
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: analyze),
                   "systemd-analyze is not installed (Debian's systemd package; scripts/setup installs it)"))
    func everyUnitInContribPassesSystemdAnalyzeVerify() throws {
        let sandbox = try Sandbox()
        let files = try Self.unitFiles()
        #expect(files == ["opsh-runner.service", "opsh-runner@.service", "opsh-script@.service", "opsh-script@.timer"], "\(files)")
        for file in files {
            let text = try String(contentsOfFile: Self.units + "/" + file, encoding: .utf8)
            #expect(!file.hasSuffix(".service") || text.contains("ExecStart=/usr/local/bin/opsh "), "\(file) runs opsh from /usr/local/bin")
            try text.replacingOccurrences(of: "/usr/local/bin/opsh", with: opshExecutable)
                .write(toFile: sandbox.root + "/" + file, atomically: true, encoding: .utf8)
        }
        for file in files {
            // Each with the others beside it (the timer's service).
            let result = try sandbox.run(Self.analyze, ["verify", "--man=no", sandbox.root + "/" + file])
            #expect(result.status == 0, "\(file): \(result.stderr)")
            #expect(result.stderr.isEmpty && result.stdout.isEmpty, "\(file) has settings systemd does not take:\n\(result.stderr)\(result.stdout)")
        }

        // Control: verify does see a setting it cannot take.
        let broken = try String(contentsOfFile: sandbox.root + "/opsh-runner.service", encoding: .utf8)
            .replacingOccurrences(of: "Type=notify\n", with: "Type=notify-please\n")
        try broken.write(toFile: sandbox.root + "/broken.service", atomically: true, encoding: .utf8)
        let refused = try sandbox.run(Self.analyze, ["verify", "--man=no", sandbox.root + "/broken.service"])
        #expect(refused.stderr.contains("Failed to parse service type"), "\(refused.stderr)")
    }

    /// The watchdog must allow the heartbeats it is fed from: a runner
    /// beats every --heartbeat seconds, and systemd restarts it after
    /// WatchdogSec= without one.
    @Test func theRunnersWatchdogAllowsThreeHeartbeats() throws {
        for file in ["opsh-runner.service", "opsh-runner@.service"] {
            let text = try String(contentsOfFile: Self.units + "/" + file, encoding: .utf8)
            let lines = text.split(separator: "\n").map(String.init)
            let watchdog = lines.first { $0.hasPrefix("WatchdogSec=") }.flatMap { Double($0.dropFirst("WatchdogSec=".count)) }
            let execStart = lines.first { $0.hasPrefix("ExecStart=") }?.split(separator: " ").map(String.init) ?? []
            let heartbeat = execStart.firstIndex(of: "--heartbeat").flatMap { Double(execStart[$0 + 1]) }
            #expect(lines.contains("Type=notify") && lines.contains("KillMode=mixed"), "\(file)")
            #expect(lines.contains { $0.hasPrefix("EnvironmentFile=") }, "\(file): the database comes from an environment file")
            guard let watchdog, let heartbeat else {
                Issue.record("\(file): WatchdogSec= \(String(describing: watchdog)), --heartbeat \(String(describing: heartbeat))")
                continue
            }
            #expect(watchdog >= 3 * heartbeat, "\(file): WatchdogSec=\(watchdog) for --heartbeat \(heartbeat)")
        }
    }
}
