--- Managed specs (GET/PUT/DELETE /api/v1/models/{id}/managed, GET /api/v1/managed)
-- and dismissing the last refused-job message. Fields: docs/managed-spec.md.
local errors = require "obleth.api.errors"
local validate = require "obleth.deployment.input"
local params = require "obleth.api.params"
local NULL = require("cjson").null

local M = {}

local function _model(ctx)
  local id = params.int_param(ctx, "id")
  if not id or not ctx.app.store:get_model(id) then return nil, errors.not_found("model", ctx.params.id) end
  return id
end

--- A managed spec as a reader who may not manage deployments sees it (a viewer
--- "sees everything but secrets", docs/access.md): the fields the spec's schema marks secret and every
--- value of its `environment` read as the mask. Everyone who may edit the spec sees it whole: a PUT
--- sends every value back.
---@param ctx table the request's context
---@param doc table a decoded spec (changed in place)
---@return table doc
function M.for_reader(ctx, doc)
  if require("obleth.api.access").may(ctx, "deployments.manage") then return doc end
  local schema = require "obleth.schema"
  return schema.mask_secrets(doc, schema.secrets(require("obleth.schema.managed").spec), validate.MASK)
end

local function list(ctx)
  local specs = ctx.app.store:list_specs()
  for _, spec in ipairs(specs) do M.for_reader(ctx, spec) end
  return 200, { managed = specs }
end

--- The spec as GET (and PUT) answer it: with `scaling` {current, desired, autoscaled, change, reason}, the
--- replicas that hold or wait for a job, the count wanted and why (an autoscaled spec: the scale policy on
--- the router's load window; docs/autoscaling.md).
---@param app table
---@param id integer the model id
---@param spec table the stored spec (changed in place)
---@return table spec
function M.with_scaling(app, id, spec)
  local ok, row = pcall(require("obleth.deployment.scaling").row, spec,
    app.store:list_replicas({ model_id = id, live = true }), app.load,
    require("obleth.policy").get("scale"), app.now())
  if ok then
    spec.scaling = { current = row.current, desired = row.desired, autoscaled = row.autoscaled,
      change = row.change or NULL, reason = row.reason or NULL }
  else
    app.log.warn("scaling_view_failed", { model_id = id, error = tostring(row) })
  end
  return spec
end

local function get(ctx)
  local id, s, e = _model(ctx)
  if not id then return s, e end
  local spec = ctx.app.store:get_spec(id)
  if not spec then return errors.fail(404, "not_found", ("model %d has no managed spec"):format(id)) end
  -- the refused job's field in the page's words (its label); Slurm's message stays as Slurm said it
  if type(spec.provision_error) == "table" then
    local label = require("obleth.deployment.labels").of(spec.provision_error.field)
    if label then spec.provision_error.label = label end
  end
  return 200, M.with_scaling(ctx.app, id, M.for_reader(ctx, spec))
end

-- PUT checks each field (obleth.deployment.input), then what Slurm would refuse or never run on this
-- cluster — account, QoS, time limit, the user's groups, partition fit — with the launch flow's own
-- checks (obleth.api.deployments.check_spec → obleth.deployment.cluster_errors): 422 with per-field errors
-- and nothing stored, so running replicas are untouched. ?check=false stores without the cluster
-- checks (the provisioner then reports a refusal as provision_error). A paused spec (enabled: false)
-- submits nothing, so it is stored without them: Pause works on a spec the cluster refuses, and
-- Resume (enabled: true) is checked.
local function put(ctx)
  local id, s, e = _model(ctx)
  if not id then return s, e end
  local check = ctx.query.check -- "true" / "false" / nil (the route declares it)
  local b = ctx.json -- a JSON object: the route declares its body (obleth.api.request)
  local spec, err = validate.managed_spec(b)
  if not spec then return errors.invalid(err) end
  if check ~= "false" and spec.enabled ~= false then
    local launch_api = require "obleth.api.deployments"
    local errs, why = launch_api.check_spec(ctx.app, spec)
    if #errs > 0 then return launch_api.unprocessable(errs) end
    if why then ctx.app.log.warn("managed_spec_unchecked", { model_id = id, reason = why }) end
  end
  local stored, perr = ctx.app.store:put_spec(id, spec)
  if not stored then return errors.store(perr) end
  return stored.created and 201 or 200, M.with_scaling(ctx.app, id, stored.spec)
end

local function delete(ctx)
  local id, s, e = _model(ctx)
  if not id then return s, e end
  local ok, err = ctx.app.store:delete_spec(id)
  if not ok then return errors.store(err) end
  return 204, "", {}
end

local function dismiss(ctx)
  local id, s, e = _model(ctx)
  if not id then return s, e end
  if ctx.json ~= nil then
    local b = ctx.json -- an object when sent (the route declares an optional body)
    for k, v in pairs(b) do
      if k ~= "provision_error" or v ~= require("cjson").null then
        return errors.fail(400, "invalid", ("unknown field: %s (send no body, or {\"provision_error\": null})"):format(k), k)
      end
    end
  end
  local spec, err = ctx.app.store:dismiss_provision_error(id)
  if not spec then return errors.store(err) end
  return 200, spec
end

-- GET /api/v1/models/{id}/load?hours=N: the model's load and replicas minute by minute over the last N
-- hours (obleth.deployment.load_history: in memory, HOURS at most), sampled now first so the current
-- minute is up to date, with the scale policy's target and the words the page shows.
local function load_history(ctx)
  local id, s, e = _model(ctx)
  if not id then return s, e end
  local history = require "obleth.deployment.load_history"
  local hours = history.HOURS
  if ctx.query.hours ~= nil then
    hours = math.tointeger(tonumber(ctx.query.hours))
    if not hours or hours < 1 or hours > history.HOURS then
      return errors.fail(400, "invalid", ("hours: a whole number of hours from 1 to %d"):format(history.HOURS), "hours")
    end
  end
  local app = ctx.app
  local model = app.store:get_model(id)
  local spec = app.store:get_spec(id)
  local scale = require("obleth.policy").get("scale")
  local row, settings
  if spec then
    row = require("obleth.deployment.scaling").row(spec, app.store:list_replicas({ model_id = id, live = true }),
      app.load, scale, app.now())
    if type(spec.autoscale) == "table" then settings = scale.settings(spec.autoscale) end
  end
  local h = app.load_history
  if app.load then h:sample(id, app.load:view(model.name, h:since()), row) end
  local out = h:answer(id, model.name, hours, row, settings)
  out.model_id = id
  return 200, out
end

M.schemas = {
  ModelLoad = { type = "object", description = "a model's load and replicas per minute (docs/autoscaling.md#load-history)",
    required = { "model", "model_id", "step", "hours", "from", "to", "observed_since", "points", "series", "summary" },
    properties = {
      model = { type = "string" }, model_id = { type = "integer" },
      step = { type = "integer", description = "seconds a point covers (60)" },
      hours = { type = "integer", description = "the hours asked for" },
      hours_max = { type = "integer", description = "the most hours kept (6)" },
      from = { type = "integer", description = "epoch seconds: the start of the span asked for" },
      to = { type = "integer", description = "epoch seconds: the end of the current minute" },
      observed_since = { type = "integer", description = "epoch seconds: from when this obleth serve has seen " ..
        "every request (its start, or `from`); no point before it" },
      target_inflight = { type = "integer", description = "autoscaled: requests one replica should carry" },
      min_replicas = { type = "integer" }, max_replicas = { type = "integer" },
      points = { type = "array", description = "oldest first; a minute no sample saw has none", items = {
        type = "object", required = { "at", "inflight", "queued", "arrivals", "finished" }, properties = {
          at = { type = "integer", description = "epoch seconds: the minute's start" },
          inflight = { type = "integer", description = "the most requests in flight at once in the minute" },
          queued = { type = "integer", description = "the most requests held (queued) in the router at once" },
          arrivals = { type = "integer" }, finished = { type = "integer", description = "requests finished in the minute" },
          current = { type = "integer", description = "replicas holding or waiting for a job (managed models)" },
          desired = { type = "integer", description = "replicas wanted (managed models)" },
          capacity = { type = "integer", description = "autoscaled: current × target_inflight" } } } },
      series = { type = "array", description = "what the chart draws, in order, with its legend's words", items = {
        type = "object", properties = { key = { type = "string" }, label = { type = "string" },
          unit = { type = "string", enum = { "requests", "replicas" } },
          chart = { type = "string", enum = { "requests", "replicas" } } } } },
      summary = { type = "string", description = "the span in words (the chart's text alternative)" },
    } },
}

M.routes = {
  { "GET", "/api/v1/managed", list, summary = "Every managed spec" },
  { "GET", "/api/v1/models/{id}/managed", get, summary = "A model's Slurm spec" },
  { "PUT", "/api/v1/models/{id}/managed", put, action = "deployments.manage", query = { { "check", enum = { "true", "false" } } },
    changes = { "managed", "models" },
    summary = "Create or replace a model's Slurm spec (generation is bumped when it changes); 422 with per-field "
      .. "errors when the cluster would refuse or never run it (?check=false skips the cluster checks)",
    body = "ManagedSpec" },
  { "DELETE", "/api/v1/models/{id}/managed", delete, action = "deployments.manage", changes = { "managed", "models" },
    summary = "Delete a model's spec: nothing more is launched and its jobs are cancelled" },
  { "GET", "/api/v1/models/{id}/load", load_history, response = "ModelLoad",
    query = { { "hours", pattern = "^%d+$", rule = "1 to 6: the hours of history (default 6)" } },
    summary = "A model's load and replicas per minute over the last hours (in flight, queued, finished; "
      .. "replicas now and wanted), kept by this obleth serve in memory for 6 h" },
  { "PATCH", "/api/v1/models/{id}/managed/provision-error", dismiss, action = "deployments.manage", changes = { "managed" },
    body = "ProvisionErrorDismiss", body_optional = true,
    summary = "Dismiss the last refused-job message" },
}

return M
