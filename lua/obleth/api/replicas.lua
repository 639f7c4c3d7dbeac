--- Replicas: list, restart one, "Try once more" for lost ones.
local errors = require "obleth.api.errors"
local params = require "obleth.api.params"
local parts = require "obleth.api.parts"

local M = {}

local function _live_filter(ctx)
  return { live = ctx.query.state == "live" } -- "live" / "all" / nil (the routes declare it)
end

local function list_all(ctx)
  local f, s, e = _live_filter(ctx)
  if not f then return s, e end
  -- model by model, in parts: thousands of replicas never hold the loop (obleth.api.parts)
  local store = ctx.app.store
  return parts.answer(ctx, { head = {}, key = "replicas", src = store:replica_model_ids(), many = true,
    make = function(id) return store:list_replicas({ model_id = id, live = f.live }) end })
end

local function list_model(ctx)
  local id = params.int_param(ctx, "id")
  if not id or not ctx.app.store:get_model(id) then return errors.not_found("model", ctx.params.id) end
  local f, s, e = _live_filter(ctx)
  if not f then return s, e end
  f.model_id = id
  return 200, { replicas = ctx.app.store:list_replicas(f) }
end

local function restart(ctx)
  local id = params.int_param(ctx, "id")
  if not id then return errors.not_found("replica", ctx.params.id) end
  local r, err = ctx.app.store:request_restart(id)
  if not r then return errors.store(err) end
  return 202, r
end

local function clear_lost(ctx)
  local id = params.int_param(ctx, "id")
  if not id then return errors.not_found("model", ctx.params.id) end
  local r, err = ctx.app.store:request_clear_lost(id)
  if not r then return errors.store(err) end
  return 202, r
end

M.routes = {
  { "GET", "/api/v1/replicas", list_all, parts = true, summary = "Every replica (?state=live leaves out ended ones)",
    query = { { "state", enum = { "live", "all" } } } },
  { "GET", "/api/v1/models/{id}/replicas", list_model, summary = "A model's replicas",
    query = { { "state", enum = { "live", "all" } } } },
  { "POST", "/api/v1/replicas/{id}/restart", restart, action = "deployments.manage", changes = { "replicas" },
    summary = "Cancel a replica's job; a new one is submitted (on the provisioner's next pass)" },
  { "POST", "/api/v1/models/{id}/replicas/clear-lost", clear_lost, action = "deployments.manage", changes = { "replicas" },
    summary = "Clear ended jobs (Try once more)" },
}

return M
