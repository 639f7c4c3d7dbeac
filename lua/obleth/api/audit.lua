--- The audit trail (docs/access.md "Audit"): obleth.api records every write through the Management
-- API (M.record, called by the dispatcher), GET /api/v1/audit reads it back.
local errors = require "obleth.api.errors"
local api_params = require "obleth.api.params"

local M = {}

--- Longest summary kept (bytes of JSON); a longer one is cut and says so.
M.SUMMARY_MAX = 4096

--- How deep a summary keeps a body's nesting; anything deeper is replaced by "…" (never kept as is).
M.MAX_DEPTH = 8

local MASK, DEEP = "***", "…"

-- The secrets, from their one owner (obleth.schema: `secret` fields and `secret_values` maps of the
-- settings and the managed spec), built once.
local _schema_secrets
local function _secrets()
  if not _schema_secrets then
    local schema = require "obleth.schema"
    _schema_secrets = schema.secrets(require("obleth.schema.settings").settings)
    schema.secrets(require("obleth.schema.managed").spec, _schema_secrets)
  end
  return _schema_secrets
end

-- Is a field of this name a secret? The schema's secret fields, and for bodies no schema describes
-- (a key's, a token's, a recipe's) the names credentials go by.
local function _secret(k)
  k = tostring(k):lower()
  return _secrets().fields[k] == true or k == "token" or k == "key" or k:find("_token$") ~= nil
    or k:find("_key$") ~= nil or k:find("secret", 1, true) ~= nil or k:find("password", 1, true) ~= nil
end

local function _blank(x) return x == nil or x == require("cjson").null or x == "" end

local redact
-- A YAML text body (Edit as YAML): kept as its parsed, masked form, never as text (secrets hide in it
-- under any name); text that does not parse is kept as its size only.
local function _yaml(text, depth)
  local ok, yaml = pcall(require, "obleth.yaml")
  local okd, doc = false, nil
  if ok then okd, doc = pcall(yaml.decode, text) end
  if okd and type(doc) == "table" then return { parsed = redact(doc, depth + 1) } end
  return { bytes = #text, parsed = false }
end

--- A request body with every secret replaced by "***" (a copy): a schema secret field, a value of a
--- `secret_values` map (every environment variable), a field named like a credential; YAML text
--- parsed and masked; anything nested deeper than M.MAX_DEPTH replaced by "…".
---@param v any the decoded body
---@return any
function redact(v, depth)
  depth = depth or 0
  if type(v) ~= "table" then return v end
  if depth > M.MAX_DEPTH then return DEEP end
  local maps = _secrets().maps
  local out = {}
  for k, x in pairs(v) do
    if _secret(k) and not _blank(x) then out[k] = MASK
    elseif maps[tostring(k):lower()] and type(x) == "table" then
      local m = {}
      for name, val in pairs(x) do m[name] = _blank(val) and val or MASK end
      out[k] = setmetatable(m, getmetatable(x))
    elseif tostring(k):lower() == "yaml" and type(x) == "string" then out[k] = _yaml(x, depth)
    else out[k] = redact(x, depth + 1) end
  end
  return setmetatable(out, getmetatable(v))
end
M.redact = redact

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

--- Record one write. The write has succeeded by now, so its record must survive: a summary the
--- store refuses is dropped (`{cut = true, refused = true}`) and the row written again; only when
--- that fails too is the failure logged (with who, what, when in the log line).
function M.record(app, route, ctx, status, rbody)
  local ident = ctx.identity
  local summary = ctx.json ~= nil and M.redact(ctx.json) or nil
  if summary ~= nil then
    local text = require("obleth.util.json").encode(summary)
    if #text > M.SUMMARY_MAX then
      summary = { cut = true, text = (require("obleth.util.text").cut_utf8(text, M.SUMMARY_MAX)) }
    end
  end
  local row = { at = math.floor(app.now()), actor = ident.actor, via = ident.via,
    role = ident.role, method = ctx.req.method, route = route.path, target = ctx.req.path,
    model_id = _model_id(route, ctx, rbody), status = status, summary = summary }
  local ok, err = app.store:add_audit(row)
  if not ok and summary ~= nil then
    row.summary = { cut = true, refused = true }
    ok, err = app.store:add_audit(row)
  end
  if not ok then app.log.warn("audit_not_recorded", { actor = ident.actor, method = ctx.req.method,
    path = ctx.req.path, at = row.at, error = err and err.message }) end
end

local function list(ctx)
  local q = ctx.query
  local f = { actor = q.user }
  if q.model then
    -- a model's name first (a model may be named "3"); decimal digits name an id otherwise (a deleted
    -- model's entries keep its id)
    local m = ctx.app.store:route_model(q.model)
    if m then f.model_id = m.id
    elseif q.model:match("^%d+$") and #q.model <= 18 then f.model_id = math.tointeger(tonumber(q.model))
    else return 200, { entries = require("obleth.util.json").array() } end
  end
  if q.since then
    f.since = math.tointeger(tonumber(q.since))
    if not f.since then
      return errors.fail(400, "invalid", "since: must be epoch seconds (a whole number below 2^63)", "since")
    end
  end
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
    summary = "The audit trail, newest first: every write through the API, who made it (user or token:admin), "
      .. "when (epoch s), the route and target, the model, and a summary of the change without secrets; "
      .. "?user=, ?model= (name or id), ?since= (epoch s), ?limit= (100, at most 1000)" },
}

return M
