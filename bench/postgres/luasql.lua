-- LuaSQL 2.6's PostgreSQL driver (Debian lua-sql-postgres) on Lua 5.4:
--   lua5.4 luasql.lua URL TABLE N Q
-- LuaSQL has no bound parameters: values are escaped into the SQL text, as
-- its users do. Its values come back as strings.
local driver = require("luasql.postgres")
local url, T, N, Q = arg[1], arg[2], tonumber(arg[3]), tonumber(arg[4])
assert(T and T:match("^[%w_]+$"), "a table name")
local env = driver.postgres()
local con = assert(env:connect(url))
-- Stock Lua has no fine wall clock: the server's, through this connection.
local function now()
  local cursor = assert(con:execute("SELECT extract(epoch FROM clock_timestamp())::float8"))
  local t = tonumber(cursor:fetch())
  cursor:close()
  return t
end
assert(con:execute("DROP TABLE IF EXISTS " .. T))
assert(con:execute("CREATE TABLE " .. T .. " (id bigint PRIMARY KEY, name text NOT NULL, value double precision NOT NULL)"))
local w0, c0 = now(), os.clock()
con:setautocommit(false)
for i = 1, N do
  assert(con:execute(string.format("INSERT INTO %s (id, name, value) VALUES (%d, '%s', %.17g)",
    T, i, con:escape("name" .. i), i * 0.5)))
end
con:commit()
con:setautocommit(true)
local w1, c1 = now(), os.clock()
local rows, sum = 0, 0
local cursor = assert(con:execute("SELECT * FROM " .. T))
local row = cursor:fetch({}, "a")
while row do
  rows = rows + 1
  sum = sum + tonumber(row.value)
  row = cursor:fetch(row, "a")
end
cursor:close()
local w2, c2 = now(), os.clock()
local ids = 0
for i = 1, Q do
  local k = (i * 7919) % N + 1
  local c = assert(con:execute("SELECT * FROM " .. T .. " WHERE id = " .. k))
  local r = c:fetch({}, "a")
  assert(r and tonumber(r.id) == k and r.name == "name" .. k and tonumber(r.value) == k * 0.5, "wrong row for id " .. k)
  ids = ids + tonumber(r.id)
  c:close()
end
local w3, c3 = now(), os.clock()
assert(con:execute("DROP TABLE " .. T))
con:close()
env:close()
print(string.format("%.1f %.1f %.1f %.1f %.1f %.1f %d %.1f %d",
  (w1 - w0) * 1e3, (w2 - w1) * 1e3, (w3 - w2) * 1e3,
  (c1 - c0) * 1e3, (c2 - c1) * 1e3, (c3 - c2) * 1e3, rows, sum, ids))
