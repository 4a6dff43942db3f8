-- A repair loop as an operator writes it (bench/subxact/README.md):
--   opsh run --no-lock --db URL repair.lua N STATUS MARK HOLD
-- sets builds b000001 … bN's status to STATUS and enddate to MARK, one
-- db.exec per row, in one db.transaction, then holds the transaction open
-- HOLD seconds (a slow script's last step) before it commits. Prints the
-- server's clock at the transaction's start, after the loop and before
-- the commit.
local n, status, mark, hold = tonumber(arg[1]), arg[2], tonumber(arg[3]), arg[4]
local function clock() return db.value("SELECT extract(epoch FROM clock_timestamp())::text") end
db.transaction(function()
  local began = clock()
  for i = 1, n do
    local changes = db.exec("UPDATE builds SET status = ?, enddate = ? WHERE id = ?", status, mark, string.format("b%06d", i))
    assert(changes == 1, "no build b" .. i)
  end
  local looped = clock()
  os.execute("sleep " .. hold)
  print(began, looped, clock())
end)
