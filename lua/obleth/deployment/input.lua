--- Validation of Management API input: managed specs, models, Slurm settings,
-- provisioner reports, saved recipes, launch-history queries.
--
-- Pure functions of decoded JSON (cjson: every number is a float, `null` is
-- cjson.null). Each returns the normalized value, or nil and
-- err = {code = "invalid", field = "health.interval", message = "..."} naming
-- the first bad field. Unknown fields are refused by name.
local hostlist = require "obleth.util.hostlist"
local recipe_schema = require "obleth.recipe.schema"
local schema = require "obleth.schema"
local check = require "obleth.schema.check"
local managed_schema = require "obleth.schema.managed"
local settings_schema = require "obleth.schema.settings"
local model_schema = require "obleth.schema.model"

local M = {}

local NULL = check.NULL

--- What GET shows instead of a stored secret; a PUT that sends it back keeps the secret.
M.MASK = "********"
--- Returned for a secret field that keeps the stored value (absent or the mask).
M.KEEP = setmetatable({}, { __name = "obleth.deployment.input.KEEP", __tostring = function() return "KEEP" end })

M.MODEL_NAME = model_schema.name.pattern
M.REPLICA_STATES = { pending = true, submitted = true, starting = true, healthy = true, unhealthy = true,
  ending = true, ended = true, lost = true }
M.LIVE_STATES = { "pending", "submitted", "starting", "healthy", "unhealthy", "ending" }

local _err, _null, _is_object, _is_array = check.err, check.null, check.is_object, check.is_array
local _int, _num, _bool, _str, _ostr, _unknown, _set = check.int, check.num, check.bool, check.str, check.ostr,
  check.unknown, check.set

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


local function _lines(v, field, max_items)
  if _null(v) then return {} end
  if not _is_array(v) then return _err(field, "must be an array of strings") end
  if #v > max_items then return _err(field, "has more than %d items", max_items) end
  local out = {}
  for i, x in ipairs(v) do
    local s, err = _str(x, ("%s[%d]"):format(field, i - 1), { max = 4096 })
    if err then return nil, err end
    out[i] = s
  end
  return out
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
-- provisioner report
---------------------------------------------------------------------------

local REPLICA_FIELDS = {
  nonce = function(v, f) return _str(v, f, { max = 16, pattern = "^%x+$", rule = "16 hex characters" }) end,
  model_id = function(v, f) return _int(v, f, 1, math.maxinteger) end,
  slot = function(v, f) return _int(v, f, 1, 64) end,
  state = function(v, f)
    if type(v) ~= "string" or not M.REPLICA_STATES[v] then
      return _err(f, "must be one of pending, submitted, starting, healthy, unhealthy, ending, ended, lost")
    end
    return v
  end,
  job_id = function(v, f) return _int(v, f, 1, math.maxinteger) end,
  node = function(v, f) return _str(v, f, { max = 256 }) end,
  port = function(v, f) return _int(v, f, 1, 65535) end,
  endpoint = function(v, f) return M.endpoint(v, f) end,
  submitted_at = function(v, f) return _num(v, f, 0, 1e11) end,
  started_at = function(v, f) return _num(v, f, 0, 1e11) end,
  healthy_at = function(v, f) return _num(v, f, 0, 1e11) end,
  ended_at = function(v, f) return _num(v, f, 0, 1e11) end,
  check_failures = function(v, f) return _int(v, f, 0, 1000000) end,
  problem = function(v, f) return _str(v, f, { max = 4096, multiline = true }) end,
  pending_reason = function(v, f) return _str(v, f, { max = 1024 }) end,
  cancel_why = function(v, f) return _str(v, f, { max = 256 }) end,
  successor_of = function(v, f)
    if type(v) == "string" then
      return _str(v, f, { max = 16, pattern = "^%x+$", rule = "a replica nonce (hex) or id" })
    end
    return _int(v, f, 1, math.maxinteger)
  end,
  launch_id = function(v, f) return _int(v, f, 1, math.maxinteger) end,
  restart_requested = _bool,
  generation = function(v, f) return _int(v, f, 0, math.maxinteger) end,
}

--- A replica's job as Slurm last showed it (docs/managed-spec.md): `slurm` in a report.
local SLURM_FIELDS = {
  state = function(v, f) return _str(v, f, { max = 64 }) end,
  reason = function(v, f) return _str(v, f, { max = 1024, multiline = true }) end,
  start_time = function(v, f) return _num(v, f, 0, 1e11) end,
  end_time = function(v, f) return _num(v, f, 0, 1e11) end,
  time_limit = function(v, f) return _int(v, f, 0, 1e9) end,
  estimated = _bool,
  stdout = function(v, f) return _str(v, f, { max = 4096 }) end,
  stderr = function(v, f) return _str(v, f, { max = 4096 }) end,
}

local END_FIELDS = {
  state = function(v, f) return _str(v, f, { max = 64 }) end,
  reason = function(v, f) return _str(v, f, { max = 4096, multiline = true }) end,
  exit_code = function(v, f) return _int(v, f, -1000000, 1000000) end,
  signal = function(v, f)
    if type(v) == "number" then return _int(v, f, 0, 255) end
    return _str(v, f, { max = 32 })
  end,
  node = function(v, f) return _str(v, f, { max = 256 }) end,
}

local OUTCOME_FIELDS = {
  nonce = REPLICA_FIELDS.nonce, model_id = REPLICA_FIELDS.model_id, slot = REPLICA_FIELDS.slot,
  job_id = REPLICA_FIELDS.job_id, state = END_FIELDS.state, reason = END_FIELDS.reason,
  exit_code = END_FIELDS.exit_code, signal = END_FIELDS.signal, node = END_FIELDS.node,
  started_at = REPLICA_FIELDS.started_at, ended_at = REPLICA_FIELDS.ended_at, healthy = _bool,
  cancel_why = REPLICA_FIELDS.cancel_why,
  replica_id = REPLICA_FIELDS.launch_id, launch_id = REPLICA_FIELDS.launch_id,
}

-- Check an object against a table of field checkers. Null values are kept as NULL (= set to null).
local function _record(v, field, checks, required)
  if not _is_object(v) then return _err(field, "must be an object") end
  local out = {}
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local c = checks[k]
    if not c then
      return nil, { code = "invalid", field = field .. "." .. k, message = "unknown field: " .. field .. "." .. k }
    end
    local x = v[k]
    if x == NULL then out[k] = NULL
    else
      local r, e = c(x, field .. "." .. k)
      if e then return nil, e end
      out[k] = r
    end
  end
  for _, k in ipairs(required or {}) do
    if _null(out[k]) then return _err(field .. "." .. k, "is required") end
  end
  return out
end

local function _id_key(k, field)
  local n = type(k) == "string" and k:match("^%d+$") and math.tointeger(tonumber(k))
  if not n or n < 1 then return _err(field, "keys must be model ids") end
  return n
end

--- Validate a POST /api/v1/provisioner/report body.
---@return table|nil report {pass, replicas[], outcomes[], endpoints{[id]=urls}, provision_errors{[id]=obj|NULL},
---  acknowledged{restart[], clear_lost[]}}, table|nil err
function M.report(input)
  if not _is_object(input) then return nil, { code = "invalid", message = "the body must be a JSON object" } end
  local ok, err = _unknown(input, _set({ "pass", "replicas", "outcomes", "endpoints", "provision_errors",
    "acknowledged", "lease_generation", "more" }))
  if not ok then return nil, err end
  local out = { replicas = {}, outcomes = {}, endpoints = {}, provision_errors = {},
    acknowledged = { restart = {}, clear_lost = {} } }
  -- a report too large for one request body comes in parts (docs/managed-spec.md, "A report in
  -- parts"): every part but the last says `more` and carries replica rows only
  if not _null(input.more) then
    local more, me = _bool(input.more, "more")
    if more == nil then return nil, me end
    if more then
      for _, k in ipairs({ "outcomes", "endpoints", "provision_errors", "acknowledged" }) do
        if not _null(input[k]) then
          return _err(k, "must be absent from a part with more: true (only replicas come before the last part)")
        end
      end
      out.more = true
    end
  end
  if _null(input.pass) then return _err("pass", "is required ({started_at, duration, error})") end
  local pass, perr = _record(input.pass, "pass", {
    started_at = function(v, f) return _num(v, f, 0, 1e11) end,
    duration = function(v, f) return _num(v, f, 0, 1e6) end,
    error = function(v, f) return _str(v, f, { max = 8192, multiline = true }) end,
    policy_error = function(v, f)
      return _record(v, f, {
        file = function(x, ff) return _str(x, ff, { max = 4096 }) end,
        line = function(x, ff) return _int(x, ff, 0, math.maxinteger) end,
        message = function(x, ff) return _str(x, ff, { max = 8192, multiline = true }) end,
        since = function(x, ff) return _num(x, ff, 0, 1e11) end,
      }, { "message" })
    end,
    token = function(v, f)
      return _record(v, f, {
        source = function(x, ff)
          if type(x) ~= "string" or not M.TOKEN_SOURCES[x] then return _err(ff, "must be a token source") end
          return x
        end,
        expires_at = function(x, ff) return _num(x, ff, 0, 1e11) end,
        renewed_at = function(x, ff) return _num(x, ff, 0, 1e11) end,
        error = function(x, ff) return _str(x, ff, { max = 4096, multiline = true }) end,
      }, { "source" })
    end,
  })
  if not pass then return nil, perr end
  out.pass = pass
  if not _null(input.lease_generation) then
    local g, ge = _int(input.lease_generation, "lease_generation", 1, math.maxinteger)
    if not g then return nil, ge end
    out.lease_generation = g
  end
  if not _null(input.replicas) then
    if not _is_array(input.replicas) then return _err("replicas", "must be an array") end
    for i, r in ipairs(input.replicas) do
      local f = ("replicas[%d]"):format(i - 1)
      local checks = setmetatable({ ["end"] = function(v, ff)
        if _null(v) then return NULL end
        return _record(v, ff, END_FIELDS)
      end, slurm = function(v, ff)
        if _null(v) then return NULL end
        return _record(v, ff, SLURM_FIELDS)
      end }, { __index = REPLICA_FIELDS })
      local rec, e = _record(r, f, checks, { "nonce" })
      if not rec then return nil, e end
      out.replicas[i] = rec
    end
  end
  if not _null(input.outcomes) then
    if not _is_array(input.outcomes) then return _err("outcomes", "must be an array") end
    for i, r in ipairs(input.outcomes) do
      local rec, e = _record(r, ("outcomes[%d]"):format(i - 1), OUTCOME_FIELDS, { "model_id", "state" })
      if not rec then return nil, e end
      out.outcomes[i] = rec
    end
  end
  if not _null(input.endpoints) then
    if not _is_object(input.endpoints) then return _err("endpoints", "must be an object {model_id: [url, ...]}") end
    for k, urls in pairs(input.endpoints) do
      local id, e = _id_key(k, "endpoints")
      if not id then return nil, e end
      local l, le = _lines(urls, "endpoints." .. k, 256)
      if le then return nil, le end
      for i, u in ipairs(l) do
        local _, ue = M.endpoint(u, ("endpoints.%s[%d]"):format(k, i - 1))
        if ue then return nil, ue end
      end
      out.endpoints[id] = l
    end
  end
  if not _null(input.provision_errors) then
    if not _is_object(input.provision_errors) then return _err("provision_errors", "must be an object") end
    for k, pe in pairs(input.provision_errors) do
      local id, e = _id_key(k, "provision_errors")
      if not id then return nil, e end
      if pe == NULL then out.provision_errors[id] = NULL
      else
        local rec, re = _record(pe, "provision_errors." .. k, {
          message = function(v, f) return _str(v, f, { max = 8192, multiline = true }) end,
          field = function(v, f) return _str(v, f, { max = 128 }) end,
          code = function(v, f)
            if type(v) == "number" then return _int(v, f, -1e9, 1e9) end -- before slurm_code had its own field
            return _str(v, f, { max = 64 })
          end,
          slurm_code = function(v, f) return _int(v, f, -1e9, 1e9) end,
          at = function(v, f) return _num(v, f, 0, 1e11) end,
          generation = function(v, f) return _int(v, f, 0, math.maxinteger) end,
        }, { "message" })
        if not rec then return nil, re end
        out.provision_errors[id] = rec
      end
    end
  end
  if not _null(input.acknowledged) then
    local a = input.acknowledged
    if not _is_object(a) then return _err("acknowledged", "must be an object {restart, clear_lost}") end
    ok, err = _unknown(a, _set({ "restart", "clear_lost" }), "acknowledged.")
    if not ok then return nil, err end
    for _, k in ipairs({ "restart", "clear_lost" }) do
      if not _null(a[k]) then
        if not _is_array(a[k]) then return _err("acknowledged." .. k, "must be an array of ids") end
        for i, x in ipairs(a[k]) do
          local n, e = _int(x, ("acknowledged.%s[%d]"):format(k, i - 1), 1, math.maxinteger)
          if not n then return nil, e end
          out.acknowledged[k][i] = n
        end
      end
    end
  end
  return out
end

--- Validate a POST /api/v1/provisioner/lease body.
---@return table|nil {holder, host, pid, ttl (seconds), generation|nil}, table|nil err
function M.lease_request(input)
  if not _is_object(input) then return nil, { code = "invalid", message = "the body must be a JSON object" } end
  local rec, err = _record(input, "lease", {
    holder = function(v, f) return _str(v, f, { max = 256 }) end,
    host = function(v, f) return _str(v, f, { max = 256 }) end,
    pid = function(v, f) return _int(v, f, 1, 4194304) end,
    ttl = function(v, f) return _num(v, f, 2, 3600) end,
    generation = function(v, f) return _int(v, f, 1, math.maxinteger) end,
  }, { "holder", "host", "pid", "ttl" })
  if not rec then
    if err.field then err.field = err.field:gsub("^lease%.", "") end
    return nil, err
  end
  if rec.generation == NULL then rec.generation = nil end
  return rec
end

--- Validate a POST /api/v1/provisioner/submits body: the replicas a provisioner is about to submit.
---@return table|nil {lease_generation, replicas[]}, table|nil err
function M.submits(input)
  if not _is_object(input) then return nil, { code = "invalid", message = "the body must be a JSON object" } end
  local ok, err = _unknown(input, _set({ "lease_generation", "replicas" }))
  if not ok then return nil, err end
  local g, ge = _int(input.lease_generation, "lease_generation", 1, math.maxinteger)
  if not g then return nil, ge end
  if not _is_array(input.replicas) then return _err("replicas", "must be an array") end
  local out = { lease_generation = g, replicas = {} }
  for i, r in ipairs(input.replicas) do
    local f = ("replicas[%d]"):format(i - 1)
    local rec, e = _record(r, f, REPLICA_FIELDS, { "nonce", "model_id", "slot", "state" })
    if not rec then return nil, e end
    if rec.state ~= "pending" then return _err(f .. ".state", "must be pending (a replica about to be submitted)") end
    out.replicas[i] = rec
  end
  return out
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
      if not v:match(M.RECIPE_ID) or #v > recipe_schema.ID_LOOKUP_MAX then
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

--- The id a recipe is looked up and saved by (obleth.recipe's rule).
M.RECIPE_ID = recipe_schema.ID_LOOKUP_PATTERN

--- Validate a saved recipe document (the recipe itself, as JSON). Only its
--- identity is checked here; the recipe format is obleth.recipe's.
---@param input table
---@param id string|nil the id from the URL (PUT); must match the body's when given
function M.recipe(input, id)
  if not _is_object(input) then return nil, { code = "invalid", message = "the body must be a JSON object (a recipe)" } end
  local rid = input.id
  if rid == nil and id then rid = id end
  local s, e = _str(rid, "id", { max = recipe_schema.ID_LOOKUP_MAX, pattern = M.RECIPE_ID,
    rule = "letters, digits, '.', '_', '-'" })
  if e then return nil, e end
  if id and s ~= id then return _err("id", "%q does not match the recipe id in the URL (%q)", s, id) end
  if input.name ~= nil and not _null(input.name) then
    local _, ne = _str(input.name, "name", { max = 256 })
    if ne then return nil, ne end
  end
  if input.source ~= nil and input.source ~= "saved" then
    return _err("source", "is read-only")
  end
  local doc = {}
  for k, v in pairs(input) do if k ~= "source" then doc[k] = v end end
  doc.id = s
  return doc
end

return M
