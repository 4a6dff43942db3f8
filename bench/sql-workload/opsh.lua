-- opsh's db module: opsh run --db FILE opsh.lua N Q (as the peers run).
local n, q = ...
local N, Q = tonumber(n), tonumber(q)
db.exec("CREATE TABLE bench (id INTEGER PRIMARY KEY, name TEXT, score REAL, qty INTEGER)")
local t0 = os.clock()
db.transaction(function()
  for i = 1, N do
    db.exec("INSERT INTO bench (name, score, qty) VALUES (?, ?, ?)", "name" .. i, i * 0.5, i)
  end
end)
local t1 = os.clock()
local sum = 0
for row in db.rows("SELECT qty FROM bench") do sum = sum + row.qty end
local t2 = os.clock()
local found = 0
for i = 1, Q do
  local row = db.first("SELECT id, name, score, qty FROM bench WHERE id = ?", (i * 7919) % N + 1)
  found = found + row.qty
end
local t3 = os.clock()
return string.format("%.1f %.1f %.1f %d", (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3, sum + found)
