/// Rows in which every query key form finds something, written in SQL
/// both engines run (StoreTests' QueryKeyEngineTests, OpshTests'
/// QueryKeyValueTests).
public enum QueryKeyRows {
    /// Rows that every form finds something in: ids and names whose byte
    /// order differs from a language's (`Zeta` before `a"b` before `beta`),
    /// log lines of one instant written out of id order, version strings
    /// that sort differently as text and as numbers.
    public static let seed = """
        INSERT INTO projects (bundleIdentifier, name, displayName, gitRepositoryURL, createdAt) VALUES
          ('com.example.app', 'app', 'App', '/srv/app', 1), ('Zeta', 'zeta', 'Zeta', '/srv/z', 2), ('a"b', 'quoted', 'Quoted', '/srv/q', 3);
        INSERT INTO schemes (id, projectBundleIdentifier, name, "order") VALUES
          ('s1', 'com.example.app', 'Release', 0), ('s.2', 'com.example.app', 'beta', 1), ('S3', 'com.example.app', 'Debug', 1),
          ('z1', 'Zeta', 'Main', 0);
        INSERT INTO builds (id, schemeId, versionString, buildNumber, status, createdAt) VALUES
          ('b1', 's1', '1.2.0', 1, 'succeeded', 10), ('b2', 's1', '1.2.0', 2, 'failed', 20),
          ('b3', 's.2', '1.10.0', 3, 'running', 30), ('b4', 'S3', 'V2', 4, 'queued', 40), ('b5', 'S3', 'v1', 5, 'queued', 40),
          ('zb', 'z1', '9.0', 1, 'queued', 5);
        INSERT INTO buildLogs (id, buildId, level, category, content, createdAt) VALUES ('l9', 'b3', 'info', 'build', 'compiling', 1);
        INSERT INTO buildLogs (id, buildId, level, category, content, createdAt) VALUES ('l2', 'b3', 'debug', 'build', 'details', 2);
        INSERT INTO buildLogs (id, buildId, level, category, content, createdAt) VALUES ('l5', 'b3', 'info', 'unit tests', 'testing', 3);
        INSERT INTO buildLogs (id, buildId, level, category, content, createdAt) VALUES ('l1', 'b3', 'warning', 'build', 'slow', 3);
        INSERT INTO buildLogs (id, buildId, level, category, content, createdAt) VALUES ('l0', 'b3', 'debug', 'build', 'more', 3);
        INSERT INTO crashLogs (incidentIdentifier, buildId, content, signal, createdAt) VALUES
          ('c1', 'b3', 'segfault', 11, 5), ('C2', 'b3', 'abort', NULL, 6), ('c0', 'b3', 'bus error', 7, 6);
        INSERT INTO model_metadata (id, name, format, framework, capabilities, created_at, updated_at) VALUES
          ('m1', 'Llama', 'gguf', 'llama.cpp', '["chat"]', 1, 2), ('M2', 'Phi', 'gguf', 'onnx', '[]', 1, 2), ('gpt-4.1', 'GPT', 'api', 'cloud', '[]', 1, 2);
        INSERT INTO model_usage_stats (model_id, day, generation_count, total_tokens, total_cost, total_latency_ms, error_count) VALUES
          ('m1', '2024-05-02', 1, 15, 0.004, 250, 0), ('m1', '2024-05-01', 3, 40, 0.0035, 400.5, 1);
        INSERT INTO generation_sessions (id, model_id, created_at, updated_at) VALUES ('g1', 'm1', 1, 2);
        INSERT INTO generations (id, session_id, sequence_number, prompt_tokens, completion_tokens, cost, latency_ms, created_at) VALUES
          ('g1-2', 'g1', 2, 5, 6, 0.25, 30, 4), ('g1-1', 'g1', 1, 1, 2, 0.5, 12.5, 3);
        INSERT INTO telemetry (event, created_at) VALUES ('open', 1), ('open', 2), ('crash', 3), ('Zap', 4), ('a"b', 5);
        INSERT INTO configuration (id, base_url, created_at, updated_at) VALUES ('default', 'https://a.example', 1, 2), ('eu.west', 'https://eu.example', 1, 2);
        INSERT INTO analytics_config (configuration_id, enabled, sampling_rate) VALUES ('eu.west', 1, 0.25);
        INSERT INTO storage_config (configuration_id, telemetry_retention_days) VALUES ('eu.west', 7);
        INSERT INTO routing_policies (id, configuration_id, name, priority, execution_target) VALUES
          ('p1', 'eu.west', 'long', 5, 'cloud'), ('p2', 'eu.west', 'Short', 5, 'onDevice'), ('p3', 'eu.west', 'cheap', 9, 'hybrid');
        """
}
