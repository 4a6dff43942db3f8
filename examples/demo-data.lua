-- demo-data.lua — fill a database with realistic data to try opsh on.
--
-- When: once, on a new or scratch database, to follow the README's tour or
-- to try the other examples. Never on a production database.
--
-- What:
--   * a configuration "default" (30-day telemetry retention, routing policies);
--   * two projects with schemes whose build commands are harmless
--     ("echo building; sleep 1"); the first one's gitRepositoryURL is a real
--     git repository with tags v1.0.0 … v1.3.0 made next to the database
--     (demo-repositories/; on PostgreSQL, which has no file to put it
--     beside, in opsh's data folder $XDG_DATA_HOME/opsh, where jobs' build
--     workspaces go too), when git is installed — so jobs.start works on
--     it and build-new-tags.lua finds v1.3.0 unbuilt; the second points at
--     a path that does not exist (build-new-tags.lua reports it);
--   * builds of the last weeks, succeeded and failed, with log lines, and one
--     crash log;
--   * three models, 40 generation sessions with their generations over the
--     last 14 days (so model_usage_stats and analytics have data);
--   * COUNT telemetry events (default 1,000,000) over the last 60 days, in
--     batches of 10,000 through telemetry.insertMany — half of them older
--     than the retention, for telemetry-retention.lua.
-- Idempotent: the relational part is skipped when the demo project exists;
-- telemetry is topped up to COUNT demo events (an interrupted run resumes).
--
-- Run:   opsh run [--db FILE|URL] [--dry-run] demo-data.lua [COUNT]
--        opsh run --db /tmp/demo.sqlite --create demo-data.lua 100000   (a smaller, faster demo)
--        opsh run --db postgresql://ops@/demo --create demo-data.lua 100000   (the same on PostgreSQL)
--        --dry-run inserts everything in its transaction, then rolls it back
--        (and creates no git repository).
--
-- Output: what it inserted on stdout.
-- Exit:  0  done, or the data was there already
--        1  error (the relational part is all-or-nothing; telemetry batches done stay)
--        2  bad COUNT
--        3  database unavailable

local DRY_RUN = db.inTransaction() -- `opsh run --dry-run` runs the script in one transaction
local PROJECT = "com.example.demo"
local DAY = 86400
local now = os.time()

local count = tonumber(arg[1] or "1000000")
if not count or count < 0 or count % 1 ~= 0 then
  io.stderr:write("demo-data: COUNT must be a whole number of events; got '", tostring(arg[1]), "'\n")
  os.exit(2)
end
math.randomseed(42)
local function pick(list) return list[math.random(#list)] end
local function shellQuote(text) return "'" .. text:gsub("'", [['\'']]) .. "'" end

-- Where the demo repository goes: next to the SQLite file; on PostgreSQL in
-- opsh's data folder.
local function repositoryFolder()
  if db.engine == "postgresql" then
    local data = os.getenv("XDG_DATA_HOME")
    if not data or data:sub(1, 1) ~= "/" then data = (os.getenv("HOME") or "") .. "/.local/share" end
    return data .. "/opsh/demo-repositories/demo-app"
  end
  local database = stats().path
  if database:sub(1, 1) ~= "/" then database = (os.getenv("PWD") or ".") .. "/" .. database end
  local folder = (database:match("^(.*)/[^/]*$") or ".") .. "/demo-repositories/demo-app"
  return (folder:gsub("/%./", "/"))
end

-- A git repository with three release tags.
local function demoRepository()
  local folder = repositoryFolder()
  if DRY_RUN then return folder end
  if not os.execute("command -v git >/dev/null 2>&1") then
    io.stderr:write("demo-data: git is not installed; the demo project points at ", folder, ", which does not exist\n")
    return folder
  end
  if os.execute("test -d " .. shellQuote(folder .. "/.git")) then return folder end
  local git = "git -C " .. shellQuote(folder) .. " -c user.name=demo -c user.email=demo@example.com "
  local steps = { "mkdir -p " .. shellQuote(folder), git .. "init -q" }
  for minor = 0, 3 do
    steps[#steps + 1] = string.format("echo 'version 1.%d.0' > %s/VERSION", minor, shellQuote(folder))
    steps[#steps + 1] = git .. "add VERSION"
    steps[#steps + 1] = git .. string.format("commit -q -m 'Release 1.%d.0'", minor)
    steps[#steps + 1] = git .. string.format("tag v1.%d.0", minor)
  end
  if not os.execute(table.concat(steps, " && ") .. " >/dev/null 2>&1") then
    io.stderr:write("demo-data: could not create the git repository ", folder, "\n")
  end
  return folder
end

local function relationalData()
  local repository = demoRepository()
  db.transaction(function()
    config.save{
      id = "default", base_url = "https://ai.example.com/v1", model_cache_size = 3,
      storage = { telemetry_retention_days = 30, auto_cleanup = true, max_cache_size_bytes = 8 << 30 },
      analytics = { enabled = true, sampling_rate = 0.5, batch_size = 100, flush_interval_seconds = 60 },
      routing_policies = {
        { name = "long prompts to the cloud", priority = 10, execution_target = "cloud", conditions = '{"minPromptTokens": 2000}' },
        { name = "offline on device", priority = 5, execution_target = "onDevice", conditions = '{"network": "offline"}' },
        { name = "default", priority = 0, execution_target = "hybrid", conditions = "{}" },
      },
    }

    -- Projects, schemes, builds with logs, one crash.
    projects.insert{ bundleIdentifier = PROJECT, name = "demo-app", displayName = "Demo App",
                     gitRepositoryURL = repository, createdAt = now - 90 * DAY }
    projects.insert{ bundleIdentifier = "com.example.companion", name = "companion", displayName = "Companion",
                     gitRepositoryURL = "/srv/git/companion.git", createdAt = now - 60 * DAY }
    local schemeRows = {
      schemes.insert{ projectBundleIdentifier = PROJECT, name = "App", order = 0,
                      buildCommand = "echo building; sleep 1", platforms = '["ios", "macos"]' },
      schemes.insert{ projectBundleIdentifier = PROJECT, name = "Tests", order = 1,
                      buildCommand = "echo testing; sleep 1", platforms = '["ios"]' },
      schemes.insert{ projectBundleIdentifier = "com.example.companion", name = "Watch", order = 0,
                      buildCommand = "echo building the watch app; sleep 1", platforms = '["watchos"]' },
    }
    local buildCount, logCount = 0, 0
    local versions = { "v1.0.0", "v1.1.0", "v1.2.0" }
    for _, scheme in ipairs(schemeRows) do
      for number = 1, 6 do
        local started = now - (40 - number * 6) * DAY + math.random(0, 3600)
        local failed = (number == 3 or number == 5)
        local build = builds.insert{
          schemeId = scheme.id, versionString = versions[math.min(3, (number + 1) // 2)], buildNumber = number,
          status = failed and "failed" or "succeeded", createdAt = started - 30, startDate = started,
          endDate = started + math.random(40, 600), exitCode = failed and 1 or 0, progress = 1,
        }
        buildCount = buildCount + 1
        local lines = { { "info", "checking out " .. build.versionString }, { "debug", "environment ready" },
                        { "info", "building" }, { "info", "compiling 128 files" } }
        if failed then
          lines[#lines + 1] = { "warning", "deprecated API in Sources/App/Network.swift:42" }
          lines[#lines + 1] = { "error", "error: linker command failed with exit code 1" }
        else
          lines[#lines + 1] = { "info", "build succeeded" }
        end
        for i, line in ipairs(lines) do
          logs.insert{ buildId = build.id, level = line[1], category = "build", content = line[2], createdAt = started + i }
          logCount = logCount + 1
        end
        if failed and number == 5 and scheme.name == "Tests" then
          crashes.insert{ incidentIdentifier = "DEMO-CRASH-0001", buildId = build.id, signal = 11, createdAt = started + 30,
                          content = "Exception Type: EXC_BAD_ACCESS (SIGSEGV)\nCrashed Thread: 0\n0 DemoAppTests 0x100 NetworkTests.testTimeout + 42" }
        end
      end
    end

    -- Models, sessions and generations (which keep model_usage_stats in step).
    local modelRows = {
      { id = "llama-3.2-3b-q4", name = "Llama 3.2 3B", format = "gguf", framework = "llama.cpp", quantization = "Q4_K_M",
        size_bytes = 2019 << 20, capabilities = '["chat", "completion"]', cost = 0, latency = 350 },
      { id = "qwen-2.5-7b-q5", name = "Qwen 2.5 7B", format = "gguf", framework = "llama.cpp", quantization = "Q5_K_M",
        size_bytes = 5440 << 20, capabilities = '["chat", "code"]', cost = 0, latency = 700 },
      { id = "cloud-large", name = "Cloud Large", format = "api", framework = "remote",
        size_bytes = 0, capabilities = '["chat", "vision", "tools"]', cost = 0.000002, latency = 1200 },
    }
    for _, model in ipairs(modelRows) do
      models.insert{ id = model.id, name = model.name, format = model.format, framework = model.framework,
                     quantization = model.quantization, size_bytes = model.size_bytes,
                     capabilities = model.capabilities, created_at = now - 100 * DAY, updated_at = now - 100 * DAY }
    end
    local generationCount = 0
    for i = 1, 40 do
      local model = modelRows[(i % #modelRows) + 1]
      local started = now - math.random(0, 13) * DAY - math.random(0, DAY - 3600)
      local session = sessions.insert{ id = string.format("demo-session-%02d", i), model_id = model.id,
                                       session_type = pick{ "chat", "chat", "completion", "code" },
                                       created_at = started, updated_at = started }
      for sequence = 1, math.random(1, 6) do
        local prompt, completion = math.random(50, 2500), math.random(20, 800)
        sessions.addGeneration{
          session_id = session.id, sequence_number = sequence, prompt_tokens = prompt, completion_tokens = completion,
          latency_ms = model.latency * (0.5 + math.random()), cost = (prompt + completion) * model.cost,
          execution_target = model.cost > 0 and "cloud" or "onDevice", created_at = started + sequence * 20,
        }
        generationCount = generationCount + 1
      end
    end
    for _ = 1, 6 do -- a few failed generations, for the error rates
      models.recordUsage(pick(modelRows).id, { tokens = 0, latencyMs = 5000, failed = true, at = now - math.random(0, 13) * DAY })
    end
    print(string.format("demo-data: 1 configuration, 2 projects, %d schemes, %d builds with %d log lines and 1 crash log, %d models, 40 sessions with %d generations",
                        #schemeRows, buildCount, logCount, #modelRows, generationCount))
    print("demo-data: " .. PROJECT .. "'s repository: " .. repository)
  end)
end

if projects.get(PROJECT) then
  print("demo-data: " .. PROJECT .. " exists already; projects, builds, models and sessions left as they are")
else
  relationalData()
end

-- Telemetry, topped up to COUNT demo events (session_id 'demo-…').
local events = {
  { "app_launch", function() return string.format('{"coldStart": %s}', math.random() < 0.3 and "true" or "false") end },
  { "model_loaded", function() return string.format('{"model": "%s", "ms": %d}', pick{ "llama-3.2-3b-q4", "qwen-2.5-7b-q5" }, math.random(200, 4000)) end },
  { "generation_started", function() return string.format('{"promptTokens": %d}', math.random(50, 2500)) end },
  { "generation_completed", function() return string.format('{"tokens": %d, "ms": %d}', math.random(20, 800), math.random(100, 3000)) end },
  { "generation_failed", function() return '{"error": "timeout"}' end },
  { "cache_evicted", function() return nil end },
}
local existing = db.value("SELECT count(*) FROM telemetry WHERE session_id LIKE 'demo-%'")
local missing = math.max(0, count - existing)
local batchSize, inserted = 10000, 0
while inserted < missing do
  local batch = {}
  for i = 1, math.min(batchSize, missing - inserted) do
    local event = events[math.random(#events)]
    batch[i] = { event = event[1], properties = event[2](), session_id = string.format("demo-session-%02d", math.random(1, 40)),
                 created_at = now - math.random() * 60 * DAY }
  end
  inserted = inserted + telemetry.insertMany(batch)
end
print(string.format("demo-data: %d telemetry events inserted (%d demo events in all)", inserted, existing + inserted))
