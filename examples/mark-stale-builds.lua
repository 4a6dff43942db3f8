-- mark-stale-builds.lua — builds left "running" by a dead runner become failed.
--
-- When: every few minutes or hourly from cron, and after a crash or reboot of
-- a build machine. A build is stale when it is `running` but its runner
-- missed three heartbeats (heartbeatAt, on any host), or the process that
-- ran it (runnerHost, runnerPid, runnerStartedAt) no longer exists on this
-- host; each such build is marked `failed` with an error log line saying why
-- (jobs.markStale). Builds of other hosts without a heartbeat (started
-- before migration 004_runners) are left alone (this machine cannot tell
-- whether their runner lives): run the script on each build host.
-- Where `opsh runner`s run, they take stale builds back themselves (and
-- requeue them); this script is for builds started by shells and scripts.
-- Running builds with no runner recorded cannot be judged either; those
-- started more than MAX_AGE ago (default 24h) are reported on stderr and the
-- exit status says so; nothing is changed for them.
--
-- Run:   opsh run [--db FILE] [--dry-run] mark-stale-builds.lua [MAX_AGE]   (MAX_AGE: 6h, 2d, …)
--        --dry-run lists the stale builds and changes nothing.
-- Cron:  */10 * * * *  opsh run --db /var/lib/opsh/opsh.sqlite /opt/opsh/examples/mark-stale-builds.lua >>/var/log/opsh/stale.log 2>&1
--
-- Output: one line per build marked failed and a summary on stdout;
-- problems on stderr.
-- Exit:  0  done: nothing stale, or every stale build marked failed
--        1  error (a build could not be marked; the others were)
--        2  bad argument
--        3  database unavailable; 75 another run holds the script's lock
--        4  running builds without a runner recorded, older than MAX_AGE:
--           look at them (builds.update(id, {status = "failed"}) if dead)

local DRY_RUN = db.inTransaction() -- `opsh run --dry-run` runs the script in one transaction
local REASON = "found by mark-stale-builds.lua"

local function warn(message) io.stderr:write("mark-stale-builds: ", message, "\n") end

local units = { s = 1, m = 60, h = 3600, d = 86400, w = 604800 }
local maxAge = 86400
if arg[1] then
  local number, unit = arg[1]:match("^(%d+%.?%d*)([smhdw])$")
  if not number then
    warn("MAX_AGE must be a duration such as 6h or 2d; got '" .. arg[1] .. "'")
    os.exit(2)
  end
  maxAge = tonumber(number) * units[unit]
end

local function describe(build)
  local scheme = db.first("SELECT projectBundleIdentifier AS project, name FROM schemes WHERE id = ?", build.schemeId)
  local runner = build.runnerPid and string.format("runner pid %d on %s", build.runnerPid, tostring(build.runnerHost))
    or "no runner recorded"
  return string.format("build %s (%s %s #%d, version %s, running since %s, %s)",
    build.id, scheme and scheme.project or "?", scheme and scheme.name or build.schemeId, build.buildNumber,
    build.versionString, build.startDate and os.date("!%Y-%m-%d %H:%M UTC", math.floor(build.startDate)) or "?", runner)
end

-- The stale builds. jobs.stale() is refused in a dry run (the job manager
-- writes outside the dry run's transaction), so a dry run asks the same
-- question here: did the runner miss three heartbeats, or is its process on
-- this host gone, or is its pid now another process (a different start time)?
local function readFile(path)
  local file = io.open(path, "r")
  if not file then return nil end
  local text = file:read("a")
  file:close()
  return text
end

local function runnerAlive(build)
  local host = (readFile("/proc/sys/kernel/hostname") or ""):gsub("%s+$", "")
  if build.runnerHost ~= host then return true end
  local stat = readFile("/proc/" .. math.floor(build.runnerPid) .. "/stat")
  if not stat then return false end
  -- Field 22 (start time in clock ticks since boot) after "(comm)".
  local rest = stat:match("%) (.*)$")
  local fields = {}
  for field in rest:gmatch("%S+") do fields[#fields + 1] = field end
  local ticks = tonumber(fields[20])
  local boot = tonumber((readFile("/proc/stat") or ""):match("btime (%d+)"))
  if not ticks or not boot or not build.runnerStartedAt then return true end
  return math.abs(boot + ticks / 100 - build.runnerStartedAt) < 1
end

-- Heartbeats exist from migration 004_runners on: a query naming the column
-- fails before it (on SQLite and PostgreSQL alike; pcall keeps a dry run's
-- transaction going).
local HEARTBEATS = pcall(db.value, "SELECT heartbeatAt FROM builds WHERE 1 = 0")

local function heartbeatLapsed(build)
  if not HEARTBEATS then return false end
  local beat = db.first("SELECT heartbeatAt, heartbeatInterval FROM builds WHERE id = ?", build.id)
  return beat ~= nil and beat.heartbeatAt ~= nil and beat.heartbeatInterval ~= nil
    and beat.heartbeatAt + 3 * beat.heartbeatInterval < os.time()
end

local stale
if DRY_RUN then
  stale = {}
  for build in db.rows([[SELECT * FROM builds WHERE status = 'running' AND runnerHost IS NOT NULL
                         AND runnerPid IS NOT NULL AND runnerStartedAt IS NOT NULL ORDER BY startDate, id]]) do
    if heartbeatLapsed(build) or not runnerAlive(build) then stale[#stale + 1] = build end
  end
else
  stale = jobs.stale()
end

local marked, errors = 0, 0
for _, build in ipairs(stale) do
  local text = describe(build)
  if DRY_RUN then
    -- What jobs.markStale would write, so that the dry run's summary counts
    -- it; the dry run's transaction rolls it back.
    local now = os.time()
    builds.update(build.id, { status = "failed", endDate = now })
    logs.insert{ buildId = build.id, level = "error", category = "build", createdAt = now,
                 content = "marked failed as stale: " .. REASON .. " (runner pid " .. build.runnerPid .. " on " .. build.runnerHost
                   .. (heartbeatLapsed(build) and ": no heartbeat for three periods)" or " is gone)") }
    print("would mark failed: " .. text)
    marked = marked + 1
  else
    local ok, problem = pcall(jobs.markStale, build.id, REASON)
    if ok then
      print("marked failed: " .. text)
      marked = marked + 1
    elseif not builds.get(build.id) or builds.get(build.id).status ~= "running" then
      -- It ended (or went) between the two calls: nothing to do.
    else
      warn("could not mark " .. text .. ": " .. tostring(problem))
      errors = errors + 1
    end
  end
end

local unknown = db.query([[SELECT * FROM builds WHERE status = 'running'
                           AND (runnerHost IS NULL OR runnerPid IS NULL OR runnerStartedAt IS NULL)
                           AND coalesce(startDate, createdAt) < ? ORDER BY startDate, id]], os.time() - maxAge)
for _, build in ipairs(unknown) do
  warn("running with no runner recorded, for more than " .. (arg[1] or "24h") .. ": " .. describe(build))
end

print(string.format("mark-stale-builds: %d stale build(s) %s%s%s", marked,
  DRY_RUN and "would be marked failed" or "marked failed",
  errors > 0 and string.format(", %d could not be marked", errors) or "",
  #unknown > 0 and string.format(", %d running without a runner recorded", #unknown) or ""))

if errors > 0 then os.exit(1) end
if #unknown > 0 then os.exit(4) end
