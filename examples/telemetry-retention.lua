-- telemetry-retention.lua — delete telemetry older than the retention policy.
--
-- When: every night, so that telemetry never fills the disk; by hand after an
-- incident that flooded the table (with a shorter retention as argument).
--
-- What: deletes the events older than the retention in short batches, each
-- its own transaction, so the backend's writers never wait long for the lock.
-- The retention is, first found:
--   1. the first argument: "30d", "12h", "2w", or a plain number of days ("30");
--   2. storage_config.telemetry_retention_days (configuration "default", else
--      the first) — and when that configuration says auto_cleanup = 0, the
--      script deletes nothing (an argument overrides);
--   3. 30 days (the schema's default).
-- A second argument keeps at least that many of the newest events, however old
-- (so a quiet system never loses its last events).
--
-- Run:   opsh run [--db FILE] [--dry-run] telemetry-retention.lua [RETENTION [KEEP]]
--        --dry-run counts what would go and deletes nothing.
-- Cron:  15 3 * * *  opsh run --db /var/lib/opsh/opsh.sqlite /opt/opsh/examples/telemetry-retention.lua >>/var/log/opsh/retention.log 2>&1
--
-- Output: one report line on stdout; problems on stderr.
-- Exit:  0  done (also: nothing was old enough, or auto_cleanup is off)
--        1  error (the message says which); batches already done stay done
--        2  bad argument
--        3  database unavailable; 75 another run holds the script's lock

local DRY_RUN = db.inTransaction() -- `opsh run --dry-run` runs the script in one transaction

local function fail(status, message)
  io.stderr:write("telemetry-retention: ", message, "\n")
  os.exit(status)
end

-- "30" → "30d"; "12h" stays; anything else is refused.
local function duration(text)
  if text:match("^%d+$") then return text .. "d" end
  if text:match("^%d+%.?%d*[smhdw]$") then return text end
  fail(2, "retention must be a duration such as 30d, 12h, 2w or a number of days; got '" .. text .. "'")
end

local retention, source
if arg[1] and arg[1] ~= "" then
  retention, source = duration(arg[1]), "argument"
else
  local policy = db.first([[
    SELECT configuration_id, telemetry_retention_days AS days, auto_cleanup
    FROM storage_config ORDER BY configuration_id = 'default' DESC, configuration_id LIMIT 1]])
  if policy then
    if policy.auto_cleanup == 0 then
      print(string.format("telemetry-retention: auto_cleanup is off in storage_config '%s'; nothing deleted",
                          policy.configuration_id))
      return
    end
    retention, source = policy.days .. "d", "storage_config '" .. policy.configuration_id .. "'"
  else
    retention, source = "30d", "default: no storage_config"
  end
end

local keep
if arg[2] then
  keep = tonumber(arg[2])
  if not keep or keep < 0 or keep % 1 ~= 0 then fail(2, "KEEP must be a whole number >= 0; got '" .. arg[2] .. "'") end
end

local before = db.value("SELECT count(*) FROM telemetry")
local report = telemetry.cleanup{ olderThan = retention, keep = keep }
local after = DRY_RUN and before - report.deleted or db.value("SELECT count(*) FROM telemetry")
local oldest = db.value("SELECT min(created_at) FROM telemetry")

print(string.format("telemetry-retention: retention %s (%s)%s: %s %d of %d events in %d batches, longest lock %.1f ms, %.2f s; %d left%s",
  retention, source, keep and (", keeping at least " .. keep .. " newest") or "",
  DRY_RUN and "would delete" or "deleted", report.deleted, before, report.batches,
  report.longestLockMs, report.seconds, after,
  (oldest and not DRY_RUN) and (", oldest " .. os.date("!%Y-%m-%d %H:%M UTC", math.floor(oldest))) or ""))
