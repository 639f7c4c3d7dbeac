--- Pretty-printing Lua values for people (the REPL, debugging).
local M = {}

local function is_ident(k)
  return type(k) == "string" and k:match("^[%a_][%w_]*$") ~= nil
end

local function keys_sorted(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  table.sort(ks, function(a, b)
    local ta, tb = type(a), type(b)
    if ta ~= tb then return ta < tb end
    if ta == "number" or ta == "string" then return a < b end
    return tostring(a) < tostring(b)
  end)
  return ks
end

local function scalar(v)
  local t = type(v)
  if t == "string" then return ("%q"):format(v):gsub("\\\n", "\\n") end
  if t == "number" then
    if v == math.huge then return "math.huge" elseif v == -math.huge then return "-math.huge" end
    return tostring(v)
  end
  return tostring(v)
end

--- Render v as text. Tables are shown with sorted keys, nested up to `depth`
--- levels (default 5); arrays of scalars fit on one line when short.
---@param v any
---@param opts {depth: integer|nil, indent: string|nil}|nil
---@return string
function M.format(v, opts)
  opts = opts or {}
  local max_depth = opts.depth or 5
  local seen = {}
  local function fmt(x, depth, ind)
    if type(x) ~= "table" then return scalar(x) end
    if seen[x] then return "<cycle>" end
    if depth >= max_depth then return "{...}" end
    if next(x) == nil then return "{}" end
    seen[x] = true
    local n = #x
    local flat = true
    for k, val in pairs(x) do
      if type(val) == "table" or math.type(k) ~= "integer" or k < 1 or k > n then flat = false break end
    end
    local out
    if flat then
      local parts = {}
      for i = 1, n do parts[i] = scalar(x[i]) end
      out = "{ " .. table.concat(parts, ", ") .. " }"
      if #out > 100 then flat = false end
    end
    if not flat then
      local inner = ind .. "  "
      local parts = {}
      for _, k in ipairs(keys_sorted(x)) do
        local key
        if math.type(k) == "integer" and k >= 1 and k <= n then key = ""
        elseif is_ident(k) then key = k .. " = "
        else key = "[" .. scalar(k) .. "] = " end
        parts[#parts + 1] = inner .. key .. fmt(x[k], depth + 1, inner)
      end
      out = "{\n" .. table.concat(parts, ",\n") .. "\n" .. ind .. "}"
    end
    seen[x] = nil
    return out
  end
  return fmt(v, 0, opts.indent or "")
end

return M
