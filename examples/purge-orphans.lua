-- purge-orphans.lua — delete rows whose parent row is gone.
--
-- When: once on a database that lived without foreign keys (an old backend,
-- a restore, writes by a tool that never said PRAGMA foreign_keys = ON, a
-- PostgreSQL table loaded with its triggers off), or whenever check() lists
-- foreign-key violations. Safe to run from cron. The same file runs on
-- SQLite and PostgreSQL (`--db postgresql://…`): its SQL is portable.
--
-- What: finds, with LEFT JOIN … IS NULL, the rows that SQLite would have
-- deleted with their parent (ON DELETE CASCADE) had foreign keys been on:
--   build logs and crash logs whose build is gone,
--   usage stats whose model is gone,
--   generations whose session is gone,
--   routing policies, analytics and storage settings whose configuration is gone;
-- deletes them all in one transaction and reports the count per table.
-- Rows whose parent is gone but which the schema protects (ON DELETE
-- RESTRICT: builds whose scheme is gone, sessions whose model is gone) and
-- schemes whose project is gone are only reported on stderr: they hold data
-- someone may want back.
--
-- Run:   opsh run [--db FILE|URL] [--dry-run] purge-orphans.lua
--        --dry-run reports the counts and deletes nothing.
-- Cron:  0 4 * * 0  opsh run --db /var/lib/opsh/opsh.sqlite /opt/opsh/examples/purge-orphans.lua >>/var/log/opsh/orphans.log 2>&1
--
-- Output: a line per table with orphans and a total on stdout; orphans it
-- leaves alone on stderr.
-- Exit:  0  done: no orphans, or every orphan deleted
--        1  error (nothing deleted: the transaction rolled back)
--        3  database unavailable; 75 another run holds the script's lock
--        4  orphans it does not delete (listed on stderr) are left

local DRY_RUN = db.inTransaction() -- `opsh run --dry-run` runs the script in one transaction

-- child table, its column, the parent table, the parent's key, what to call them
local PURGED = {
  { "buildLogs", "buildId", "builds", "id", "build log lines whose build is gone" },
  { "crashLogs", "buildId", "builds", "id", "crash logs whose build is gone" },
  { "model_usage_stats", "model_id", "model_metadata", "id", "usage stats whose model is gone" },
  { "generations", "session_id", "generation_sessions", "id", "generations whose session is gone" },
  { "routing_policies", "configuration_id", "configuration", "id", "routing policies whose configuration is gone" },
  { "analytics_config", "configuration_id", "configuration", "id", "analytics settings whose configuration is gone" },
  { "storage_config", "configuration_id", "configuration", "id", "storage settings whose configuration is gone" },
}
local REPORTED = {
  { "schemes", "projectBundleIdentifier", "projects", "bundleIdentifier", "id", "schemes whose project is gone" },
  { "builds", "schemeId", "schemes", "id", "id", "builds whose scheme is gone" },
  { "generation_sessions", "model_id", "model_metadata", "id", "id", "sessions whose model is gone" },
}

-- Names are written unquoted, so that they are the same on both engines
-- (PostgreSQL folds buildLogs to buildlogs, as it created it).
local function orphans(child, column, parent, key)
  return string.format([[FROM %s AS c LEFT JOIN %s AS p ON p.%s = c.%s WHERE p.%s IS NULL]],
                       child, parent, key, column, key)
end

-- The same rows as orphans() finds, by their parent alone (no rowid needed,
-- which PostgreSQL does not have).
local function deleteOrphans(child, column, parent, key)
  return string.format([[DELETE FROM %s WHERE NOT EXISTS (SELECT 1 FROM %s AS p WHERE p.%s = %s.%s)]],
                       child, parent, key, child, column)
end

local counts, total = {}, 0
db.transaction(function()
  for _, relation in ipairs(PURGED) do
    local child, column, parent, key, what = table.unpack(relation)
    local from = orphans(child, column, parent, key)
    local found = db.value("SELECT count(*) " .. from)
    if found > 0 then
      local deleted = db.exec(deleteOrphans(child, column, parent, key))
      counts[#counts + 1] = { child, deleted, what }
      total = total + deleted
    end
  end
end)

for _, entry in ipairs(counts) do
  print(string.format("%-18s %8d %s %s", entry[1], entry[2], DRY_RUN and "would be deleted:" or "deleted:", entry[3]))
end

local left = 0
for _, relation in ipairs(REPORTED) do
  local child, column, parent, key, id, what = table.unpack(relation)
  local rows = db.query(string.format("SELECT c.%s AS id, c.%s AS parent %s ORDER BY 1 LIMIT 20",
                                      id, column, orphans(child, column, parent, key)))
  local found = db.value("SELECT count(*) " .. orphans(child, column, parent, key))
  if found > 0 then
    left = left + found
    local ids = {}
    for _, row in ipairs(rows) do ids[#ids + 1] = string.format("%s (%s %s)", row.id, column, row.parent) end
    io.stderr:write(string.format("purge-orphans: left alone: %d %s in %s: %s%s\n", found, what, child,
                                  table.concat(ids, ", "), found > #rows and ", …" or ""))
  end
end

print(string.format("purge-orphans: %d orphan row(s) %s in %d table(s)%s", total,
  DRY_RUN and "would be deleted" or "deleted", #counts,
  left > 0 and string.format("; %d left alone (see stderr)", left) or ""))
if left > 0 then os.exit(4) end
