--- Validation of Management API input: managed specs, models, Slurm settings,
-- provisioner reports, saved recipes, launch-history queries.
--
-- Pure functions of decoded JSON (cjson: every number is a float, `null` is
-- cjson.null). Each returns the normalized value, or nil and
-- err = {code = "invalid", field = "health.interval", message = "..."} naming
-- the first bad field. Unknown fields are refused by name.
local hostlist = require "obleth.util.hostlist"
local recipe_ids = require "obleth.schema.recipe"
local schema = require "obleth.schema"
local check = require "obleth.schema.check"
local managed_schema = require "obleth.schema.managed"
local settings_schema = require "obleth.schema.settings"
local model_schema = require "obleth.schema.model"
local provisioner_schema = require "obleth.schema.provisioner"

local M = {}

local NULL = check.NULL

--- What GET shows instead of a stored secret; a PUT that sends it back keeps the secret.
M.MASK = "********"
--- Returned for a secret field that keeps the stored value (absent or the mask).
M.KEEP = setmetatable({}, { __name = "obleth.deployment.input.KEEP", __tostring = function() return "KEEP" end })

M.MODEL_NAME = model_schema.name.pattern
M.REPLICA_STATES = check.set(provisioner_schema.REPLICA_STATES)
M.LIVE_STATES = { "pending", "submitted", "starting", "healthy", "unhealthy", "ending" }

local _err, _null, _is_object = check.err, check.null, check.is_object
local _ostr, _set = check.ostr, check.set

-- A job log path (the spec's stdout / stderr): one line, and only the filename patterns sbatch
-- knows (%%, %A, %a, %J, %j, %N, %n, %s, %t, %u, %x, each with an optional width: %4j).
local LOG_PATTERNS = { ["%"] = true, A = true, a = true, J = true, j = true, N = true, n = true, s = true, t = true,
  u = true, x = true }
local function _log_path(v, field)
  local p, err = _ostr(v, field, { max = 4096 })
  if err or p == nil then return p, err end
  if p:find("[%c]") then return _err(field, "must be one line with no control characters") end
  local i = 1
  while true do
    local at = p:find("%", i, true)
    if not at then break end
    local width, c = p:match("^(%d*)(.)", at + 1)
    if not c or not LOG_PATTERNS[c] then
      return _err(field, "%s is not a Slurm filename pattern (%%j job id, %%x job name, %%u user, %%N node, "
        .. "%%A, %%a, %%J, %%n, %%s, %%t, %%%% for a percent sign)", p:sub(at, at + #(width or "") + 1))
    end
    i = at + #width + 2
  end
  return p
end


---------------------------------------------------------------------------
-- managed spec
---------------------------------------------------------------------------

--- The health check's defaults and the spec's fields, read from the schema (obleth.schema.managed).
M.HEALTH_DEFAULTS = schema.defaults(managed_schema.health)
M.SPEC_FIELDS = {}
for i, f in ipairs(managed_schema.spec.fields) do M.SPEC_FIELDS[i] = f[1] end
--- Read-only fields a client may send back unchanged from a GET; they are ignored.
M.SPEC_READ_ONLY = managed_schema.spec.read_only

local function _hostlist(v, field)
  local ok, e = hostlist.expand(v)
  if not ok then return _err(field, "%s", e) end
  return v
end

--- The spec's checks that are not data (named by the schema's `format`).
local FORMATS = { hostlist = _hostlist, log_path = _log_path }

--- Validate a managed spec from a PUT body and fill in the defaults.
---@param input table decoded JSON object
---@return table|nil spec (every field of M.SPEC_FIELDS; nil for null ones), table|nil err
function M.managed_spec(input)
  local out, err = schema.validate(managed_schema.spec, input, nil, { formats = FORMATS })
  if not out then return nil, err end
  -- the rules between fields
  if out.health.timeout > out.health.interval then
    return _err("health.timeout", "must not be longer than health.interval (%d s)", out.health.interval)
  end
  if out.script_body and out.launch_command then
    return nil, { code = "invalid", field = "script_body",
      message = "give exactly one of script_body or launch_command, not both" }
  end
  if not out.script_body and not out.launch_command then
    return nil, { code = "invalid", field = "launch_command",
      message = "give exactly one of script_body or launch_command (neither was given)" }
  end
  if out.launch_command and (out.nodes or 1) > 1 then
    return _err("nodes", "must be 1 with launch_command%s: the command runs on the job's first node only "
      .. "and the other nodes would sit idle; use a recipe whose script_body starts the engine on every node "
      .. "(vllm-multinode)", out.image and " and image" or "")
  end
  if out.script_body and out.image then
    return _err("image", "goes with launch_command; a script_body runs as written")
  end
  if out.script_body and #out.preamble > 0 then
    return _err("preamble", "goes with launch_command; put the lines in script_body")
  end
  if out.time_limit and out.rollover_margin and out.rollover_margin >= out.time_limit then
    return _err("rollover_margin", "must be shorter than time_limit (%d minutes)", out.time_limit)
  end
  if _null(input.autoscale) then
    out.autoscale = nil -- absent: a fixed count (the schema would fill the object's defaults)
  else
    if _null(input.autoscale.max_replicas) then
      return _err("autoscale.max_replicas", "is required (the most replicas the load may ask for)")
    end
    if not _null(input.replicas) then
      return _err("replicas", "is a fixed count: give replicas or autoscale, not both")
    end
    if out.autoscale.min_replicas > out.autoscale.max_replicas then
      return _err("autoscale.min_replicas", "must not be above autoscale.max_replicas (%d)",
        out.autoscale.max_replicas)
    end
    out.replicas = nil -- the count is the scale policy's
  end
  return out
end

---------------------------------------------------------------------------
-- models
---------------------------------------------------------------------------

--- Validate a model body (POST: name required; PATCH: partial).
---@param input table
---@param partial boolean|nil
---@return table|nil {name=, description=}, table|nil err
function M.model(input, partial)
  local body = input
  if _is_object(input) and input.description == NULL then -- null clears the description
    body = {}
    for k, v in pairs(input) do if k ~= "description" then body[k] = v end end
  end
  local out, err = schema.validate(model_schema.input, body)
  if not out then return nil, err end
  if out.name == nil and not partial then return _err("name", "is required (the API model name clients send)") end
  if body ~= input then out.description = NULL end
  return out
end

--- An endpoint base URL: http(s)://host:port[/path].
function M.endpoint(v, field)
  return schema.validate(model_schema.endpoint, v, field or "url")
end

---------------------------------------------------------------------------
-- Slurm settings
---------------------------------------------------------------------------

--- The settings' defaults, read from their declaration (obleth.schema.settings).
M.SETTINGS_DEFAULTS = schema.defaults(settings_schema.settings)

--- How the Slurm JWT is had: the saved token, minted from the site's HS256 key file, or a command's output.
M.TOKEN_SOURCES = {}
for _, v in ipairs(schema.field(settings_schema.settings, "token_source").enum) do M.TOKEN_SOURCES[v] = true end
-- "auto" and every version obleth knows (obleth.slurm.versions, the one list)
local slurm_versions = require "obleth.slurm.versions"
local API_VERSIONS = _set({ "auto", table.unpack(slurm_versions.known) })
local API_VERSIONS_TEXT = "\"auto\" or one of " .. slurm_versions.range()

--- The settings' checks that are not data (named by the schema's `format`).
local SETTINGS_FORMATS = {
  api_version = function(v, f)
    if not API_VERSIONS[v] then return _err(f, "must be " .. API_VERSIONS_TEXT) end
    return v
  end,
  -- a URL with userinfo would be stored, returned and logged: credentials go in `token`
  no_userinfo = function(v, f)
    if v:match("^https?://([^/?#]*)"):find("@", 1, true) then
      return _err(f, "must not hold credentials before an @ (userinfo): give the JWT as token")
    end
    return v
  end,
  port_range = function(v, f)
    if v[2] < v[1] then return _err(f, "last port %d is below the first %d", v[2], v[1]) end
    return v
  end,
}

-- A secret the schema has checked: absent or the mask keeps the stored one (M.KEEP), null or blank clears it.
local function _secret(raw, checked)
  if raw == nil or raw == M.MASK then return M.KEEP end
  return checked
end

-- The rules between the connection's fields.
local function _connection_rules(out)
  if out.url and out.socket then
    return _err("socket", "give either url or socket, not both")
  end
  if out.token_source == "key_file" and not out.token_key_file then
    return _err("token_key_file", "is required with token_source \"key_file\" (the site's HS256 key, as in "
      .. "AuthAltParameters=jwt_key=...)")
  end
  if out.token_source == "key_file" and not out.user then
    return _err("user", "is required with token_source \"key_file\" (the token is minted for this user)")
  end
  if out.token_source == "command" and not out.token_command then
    return _err("token_command", "is required with token_source \"command\" (it prints a token)")
  end
  return out
end

--- Validate a PUT /api/v1/settings/slurm body (the whole document).
---@return table|nil settings (token / defaults.hf_token may be M.KEEP), table|nil err
function M.settings(input)
  local out, err = schema.validate(settings_schema.settings, input, nil, { formats = SETTINGS_FORMATS })
  if not out then return nil, err end
  out.token = _secret(input.token, out.token)
  local din = _is_object(input.defaults) and input.defaults or {}
  out.defaults.hf_token = _secret(din.hf_token, out.defaults.hf_token)
  if out.enabled and not out.url and not out.socket then
    return _err("url", "is required to enable Slurm (or give socket)")
  end
  return _connection_rules(out)
end

--- Validate the optional body of POST /api/v1/settings/slurm/test (connection fields only, over the
--- saved ones: nothing is filled in but token_source).
function M.connection(input)
  if _null(input) then return { token = M.KEEP } end
  local out, err = schema.validate(settings_schema.connection, input, nil, { formats = SETTINGS_FORMATS })
  if not out then return nil, err end
  out.token = _secret(input.token, out.token)
  return _connection_rules(out)
end

---------------------------------------------------------------------------
-- the provisioner protocol (its bodies are data: obleth.schema.provisioner)
---------------------------------------------------------------------------

--- Validate a POST /api/v1/provisioner/report body: the schema, then the rule between its fields (a part
--- with more: true carries replicas only; docs/managed-spec.md, "A report in parts").
---@return table|nil report {pass, replicas[], outcomes[], endpoints{[id]=urls}, provision_errors{[id]=obj|NULL},
---  acknowledged{restart[], clear_lost[]}, lease_generation|nil, more|nil}, table|nil err
function M.report(input)
  local out, err = schema.validate(provisioner_schema.report, input)
  if not out then return nil, err end
  if out.more then
    for _, k in ipairs({ "outcomes", "endpoints", "provision_errors", "acknowledged" }) do
      if not _null(input[k]) then
        return _err(k, "must be absent from a part with more: true (only replicas come before the last part)")
      end
    end
  else
    out.more = nil
  end
  return out
end

--- Validate a POST /api/v1/provisioner/lease body.
---@return table|nil {holder, host, pid, ttl (seconds), generation|nil}, table|nil err
function M.lease_request(input)
  return schema.validate(provisioner_schema.lease, input)
end

--- Validate a POST /api/v1/provisioner/submits body: the replicas a provisioner is about to submit.
---@return table|nil {lease_generation, replicas[]}, table|nil err
function M.submits(input)
  return schema.validate(provisioner_schema.submits, input)
end

---------------------------------------------------------------------------
-- launches query, recipes
---------------------------------------------------------------------------

--- Validate the query of GET /api/v1/deployments/launches.
---@param q table<string, string>
---@return table|nil {model_id=, recipe_id=, limit=}, table|nil err (field = the parameter)
function M.launches_query(q)
  local out = { limit = 50 }
  for k, v in pairs(q or {}) do
    if k == "model_id" then
      local n = v:match("^%d+$") and math.tointeger(tonumber(v))
      if not n or n < 1 then return _err("model_id", "must be a model id (a positive integer), got %q", v) end
      out.model_id = n
    elseif k == "recipe_id" then
      if not v:match(M.RECIPE_ID) or #v > recipe_ids.ID_LOOKUP_MAX then
        return _err("recipe_id", "%q is not a recipe id", v:sub(1, 80))
      end
      out.recipe_id = v
    elseif k == "limit" then
      local n = v:match("^%d+$") and math.tointeger(tonumber(v))
      if not n or n < 1 or n > 500 then return _err("limit", "must be a whole number from 1 to 500, got %q", v:sub(1, 40)) end
      out.limit = n
    else
      return nil, { code = "invalid", field = tostring(k),
        message = ("unknown query parameter %q (model_id, recipe_id, limit)"):format(tostring(k)) }
    end
  end
  return out
end

--- The id a recipe is looked up by (obleth.schema.recipe's rule).
M.RECIPE_ID = recipe_ids.ID_LOOKUP_PATTERN

--- A saved recipe document (the recipe itself, as JSON) to store: its identity, the body's id or the
--- URL's. The body's keys are checked against obleth.schema.recipe's `new` (POST: with its id) or `saved`
--- (PUT) first (the dispatcher does, for the route that declares it); the recipe format is obleth.recipe's.
---@param input table the body, checked
---@param id string|nil the id from the URL (PUT); must match the body's when given
---@return table|nil doc (without `source`), table|nil err
function M.recipe(input, id)
  local rid = input.id
  if rid == nil then rid = id end
  if id and rid ~= id then return _err("id", "%q does not match the recipe id in the URL (%q)", rid, id) end
  local doc = {}
  for k, v in pairs(input) do if k ~= "source" then doc[k] = v end end
  doc.id = rid
  return doc
end

return M
