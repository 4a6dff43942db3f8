-- nightly-backup.lua — an online backup of the database, verified, with rotation.
--
-- When: every night (the backend may keep writing meanwhile: the copy is
-- SQLite's online backup); by hand before a risky repair or a migration.
--
-- What: copies the database to FOLDER/opsh-YYYYMMDD-HHMMSS.sqlite (UTC),
-- lets `backup` check the copy (integrity_check), checks again here that the
-- file is an SQLite database of the reported size, then deletes all but the
-- KEEP newest backups of that series (default 7). Files of other names in
-- FOLDER are never touched, nor files of the series that are not opsh's
-- backups. FOLDER is created if missing.
-- On PostgreSQL (`--db postgresql://…`) the same file runs pg_dump into
-- FOLDER/opsh-YYYYMMDD-HHMMSS.dump (custom format: `pg_restore` reads it),
-- checks its PGDMP header and size, and rotates the .dump series.
-- Run twice in the same second, the second run finds its file there and
-- does nothing.
--
-- Run:   opsh run [--db FILE|URL] [--dry-run] nightly-backup.lua FOLDER [KEEP]
--        --dry-run copies nothing and deletes nothing; it says what it would do.
-- Cron:  30 2 * * *  opsh run --db /var/lib/opsh/opsh.sqlite /opt/opsh/examples/nightly-backup.lua /var/backups/opsh 14 >>/var/log/opsh/backup.log 2>&1
--
-- Output: the backup's path, size and what rotation removed on stdout;
-- problems on stderr.
-- Exit:  0  backup made and verified (or already made this second)
--        1  error: the copy failed or did not verify (the bad copy is deleted)
--        2  usage: no FOLDER, bad KEEP, FOLDER cannot be created
--        3  database unavailable; 75 another run holds the script's lock

local DRY_RUN = db.inTransaction() -- `opsh run --dry-run` runs the script in one transaction
local POSTGRES = db.engine == "postgresql"

local function fail(status, message)
  io.stderr:write("nightly-backup: ", message, "\n")
  os.exit(status)
end

local folder, keep = arg[1], arg[2] or "7"
if not folder or folder == "" then
  fail(2, "usage: opsh run nightly-backup.lua FOLDER [KEEP]")
end
folder = folder:gsub("/+$", "")
if folder == "" then folder = "/" end
keep = tonumber(keep)
if not keep or keep < 1 or keep % 1 ~= 0 then fail(2, "KEEP must be a whole number of 1 or more; got '" .. arg[2] .. "'") end

local function shellQuote(text) return "'" .. text:gsub("'", [['\'']]) .. "'" end
local function exists(path)
  local file = io.open(path, "rb")
  if file then file:close() return true end
  return false
end
local function human(bytes)
  if bytes >= 1 << 30 then return string.format("%.1f GB", bytes / (1 << 30)) end
  if bytes >= 1 << 20 then return string.format("%.1f MB", bytes / (1 << 20)) end
  if bytes >= 1 << 10 then return string.format("%.1f KB", bytes / (1 << 10)) end
  return bytes .. " B"
end

-- SQLite's backup is a database file; PostgreSQL's a pg_dump archive.
local path = folder .. "/" .. os.date(POSTGRES and "!opsh-%Y%m%d-%H%M%S.dump" or "!opsh-%Y%m%d-%H%M%S.sqlite")

if DRY_RUN then
  print(string.format("nightly-backup: would copy the database (%s) to %s and keep the %d newest backups",
                      human(POSTGRES and stats().databaseBytes or stats().fileSize), path, keep))
  return
end

if not os.execute("mkdir -p " .. shellQuote(folder)) then fail(2, "cannot create the folder " .. folder) end
if exists(path) then
  print("nightly-backup: " .. path .. " exists already (made this second); nothing to do")
  return
end

local ok, result = pcall(backup, path, { keep = keep })
if not ok then
  if exists(path) then os.remove(path) end
  fail(1, "backup to " .. path .. " failed: " .. tostring(result))
end

-- The copy must be a whole SQLite file (a pg_dump archive on PostgreSQL):
-- its header, and the size backup reported.
local expected = POSTGRES and "PGDMP" or "SQLite format 3\0"
local file = io.open(path, "rb")
local header = file and file:read(#expected)
local size = file and file:seek("end")
if file then file:close() end
if header ~= expected or size ~= result.bytes or size == 0 then
  os.remove(path)
  fail(1, string.format("the copy at %s did not verify (header %q, %s bytes, backup reported %s); deleted it",
                        path, tostring(header), tostring(size), tostring(result.bytes)))
end

if POSTGRES then
  print(string.format("nightly-backup: %s, %s, pg_dump in %.2f s, verified", path, human(size), result.seconds))
else
  print(string.format("nightly-backup: %s, %s, %d pages in %.2f s, verified", path, human(size), result.pages, result.seconds))
end
if #result.removed > 0 then
  print(string.format("nightly-backup: removed %d old backup(s): %s", #result.removed, table.concat(result.removed, ", ")))
end
