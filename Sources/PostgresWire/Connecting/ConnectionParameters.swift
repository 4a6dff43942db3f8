/// libpq's order for filling in a connection's parameters: what the URL or
/// keyword/value string says, then its service (`service=` or
/// `PGSERVICE`, from a service file: ``ServiceFile``), then the `PG*`
/// environment variables, then the defaults (``PostgresURL``). Each source
/// fills only what the ones before it left out.
enum ConnectionParameters {
    /// The environment variables and the keyword each stands for, as libpq
    /// reads them.
    static let environmentVariables: [(variable: String, keyword: String)] = [
        ("PGHOST", "host"), ("PGHOSTADDR", "hostaddr"), ("PGPORT", "port"),
        ("PGDATABASE", "dbname"), ("PGUSER", "user"), ("PGPASSWORD", "password"),
        ("PGPASSFILE", "passfile"), ("PGOPTIONS", "options"), ("PGAPPNAME", "application_name"),
        ("PGSSLMODE", "sslmode"), ("PGCONNECT_TIMEOUT", "connect_timeout"),
        ("PGTARGETSESSIONATTRS", "target_session_attrs"), ("PGLOADBALANCEHOSTS", "load_balance_hosts"),
        ("PGSSLROOTCERT", "sslrootcert"), ("PGSSLCERT", "sslcert"), ("PGSSLKEY", "sslkey"),
        ("PGSSLNEGOTIATION", "sslnegotiation"), ("PGCHANNELBINDING", "channel_binding"),
    ]

    /// `explicit` followed by what its service and the environment add, in
    /// the order to apply them.
    static func resolve(_ explicit: [ConnectionSetting], environment: ConnectionEnvironment) throws -> [ConnectionSetting] {
        var resolved = explicit
        var given = Set(explicit.map(\.keyword))
        let service = explicit.last { $0.keyword == "service" }
            ?? environment["PGSERVICE"].map { ConnectionSetting("service", $0, from: .environment("PGSERVICE")) }
        if let service, !service.value.isEmpty {
            for setting in try ServiceFile.settings(ofService: service, environment: environment)
            where !given.contains(setting.keyword) {
                resolved.append(setting)
                given.insert(setting.keyword)
            }
        }
        for (variable, keyword) in environmentVariables where !given.contains(keyword) {
            if let value = environment[variable] {
                resolved.append(ConnectionSetting(keyword, value, from: .environment(variable)))
                given.insert(keyword)
            }
        }
        return resolved
    }
}
