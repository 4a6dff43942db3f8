-- telemetry.insertMany over PostgreSQL (one COPY FROM STDIN; before it,
-- multi-row INSERTs of 1,000 rows):
--   opsh run --no-lock --db URL --create telemetry.lua N
-- N events (event, properties JSON, session_id, created_at), built as Lua
-- tables before the clock starts. Prints: elapsed-ms rows (README.md).
local n = ...
local N = tonumber(n)
local function now() return db.first("SELECT extract(epoch FROM clock_timestamp())::float8 AS t").t end
db.exec("DELETE FROM telemetry")
local events = {}
for i = 1, N do
  events[i] = { event = "event" .. (i % 50), properties = '{"i":' .. i .. '}', session_id = "s" .. (i % 1000), created_at = i * 0.5 }
end
local w0 = now()
telemetry.insertMany(events)
local w1 = now()
local rows = db.value("SELECT count(*) FROM telemetry")
db.exec("DELETE FROM telemetry")
print(string.format("%.1f %d", (w1 - w0) * 1000, rows))
