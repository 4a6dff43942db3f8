-- LuaSQL (Debian lua-sql-sqlite3) on Lua 5.4: lua5.4 luasql.lua FILE N Q
-- LuaSQL has no bound parameters: values are escaped into the SQL text,
-- as its users do.
local driver = require("luasql.sqlite3")
local file, N, Q = arg[1], tonumber(arg[2]), tonumber(arg[3])
local env = driver.sqlite3()
local con = assert(env:connect(file))
local mode = assert(con:execute("PRAGMA journal_mode=WAL"))
assert(mode:fetch() == "wal", "LuaSQL peer is not in WAL mode")
mode:close()
assert(con:execute("CREATE TABLE bench (id INTEGER PRIMARY KEY, name TEXT, score REAL, qty INTEGER)"))
local t0 = os.clock()
con:setautocommit(false)
for i = 1, N do
  assert(con:execute(string.format("INSERT INTO bench (name, score, qty) VALUES ('%s', %.17g, %d)",
    con:escape("name" .. i), i * 0.5, i)))
end
con:commit()
local t1 = os.clock()
local sum = 0
local cursor = assert(con:execute("SELECT qty FROM bench"))
local row = cursor:fetch({}, "a")
while row do
  sum = sum + tonumber(row.qty)
  row = cursor:fetch(row, "a")
end
cursor:close()
local t2 = os.clock()
local found = 0
for i = 1, Q do
  local c = assert(con:execute("SELECT id, name, score, qty FROM bench WHERE id = " .. ((i * 7919) % N + 1)))
  local r = c:fetch({}, "a")
  found = found + tonumber(r.qty)
  c:close()
end
local t3 = os.clock()
print(string.format("%.1f %.1f %.1f %d", (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3, sum + found))
