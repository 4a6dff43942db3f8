import GRDB

/// "001_initialSchema": every table of the domain.
///
/// Two families live in one file, each keeping the column naming of the
/// design document it comes from:
/// - the build server (seeds 000/001): camelCase columns, as the seed's
///   queries (`projectBundleIdentifier`, `versionString`, …);
/// - the on-device AI analytics (ARCHITECTURE.md): snake_case columns.
///
/// Dates are REAL seconds since 1970 (UTC), so that SQL and Lua can compare
/// them with `os.time()` and do arithmetic on them. JSON columns carry a
/// CHECK constraint: SQLite itself refuses invalid JSON, whoever writes.
enum Migration001InitialSchema {
    static let identifier = "001_initialSchema"

    static func migrate(_ db: Database) throws {
        try db.execute(sql: buildServer)
        try db.execute(sql: analytics)
    }

    static let buildServer = """
        CREATE TABLE projects (
            bundleIdentifier TEXT PRIMARY KEY NOT NULL CHECK (bundleIdentifier <> ''),
            name TEXT NOT NULL,
            displayName TEXT NOT NULL,
            gitRepositoryURL TEXT NOT NULL,
            createdAt REAL NOT NULL
        );

        -- Deleting a project deletes its schemes; a scheme with builds
        -- refuses (builds.schemeId is RESTRICT), so a project with builds is
        -- only deleted when asked to cascade (ProjectRepository.delete).
        CREATE TABLE schemes (
            id TEXT PRIMARY KEY NOT NULL,
            projectBundleIdentifier TEXT NOT NULL
                REFERENCES projects(bundleIdentifier) ON DELETE CASCADE ON UPDATE CASCADE,
            name TEXT NOT NULL,
            "order" INTEGER NOT NULL DEFAULT 0,
            buildCommand TEXT NOT NULL DEFAULT '',
            platforms TEXT NOT NULL DEFAULT '[]'
                CONSTRAINT platforms_is_json CHECK (json_valid(platforms)),
            UNIQUE (projectBundleIdentifier, name)
        );

        CREATE TABLE builds (
            id TEXT PRIMARY KEY NOT NULL,
            schemeId TEXT NOT NULL REFERENCES schemes(id) ON DELETE RESTRICT,
            versionString TEXT NOT NULL,
            buildNumber INTEGER NOT NULL CHECK (buildNumber > 0),
            status TEXT NOT NULL DEFAULT 'queued'
                CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
            createdAt REAL NOT NULL,
            startDate REAL,
            endDate REAL,
            exitCode INTEGER,
            progress REAL NOT NULL DEFAULT 0 CHECK (progress BETWEEN 0 AND 1),
            -- The revision that was checked out (tag, branch or commit) and its commit.
            commitHash TEXT,
            -- Who runs the build: with the pid and the process start time a
            -- build left running by a dead opsh is detectable as stale.
            runnerHost TEXT,
            runnerPid INTEGER,
            runnerStartedAt REAL,
            UNIQUE (schemeId, buildNumber)
        );

        CREATE TABLE buildLogs (
            id TEXT PRIMARY KEY NOT NULL,
            buildId TEXT NOT NULL REFERENCES builds(id) ON DELETE CASCADE,
            level TEXT NOT NULL DEFAULT 'info'
                CHECK (level IN ('debug', 'info', 'warning', 'error')),
            category TEXT NOT NULL DEFAULT 'build',
            content TEXT NOT NULL,
            createdAt REAL NOT NULL
        );

        CREATE TABLE crashLogs (
            incidentIdentifier TEXT PRIMARY KEY NOT NULL,
            buildId TEXT NOT NULL REFERENCES builds(id) ON DELETE CASCADE,
            content TEXT NOT NULL,
            signal INTEGER,
            createdAt REAL NOT NULL
        );
        """

    static let analytics = """
        CREATE TABLE configuration (
            id TEXT PRIMARY KEY NOT NULL,
            api_key TEXT,
            base_url TEXT NOT NULL,
            model_cache_size INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        );

        CREATE TABLE routing_policies (
            id TEXT PRIMARY KEY NOT NULL,
            configuration_id TEXT NOT NULL REFERENCES configuration(id) ON DELETE CASCADE,
            name TEXT NOT NULL,
            priority INTEGER NOT NULL DEFAULT 0,
            execution_target TEXT NOT NULL DEFAULT 'onDevice'
                CHECK (execution_target IN ('onDevice', 'cloud', 'hybrid')),
            conditions TEXT NOT NULL DEFAULT '{}'
                CONSTRAINT conditions_is_json CHECK (json_valid(conditions))
        );

        CREATE TABLE analytics_config (
            configuration_id TEXT PRIMARY KEY NOT NULL
                REFERENCES configuration(id) ON DELETE CASCADE,
            enabled INTEGER NOT NULL DEFAULT 1,
            sampling_rate REAL NOT NULL DEFAULT 1 CHECK (sampling_rate BETWEEN 0 AND 1),
            batch_size INTEGER NOT NULL DEFAULT 100,
            flush_interval_seconds REAL NOT NULL DEFAULT 60
        );

        CREATE TABLE storage_config (
            configuration_id TEXT PRIMARY KEY NOT NULL
                REFERENCES configuration(id) ON DELETE CASCADE,
            max_cache_size_bytes INTEGER NOT NULL DEFAULT 0,
            telemetry_retention_days INTEGER NOT NULL DEFAULT 30
                CHECK (telemetry_retention_days > 0),
            auto_cleanup INTEGER NOT NULL DEFAULT 1
        );

        CREATE TABLE model_metadata (
            id TEXT PRIMARY KEY NOT NULL,
            name TEXT NOT NULL,
            format TEXT NOT NULL,
            size_bytes INTEGER NOT NULL DEFAULT 0,
            framework TEXT NOT NULL,
            quantization TEXT,
            capabilities TEXT NOT NULL DEFAULT '[]'
                CONSTRAINT capabilities_is_json CHECK (json_valid(capabilities)),
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        );

        -- One row per model and UTC day.
        CREATE TABLE model_usage_stats (
            id INTEGER PRIMARY KEY,
            model_id TEXT NOT NULL REFERENCES model_metadata(id) ON DELETE CASCADE,
            day TEXT NOT NULL,
            generation_count INTEGER NOT NULL DEFAULT 0,
            total_tokens INTEGER NOT NULL DEFAULT 0,
            total_cost REAL NOT NULL DEFAULT 0,
            total_latency_ms REAL NOT NULL DEFAULT 0,
            error_count INTEGER NOT NULL DEFAULT 0,
            UNIQUE (model_id, day)
        );

        CREATE TABLE generation_sessions (
            id TEXT PRIMARY KEY NOT NULL,
            model_id TEXT NOT NULL REFERENCES model_metadata(id) ON DELETE RESTRICT,
            session_type TEXT NOT NULL DEFAULT 'chat',
            total_tokens INTEGER NOT NULL DEFAULT 0,
            total_cost REAL NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        );

        CREATE TABLE generations (
            id TEXT PRIMARY KEY NOT NULL,
            session_id TEXT NOT NULL REFERENCES generation_sessions(id) ON DELETE CASCADE,
            sequence_number INTEGER NOT NULL,
            prompt_tokens INTEGER NOT NULL DEFAULT 0,
            completion_tokens INTEGER NOT NULL DEFAULT 0,
            latency_ms REAL NOT NULL DEFAULT 0,
            cost REAL NOT NULL DEFAULT 0,
            execution_target TEXT NOT NULL DEFAULT 'onDevice'
                CHECK (execution_target IN ('onDevice', 'cloud', 'hybrid')),
            created_at REAL NOT NULL,
            UNIQUE (session_id, sequence_number)
        );

        -- Fire-and-forget events: no foreign key, so that the SDK never
        -- fails to record one.
        CREATE TABLE telemetry (
            id INTEGER PRIMARY KEY,
            event TEXT NOT NULL,
            properties TEXT
                CONSTRAINT properties_is_json CHECK (properties IS NULL OR json_valid(properties)),
            session_id TEXT,
            created_at REAL NOT NULL
        );
        """
}
