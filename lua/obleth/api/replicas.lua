--- Replicas: list, restart one, "Try once more" for lost ones.
local errors = require "obleth.api.errors"
local server = require "obleth.server"

local M = {}

local function _live_filter(ctx)
  local q = ctx.query
  for k in pairs(q) do
    if k ~= "state" then
      return nil, errors.fail(400, "invalid", ("unknown query parameter %q (state)"):format(k), k)
    end
  end
  if q.state and q.state ~= "live" and q.state ~= "all" then
    return nil, errors.fail(400, "invalid", "state: must be live or all", "state")
  end
  return { live = q.state == "live" }
end

local function list_all(ctx)
  local f, s, e = _live_filter(ctx)
  if not f then return s, e end
  return 200, { replicas = ctx.app.store:list_replicas(f) }
end

local function list_model(ctx)
  local id = server.int_param(ctx, "id")
  if not id or not ctx.app.store:get_model(id) then return errors.not_found("model", ctx.params.id) end
  local f, s, e = _live_filter(ctx)
  if not f then return s, e end
  f.model_id = id
  return 200, { replicas = ctx.app.store:list_replicas(f) }
end

local function restart(ctx)
  local id = server.int_param(ctx, "id")
  if not id then return errors.not_found("replica", ctx.params.id) end
  local r, err = ctx.app.store:request_restart(id)
  if not r then return errors.store(err) end
  return 202, r
end

local function clear_lost(ctx)
  local id = server.int_param(ctx, "id")
  if not id then return errors.not_found("model", ctx.params.id) end
  local r, err = ctx.app.store:request_clear_lost(id)
  if not r then return errors.store(err) end
  return 202, r
end

M.routes = {
  { "GET", "/api/v1/replicas", list_all, summary = "Every replica (?state=live leaves out ended ones)",
    query = { "state" } },
  { "GET", "/api/v1/models/{id}/replicas", list_model, summary = "A model's replicas", query = { "state" } },
  { "POST", "/api/v1/replicas/{id}/restart", restart, changes = { "replicas" },
    summary = "Cancel a replica's job; a new one is submitted (on the provisioner's next pass)" },
  { "POST", "/api/v1/models/{id}/replicas/clear-lost", clear_lost, changes = { "replicas" },
    summary = "Clear ended jobs (Try once more)" },
}

return M
