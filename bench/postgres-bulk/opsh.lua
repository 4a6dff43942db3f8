-- opsh's bulk writes over PostgreSQL:
--   opsh run --no-lock --db URL --create opsh.lua TABLE N CSV MODE
-- MODE: send (db.send in db.transaction: pipelined), exec (db.exec in
-- db.transaction: one round trip a row, as before db.send), copy (db.copy
-- of the CSV file). Prints: elapsed-ms rows (README.md).
local T, n, csv, mode = ...
local N = tonumber(n)
assert(T and T:match("^[%w_]+$"), "a table name")
-- Stock Lua has no fine wall clock: the server's, through this connection.
local function now() return db.first("SELECT extract(epoch FROM clock_timestamp())::float8 AS t").t end
db.exec("DROP TABLE IF EXISTS " .. T)
db.exec("CREATE TABLE " .. T .. " (id bigint PRIMARY KEY, name text NOT NULL, value double precision NOT NULL)")
local insert = "INSERT INTO " .. T .. " (id, name, value) VALUES (?, ?, ?)"
local w0 = now()
if mode == "copy" then
  db.copy(T, csv, { format = "csv" })
else
  local write = mode == "send" and db.send or db.exec
  db.transaction(function()
    for i = 1, N do
      write(insert, i, "name" .. i, i * 0.5)
    end
  end)
end
local w1 = now()
local rows = db.value("SELECT count(*) FROM " .. T)
db.exec("DROP TABLE " .. T)
print(string.format("%.1f %d", (w1 - w0) * 1000, rows))
