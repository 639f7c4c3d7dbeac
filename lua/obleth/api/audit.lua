--- The audit trail (docs/access.md "Audit"): obleth.api records every write through the Management
-- API (M.record, called by the dispatcher), GET /api/v1/audit reads it back.
local errors = require "obleth.api.errors"
local api_params = require "obleth.api.params"

local M = {}

--- Longest summary kept (bytes of JSON); a longer one is cut and says so.
M.SUMMARY_MAX = 4096

-- Names of fields whose values are secrets: never in a summary.
local function _secret(k)
  k = tostring(k):lower()
  return k == "token" or k == "key" or k:find("_token$") ~= nil or k:find("_key$") ~= nil
    or k:find("secret", 1, true) ~= nil or k:find("password", 1, true) ~= nil
end

--- A request body with every secret replaced by "***" (a copy; depth-limited).
---@param v any the decoded body
---@return any
function M.redact(v, depth)
  depth = depth or 0
  if type(v) ~= "table" or depth > 8 then return v end
  local out = {}
  for k, x in pairs(v) do
    if _secret(k) and x ~= nil and x ~= require("cjson").null and x ~= "" then out[k] = "***"
    else out[k] = M.redact(x, depth + 1) end
  end
  return setmetatable(out, getmetatable(v))
end

-- The model a write was about: the handler's ctx.model_id, the path's /models/{id}, or the answer's
-- model_id (a launch: launch.model_id; a new model: its id).
local function _model_id(route, ctx, rbody)
  local mid = ctx.model_id
  if mid == nil and route.path:match("^/api/v1/models/{id}") then mid = api_params.int_param(ctx, "id") end
  if mid == nil and type(rbody) == "table" then
    if math.type(rbody.model_id) == "integer" then mid = rbody.model_id
    elseif type(rbody.launch) == "table" and math.type(rbody.launch.model_id) == "integer" then
      mid = rbody.launch.model_id
    elseif route.path == "/api/v1/models" and math.type(rbody.id) == "integer" then mid = rbody.id end
  end
  return mid
end

--- Should this answered request be in the audit trail? A write (not GET/HEAD) that succeeded, by
--- someone, on a route that is not the provisioner's own (its report every pass is not a person's
--- change: its effects are in the replicas and the launch history) nor a public one.
function M.wanted(route, ctx, status)
  return ctx.identity ~= nil and status >= 200 and status < 300 and ctx.req.method ~= "GET"
    and ctx.req.method ~= "HEAD" and not route.public and route.action ~= "provisioner"
    and route.audit ~= false
end

--- Record one write (a failure to record is logged, never the request's).
function M.record(app, route, ctx, status, rbody)
  local ident = ctx.identity
  local summary = ctx.json ~= nil and M.redact(ctx.json) or nil
  if summary ~= nil then
    local text = require("obleth.util.json").encode(summary)
    if #text > M.SUMMARY_MAX then summary = { cut = true, text = text:sub(1, M.SUMMARY_MAX) } end
  end
  local ok, err = app.store:add_audit { at = math.floor(app.now()), actor = ident.actor, via = ident.via,
    role = ident.role, method = ctx.req.method, route = route.path, target = ctx.req.path,
    model_id = _model_id(route, ctx, rbody), status = status, summary = summary }
  if not ok then app.log.warn("audit_not_recorded", { actor = ident.actor, path = ctx.req.path,
    error = err and err.message }) end
end

local function list(ctx)
  local q = ctx.query
  local f = { actor = q.user }
  if q.model then
    local id = tonumber(q.model)
    if id and math.tointeger(id) then f.model_id = math.tointeger(id)
    else
      local m = ctx.app.store:route_model(q.model)
      if not m then return 200, { entries = require("obleth.util.json").array() } end
      f.model_id = m.id
    end
  end
  if q.since then f.since = math.tointeger(tonumber(q.since)) end
  if q.limit then
    f.limit = math.tointeger(tonumber(q.limit))
    if not f.limit or f.limit < 1 or f.limit > 1000 then
      return errors.fail(400, "invalid", "limit: must be a whole number from 1 to 1000", "limit")
    end
  end
  return 200, { entries = ctx.app.store:list_audit(f) }
end

M.routes = {
  { "GET", "/api/v1/audit", list, action = "audit.read", tag = "access",
    query = { "user", "model", { "since", pattern = "^%d+$", rule = "epoch seconds" },
      { "limit", pattern = "^%d+$", rule = "a whole number from 1 to 1000" } },
    summary = "The audit trail, newest first: every write through the API, who made it (user or admin-token), "
      .. "when (epoch s), the route and target, the model, and a summary of the change without secrets; "
      .. "?user=, ?model= (name or id), ?since= (epoch s), ?limit= (100, at most 1000)" },
}

return M
