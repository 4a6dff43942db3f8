-- model-usage-report.lua — usage per model over the last week, as a table and a chart.
--
-- When: weekly from cron (mail the output), or by hand before deciding which
-- models to keep on devices.
--
-- What: reads model_usage_stats (analytics.usage) for the last DAYS days
-- (default 7) and prints, per model, generations, tokens, cost, mean
-- latency and error rate, then a bar chart of tokens per model and a
-- sparkline of the daily tokens. Read-only: it changes nothing (so it is the
-- same with --dry-run, and every run is a no-op).
--
-- Run:   opsh run [--db FILE] [--read-only] model-usage-report.lua [DAYS]
-- Cron:  0 8 * * 1  opsh run --read-only --db /var/lib/opsh/opsh.sqlite /opt/opsh/examples/model-usage-report.lua 7 | mail -s "opsh: model usage" ops@example.com
--
-- Output: the report on stdout (also when there was no usage: it says so).
-- Exit:  0  report printed
--        1  error
--        2  bad DAYS
--        3  database unavailable

local days = tonumber(arg[1] or "7")
if not days or days <= 0 or days % 1 ~= 0 then
  io.stderr:write("model-usage-report: DAYS must be a whole number of 1 or more; got '", tostring(arg[1]), "'\n")
  os.exit(2)
end

-- The first UTC day of the period (model_usage_stats has one row per model and UTC day).
local since = os.date("!%Y-%m-%d", os.time() - (days - 1) * 86400)
local rows = analytics.usage{ since = since }

-- A plain text table: columns in order, numbers right-aligned.
local function formatTable(data, columns)
  local widths, cells = {}, {}
  for i, column in ipairs(columns) do widths[i] = #column[2] end
  for r, row in ipairs(data) do
    cells[r] = {}
    for i, column in ipairs(columns) do
      local value = row[column[1]]
      local text
      if value == nil then text = "-"
      elseif column[3] then text = string.format(column[3], value)
      else text = tostring(value) end
      cells[r][i] = text
      widths[i] = math.max(widths[i], utf8.len(text) or #text)
    end
  end
  local function line(values, numeric)
    local parts = {}
    for i, text in ipairs(values) do
      local pad = string.rep(" ", widths[i] - (utf8.len(text) or #text))
      parts[i] = (numeric and i > 1) and (pad .. text) or (text .. pad)
    end
    return table.concat(parts, "  ")
  end
  local header, rule = {}, {}
  for i, column in ipairs(columns) do header[i] = column[2]; rule[i] = string.rep("-", widths[i]) end
  local out = { line(header, true), line(rule, false) }
  for _, values in ipairs(cells) do out[#out + 1] = line(values, true) end
  return table.concat(out, "\n")
end

print(string.format("Model usage, %s to %s (UTC), %d day(s)", since, os.date("!%Y-%m-%d"), days))
print()
if #rows == 0 then
  print("No model usage in this period.")
  return
end

local totals = { name = "total", generations = 0, tokens = 0, cost = 0, errors = 0 }
local list = {}
for _, row in ipairs(rows) do
  list[#list + 1] = row
  totals.generations = totals.generations + (row.generations or 0)
  totals.tokens = totals.tokens + (row.tokens or 0)
  totals.cost = totals.cost + (row.cost or 0)
  totals.errors = totals.errors + (row.errors or 0)
end
table.sort(list, function(a, b) return (a.tokens or 0) > (b.tokens or 0) end)
totals.error_rate = totals.generations > 0 and 100 * totals.errors / totals.generations or nil
list[#list + 1] = totals

print(formatTable(list, {
  { "name", "model" },
  { "generations", "generations", "%d" },
  { "tokens", "tokens", "%d" },
  { "cost", "cost", "%.4f" },
  { "avg_latency_ms", "avg ms", "%.1f" },
  { "errors", "errors", "%d" },
  { "error_rate", "error %", "%.2f" },
}))
print()
print("Tokens per model")
print(chart(rows, "name", "tokens"))

local daily = db.query([[SELECT day, sum(total_tokens) AS tokens FROM model_usage_stats
                         WHERE day >= ? GROUP BY day ORDER BY day]], since)
if #daily > 1 then
  print()
  print(string.format("Tokens per day  %s  (%s … %s)", sparkline(daily, "tokens"), daily[1].day, daily[#daily].day))
end
