/// The repositories, one per aggregate, reached from the store.
extension Store {
    public var projects: ProjectRepository { ProjectRepository() }
    public var schemes: SchemeRepository { SchemeRepository() }
    public var builds: BuildRepository { BuildRepository() }
    public var buildLogs: BuildLogRepository { BuildLogRepository() }
    public var crashLogs: CrashLogRepository { CrashLogRepository() }
    public var configuration: ConfigurationRepository { ConfigurationRepository() }
    public var models: ModelRepository { ModelRepository() }
    public var sessions: SessionRepository { SessionRepository() }
    public var telemetry: TelemetryRepository { TelemetryRepository() }
}
