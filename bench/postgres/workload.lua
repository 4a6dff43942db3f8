-- opsh's db module over PostgreSQL:
--   opsh run --no-lock --db URL --create workload.lua TABLE N Q
-- (bench/postgres/README.md: the same work as the peers, the same output).
local T, n, q = ...
local N, Q = tonumber(n), tonumber(q)
assert(T and T:match("^[%w_]+$"), "a table name")
-- Stock Lua has no fine wall clock: the server's, through this connection.
local function now() return db.first("SELECT extract(epoch FROM clock_timestamp())::float8 AS t").t end
db.exec("DROP TABLE IF EXISTS " .. T)
db.exec("CREATE TABLE " .. T .. " (id bigint PRIMARY KEY, name text NOT NULL, value double precision NOT NULL)")
local insert = "INSERT INTO " .. T .. " (id, name, value) VALUES (?, ?, ?)"
local w0, c0 = now(), os.clock()
db.transaction(function()
  for i = 1, N do
    db.exec(insert, i, "name" .. i, i * 0.5)
  end
end)
local w1, c1 = now(), os.clock()
local rows, sum = 0, 0
for row in db.rows("SELECT * FROM " .. T) do
  rows = rows + 1
  sum = sum + row.value
end
local w2, c2 = now(), os.clock()
local point, ids = "SELECT * FROM " .. T .. " WHERE id = ?", 0
for i = 1, Q do
  local k = (i * 7919) % N + 1
  local row = db.first(point, k)
  assert(row and row.id == k and row.name == "name" .. k and row.value == k * 0.5, "wrong row for id " .. k)
  ids = ids + row.id
end
local w3, c3 = now(), os.clock()
db.exec("DROP TABLE " .. T)
return string.format("%.1f %.1f %.1f %.1f %.1f %.1f %d %.1f %d",
  (w1 - w0) * 1e3, (w2 - w1) * 1e3, (w3 - w2) * 1e3,
  (c1 - c0) * 1e3, (c2 - c1) * 1e3, (c3 - c2) * 1e3, rows, sum, ids)
