-- Writes docs/lua-api.md (on stdout) from the template named by arg[1]:
-- each `{{help MODULE}}` becomes that module's help entries as Markdown
-- (`help{ markdown = MODULE }`; `{{help globals}}` the global functions),
-- so the page and help() have one source (Sources/Bindings/Help). Every
-- module help() knows must be placed exactly once. Run by ./scripts/docs.

local path = assert(arg[1], "usage: opsh run scripts/lua-api.lua TEMPLATE")
local file = assert(io.open(path, "r"))
local template = file:read("a")
file:close()

-- What help prints, as text.
local function helpText(request)
  local lines, saved = {}, print
  print = function(text) lines[#lines + 1] = text end
  local ok, problem = pcall(help, request)
  print = saved
  if not ok then error(problem, 0) end
  return table.concat(lines, "\n")
end

-- Every module help() describes, from the headings of the whole reference.
local modules = {}
for heading in helpText{ markdown = true }:gmatch("\n?### ([^\n]+)") do
  local name = heading == "Global functions" and "globals" or heading:match("^`([%w_]+)`")
  modules[#modules + 1] = assert(name, "a heading help{ markdown = true } printed that this script cannot read: " .. heading)
end

local placed = {}
local page = template:gsub("{{help ([%w_]+)}}", function(name)
  placed[name] = (placed[name] or 0) + 1
  return helpText{ markdown = name == "globals" and "" or name }
end)

local problems = {}
for _, name in ipairs(modules) do
  if placed[name] ~= 1 then
    problems[#problems + 1] = string.format("{{help %s}} appears %d times in %s (once expected)", name, placed[name] or 0, path)
  end
end
if #problems > 0 then error(table.concat(problems, "\n"), 0) end
io.write(page)
