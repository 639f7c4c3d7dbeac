-- The folders of lua/obleth/ depend on one another down the layers of docs/architecture.md only:
-- every `require` under lua/ is read from the source, and an edge to a folder of the same or a
-- higher layer, a cycle between folders, or a folder the layer table does not place fails here.
-- The layer table is read from docs/architecture.md, so the page and this check cannot disagree.

local function read(path)
  local fh = assert(io.open(path, "rb"))
  local s = fh:read("a")
  fh:close()
  return s
end

-- every .lua file under dir (find(1): the spec runs under plain Lua 5.4)
local function lua_files(dir)
  local out = {}
  local p = assert(io.popen("find " .. dir .. " -name '*.lua' -type f | sort"))
  for line in p:lines() do out[#out + 1] = line end
  p:close()
  return out
end

--- The layers from the "## Layers" table: folder -> layer number.
local function layers(text)
  local section = text:match("\n## Layers\n(.-)\n## ") or text:match("\n## Layers\n(.*)$")
  assert(section, "docs/architecture.md has no '## Layers' section")
  local of = {}
  for n, folders in section:gmatch("\n| (%d+) | ([^|]+) |") do
    for f in folders:gmatch("`([%w_]+)/`") do
      assert(of[f] == nil, "folder " .. f .. "/ is placed twice")
      of[f] = tonumber(n)
    end
  end
  return of
end

--- Module names a chunk requires: require "x", require("x"), require 'x', pcall(require, "x").
local function requires(src)
  local out = {}
  -- drop comments first, so a require named in prose is not taken for one
  src = src:gsub("%-%-%[(=*)%[.-%]%1%]", ""):gsub("%-%-[^\n]*", "")
  for name in src:gmatch("require%s*%(?%s*[\"']([%w_.]+)[\"']") do out[#out + 1] = name end
  for name in src:gmatch("pcall%s*%(%s*require%s*,%s*[\"']([%w_.]+)[\"']") do out[#out + 1] = name end
  return out
end

--- The folder of lua/obleth/ a module name is in, or nil (the host's C modules, other libraries).
local function folder_of(name, folders)
  local f = name:match("^obleth%.([%w_]+)")
  if f and folders[f] then return f end
  return nil
end

--- Problems of a folder graph against the layers: upward or sideways edges, cycles, unplaced folders.
---@param edges table<string, table<string, string>> from -> to -> an example "file: require" that makes it
---@param layer_of table<string, integer>
---@param folders table<string, boolean> every folder there is
---@return string[]
local function problems(edges, layer_of, folders)
  local out = {}
  local names = {}
  for f in pairs(folders) do names[#names + 1] = f end
  table.sort(names)
  for _, f in ipairs(names) do
    if not layer_of[f] then
      out[#out + 1] = ("folder %s/ is in no layer of docs/architecture.md"):format(f)
    end
  end
  for _, from in ipairs(names) do
    local tos = {}
    for to in pairs(edges[from] or {}) do tos[#tos + 1] = to end
    table.sort(tos)
    for _, to in ipairs(tos) do
      local a, b = layer_of[from], layer_of[to]
      if a and b and b <= a then
        out[#out + 1] = ("%s/ (layer %d) requires %s/ (layer %d, %s): %s"):format(from, a, to, b,
          b == a and "the same layer" or "a higher layer", edges[from][to])
      end
    end
  end
  -- cycles (depth-first search; the layers forbid them already, this names the loop)
  local state, stack = {}, {}
  local function visit(f)
    state[f] = "open"
    stack[#stack + 1] = f
    local tos = {}
    for to in pairs(edges[f] or {}) do tos[#tos + 1] = to end
    table.sort(tos)
    for _, to in ipairs(tos) do
      if state[to] == "open" then
        local loop, on = {}, false
        for _, s in ipairs(stack) do
          if s == to then on = true end
          if on then loop[#loop + 1] = s .. "/" end
        end
        loop[#loop + 1] = to .. "/"
        out[#out + 1] = "cycle between folders: " .. table.concat(loop, " -> ")
      elseif not state[to] then
        visit(to)
      end
    end
    stack[#stack] = nil
    state[f] = "done"
  end
  for _, f in ipairs(names) do if not state[f] then visit(f) end end
  return out
end

-- the folder graph of the tree: from -> to -> "file: module"
local function tree_graph()
  local folders, edges = {}, {}
  for _, path in ipairs(lua_files("lua/obleth")) do
    local f = path:match("^lua/obleth/([%w_]+)/")
    if f then folders[f] = true end
  end
  for _, path in ipairs(lua_files("lua")) do
    local from = path:match("^lua/obleth/([%w_]+)/")
    assert(from, path .. " is outside the folders of lua/obleth/ (every module belongs to one)")
    for _, name in ipairs(requires(read(path))) do
      local to = folder_of(name, folders)
      if to and to ~= from then
        edges[from] = edges[from] or {}
        edges[from][to] = edges[from][to] or (path .. ": " .. name)
      end
    end
  end
  return edges, folders
end

describe("the folders of lua/obleth/", function()
  local layer_of = layers(read("docs/architecture.md"))

  it("depend only down the layers of docs/architecture.md: no edge up or sideways, no cycle, none unplaced", function()
    local edges, folders = tree_graph()
    assert.same({}, problems(edges, layer_of, folders))
  end)

  it("are all placed by the layer table, which names no folder that is gone", function()
    local _, folders = tree_graph()
    for f in pairs(layer_of) do assert.is_true(folders[f] ~= nil, f .. "/ is in the table but not in lua/obleth/") end
    assert.is_true(next(layer_of) ~= nil)
  end)

  it("keep the parts of obleth serve apart: api/, router/ and web/ share a layer", function()
    assert.equal(layer_of.api, layer_of.router)
    assert.equal(layer_of.api, layer_of.web)
    assert.is_true(layer_of.serve < layer_of.api)
  end)
end)

describe("the requires check itself", function()
  local layer_of = { top = 1, a = 2, b = 2, low = 3 }
  local folders = { top = true, a = true, b = true, low = true }

  it("reads require in each of its forms, and not in comments", function()
    assert.same({ "obleth.x", "obleth.y", "obleth.z", "obleth.w" },
      requires('local x = require "obleth.x"\nlocal y = require("obleth.y")\n-- require "obleth.no"\n'
        .. "local z = require 'obleth.z'\nlocal ok, w = pcall(require, \"obleth.w\")\n--[[ require 'obleth.no' ]]"))
  end)

  it("reports an edge up the layers", function()
    local p = problems({ low = { top = "lua/obleth/low/x.lua: obleth.top" } }, layer_of, folders)
    assert.equal(1, #p)
    assert.matches("low/ %(layer 3%) requires top/ %(layer 1, a higher layer%)", p[1])
  end)

  it("reports an edge between two folders of one layer", function()
    local p = problems({ a = { b = "lua/obleth/a/x.lua: obleth.b" } }, layer_of, folders)
    assert.equal(1, #p)
    assert.matches("the same layer", p[1])
  end)

  it("reports a cycle between folders", function()
    local p = problems({ a = { low = "f" }, low = { a = "g" } }, layer_of, folders)
    local found = false
    for _, m in ipairs(p) do if m:find("cycle between folders: a/ -> low/ -> a/", 1, true) then found = true end end
    assert.is_true(found, table.concat(p, "\n"))
  end)

  it("reports a folder no layer places", function()
    local p = problems({}, layer_of, { top = true, a = true, b = true, low = true, stray = true })
    assert.same({ "folder stray/ is in no layer of docs/architecture.md" }, p)
  end)

  it("accepts edges down the layers", function()
    assert.same({}, problems({ top = { a = "f", low = "g" }, a = { low = "h" } }, layer_of, folders))
  end)
end)
