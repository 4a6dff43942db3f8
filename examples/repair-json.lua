-- repair-json.lua — find JSON columns holding invalid JSON; repair or quarantine.
--
-- When: after an incident or a restore of a database that lived without the
-- CHECK (json_valid(…)) constraints (older SDKs wrote JSON by hand), when
-- the backend or check() complains about JSON; safe to run from cron.
--
-- What: the JSON columns are read from the schema (every
-- CHECK (… json_valid(column) …) in sqlite_master; on PostgreSQL every
-- CHECK (… opsh_json_valid(column) …) in pg_constraint). For each row whose
-- value is not valid JSON it tries, in order, a few modest and safe repairs:
--   surrounding blanks and a byte-order mark, trailing commas before } or ],
--   single-quoted strings ('a' → "a"), missing closing brackets at the end
--   of a truncated value (not a truncated string);
-- a repair counts only if the database's own check accepts it (SQLite's
-- json_valid, PostgreSQL's opsh_json_valid) and it keeps the column's kind
-- (an array for a '[]' default, an object for '{}').
-- A value that cannot be repaired is moved to the table
--   json_quarantine(table_name, row_key, column_name, value, found_at, reason)
-- (created if missing) and the column is set to its default, or NULL.
-- Every row is reported; everything happens in one transaction. A row is
-- found again by the table's primary key (else SQLite's rowid, PostgreSQL's
-- ctid). The same file runs on SQLite and PostgreSQL (`--db postgresql://…`).
--
-- Run:   opsh run [--db FILE|URL] [--dry-run] repair-json.lua
--        --dry-run reports what it would repair or quarantine and changes nothing.
-- Cron:  0 5 * * *  opsh run --db /var/lib/opsh/opsh.sqlite /opt/opsh/examples/repair-json.lua >>/var/log/opsh/json.log 2>&1
--
-- Output: one line per row (repaired, or quarantined on stderr) and a summary.
-- Exit:  0  nothing invalid, or every value repaired
--        1  error (nothing changed: the transaction rolled back)
--        3  database unavailable; 75 another run holds the script's lock
--        4  values were quarantined (look at json_quarantine); the next run exits 0

local DRY_RUN = db.inTransaction() -- `opsh run --dry-run` runs the script in one transaction
local POSTGRES = db.engine == "postgresql"
-- The function the schema's CHECK constraints call.
local JSON_VALID = POSTGRES and "opsh_json_valid" or "json_valid"

-- The JSON columns: { table =, column =, key =, default =, notNull = }, from
-- the CHECK constraints of the schema.
local function sqliteJSONColumns()
  local found = {}
  for object in db.rows([[SELECT name, sql FROM sqlite_master
                          WHERE type = 'table' AND sql LIKE '%json_valid%' ORDER BY name]]) do
    local info = {}
    for _, column in ipairs(db.query(string.format("PRAGMA table_info(%q)", object.name))) do
      info[column.name] = column
    end
    local key = "rowid"
    for _, column in pairs(info) do
      if column.pk == 1 then key = column.name end
    end
    for name in object.sql:gmatch("json_valid%s*%(%s*[\"`%[]?([%w_]+)[\"`%]]?%s*%)") do
      if info[name] then
        found[#found + 1] = { table = object.name, column = name, key = key,
                              default = info[name].dflt_value, notNull = info[name].notnull == 1 }
      end
    end
  end
  return found
end

-- The same from PostgreSQL's catalogs, for the tables of the current schema.
-- A default comes without its cast ('[]'::text → '[]'); the key is the
-- primary key when it is one column, else the row's ctid.
local function postgresJSONColumns()
  local found = {}
  for object in db.rows([[SELECT c.relname AS "table",
                                 string_agg(pg_get_constraintdef(k.oid), ' ' ORDER BY k.conname) AS "checks"
                          FROM pg_constraint AS k
                          JOIN pg_class AS c ON c.oid = k.conrelid
                          JOIN pg_namespace AS n ON n.oid = c.relnamespace
                          WHERE k.contype = 'c' AND n.nspname = current_schema()
                            AND pg_get_constraintdef(k.oid) LIKE '%opsh_json_valid%'
                          GROUP BY c.relname ORDER BY c.relname COLLATE "C"]]) do
    local info, key = {}, nil
    for column in db.rows([[SELECT a.attname AS "name", pg_get_expr(d.adbin, d.adrelid) AS "default",
                                   a.attnotnull AS "notNull",
                                   EXISTS (SELECT 1 FROM pg_index AS i WHERE i.indrelid = c.oid AND i.indisprimary
                                           AND i.indnatts = 1 AND i.indkey[0] = a.attnum) AS "primaryKey"
                            FROM pg_class AS c
                            JOIN pg_namespace AS n ON n.oid = c.relnamespace
                            JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                            LEFT JOIN pg_attrdef AS d ON d.adrelid = c.oid AND d.adnum = a.attnum
                            WHERE n.nspname = current_schema() AND c.relname = ?]], object.table) do
      info[column.name] = column
      if column.primaryKey == 1 then key = column.name end
    end
    for name in object.checks:gmatch("opsh_json_valid%(%(?\"?([%w_]+)\"?%)?") do
      if info[name] then
        local default = info[name].default
        if default then default = default:gsub("::[%a_ ]+$", "") end
        found[#found + 1] = { table = object.table, column = name, key = key or "ctid", byCtid = key == nil,
                              default = default, notNull = info[name].notNull == 1 }
      end
    end
  end
  return found
end

local function jsonColumns()
  if POSTGRES then return postgresJSONColumns() end
  return sqliteJSONColumns()
end

local function valid(text)
  return db.value("SELECT " .. JSON_VALID .. "(?)", text) == 1
end

-- 'array', 'object', … as SQLite's json_type says (PostgreSQL's json_typeof
-- says the same of arrays and objects).
local function jsonType(text)
  if POSTGRES then return db.value("SELECT json_typeof(CAST(? AS json))", text) end
  return db.value("SELECT json_type(?)", text)
end

-- The repairs. Each takes text and returns text; none looks inside strings
-- for anything but the end of the string.
local function trimmed(text)
  return (text:gsub("^\239\187\191", ""):gsub("^%s+", ""):gsub("%s+$", ""))
end

local function withoutTrailingCommas(text)
  local out, inString, escaped, pendingComma = {}, false, false, nil
  for i = 1, #text do
    local c = text:sub(i, i)
    if inString then
      out[#out + 1] = c
      if escaped then escaped = false
      elseif c == "\\" then escaped = true
      elseif c == '"' then inString = false end
    elseif c == "," then
      if pendingComma then out[#out + 1] = pendingComma end
      pendingComma = c
    elseif c:match("%s") then
      if pendingComma then pendingComma = pendingComma .. c else out[#out + 1] = c end
    else
      if pendingComma and c ~= "}" and c ~= "]" then out[#out + 1] = pendingComma end
      pendingComma = nil
      out[#out + 1] = c
      if c == '"' then inString = true end
    end
  end
  if pendingComma then out[#out + 1] = pendingComma end
  return table.concat(out)
end

-- 'a' → "a" (a " inside becomes \"), outside double-quoted strings.
local function doubleQuoted(text)
  local out, quote, escaped = {}, nil, false
  for i = 1, #text do
    local c = text:sub(i, i)
    if quote then
      if escaped then
        escaped = false
        out[#out + 1] = (quote == "'" and c == "'") and "'" or ("\\" .. c)
      elseif c == "\\" then escaped = true
      elseif c == quote then quote = nil; out[#out + 1] = '"'
      elseif quote == "'" and c == '"' then out[#out + 1] = '\\"'
      else out[#out + 1] = c end
    elseif c == "'" or c == '"' then
      quote = c
      out[#out + 1] = '"'
    else
      out[#out + 1] = c
    end
  end
  return table.concat(out)
end

-- Closes the brackets a truncated value left open; nil inside a string.
local function closed(text)
  local stack, inString, escaped = {}, false, false
  for i = 1, #text do
    local c = text:sub(i, i)
    if inString then
      if escaped then escaped = false
      elseif c == "\\" then escaped = true
      elseif c == '"' then inString = false end
    elseif c == '"' then inString = true
    elseif c == "{" then stack[#stack + 1] = "}"
    elseif c == "[" then stack[#stack + 1] = "]"
    elseif c == "}" or c == "]" then
      if stack[#stack] ~= c then return nil end
      stack[#stack] = nil
    end
  end
  if inString or #stack == 0 then return nil end
  local tail = {}
  for i = #stack, 1, -1 do tail[#tail + 1] = stack[i] end
  return withoutTrailingCommas(text:gsub("[,:%s]+$", "") .. table.concat(tail))
end

local REPAIRS = {
  { "blanks", trimmed },
  { "trailing commas", function(t) return withoutTrailingCommas(trimmed(t)) end },
  { "single quotes", function(t) return withoutTrailingCommas(doubleQuoted(trimmed(t))) end },
  { "missing closing brackets", function(t) return closed(withoutTrailingCommas(trimmed(t))) end },
  { "single quotes and missing closing brackets", function(t) return closed(withoutTrailingCommas(doubleQuoted(trimmed(t)))) end },
}

-- The JSON kind a column's default asks for: 'array', 'object' or nil (any).
local function kindOf(default)
  if default == "'[]'" then return "array" end
  if default == "'{}'" then return "object" end
  return nil
end

local function repair(text, column)
  local kind = kindOf(column.default)
  for _, entry in ipairs(REPAIRS) do
    local name, fix = entry[1], entry[2]
    local candidate = fix(text)
    if candidate and candidate ~= text and valid(candidate)
        and (not kind or jsonType(candidate) == kind) then
      return candidate, name
    end
  end
  return nil
end

local function shown(text)
  text = text:gsub("[%c]", " ")
  if #text > 60 then text = text:sub(1, 57) .. "..." end
  return text
end

-- json_quarantine, made at the first value quarantined (in the transaction:
-- a dry run leaves no table behind).
local quarantineReady = false
local function makeQuarantine()
  if quarantineReady then return end
  quarantineReady = true
  if POSTGRES then
    if db.value("SELECT to_regclass('json_quarantine') IS NULL") == 1 then
      db.exec([[CREATE TABLE json_quarantine (
                  id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
                  table_name text NOT NULL, row_key text, column_name text NOT NULL,
                  value text, found_at double precision NOT NULL, reason text NOT NULL)]])
    end
    return
  end
  db.exec([[CREATE TABLE IF NOT EXISTS json_quarantine (
              id INTEGER PRIMARY KEY,
              table_name TEXT NOT NULL, row_key TEXT, column_name TEXT NOT NULL,
              value TEXT, found_at REAL NOT NULL, reason TEXT NOT NULL)]])
end

local repaired, quarantined, now = 0, 0, os.time()
db.transaction(function()
  for _, column in ipairs(jsonColumns()) do
    -- How the row is found again: a ctid is given as text and read back as one.
    local keyShown, keyMatch = string.format("%q", column.key), string.format("%q = ?", column.key)
    if column.byCtid then keyShown, keyMatch = "CAST(ctid AS text)", "ctid = CAST(? AS tid)" end
    local broken = db.query(string.format(
      "SELECT %s AS key, CAST(%q AS TEXT) AS value FROM %q WHERE %q IS NOT NULL AND NOT %s(%q)%s",
      keyShown, column.column, column.table, column.column, JSON_VALID, column.column, POSTGRES and " ORDER BY 1" or ""))
    for _, row in ipairs(broken) do
      local where = string.format("%s.%s of %s %s", column.table, column.column, column.key, tostring(row.key))
      local fixed, how = repair(row.value, column)
      if fixed then
        db.exec(string.format("UPDATE %q SET %q = ? WHERE %s", column.table, column.column, keyMatch), fixed, row.key)
        print(string.format("%s %s (%s): %s → %s", DRY_RUN and "would repair" or "repaired", where, how,
                            shown(row.value), shown(fixed)))
        repaired = repaired + 1
      else
        makeQuarantine()
        -- The column's default; NULL where it has none; JSON null where NULL is refused.
        local replacement = column.default or (column.notNull and "'null'") or "NULL"
        local reason = "invalid JSON that no safe repair could mend"
        db.exec("INSERT INTO json_quarantine (table_name, row_key, column_name, value, found_at, reason) VALUES (?, ?, ?, ?, ?, ?)",
                column.table, tostring(row.key), column.column, row.value, now, reason)
        db.exec(string.format("UPDATE %q SET %q = %s WHERE %s", column.table, column.column, replacement, keyMatch), row.key)
        io.stderr:write(string.format("repair-json: %s %s: %s → json_quarantine; the column is now %s\n",
                                      DRY_RUN and "would quarantine" or "quarantined", where, shown(row.value),
                                      replacement))
        quarantined = quarantined + 1
      end
    end
  end
end)

print(string.format("repair-json: %d value(s) %s, %d %s", repaired, DRY_RUN and "would be repaired" or "repaired",
                    quarantined, DRY_RUN and "would be quarantined" or "quarantined"))
if quarantined > 0 then os.exit(4) end
