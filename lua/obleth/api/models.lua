--- Models: the name clients send, status (staged / active) and endpoints.
local errors = require "obleth.api.errors"
local validate = require "obleth.deployment.input"
local params = require "obleth.api.params"

local M = {}

local function _id(ctx)
  local id = params.int_param(ctx, "id")
  if not id then return nil, errors.not_found("model", ctx.params.id) end
  return id
end

local function list(ctx)
  return 200, { models = ctx.app.store:list_models() }
end

local function create(ctx)
  local b = ctx.json -- a JSON object: the route declares its body (obleth.api.request)
  local m, err = validate.model(b)
  if not m then return errors.invalid(err) end
  local model, serr = ctx.app.store:create_model(m)
  if not model then return errors.store(serr) end
  ctx.model_id = model.id
  return 201, model, { Location = "/api/v1/models/" .. model.id }
end

local function get(ctx)
  local id, s, e = _id(ctx)
  if not id then return s, e end
  local m = ctx.app.store:get_model(id)
  if not m then return errors.not_found("model", id) end
  return 200, m
end

-- the router's load window is by name: a deleted or renamed model's load must not pass to the next
-- model of that name (obleth.router.load's forget; the load history is by id)
local function _forget_load(ctx, ...)
  local load = ctx.app.load
  if not load then return end
  for _, name in ipairs({ ... }) do load:forget(name) end
end

local function update(ctx)
  local id, s, e = _id(ctx)
  if not id then return s, e end
  local b = ctx.json -- a JSON object: the route declares its body (obleth.api.request)
  local m, err = validate.model(b, true)
  if not m then return errors.invalid(err) end
  local before = ctx.app.store:get_model(id)
  local model, serr = ctx.app.store:update_model(id, m)
  if not model then return errors.store(serr) end
  if before and before.name ~= model.name then _forget_load(ctx, before.name, model.name) end
  return 200, model
end

local function delete(ctx)
  local id, s, e = _id(ctx)
  if not id then return s, e end
  local before = ctx.app.store:get_model(id)
  local ok, err = ctx.app.store:delete_model(id)
  if not ok then return errors.store(err) end
  if before then _forget_load(ctx, before.name) end
  return 204, "", {}
end

local function add_endpoint(ctx)
  local id, s, e = _id(ctx)
  if not id then return s, e end
  local b = ctx.json -- a JSON object: the route declares its body (obleth.api.request)
  for k in pairs(b) do
    if k ~= "url" then return errors.fail(400, "invalid", "unknown field: " .. k, k) end
  end
  local url, verr = validate.endpoint(b.url, "url")
  if not url then return errors.invalid(verr) end
  local m, serr = ctx.app.store:add_endpoint(id, url)
  if not m then return errors.store(serr) end
  return 200, m
end

local function remove_endpoint(ctx)
  local id, s, e = _id(ctx)
  if not id then return s, e end
  local url, verr = validate.endpoint(ctx.query.url, "url")
  if not url then return errors.invalid(verr) end
  local m, serr = ctx.app.store:remove_endpoint(id, url)
  if not m then return errors.store(serr) end
  return 200, m
end

M.routes = {
  { "GET", "/api/v1/models", list, summary = "Every model, with status and endpoints" },
  { "POST", "/api/v1/models", create, action = "deployments.manage", changes = { "models" },
    summary = "Create a model (staged) under a unique API model name",
    body = "ModelInput" },
  { "GET", "/api/v1/models/{id}", get, summary = "One model" },
  { "PATCH", "/api/v1/models/{id}", update, action = "deployments.manage", changes = { "models" },
    summary = "Rename a model or change its description",
    body = "ModelInput" },
  { "DELETE", "/api/v1/models/{id}", delete, action = "deployments.manage", changes = { "models" },
    summary = "Delete a model (refused while it has a managed spec or live replicas)" },
  { "POST", "/api/v1/models/{id}/endpoints", add_endpoint, action = "deployments.manage", changes = { "models" },
    summary = "Add an endpoint (the model becomes active)",
    body = "EndpointInput" },
  { "DELETE", "/api/v1/models/{id}/endpoints", remove_endpoint, action = "deployments.manage", changes = { "models" },
    summary = "Remove the endpoint ?url= (staged when none is left)", query = { "url" } },
}

return M
