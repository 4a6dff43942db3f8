import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Separate hosts on one machine, for `opsh runner` processes that share a
/// PostgreSQL database (README, "A fleet on PostgreSQL"): each host is a
/// network namespace of its own (`ip netns add`), joined to this machine
/// by a veth pair whose two ends have addresses of their own, and a
/// runner started on it (``command(on:_:_:)``) also gets a UTS namespace
/// of its own with the host's name (`unshare --uts`). So to the server
/// each runner connects from its own address (`pg_stat_activity.client_addr`),
/// and to opsh it runs on its own host (`runnerHost`, from gethostname).
/// The processes still share this machine's file system and pids: only
/// the network and the host name are the host's.
///
/// The server is one of its own (``server``): `scripts/pg-server start DIR
/// --listen ADDR/PREFIX` on this machine's end of each veth pair, trusting
/// only those networks. Addresses are a /28 of 198.18.0.0/15 (RFC 2544's
/// range for benchmarks and tests, never routed), picked from this
/// process's pid and passed over if this machine already has an address
/// or route in it; each host is a /30 of it: this machine's end `.4i+1`,
/// the host's `.4i+2`.
///
/// Names carry this process's pid (`opsh-PID-N` namespaces, `opshPIDvN`
/// links); ``remove()`` (also at deinit) stops the server, kills what still
/// runs in the namespaces, and deletes exactly the namespaces and links it
/// made, whatever the test did: nothing else is touched.
///
/// Namespaces need root (CAP_NET_ADMIN, CAP_SYS_ADMIN). Where they cannot
/// be made, ``unavailable`` says why (tried once for real), the tests that
/// need them are skipped saying so, unless `OPSH_REQUIRE_NETNS=1`
/// (`.ci/run` sets it: CI runs as root), which makes it a failure.
final class RunnerHosts: @unchecked Sendable {
    struct Host: Sendable {
        /// Its host name (`ci-1`), what opsh records as `runnerHost`.
        let name: String
        let namespace: String
        /// Its end of the veth pair: where its connections come from.
        let address: String
        /// This machine's end of the veth pair: where the server listens for it.
        let serverAddress: String
    }

    let hosts: [Host]
    let server: PostgresServer
    private var namespaces: [String] = []
    private var links: [String] = []
    private var removed = false

    subscript(index: Int) -> Host { hosts[index] }

    /// Hosts named `names` (at most 4), and a server listening for them.
    init(names: [String]) throws {
        precondition(names.count <= 4, "a /28 holds four /30s")
        if let reason = Self.unavailable {
            throw HostsError(message: "separate hosts are required (OPSH_REQUIRE_NETNS=1), but network namespaces cannot be made here: \(reason)")
        }
        let pid = Int(getpid())
        let block = try Self.freeBlock(from: pid)
        var hosts: [Host] = []
        do {
            for (index, name) in names.enumerated() {
                let namespace = "opsh-\(pid)-\(index + 1)"
                let link = "opsh\(pid)v\(index + 1)"
                let serverAddress = Self.address(block + UInt32(4 * index + 1))
                let address = Self.address(block + UInt32(4 * index + 2))
                try Self.ip(["netns", "add", namespace])
                namespaces.append(namespace)
                try Self.ip(["link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", namespace])
                links.append(link)
                try Self.ip(["addr", "add", "\(serverAddress)/30", "dev", link])
                try Self.ip(["link", "set", link, "up"])
                try Self.ip(["-n", namespace, "addr", "add", "\(address)/30", "dev", "eth0"])
                try Self.ip(["-n", namespace, "link", "set", "eth0", "up"])
                try Self.ip(["-n", namespace, "link", "set", "lo", "up"])
                hosts.append(Host(name: name, namespace: namespace, address: address, serverAddress: serverAddress))
            }
            self.hosts = hosts
            server = try PostgresServer.start(in: "/tmp/opsh-pgnet-\(pid)", listen: hosts.map { "\($0.serverAddress)/30" })
        } catch {
            Self.delete(namespaces: namespaces, links: links)
            throw error
        }
    }

    deinit { remove() }

    /// Stops the server and deletes the namespaces and links this made
    /// (killing whatever still runs in its namespaces first). Safe to call twice.
    func remove() {
        guard !removed else { return }
        removed = true
        server.stop()
        Self.delete(namespaces: namespaces, links: links)
    }

    private static func delete(namespaces: [String], links: [String]) {
        for namespace in namespaces {
            let pids = (try? run(ipPath, ["netns", "pids", namespace]))?.stdout.split(separator: "\n") ?? []
            for pid in pids.compactMap({ pid_t($0) }) { kill(pid, SIGKILL) }
            _ = try? run(ipPath, ["netns", "delete", namespace])
        }
        // A veth pair goes with its namespace; this one's end only if still there.
        for link in links where (try? run(ipPath, ["link", "show", link]))?.status == 0 {
            _ = try? run(ipPath, ["link", "delete", link])
        }
    }

    /// `executable arguments` on `host`: in its network namespace, and in a
    /// UTS namespace of its own with the host's name. Each step execs the
    /// next (`ip netns exec`, `unshare` without `--fork`, `sh -c 'exec'`), so
    /// the process started is the executable itself: its pid is the one
    /// started, and a signal sent to it reaches it.
    func command(on host: Host, _ executable: String, _ arguments: [String]) -> (executable: String, arguments: [String]) {
        (Self.ipPath, ["netns", "exec", host.namespace, Self.unsharePath, "--uts", "--", "/bin/sh", "-c",
                       "echo \"$0\" > /proc/sys/kernel/hostname && exec \"$@\"", host.name, executable] + arguments)
    }

    // MARK: Whether namespaces can be made here

    /// Why network namespaces cannot be made here (tried once for real:
    /// a namespace, a veth pair into it, a UTS namespace inside it), or nil.
    static let unavailable: String? = {
        let reason = probe()
        if let reason {
            // Said where the test log shows it, beside Swift Testing's skip line.
            FileHandle.standardError.write(Data("""
                RunnerHosts: no separate hosts here: \(reason). The tests that run opsh runners on separate hosts \
                are \(required ? "failing (OPSH_REQUIRE_NETNS=1)" : "skipped (OPSH_REQUIRE_NETNS=1 makes this a failure)").

                """.utf8))
        }
        return reason
    }()

    /// `OPSH_REQUIRE_NETNS=1`: where namespaces cannot be made, the tests
    /// that need them fail instead of being skipped.
    static let required = ProcessInfo.processInfo.environment["OPSH_REQUIRE_NETNS"] == "1"

    /// Whether the tests that need separate hosts run: they can, or they must.
    static var enabled: Bool { unavailable == nil || required }

    static let skipReason: Comment = """
        separate hosts need network and UTS namespaces (root: CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2; \
        they could not be made here (the reason is on stderr); OPSH_REQUIRE_NETNS=1 makes this a failure
        """

    private static func probe() -> String? {
        guard geteuid() == 0 else { return "not root (euid \(geteuid()))" }
        guard FileManager.default.isExecutableFile(atPath: ipPath) else { return "no \(ipPath) (iproute2; scripts/setup installs it)" }
        guard FileManager.default.isExecutableFile(atPath: unsharePath) else { return "no \(unsharePath) (util-linux)" }
        let namespace = "opsh-\(getpid())-probe"
        let link = "opsh\(getpid())p"
        // What it made, and only that, is deleted.
        var made: (namespaces: [String], links: [String]) = ([], [])
        defer { delete(namespaces: made.namespaces, links: made.links) }
        let steps: [(arguments: [String], makes: (namespace: String?, link: String?))] = [
            (["netns", "add", namespace], (namespace, nil)),
            (["link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", namespace], (nil, link)),
            (["netns", "exec", namespace, unsharePath, "--uts", "--", "/bin/sh", "-c", "echo probe > /proc/sys/kernel/hostname"], (nil, nil)),
        ]
        for step in steps {
            let command = "ip " + step.arguments.joined(separator: " ")
            do {
                let result = try run(ipPath, step.arguments)
                guard result.status == 0 else {
                    return "\(command): exit \(result.status): \(result.stderr.trimmingCharacters(in: .whitespacesAndNewlines))"
                }
            } catch {
                return "\(command): \(error)"
            }
            if let namespace = step.makes.namespace { made.namespaces.append(namespace) }
            if let link = step.makes.link { made.links.append(link) }
        }
        return nil
    }

    // MARK: Helpers

    static let ipPath = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
        .first { FileManager.default.isExecutableFile(atPath: $0) } ?? "/sbin/ip"
    static let unsharePath = ["/usr/bin/unshare", "/bin/unshare"]
        .first { FileManager.default.isExecutableFile(atPath: $0) } ?? "/usr/bin/unshare"

    struct HostsError: Error, CustomStringConvertible {
        var message: String
        var description: String { message }
    }

    private static func run(_ executable: String, _ arguments: [String]) throws -> TestFolder.Result {
        try ChildProcess.start(executable, arguments, environment: ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C"]).finish()
    }

    @discardableResult
    private static func ip(_ arguments: [String]) throws -> TestFolder.Result {
        let result = try run(ipPath, arguments)
        guard result.status == 0 else {
            throw HostsError(message: "ip \(arguments.joined(separator: " ")): exit \(result.status): \(result.stderr)")
        }
        return result
    }

    /// 198.18.0.0/15 as a number, and its /28s.
    private static let range: UInt32 = 198 << 24 | 18 << 16
    private static let blocks: UInt32 = 1 << 13

    private static func address(_ value: UInt32) -> String {
        "\(value >> 24).\(value >> 16 & 255).\(value >> 8 & 255).\(value & 255)"
    }

    /// The first of 16 /28s from `pid`'s on that no address or route of
    /// this machine overlaps (in any table; the default route aside).
    private static func freeBlock(from pid: Int) throws -> UInt32 {
        for step in 0..<16 {
            let block = range + (UInt32(pid + step) % blocks) * 16
            let cidr = address(block) + "/28"
            let inside = try ip(["-4", "route", "show", "table", "all", "root", cidr]).stdout
            let around = try ip(["-4", "route", "show", "table", "all", "match", cidr]).stdout
                .split(separator: "\n").filter { !$0.hasPrefix("default") }
            if inside.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty && around.isEmpty { return block }
        }
        throw HostsError(message: "no free /28 in 198.18.0.0/15 near \(pid % Int(blocks)) (this machine has addresses or routes there)")
    }
}
