--- Path and query parameters of a route's request, read the same way by every route module.
local M = {}

--- An integer path parameter, or nil.
---@param ctx table the request context (ctx.params: the path's {name} values, strings)
---@param name string|nil the parameter (default "id")
---@return integer|nil n a whole number of at least 1; nil when missing or not one
function M.int_param(ctx, name)
  local s = ctx.params[name or "id"]
  local n = s and s:match("^%d+$") and math.tointeger(tonumber(s))
  if n and n >= 1 then return n end
  return nil
end

return M
