-- LuaDBI (Debian lua-dbi-sqlite3) on Lua 5.4: lua5.4 luadbi.lua FILE N Q
local DBI = require("DBI")
local file, N, Q = arg[1], tonumber(arg[2]), tonumber(arg[3])
local db = assert(DBI.Connect("SQLite3", file))
-- LuaDBI opens a transaction at once (autocommit is off by default), and
-- inside a transaction SQLite ignores the journal_mode pragma: the run
-- would use a rollback journal. Switch to WAL in autocommit mode.
db:autocommit(true)
-- Each statement is closed after its run: an unclosed one keeps the
-- connection's read of the file open, so the pager never switched to the
-- WAL SQLite had just recorded in the header, and the insert below ran
-- with a rollback journal (no WAL frames, no checkpoint) though
-- `PRAGMA journal_mode` answered "wal".
local function run(sql)
  local statement = assert(db:prepare(sql))
  statement:execute()
  statement:close()
end
run("PRAGMA journal_mode=WAL")
local mode = assert(db:prepare("PRAGMA journal_mode"))
mode:execute()
for row in mode:rows(false) do assert(row[1] == "wal", "LuaDBI peer is not in WAL mode") end
mode:close()
db:autocommit(false)
run("CREATE TABLE bench (id INTEGER PRIMARY KEY, name TEXT, score REAL, qty INTEGER)")
db:commit()
-- The pragma names the mode asked for; the -wal file says the pager uses it.
assert(io.open(file .. "-wal"), "LuaDBI peer writes no WAL"):close()
local t0 = os.clock()
local insert = assert(db:prepare("INSERT INTO bench (name, score, qty) VALUES (?, ?, ?)"))
for i = 1, N do insert:execute("name" .. i, i * 0.5, i) end
db:commit()
local t1 = os.clock()
local sum = 0
local scan = assert(db:prepare("SELECT qty FROM bench"))
scan:execute()
for row in scan:rows(true) do sum = sum + row.qty end
local t2 = os.clock()
local found = 0
local point = assert(db:prepare("SELECT id, name, score, qty FROM bench WHERE id = ?"))
for i = 1, Q do
  point:execute((i * 7919) % N + 1)
  local row = point:fetch(true)
  found = found + row.qty
end
local t3 = os.clock()
print(string.format("%.1f %.1f %.1f %d", (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3, sum + found))
