--- Small table helpers shared by modules (pure Lua, no I/O).
local M = {}

--- A new table holding a's keys, then b's over them (shallow).
---@param a table|nil
---@param b table|nil
---@return table
function M.merged(a, b)
  local out = {}
  for k, v in pairs(a or {}) do out[k] = v end
  for k, v in pairs(b or {}) do out[k] = v end
  return out
end

--- A new table holding t's keys (shallow); nil gives an empty table.
---@param t table|nil
---@return table
function M.copy(t)
  return M.merged(t, nil)
end

--- A copy of plain data: tables are copied all the way down (without their metatables), every
--- other value is itself. For decoded JSON a caller is about to change.
---@param v any
---@return any
function M.deep_copy(v)
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = M.deep_copy(x) end
  return out
end

--- The mark of a list that must stay a list when written as JSON (an empty one is `[]`,
-- not `{}`): obleth.util.json writes it so, obleth.util.format.jsonable keeps it.
M.ARRAY = { __name = "obleth.json.array" }

--- Mark t (default a new table) as a list.
---@param t table|nil
---@return table t
function M.array(t)
  return setmetatable(t or {}, M.ARRAY)
end

return M
