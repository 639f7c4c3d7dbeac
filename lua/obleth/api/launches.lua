--- Launch history (GET /api/v1/deployments/launches), newest first.
local errors = require "obleth.api.errors"
local validate = require "obleth.validate"

local M = {}

local function list(ctx)
  local q, err = validate.launches_query(ctx.query)
  if not q then return errors.invalid(err) end
  return 200, { launches = ctx.app.store:list_launches(q) }
end

M.routes = {
  { "GET", "/api/v1/deployments/launches", list,
    summary = "Launch history, newest first; ?model_id=, ?recipe_id=, ?limit= (50, at most 500)",
    query = { "model_id", "recipe_id", "limit" } },
}

return M
