--- Slurm GRES strings, as found in node `gres` / `gres_used` and job `tres_per_node`.
--
-- Parsed shape (one entry per GRES name):
--   { gpu = { total = 4, by_type = { a100 = 4 } } }
-- An untyped count ("gpu:4") is kept under the key `M.UNTYPED` ("") of
-- `by_type`, so `by_type[""]` is the number of GPUs whose model Slurm was not
-- told. The parenthesised detail ("(S:0-1)", "(IDX:0,2-3)", "(IDX:N/A)") is
-- socket / index information, never a count, and its commas never separate
-- entries. Pure functions, no I/O.
local hostlist = require "obleth.util.hostlist"

local M = {}

--- Key of `by_type` holding counts declared without a type.
M.UNTYPED = ""

-- Entries are split at the commas outside "(...)", by the hostlist's rule; a stray ")" makes the
-- whole string one entry.
local function _split_entries(s)
  return hostlist.split_top(s, "(", ")") or { s }
end

local SUFFIX = { k = 1024, K = 1024, m = 1024 ^ 2, M = 1024 ^ 2, g = 1024 ^ 3, G = 1024 ^ 3,
  t = 1024 ^ 4, T = 1024 ^ 4 }

local function _count(s)
  local n, suf = s:match("^(%d+)([kKmMgGtT]?)$")
  if not n then return nil end
  return math.tointeger(tonumber(n) * (SUFFIX[suf] or 1)) or tonumber(n)
end

local function _add(out, name, gtype, count)
  local e = out[name]
  if not e then
    e = { total = 0, by_type = {} }
    out[name] = e
  end
  e.total = e.total + count
  e.by_type[gtype] = (e.by_type[gtype] or 0) + count
end

--- Parse a GRES string such as "gpu:a100:4(S:0-1)", "gpu:a:2,gpu:b:2", "gpu:4".
-- The TRES forms used by jobs are accepted too: "gres:gpu:1" (v0.0.38),
-- "gres/gpu:a100:2" (v0.0.39+) and "gres/gpu=2" (tres_per_task); non-gres TRES
-- entries ("cpu=2") are ignored.
---@param s string|nil
---@return table<string, {total: integer, by_type: table<string, integer>}>
function M.parse(s)
  local out = {}
  if type(s) ~= "string" then return out end
  s = s:gsub("%s+", "")
  if s == "" or s == "(null)" or s == "N/A" then return out end
  for _, item in ipairs(_split_entries(s)) do
    item = item:gsub("%b()", "")
    local n_prefix
    item, n_prefix = item:gsub("^gres[:/]", "")
    -- the TRES "=" form of a GRES ("gres/gpu=2", "gres/gpu:a100=2", tres_per_task): name[:type]=count
    local named, eqcount = item:match("^([^=]+)=(%d+[kKmMgGtT]?)$")
    if n_prefix > 0 and named then item = named .. ":" .. eqcount end
    -- an entry with no name (":4", ":") is not a GRES: skipped
    if item ~= "" and not item:find("=", 1, true) and item:sub(1, 1) ~= ":" then
      local fields = {}
      for f in item:gmatch("[^:]+") do fields[#fields + 1] = f end
      local name, gtype, count = fields[1], M.UNTYPED, 1
      if #fields >= 2 then
        local last = _count(fields[#fields])
        if last then
          count = last
          gtype = table.concat(fields, ":", 2, #fields - 1)
        else
          gtype = table.concat(fields, ":", 2, #fields)
        end
      end
      _add(out, name, gtype, count)
    end
  end
  return out
end

--- Free GRES: configured minus used, per name and type (never below 0).
-- When the used string is untyped but the configured one is typed (or the
-- reverse) the untyped count is taken from the total only.
---@param configured string|table node `gres` string or its parsed form
---@param used string|table|nil node `gres_used` string or its parsed form
---@return table<string, {total: integer, by_type: table<string, integer>}>
function M.free(configured, used)
  local conf = type(configured) == "table" and configured or M.parse(configured)
  local busy = type(used) == "table" and used or M.parse(used)
  local out = {}
  for name, c in pairs(conf) do
    local u = busy[name] or { total = 0, by_type = {} }
    local e = { total = math.max(0, c.total - u.total), by_type = {} }
    for t, n in pairs(c.by_type) do
      e.by_type[t] = math.max(0, n - (u.by_type[t] or 0))
    end
    out[name] = e
  end
  return out
end

--- Number of GPUs in a parsed or raw GRES value (0 when none).
---@param g string|table|nil
---@return integer
function M.gpus(g)
  local p = type(g) == "table" and g or M.parse(g)
  return p.gpu and p.gpu.total or 0
end

return M
