--- The launch flow (docs/launch.md): preview, "Edit as YAML" check, launch,
-- suggestions from past runs, and the launch history. The logic is obleth.deployment (pure); this
-- module gathers its facts — the recipe (library, saved, or a Hugging Face
-- choice), the cluster defaults, the recipe's launch history and the
-- cluster's partitions, nodes, associations and QoS — and stores a launch.
local cjson = require "cjson"
local errors = require "obleth.api.errors"
local json = require "obleth.util.json"
local validate = require "obleth.deployment.input"
local launch = require "obleth.deployment"
local labels = require "obleth.deployment.labels"
local recipe_schema = require "obleth.recipe.schema"
local wire = require "obleth.schema"
local managed_schema = require "obleth.schema.managed"
local launch_schema = require "obleth.schema.launch"

local M = {}

local NULL = cjson.null

--- Seconds the cluster facts are reused between requests.
M.FACTS_TTL = 3
--- How many of a recipe's launches the learned defaults and suggestions look at.
M.HISTORY = 50

local HF_STATUS = {
  invalid_repo_id = 400, invalid_revision = 400, invalid_gpu_type = 400,
  gated_no_token = 403, no_access = 403, invalid_token = 403,
  not_found = 404, rate_limited = 429, hub_unreachable = 502, hub_error = 502, bad_endpoint = 500,
}

-- A failure to hand back from a helper: {status, body, headers}.
local function _failure(status, body, headers) return { status = status, body = body, headers = headers } end
local function _fail(...) return _failure(errors.fail(...)) end

local _null = json.is_null

-- Keys whose values are lists in the answers (lua-cjson would write an empty one as {}).
local LIST_KEYS = { errors = true, fields = true, partitions = true, partitions_offered = true,
  accounts_offered = true, qos_offered = true, suggestions = true, evidence = true, warnings = true,
  reasons = true, accounts = true, fitting = true, idle = true, preamble = true, diagnostics = true,
  outcomes = true }

local ARRAY_MT = getmetatable(json.array())

local function _arrays(t, seen)
  seen = seen or {}
  if type(t) ~= "table" or seen[t] then return t end
  seen[t] = true
  for k, v in pairs(t) do
    if type(v) == "table" and (getmetatable(v) == nil or getmetatable(v) == ARRAY_MT) then
      _arrays(v, seen)
      if LIST_KEYS[k] and getmetatable(v) == nil then json.array(v) end
    end
  end
  return t
end

---------------------------------------------------------------------------
-- facts
---------------------------------------------------------------------------

local function _library(app)
  local recipe = require "obleth.recipe"
  local found, errs = recipe.load_dir(require("obleth.api.recipes").library_dir())
  for file, e in pairs(errs or {}) do
    app.log.warn("library_recipe_invalid", { file = file, error = e.message })
  end
  return found or {}
end

-- The raw document of a library recipe (for "save as a recipe").
local function _library_doc(id)
  local sys, yaml = require "obleth.sys", require "obleth.yaml"
  local dir = require("obleth.api.recipes").library_dir()
  for _, name in ipairs(sys.listdir(dir) or {}) do
    if name:match("%.ya?ml$") then
      local fh = io.open(dir .. "/" .. name, "rb")
      if fh then
        local doc = yaml.decode(fh:read("a"))
        fh:close()
        if type(doc) == "table" and doc.id == id then return json.plain(doc) end
      end
    end
  end
  return nil
end

--- A recipe by id: validated recipe, its document, and where it came from.
---@return table|nil recipe, table|string doc_or_failure, string|nil source
local function _recipe(app, id)
  if type(id) ~= "string" or not id:match(validate.RECIPE_ID) or #id > recipe_schema.ID_LOOKUP_MAX then
    return nil, _fail(400, "invalid", "recipe_id: must be a recipe id (letters, digits, '.', '_', '-')", "recipe_id")
  end
  local lib = _library(app)
  if lib[id] then
    return lib[id], function() return _library_doc(id) end, "library"
  end
  local saved = app.store:get_recipe(id)
  if not saved then return nil, _fail(404, "not_found", ("recipe %q does not exist"):format(id), "recipe_id") end
  local doc = json.plain(cjson.decode(saved.recipe[1]))
  local r, rerr = require("obleth.recipe").validate(doc)
  if not r then
    return nil, _fail(409, "invalid_recipe", ("saved recipe %q is not valid: %s%s"):format(id,
      rerr.field and (rerr.field .. ": ") or "", tostring(rerr.message)), "recipe_id")
  end
  return r, function() return doc end, "saved"
end

-- The Hugging Face choice → library recipe id, prefill, what was picked, warnings. `h` is the body's hf,
-- checked (obleth.schema.launch.hf).
local function _hf(app, h, gpu_type)
  local token = app:slurm_settings().defaults.hf_token
  local res, err = require("obleth.hf").inspect(h.repo_id, { revision = not _null(h.revision) and h.revision or nil,
    token = token, gpu_type = gpu_type })
  if not res then
    local field = err.field and ("hf." .. err.field) or "hf.repo_id"
    local st, body = errors.fail(HF_STATUS[err.code] or 502, err.code, err.message, field,
      { retry_after = err.retry_after })
    return nil, _failure(st, body, err.retry_after and { ["Retry-After"] = tostring(math.floor(err.retry_after)) } or nil)
  end
  local eng
  for _, e in ipairs(res.engines or {}) do
    if e.engine == h.engine or e.recipe == h.engine then eng = e end
  end
  if not eng then
    local names = {}
    for _, e in ipairs(res.engines or {}) do names[#names + 1] = e.engine end
    return nil, _fail(422, "invalid", ("hf.engine: %s cannot run %s (engines: %s)"):format(h.engine, h.repo_id,
      #names > 0 and table.concat(names, ", ") or "none"), "hf.engine")
  end
  local choice
  if _null(h.choice) then
    choice = eng.choices[eng.default or 1]
  else
    for i, c in ipairs(eng.choices or {}) do
      if c.id == h.choice or (math.tointeger(h.choice) == i) then choice = c end
    end
  end
  if not choice then
    return nil, _fail(422, "invalid", ("hf.choice: %s has no choice %s"):format(eng.engine, tostring(h.choice)), "hf.choice")
  end
  local pre = choice.prefill or {}
  local rid = pre.recipe_id or eng.recipe
  rid = launch.RECIPE_ALIASES[rid] or rid
  local warnings = {}
  if choice.supported == false then
    warnings[#warnings + 1] = ("%s does not support this choice: %s"):format(eng.engine,
      table.concat(choice.notes or {}, "; "))
  end
  return { recipe_id = rid, prefill = pre, warnings = warnings,
    picked = { repo_id = res.repo_id or h.repo_id, revision = res.revision or NULL, engine = eng.engine,
      choice = choice.id } }
end

local function _same_key(a, b)
  return tostring(a) == tostring(b)
end

--- The Slurm user and its groups, for partitions with AllowGroups: the
--- Cluster defaults' `user_groups` when the site sets them, else this host's
--- group database (NSS: getgrouplist, as slurmctld does on its own host).
--- A host lookup is reused M.FACTS_TTL seconds when `cache` is given (NSS may ask LDAP).
---@param s table app:slurm_settings()
---@param cache table|nil app.cache
---@param now number|nil app.clock()
---@return {name: string, groups: table<string, boolean>|nil, groups_from: string|nil, groups_error: string|nil}
function M.slurm_user(s, cache, now)
  local u = { name = s.user }
  local listed = s.defaults and s.defaults.user_groups
  if type(listed) == "table" then
    u.groups, u.groups_from = {}, "cluster_default"
    for _, g in ipairs(listed) do u.groups[g] = true end
    return u
  end
  local ok, sys = pcall(require, "obleth.sys")
  if not ok or not sys.user_groups or not s.user then
    u.groups_error = "this host cannot look up the Slurm user's groups"
    return u
  end
  local c = cache and cache.slurm_user_groups
  local list, err
  if c and c.user == s.user and now and now - c.at < M.FACTS_TTL then
    list, err = c.list, c.err
  else
    list, err = sys.user_groups(s.user)
    if cache and now then cache.slurm_user_groups = { user = s.user, at = now, list = list, err = err } end
  end
  if not list then
    u.groups_error = err
    return u
  end
  u.groups, u.groups_from = {}, "host"
  for _, g in ipairs(list) do u.groups[g] = true end
  return u
end

--- The cluster facts the checks need, normalized (cached M.FACTS_TTL seconds).
---@return table|nil {partitions, nodes, associations, qos, api_version, user, enforce_part_limits},
---@return {code: "not_configured"|"no_slurm_user"|"slurm", message: string}|nil why not
function M.facts(app)
  local s = app:slurm_settings()
  if not s.url and not s.socket then
    return nil, { code = "not_configured", message = "no slurmrestd connection is set up" }
  end
  local c = app.cache.launch_facts
  local now = app.clock()
  -- the Slurm user's groups and EnforcePartLimits follow the settings at once (not cached)
  local function with_site(f)
    local out = {}
    for k, v in pairs(f) do out[k] = v end
    out.user = M.slurm_user(s, app.cache, now)
    -- the site's setting wins; else what slurmctld says (v0.0.45's /conf), else unknown
    out.enforce_part_limits = s.defaults and s.defaults.enforce_part_limits or f.slurm_enforce_part_limits
    return out
  end
  if c and _same_key(c.key, s.updated_at) and now - c.at < M.FACTS_TTL then return with_site(c.facts) end
  local conn, err = app:slurm_connect()
  if not conn then return nil, { code = "slurm", message = "slurmrestd: " .. tostring(err and err.message) } end
  local f = { api_version = conn:version() }
  local calls = {
    { "partitions", function() return conn:partitions() end },
    { "nodes", function() return conn:nodes() end },
    { "qos", function() return conn:qos() end },
    { "associations", function() return conn:associations { user = s.user } end },
  }
  if not s.user then
    return nil, { code = "no_slurm_user", message = "no Slurm user is set: the user's associations are unknown" }
  end
  for _, call in ipairs(calls) do
    local v, e = call[2]()
    if not v then
      return nil, { code = "slurm", message = ("slurmrestd %s: %s"):format(call[1], tostring(e and e.message)) }
    end
    f[call[1]] = v
  end
  -- EnforcePartLimits, where slurmrestd says it (v0.0.45+); a failure here only leaves it unknown
  local conf = (require("obleth.slurm.versions").number(f.api_version) or 0) >= 45 and conn:conf() or nil
  f.slurm_enforce_part_limits = conf and conf.enforce_part_limits or nil
  app.cache.launch_facts = { key = s.updated_at, at = now, facts = f }
  return with_site(f)
end

---------------------------------------------------------------------------
-- the preview
---------------------------------------------------------------------------

local function _policy(app, warnings)
  local policy = require "obleth.policy"
  local ok, perr = pcall(policy.reload)
  if not ok then app.log.warn("policy_reload_failed", { error = tostring(perr) }) end
  for name, e in pairs(policy.errors()) do
    warnings[#warnings + 1] = ("policy %s: %s (the previous version is in use)"):format(name, tostring(e.message))
  end
  return policy.get
end

--- The cluster checks of a managed spec about to be stored (PUT
--- /api/v1/models/{id}/managed): the same obleth.deployment.cluster_errors the
--- preview and the launch run, on the values the provisioner would submit.
---@param app table
---@param spec table validated managed spec
---@return {field: string, message: string, code: string}[] errors (empty when fine)
---@return string|nil why the checks could not run (no connection, Slurm unreachable)
function M.check_spec(app, spec)
  local facts, why = M.facts(app)
  if not facts then return {}, why.message end
  local warnings = {}
  local errs = launch.spec_errors(_policy(app, warnings), spec, app:slurm_settings().defaults, facts)
  return errs
end

--- A 422 answer for per-field errors: {error: {code: "invalid", field, message}, errors: [...]}.
function M.unprocessable(errs, extra)
  for _, e in ipairs(errs) do labels.say(e) end
  local first = errs[1] or {}
  local body = { error = { code = "invalid", field = first.field or NULL,
    message = (#errs == 1 and "%s" or "%s (and %d more)"):format(tostring(first.message), #errs - 1) },
    errors = json.array(errs) }
  for k, v in pairs(extra or {}) do body[k] = v end
  return 422, body
end

--- The body's recipe / hf / values (its shape checked: obleth.schema.launch); returns the pieces or a
--- failure of the rule between its fields.
local function _read_body(ctx)
  local b = ctx.json
  if _null(b.recipe_id) == _null(b.hf) then
    return nil, _fail(400, "invalid", "give exactly one of recipe_id or hf (a Hugging Face choice)", "recipe_id")
  end
  local values = b.values
  if _null(values) then values = {} end
  return b, json.plain(values)
end

--- Everything a preview needs, computed. Returns preview, context or nil, failure.
function M.prepare(app, b, values)
  local warnings = {}
  local rid, picked, prefill, prefilled = b.recipe_id, nil, nil, nil
  if not _null(b.hf) then
    local h, f = _hf(app, b.hf, values.gpu_type)
    if not h then return nil, f end
    rid, picked, prefill = h.recipe_id, h.picked, h.prefill
    for _, w in ipairs(h.warnings) do warnings[#warnings + 1] = w end
  end
  local r, doc, source = _recipe(app, rid)
  if not r then
    if picked then doc.body.error.field = "hf.engine" end
    return nil, doc
  end
  if prefill then
    local pr, pw, applied = launch.apply_prefill(r, prefill)
    r, prefilled = pr, applied
    for _, w in ipairs(pw) do warnings[#warnings + 1] = w end
  end
  local settings = app:slurm_settings()
  local launches = require("obleth.api.replica_logs").attach_to_outcomes(app.store,
    app.store:list_launches { recipe_id = r.id, limit = M.HISTORY })
  local facts, why = M.facts(app)
  if not facts and why then warnings[#warnings + 1] = why.message end
  local api_version = facts and facts.api_version
  if not api_version and settings.api_version ~= "auto" then api_version = settings.api_version end
  local sys = require "obleth.sys"
  local exe = sys.paths.exe
  local policy = _policy(app, warnings)
  local pv = launch.preview { recipe = r, values = values, api_model_name = not _null(b.api_model_name)
    and b.api_model_name or nil, defaults = settings.defaults, launches = launches, facts = facts,
    api_version = api_version, policy = policy, bindir = exe and exe:match("^(.*)/[^/]*$"), exe = exe,
    warnings = warnings, instance = app.store.instance and app.store:instance() or nil }
  return pv, { recipe = r, doc = doc, source = source, picked = picked, prefilled = prefilled, settings = settings,
    facts = facts }
end

-- What the form shows beside a setting (obleth.schema.hint: min, max, default, unit), and for a
-- setting left to a policy when empty, the policy's value (`empty`: rollover_margin, in minutes, is the
-- rollover policy's margin); NULL for an input or a field with nothing to say.
local function _hint(field)
  if field:match("^inputs%.") then return NULL end
  local h = wire.hint(managed_schema.spec, field)
  if not h then return NULL end
  if field == "rollover_margin" then
    local ok, r = pcall(require("obleth.policy").get, "rollover")
    local m = ok and type(r) == "table" and r.DEFAULTS and tonumber(r.DEFAULTS.margin)
    if m then h.empty = m / 60 end
  end
  if next(h) == nil then return NULL end
  return h
end

--- The preview as the API answers it.
-- A field's error {message, code, label} in the label's words.
local function _field_error(f)
  local e = labels.say { field = f.field, message = f.error.message, code = f.error.code }
  e.field = nil
  return e
end

function M.answer(pv, c)
  local settings = {}
  for k, s in pairs(pv.settings) do
    settings[k] = { value = s.value == nil and NULL or s.value, provenance = s.provenance or NULL }
  end
  local learned = pv.learned
  local fields = {}
  for i, f in ipairs(pv.fields) do
    fields[i] = { field = f.field, label = labels.of(f.field) or f.field, value = f.value == nil and NULL or f.value,
      provenance = f.provenance or NULL, error = f.error and _field_error(f) or NULL, hint = _hint(f.field) }
  end
  for _, e in ipairs(pv.errors or {}) do labels.say(e) end
  local user = pv.slurm_user
  if user then
    user = { name = user.name or NULL, groups = user.groups and json.array(user.groups) or NULL,
      groups_from = user.groups_from or NULL, groups_error = user.groups_error or NULL }
  end
  return _arrays({
    ok = pv.ok,
    recipe = { id = c.recipe.id, name = c.recipe.name or NULL, source = c.source, engine = c.recipe.engine or NULL },
    hf = c.picked or NULL,
    settings = settings, fields = fields, errors = pv.errors,
    slurm_user = user or NULL, enforce_part_limits = pv.enforce_part_limits or NULL,
    partitions = pv.partitions, partitions_offered = pv.partitions_offered,
    accounts_offered = pv.accounts_offered, qos_offered = pv.qos_offered,
    suggestions = pv.suggestions,
    learned = { account = learned.account or NULL, qos = learned.qos or NULL, applied = learned.applied == true,
      reason = learned.reason or NULL, evidence = learned.evidence or {} },
    job_script = pv.job_script or NULL, slurm_request = pv.slurm_request or NULL,
    api_version = pv.api_version or NULL, spec = pv.spec or NULL, warnings = pv.warnings,
    placeholders = pv.placeholders,
  })
end

--- A recipe id "Also save these settings as a recipe" can offer: the API model name (else the recipe's
--- id) made a recipe id, with -2, -3, ... when a library or saved recipe has it.
---@return string|nil
function M.free_recipe_id(app, name)
  if type(name) ~= "string" then return nil end
  local base = name:lower():gsub("[^a-z0-9._-]+", "-"):gsub("^[^a-z0-9]+", ""):gsub("%-+$", "")
  base = base:sub(1, recipe_schema.ID_MAX - 4)
  if base == "" or not base:match(recipe_schema.ID_PATTERN) then return nil end
  local lib = _library(app)
  local id, n = base, 1
  while lib[id] or app.store:get_recipe(id) do
    n = n + 1
    if n > 99 then return nil end
    id = base .. "-" .. n
  end
  return id
end

local function preview(ctx)
  local b, values = _read_body(ctx)
  if not b then return values.status, values.body, values.headers end
  local pv, c = M.prepare(ctx.app, b, values)
  if not pv then return c.status, c.body, c.headers end
  local out = M.answer(pv, c)
  local nm = pv.settings.api_model_name and pv.settings.api_model_name.value
  out.save_recipe_id = M.free_recipe_id(ctx.app, type(nm) == "string" and nm ~= "" and nm or c.recipe.id) or NULL
  return 200, out
end

---------------------------------------------------------------------------
-- launch
---------------------------------------------------------------------------

-- The save_recipe object (checked: obleth.schema.launch): {id, name?} or nil; or a failure.
local function _save_target(app, s)
  if _null(s) then return nil end
  if _library(app)[s.id] then
    return nil, _fail(409, "read_only", ("%q is a library recipe; save under another id"):format(s.id), "save_recipe.id")
  end
  if app.store:get_recipe(s.id) then
    return nil, _fail(409, "conflict", ("a saved recipe %q already exists; choose another id"):format(s.id), "save_recipe.id")
  end
  return { id = s.id, name = not _null(s.name) and s.name or nil }
end

local ABORT = { __name = "obleth.api.deployments.abort" }

-- "Launch again": model_id names a model that exists and is not managed (stopped); the launch
-- reuses it (its name is the API model name) instead of creating one. Returns the model or a failure.
local function _relaunch_target(app, b)
  if _null(b.model_id) then return nil end
  local m = app.store:get_model(b.model_id)
  if not m then return nil, _fail(404, "not_found", ("model %d does not exist"):format(b.model_id), "model_id") end
  if app.store:get_spec(m.id) then
    return nil, _fail(409, "conflict", ("model %s is still launched: stop launching it first"):format(m.name), "model_id")
  end
  if not _null(b.api_model_name) and b.api_model_name ~= m.name then
    return nil, _fail(400, "invalid", ("api_model_name: launching model %d again keeps its name %s"):format(m.id, m.name),
      "api_model_name")
  end
  b.api_model_name = m.name
  return m
end

-- Launch again as it was: {model_id} alone takes the recipe and the settings of the model's last
-- launch (values given beside it are laid over them).
local RECORD_ONLY = { provenance = true, hf = true, saved_recipe_id = true }
local function _as_last_launch(app, b)
  if type(b) ~= "table" or math.type(b.model_id) ~= "integer" or not _null(b.recipe_id) or not _null(b.hf) then return end
  local last = app.store:list_launches({ model_id = b.model_id, limit = 1 })[1]
  if not last or _null(last.recipe_id) then return end
  local values = {}
  for k, v in pairs(type(last.settings) == "table" and last.settings or {}) do
    if not RECORD_ONLY[k] then values[k] = v end
  end
  for k, v in pairs(type(b.values) == "table" and b.values or {}) do values[k] = v end
  b.recipe_id, b.values = last.recipe_id, values
end

local function do_launch(ctx)
  local app = ctx.app
  _as_last_launch(app, ctx.json)
  local b, values = _read_body(ctx)
  if not b then return values.status, values.body, values.headers end
  local again, af = _relaunch_target(app, b)
  if af then return af.status, af.body end
  local save, sf = _save_target(app, b.save_recipe)
  if sf then return sf.status, sf.body end
  local pv, c = M.prepare(app, b, values)
  if not pv then return c.status, c.body, c.headers end
  if not pv.ok then return M.unprocessable(pv.errors, { preview = M.answer(pv, c) }) end

  local saved_text
  if save then
    local recipe = require "obleth.recipe"
    local doc = launch.saved_recipe(c.doc(), save, pv.values, (function()
      local prov = {}
      for _, f in ipairs(pv.fields) do prov[f.field] = f.provenance end
      return prov
    end)(), c.prefilled)
    local ok, rerr = recipe.validate(doc)
    if not ok then
      local out = {}
      for _, e in ipairs(rerr.errors) do
        out[#out + 1] = { field = "save_recipe", message = (e.field or "") .. ": " .. e.message }
      end
      return M.unprocessable(out)
    end
    saved_text = json.encode(doc)
  end

  local v = pv.values
  local record = {}
  for k, x in pairs(v) do if k ~= "api_name" then record[k] = x end end
  record.provenance = {}
  for _, f in ipairs(pv.fields) do record.provenance[f.field] = f.provenance end
  record.hf = c.picked
  record.saved_recipe_id = save and save.id or nil
  local store = app.store
  local okp, res, terr = pcall(store.transaction, store, function()
    local function need(x, e)
      if x == nil then error(setmetatable({ err = e }, ABORT), 0) end
      return x
    end
    local model = again and need(store:get_model(again.id), { code = "not_found", message = "the model is gone",
      field = "model_id" }) or need(store:create_model { name = v.api_name })
    if again and store:get_spec(model.id) then
      need(nil, { code = "conflict", message = ("model %s is still launched"):format(model.name), field = "model_id" })
    end
    local lid = need(store:add_launch { model_id = model.id, recipe_id = c.recipe.id, settings = record,
      created_by = ctx.actor or require("obleth.api.access").ADMIN_ACTOR, created_at = math.floor(app.now()) })
    need(store:put_spec(model.id, pv.spec))
    local saved
    if save then saved = need(store:put_recipe(save.id, save.name or save.id, saved_text, true)).recipe end
    return { model_id = model.id, launch_id = lid, saved = saved }
  end)
  if not okp then
    if getmetatable(res) == ABORT then res, terr = nil, res.err else error(res, 0) end
  end
  if not res then
    local e = terr or { code = "storage", message = "the launch could not be stored" }
    if e.code == "conflict" and e.field == "name" then e.field = "api_model_name" end
    if e.code == "conflict" and e.field == "id" then e.field = "save_recipe.id" end
    return errors.store(e)
  end
  ctx.model_id = res.model_id
  local model = store:get_model(res.model_id)
  local spec = store:get_spec(res.model_id)
  local rec
  for _, l in ipairs(store:list_launches { model_id = res.model_id, limit = 1 }) do rec = l end
  app.log.info("launched", { model_id = res.model_id, name = v.api_name, recipe_id = c.recipe.id, actor = ctx.actor,
    launch_id = res.launch_id, saved_recipe = save and save.id or nil })
  return 201, _arrays({ model = model, spec = spec, launch = rec, recipe = res.saved or NULL, warnings = pv.warnings }),
    { Location = "/api/v1/models/" .. res.model_id }
end

---------------------------------------------------------------------------
-- suggestions
---------------------------------------------------------------------------

local function suggestions(ctx)
  local pv, c = M.prepare(ctx.app, { recipe_id = ctx.query.recipe_id }, {})
  if not pv then return c.status, c.body, c.headers end
  local launches = ctx.app.store:list_launches { recipe_id = c.recipe.id, limit = M.HISTORY }
  return 200, _arrays({ recipe_id = c.recipe.id, suggestions = pv.suggestions, launches_considered = #launches,
    warnings = pv.warnings })
end

---------------------------------------------------------------------------
-- "Edit as YAML"
---------------------------------------------------------------------------

local function check_yaml(ctx)
  local app = ctx.app
  local b = ctx.json -- checked: the route declares its body (obleth.api.request)
  local yaml = require "obleth.yaml"
  local doc, pos = yaml.decode(b.yaml, { positions = true })
  if doc == nil then
    local e = type(pos) == "table" and pos or { message = tostring(pos) }
    return 200, { ok = false, diagnostics = json.array({ { line = e.line or NULL, column = e.column or NULL,
      field = NULL, message = tostring(e.message) } }) }
  end
  -- the settings are one document: a second one would be silently ignored
  local all = yaml.decode_all(b.yaml)
  if type(all) == "table" and #all > 1 then
    local line, n, content = nil, 0, false
    for l in (b.yaml .. "\n"):gmatch("([^\n]*)\n") do
      n = n + 1
      if l:match("^%-%-%-") and content then line = n break end
      if l:match("%S") and not l:match("^%s*#") and not l:match("^%-%-%-") then content = true end
    end
    return 200, { ok = false, diagnostics = json.array({ { line = line or NULL, column = 1, field = NULL,
      message = "more than one YAML document: the settings are one mapping (remove the second '---')" } }) }
  end
  -- the recipe, to know its inputs: the one named, else a stand-in with none
  local r
  local body = { api_model_name = nil }
  if not _null(b.recipe_id) or not _null(b.hf) then
    body.recipe_id, body.hf = b.recipe_id, b.hf
    if not _null(b.hf) then
      local h, f = _hf(app, b.hf, nil)
      if not h then return f.status, f.body, f.headers end
      body.recipe_id, body.hf = h.recipe_id, nil
    end
    local rr, f = _recipe(app, body.recipe_id)
    if not rr then return f.status, f.body end
    r = rr
  end
  local values, diags = launch.yaml_values(doc, pos, r)
  if values then
    values = json.plain(values)
    local pv, c
    if r then
      pv, c = M.prepare(app, { recipe_id = b.recipe_id, hf = b.hf, api_model_name = values.api_model_name }, values)
      if not pv then return c.status, c.body, c.headers end
    else
      local stub = assert(require("obleth.recipe").validate({ id = "settings", engine = "custom", launch = { "true" } }))
      local settings = app:slurm_settings()
      local warnings = {}
      local facts, why = M.facts(app)
      if why then warnings[#warnings + 1] = why.message end
      pv = launch.preview { recipe = stub, values = values, api_model_name = values.api_model_name,
        defaults = settings.defaults, launches = {}, facts = facts, api_version = facts and facts.api_version,
        policy = _policy(app, warnings), warnings = warnings }
    end
    local flagged = {}
    for _, d in ipairs(diags) do if d.field then flagged[d.field] = true end end
    for _, e in ipairs(pv.errors) do
      if not flagged[e.field] then
        local line, column = launch.yaml_position(doc, pos, e.field)
        diags[#diags + 1] = { line = line, column = column, field = e.field, message = e.message }
      end
    end
    if #diags == 0 then
      local settings = {}
      for k, s in pairs(pv.settings) do
        settings[k] = { value = s.value == nil and NULL or s.value, provenance = s.provenance or NULL }
      end
      return 200, { ok = true, settings = settings, warnings = json.array(pv.warnings) }
    end
  end
  -- in line order (then column): the structure's diagnostics and the checks' come from two passes
  table.sort(diags, function(x, y)
    local la, lb = x.line or math.huge, y.line or math.huge
    if la ~= lb then return la < lb end
    local ca, cb = x.column or 0, y.column or 0
    if ca ~= cb then return ca < cb end
    return tostring(x.field) < tostring(y.field)
  end)
  if #diags > launch.MAX_DIAGNOSTICS + 1 then -- yaml_values capped its own; the preview's errors were added
    local rest = 0
    for i = #diags, launch.MAX_DIAGNOSTICS + 1, -1 do
      local more = tonumber((diags[i].message or ""):match("^(%d+) more problems not listed$"))
      rest = rest + (more and not diags[i].field and more or 1)
      diags[i] = nil
    end
    diags[#diags + 1] = { message = ("%d more problems not listed"):format(rest) }
  end
  for _, d in ipairs(diags) do
    d.line, d.column, d.field = d.line or NULL, d.column or NULL, d.field or NULL
  end
  return 200, { ok = false, diagnostics = json.array(diags) }
end

-- Launch history (GET /api/v1/deployments/launches), newest first.
local function list_launches(ctx)
  local q, err = validate.launches_query(ctx.query)
  if not q then return errors.invalid(err) end
  return 200, { launches = ctx.app.store:list_launches(q) }
end

M.routes = {
  { "GET", "/api/v1/deployments/launches", list_launches, tag = "launches",
    summary = "Launch history, newest first; ?model_id=, ?recipe_id=, ?limit= (50, at most 500)",
    query = { "model_id", "recipe_id", "limit" } },
  { "POST", "/api/v1/deployments/preview", preview, action = "deployments.launch",
    tag = "deployments", body = "LaunchPreview", body_schema = launch_schema.preview, changes = {},
    audit = false, -- reads: not a write
    summary = "Every setting of a launch with its value and provenance, per-field errors, partition fit, "
      .. "offered accounts, suggestions, the job script and the exact slurmrestd request" },
  { "POST", "/api/v1/deployments/check-yaml", check_yaml, action = "deployments.launch",
    tag = "deployments", body = "LaunchYaml", body_schema = launch_schema.yaml, changes = {},
    audit = false, -- reads: not a write
    summary = "Check the launch settings as YAML (Edit as YAML): per-line diagnostics or the parsed settings" },
  { "POST", "/api/v1/deployments/launch", do_launch, action = "deployments.launch", tag = "deployments", body = "LaunchRequest",
    body_schema = launch_schema.request, changes = { "models", "managed", "launches", "recipes" },
    summary = "Launch: create the model (staged), its managed spec and a launch record (and optionally a "
      .. "saved recipe) in one transaction; 422 with per-field errors when a setting is refused" },
  { "GET", "/api/v1/deployments/suggestions", suggestions, tag = "deployments",
    query = { { "recipe_id", required = true } },
    summary = "Suggestions from past runs of a recipe's launches, each with its evidence (never applied)" },
}

return M
