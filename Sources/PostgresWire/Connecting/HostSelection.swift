/// Choosing the server among a URL's hosts, as libpq does: each host in
/// order (shuffled with `load_balance_hosts=random`), each within
/// `connect_timeout`; the first that accepts the login and suits
/// `target_session_attrs` is kept. A host that cannot be reached, does not
/// answer in time or does not suit is passed over for the next; a server
/// that refuses the login (a wrong password, no such database) ends the
/// search, as in libpq. When none will do, the error names every host
/// tried and why each failed. Every connection opsh makes (the session's,
/// the build queue's, the listener's, run locks', maintenance's) opens
/// here, so each picks its server the same way.
extension PostgresConnection {
    func openOneOfTheHosts(timeLimit: Double?, settings: [(name: String, value: String)]) throws {
        let started = monotonicSeconds()
        let order = url.loadBalanceHosts ? url.hosts.shuffled() : url.hosts
        // prefer-standby: a standby among all the hosts first, then any.
        let passes: [PostgresURL.TargetSessionAttributes] =
            url.targetSessionAttributes == .preferStandby ? [.standby, .any] : [url.targetSessionAttributes]
        var failures: [String] = []
        var lastError: (any Error)? = nil
        for requirement in passes {
            for host in order {
                // The caller's time limit covers every host; connect_timeout each.
                var seconds = url.connectTimeout
                if let timeLimit {
                    let remaining = timeLimit - (monotonicSeconds() - started)
                    if remaining <= 0 {
                        throw PostgresClientError.timedOut(
                            failures.isEmpty ? "no host answered" : "no host would do (\(failures.joined(separator: "; ")))",
                            seconds: timeLimit)
                    }
                    // The first host gets the limit itself, so its time-out reports it.
                    if failures.isEmpty, timeLimit < seconds { seconds = timeLimit } else { seconds = min(seconds, remaining) }
                }
                do {
                    try open(host, seconds: seconds, settings: settings)
                    if let refusal = try unsuitability(for: requirement) {
                        closeForTheNextHost()
                        failures.append("\(host): \(refusal)")
                        continue
                    }
                    exchangeCount = 0
                    return
                } catch let error as PostgresClientError {
                    closeForTheNextHost()
                    switch error {
                    case .connectionFailed(var reason), .timedOut(var reason, _), .connectionClosed(var reason):
                        if case .timedOut(_, let limit) = error { reason += " within \(formatSeconds((limit * 10).rounded() / 10)) seconds" }
                        failures.append(names(host, reason) ? reason : "\(host): \(reason)")
                        lastError = error
                    default:
                        throw error
                    }
                } catch var error as PostgresError {
                    // The server refused the login: libpq tries no other host.
                    // A wrong password from the password file says so, as libpq does.
                    if error.code == "28P01", let file = passwordFile {
                        error.hint = "the password was read from the password file \(KeywordValueString.visible(file))"
                    }
                    closeForTheNextHost()
                    throw error
                } catch {
                    closeForTheNextHost()
                    throw error
                }
            }
        }
        // One host and no requirement: its own error, as before several hosts were read.
        if url.hosts.count == 1, url.targetSessionAttributes == .any, let lastError { throw lastError }
        let wanted = url.targetSessionAttributes == .any ? "" : " with target_session_attrs=\(url.targetSessionAttributes.rawValue)"
        let summary = "no server\(wanted) among the \(url.hosts.count) host(s) tried: \(failures.joined(separator: "; "))"
        // The caller's time limit ran out on the last host: a time-out, as the caller counts it.
        if let timeLimit, monotonicSeconds() - started >= timeLimit {
            throw PostgresClientError.timedOut(summary, seconds: timeLimit)
        }
        throw PostgresClientError.connectionFailed(summary)
    }

    /// Whether `reason` already starts with the host it is about.
    private func names(_ host: PostgresURL.Host, _ reason: String) -> Bool {
        if reason.hasPrefix(host.description) { return true }
        if case .unixSocket(let path) = host.endpoint { return reason.hasPrefix(path) }
        return false
    }

    /// Connects to `host` and logs in, within `seconds`.
    private func open(_ host: PostgresURL.Host, seconds: Double, settings: [(name: String, value: String)]) throws {
        connectedHost = host
        loginPassword = url.password
        passwordFile = nil
        if loginPassword == nil, let file = url.passFile,
           let password = PassFile.password(in: file, host: host, database: url.database, user: url.user) {
            loginPassword = password
            passwordFile = file
        }
        let deadline = monotonicSeconds() + seconds
        let tls = try TLSSettings(url, host: host)
        var encrypt = tls?.startsEncrypted ?? false
        // sslmode prefer and allow try once more the other way (libpq):
        // prefer in clear text after a failed TLS start or a login refused
        // over TLS, allow with TLS after a login refused in clear text.
        var triedTheOtherWay = false
        while true {
            let socket = try Socket.connect(to: host.endpoint, timeout: triedTheOtherWay ? max(deadline - monotonicSeconds(), 0) : seconds)
            self.socket = socket
            do {
                if encrypt, let tls {
                    do {
                        encrypt = try socket.startTLS(tls, endpoint: host.endpoint, deadline: deadline, limit: seconds)
                    } catch let error as PostgresClientError where tls.mode == .prefer && !triedTheOtherWay && !error.isTimeout {
                        socket.close()
                        triedTheOtherWay = true
                        encrypt = false
                        continue
                    }
                }
                try startUp(deadline: deadline, limit: seconds, settings: settings)
                cancelTLS = socket.tls == nil ? nil : tls?.requiringEncryption()
                return
            } catch is PostgresError where !triedTheOtherWay && tls?.triesAgain(wasEncrypted: socket.tls != nil) == true {
                socket.close()
                self.socket = nil
                inbox.reset()
                serverParameters = [:]
                triedTheOtherWay = true
                encrypt.toggle()
            } catch {
                socket.close()
                self.socket = nil
                throw error
            }
        }
    }

    /// Why the server just reached does not suit `requirement` (libpq's
    /// words), or nil when it does.
    private func unsuitability(for requirement: PostgresURL.TargetSessionAttributes) throws -> String? {
        func value(_ sql: String) throws -> String {
            try simpleQuery(sql).first?.scalar?.description ?? ""
        }
        switch requirement {
        case .any, .preferStandby:
            return nil
        case .readWrite:
            return try value("SHOW transaction_read_only") == "on" ? "session is read-only" : nil
        case .readOnly:
            return try value("SHOW transaction_read_only") == "on" ? nil : "session is not read-only"
        case .primary:
            return try value("SELECT pg_is_in_recovery()") == "true" ? "server is in hot standby mode" : nil
        case .standby:
            return try value("SELECT pg_is_in_recovery()") == "true" ? nil : "server is not in hot standby mode"
        }
    }

    /// Closes the connection to a host given up on and forgets what it said.
    private func closeForTheNextHost() {
        close()
        inbox.reset()
        serverParameters = [:]
        processID = 0
        secretKey = 0
        transactionStatus = .idle
        notices = []
        notifications = []
        exchangeCount = 0
        cancelTLS = nil
    }
}
