--- Slurm settings (GET/PUT /api/v1/settings/slurm), the connection test and
-- the live cluster resources (GET /api/v1/slurm/resources, cached a few seconds).
-- The JWT and the Hugging Face token are masked in every answer here.
local cjson = require "cjson"
local errors = require "obleth.api.errors"
local json = require "obleth.util.json"
local validate = require "obleth.deployment.input"

local M = {}

local NULL = cjson.null
M.RESOURCES_TTL = 5 -- seconds

local function n(v) if v == nil then return NULL end return v end

--- The settings as GET shows them: secrets masked, provisioner status added.
function M.public(app)
  local s = app:slurm_settings()
  local d = s.defaults
  local prov = app.store:provisioner_status()
  local tok = require("obleth.slurm.token_source").status(s, prov, app.now())
  return {
    enabled = s.enabled, url = n(s.url), socket = n(s.socket), user = n(s.user),
    token = s.token and validate.MASK or NULL, token_set = s.token ~= nil, token_expires_at = n(tok.expires_at),
    token_source = s.token_source, token_key_file = n(s.token_key_file), token_command = n(s.token_command),
    token_lifespan = n(s.token_lifespan), token_renewed_at = n(tok.renewed_at), token_warning = n(tok.warning),
    verify = s.verify, ca_file = n(s.ca_file), api_version = s.api_version, timeout = s.timeout,
    defaults = {
      model_cache_dir = n(d.model_cache_dir), image_dir = n(d.image_dir), log_dir = n(d.log_dir),
      hf_token_path = n(d.hf_token_path),
      modules = d.modules, partition = n(d.partition), account = n(d.account), qos = n(d.qos),
      hf_token = d.hf_token and validate.MASK or NULL, hf_token_set = d.hf_token ~= nil,
      port_range = d.port_range, environment = d.environment,
      user_groups = d.user_groups and json.array(d.user_groups) or NULL, enforce_part_limits = n(d.enforce_part_limits),
    },
    provisioner = prov,
    serve_policy_errors = M.serve_policy_errors(),
    thresholds = M.thresholds(),
    updated_at = n(s.updated_at),
  }
end

--- This obleth serve's own policy overrides that do not load (the previous version is used), for the
--- Slurm card beside the provisioner's `policy_error`: one {policy, file, line, message, since} per
--- broken file, by policy name; line is nil when the message names none.
---@return table[]
function M.serve_policy_errors()
  local policy = require "obleth.policy"
  local out = json.array()
  local ok = pcall(policy.reload)
  local errs = ok and policy.errors() or {}
  for _, name in ipairs(policy.NAMES) do
    local e = errs[name]
    if e then
      local msg = type(e) == "table" and tostring(e.message) or tostring(e)
      local file = type(e) == "table" and e.path or NULL
      out[#out + 1] = { policy = name, file = file, line = n(math.tointeger(tonumber(msg:match(":(%d+):")))),
        message = msg, since = n(type(e) == "table" and e.at or nil) }
    end
  end
  return out
end

--- The numbers the Slurm card words by, from their one owner (obleth.schema.thresholds): seconds
--- without a check-in after which the provisioner is taken for stopped, and seconds before a static
--- JWT's expiry from which it is warned about.
---@return {provisioner_stale: integer, token_warn_before: integer}
function M.thresholds()
  local t = require "obleth.schema.thresholds"
  return { provisioner_stale = t.provisioner_stale, token_warn_before = t.token_warn_before }
end

--- The settings for a reader who may not change them (a viewer "sees everything but secrets"):
--- besides the two tokens, every secret the schema names (obleth.schema.secrets: token_command, the
--- environment's values) masked.
---@param pub table M.public's answer (changed in place)
---@return table pub
function M.for_reader(pub)
  local sec = require("obleth.schema").secrets(require("obleth.schema.settings").settings)
  local function mask(t)
    for k, v in pairs(t) do
      if sec.fields[k] and type(v) == "string" then t[k] = validate.MASK
      elseif sec.maps[k] and type(v) == "table" then
        for name in pairs(v) do v[name] = validate.MASK end
      end
    end
  end
  mask(pub)
  if type(pub.defaults) == "table" then
    if type(pub.defaults.environment) == "table" then pub.defaults.environment = require("obleth.util.tables")
      .copy(pub.defaults.environment) end
    mask(pub.defaults)
  end
  return pub
end

local function get(ctx)
  local pub = M.public(ctx.app)
  if not require("obleth.api.access").may(ctx, "settings.slurm") then M.for_reader(pub) end
  return 200, pub
end

local function put(ctx)
  local confirm = ctx.query.confirm -- "true" / "false" / nil (the route declares it)
  local b = ctx.json -- a JSON object: the route declares its body (obleth.api.request)
  local s, err = validate.settings(b)
  if not s then return errors.invalid(err) end
  local app = ctx.app
  app:register_secrets(s)
  local function check(cur, store)
    cur = cur or {}
    if s.token == validate.KEEP then s.token = cur.token end
    if s.defaults.hf_token == validate.KEEP then s.defaults.hf_token = (cur.defaults or {}).hf_token end
    if cur.enabled == true and not s.enabled and confirm ~= "true" then
      local live = store:count_live_replicas()
      if live > 0 then
        return nil, { code = "confirm", field = "enabled", extra = { running = live },
          message = ("%d replica%s still running: turning Slurm off cancels nothing now but stops the "
            .. "provisioner from managing them; repeat with ?confirm=true to go ahead"):format(live,
            live == 1 and " is" or "s are") }
      end
    end
    return true
  end
  local saved, serr = app.store:put_settings(s, check)
  if not saved then
    if serr.code == "confirm" then return errors.fail(409, "confirm", serr.message, serr.field, { running = serr.running }) end
    return errors.store(serr)
  end
  app.cache.resources = nil
  app.log.info("settings_saved", { enabled = s.enabled, url = s.url, socket = s.socket })
  return 200, M.public(app)
end

local function test(ctx)
  local over, err = validate.connection(ctx.json)
  if not over then return errors.invalid(err) end
  local app = ctx.app
  local saved = app:slurm_settings()
  local opts = {}
  for k, v in pairs(saved) do opts[k] = v end
  -- the saved credentials go to the saved slurmrestd only, never to a URL posted here: neither the
  -- saved token nor one this host would mint or fetch for it (only a token posted with the URL)
  local elsewhere = (over.url or over.socket) and (over.url ~= saved.url or over.socket ~= saved.socket)
  if over.url or over.socket then
    if elsewhere then opts.token = nil end
    opts.url, opts.socket = over.url, over.socket
  end
  for _, k in ipairs({ "user", "verify", "ca_file", "api_version", "timeout", "token_source", "token_key_file",
    "token_command", "token_lifespan" }) do
    if over[k] ~= nil then opts[k] = over[k] end
  end
  if elsewhere then opts.token_source = "static" end
  if over.timeout == nil then opts.timeout = math.min(opts.timeout or 5, 5) end
  -- a posted token is used for this call only: it is not saved, so not registered as a
  -- secret to redact (a short one would blank ordinary words in every later log line)
  if over.token ~= validate.KEEP then opts.token = over.token end
  local out = { reachable = false, ok = false, api_version = NULL, release = NULL, hostname = NULL,
    latency_ms = NULL, target = n(opts.url or opts.socket), token = NULL, error = NULL }
  if over.token == validate.KEEP and opts.token_source ~= "static" then
    -- renewed automatically: this host's token source has (or makes) the current one
    local tok, terr = app:slurm_tokens():token(opts)
    opts.token = tok
    if not tok then
      out.error = { code = "auth", message = terr.message, field = terr.field }
      return 200, out
    end
  end
  if opts.token then
    local exp = require("obleth.slurm").token_expiry(opts.token)
    if exp then
      local left = exp - math.floor(app.now())
      out.token = { expires_at = exp, seconds_left = left, expired = left <= 0, source = opts.token_source,
        renewed = opts.token_source ~= "static" and over.token == validate.KEEP }
    else
      out.token = { expires_at = NULL, seconds_left = NULL, expired = NULL, message = "the token has no exp claim" }
    end
  end
  if not opts.url and not opts.socket then
    out.error = { code = "not_configured", message = "no slurmrestd URL or socket is saved or given" }
    return 200, out
  end
  local t0 = app.clock()
  local conn, cerr = app:slurm_connect({ url = opts.url, socket = opts.socket, user = opts.user,
    token = opts.token or false, -- false: none (nil would take the saved one)
    verify = opts.verify, ca_file = opts.ca_file, api_version = opts.api_version, timeout = opts.timeout })
  if not conn then
    out.reachable = cerr.code ~= "unreachable" and cerr.code ~= "timeout"
    out.error = { code = cerr.code, message = cerr.message }
    out.elapsed_ms = math.floor((app.clock() - t0) * 1000)
    return 200, out
  end
  out.reachable = true
  out.api_version = conn:version()
  out.versions = json.array(conn:versions() or {})
  local p, perr = conn:ping()
  if not p then
    out.error = { code = perr.code, message = perr.message }
  else
    out.ok = p.ok == true
    out.release = n(p.release)
    out.hostname = n(p.hostname)
    out.latency_ms = math.floor((p.rtt or 0) * 100000 + 0.5) / 100
  end
  out.elapsed_ms = math.floor((app.clock() - t0) * 1000)
  return 200, out
end

---------------------------------------------------------------------------
-- resources
---------------------------------------------------------------------------

local function _sorted(set)
  if set == nil then return NULL end
  local a = json.array()
  for k, v in pairs(set) do if v then a[#a + 1] = k end end
  table.sort(a)
  return a
end

local function _limit(v)
  if v == math.huge then return "UNLIMITED" end
  return n(v)
end

local function _state(st)
  if type(st) ~= "table" then return n(st) end
  return { base = n(st.base), flags = _sorted(st.flags or {}) }
end

local function _partition(p)
  return {
    name = p.name, state = n(p.state), default = p.default == true, nodes = n(p.nodes),
    node_list = json.array(p.node_list or {}), max_time = _limit(p.max_time), default_time = _limit(p.default_time),
    max_nodes = _limit(p.max_nodes), total_cpus = n(p.total_cpus), total_nodes = n(p.total_nodes),
    allowed_accounts = _sorted(p.allowed_accounts), denied_accounts = _sorted(p.denied_accounts),
    allowed_qos = _sorted(p.allowed_qos), denied_qos = _sorted(p.denied_qos),
    allowed_groups = _sorted(p.allowed_groups),
    -- Hidden=YES (null: the API version does not say), the partition's own QoS, PriorityTier
    hidden = n(p.hidden), qos = n(p.qos), priority_tier = n(p.priority_tier),
    exclusive = n(p.exclusive), oversubscribe = n(p.oversubscribe),
  }
end

-- GPUs of a node per type: [{type, total, used, free}] (free = 0 on a node that takes no job).
local function _gpus_by_type(x)
  local out = json.array()
  local g = x.gres and x.gres.gpu
  if not g then return out end
  local used = x.gres_used and x.gres_used.gpu and x.gres_used.gpu.by_type or {}
  local free = x.gres_free and x.gres_free.gpu and x.gres_free.gpu.by_type or {}
  local types = {}
  for t in pairs(g.by_type or {}) do types[#types + 1] = t end
  table.sort(types)
  if #types == 0 and (g.total or 0) > 0 then
    local u = x.gres_used and x.gres_used.gpu and x.gres_used.gpu.total or 0
    out[1] = { type = NULL, total = g.total, used = u, free = x.gpus_free or 0 }
    return out
  end
  for _, t in ipairs(types) do
    local f = free[t] or 0
    if (x.gpus_free or 0) == 0 then f = 0 end
    out[#out + 1] = { type = t, total = g.by_type[t], used = used[t] or 0, free = f }
  end
  return out
end

local function _node(x)
  return {
    gpus_by_type = _gpus_by_type(x), gpus_used = x.gres_used and x.gres_used.gpu and x.gres_used.gpu.total or 0,
    name = x.name, address = n(x.address), hostname = n(x.hostname), state = _state(x.state), idle = x.idle == true,
    reason = n(x.reason), cpus = n(x.cpus), alloc_cpus = n(x.alloc_cpus), memory = n(x.memory),
    alloc_memory = n(x.alloc_memory), free_memory = n(x.free_memory), features = _sorted(x.features or {}),
    active_features = _sorted(x.active_features or {}), partitions = json.array(x.partitions or {}),
    gpus = x.gpus or 0, gpus_free = x.gpus_free or 0, gres = x.gres or {}, gres_free = x.gres_free or {},
  }
end

local function _fetch(app)
  local settings = app:slurm_settings()
  local conn, err = app:slurm_connect()
  if not conn then return nil, err end
  local parts, perr = conn:partitions()
  if not parts then return nil, perr end
  local nodes, nerr = conn:nodes()
  if not nodes then return nil, nerr end
  local out = { api_version = conn:version(), user = n(settings.user), partitions = json.array(),
    nodes = json.array(), accounts = NULL, qos = NULL, associations = NULL, user_accounts = NULL,
    user_qos = NULL, warnings = json.array() }
  for _, p in ipairs(parts) do out.partitions[#out.partitions + 1] = _partition(p) end
  for _, x in ipairs(nodes) do out.nodes[#out.nodes + 1] = _node(x) end
  -- this installation's jobs in the queue or running, with Slurm's reason and (estimated) start
  out.jobs = json.array()
  local jobs, jerr = conn:jobs()
  if jobs then
    local inst = app.store:instance()
    local tag = require "obleth.job.tag"
    for _, j in ipairs(jobs) do
      local t = tag.parse(j)
      local base = j.state and j.state.base
      if t and t.instance == inst and (base == "PENDING" or base == "RUNNING" or base == "CONFIGURING"
        or base == "COMPLETING" or base == "SUSPENDED") then
        local m = app.store:get_model(t.model_id)
        out.jobs[#out.jobs + 1] = { job_id = j.id, model_id = t.model_id, model_name = m and m.name or NULL,
          slot = t.slot, state = n(base), reason = n(j.reason), partition = n(j.partition), account = n(j.account),
          qos = n(j.qos), nodes = n(j.nodes), submit_time = n(j.submit_time), start_time = n(j.start_time),
          estimated = j.estimated == true, time_limit = _limit(j.time_limit) }
      end
    end
    table.sort(out.jobs, function(a, b) return a.job_id < b.job_id end)
  else out.warnings[#out.warnings + 1] = "jobs: " .. tostring(jerr.message) end
  local accts, aerr = conn:accounts()
  if accts then
    out.accounts = json.array()
    for _, a in ipairs(accts) do
      out.accounts[#out.accounts + 1] = { name = a.name, description = n(a.description), organization = n(a.organization) }
    end
  else out.warnings[#out.warnings + 1] = "accounts: " .. tostring(aerr.message) end
  local qos, qerr = conn:qos()
  if qos then
    out.qos = json.array()
    for _, q in ipairs(qos) do
      out.qos[#out.qos + 1] = { name = q.name, max_wall = n(q.max_wall), priority = n(q.priority),
        max_tres_per_job = n(q.max_tres_per_job), max_tres_per_node = n(q.max_tres_per_node),
        max_tres_per_user = n(q.max_tres_per_user) }
    end
  else out.warnings[#out.warnings + 1] = "qos: " .. tostring(qerr.message) end
  if settings.user then
    local assoc, serr = conn:associations { user = settings.user }
    if assoc then
      out.associations = json.array()
      local ua, uq = {}, {}
      for _, a in ipairs(assoc) do
        out.associations[#out.associations + 1] = { account = n(a.account), user = n(a.user),
          partition = n(a.partition), qos = _sorted(a.qos or {}), default_qos = n(a.default_qos),
          is_default = a.is_default == true }
        if a.account then ua[a.account] = true end
        for q in pairs(a.qos or {}) do uq[q] = true end
      end
      out.user_accounts, out.user_qos = _sorted(ua), _sorted(uq)
    else out.warnings[#out.warnings + 1] = "associations: " .. tostring(serr.message) end
  end
  return out
end

local function resources(ctx)
  local app = ctx.app
  local s = app:slurm_settings()
  if not s.url and not s.socket then
    return errors.fail(409, "not_configured", "no slurmrestd connection is set up (PUT /api/v1/settings/slurm)")
  end
  local c = app.cache.resources
  local now = app.clock()
  if c and c.key == tostring(s.updated_at) and now - c.at < M.RESOURCES_TTL then
    c.doc.cached = true
    return 200, c.doc
  end
  -- one fetch at a time: concurrent requests wait for it
  if app.cache.resources_busy then
    local loop = require "obleth.loop"
    local t0 = now
    while app.cache.resources_busy and app.clock() - t0 < 30 do loop.sleep(0.02) end
    c = app.cache.resources
    if c and c.key == tostring(s.updated_at) then c.doc.cached = true; return 200, c.doc end
  end
  app.cache.resources_busy = true
  local ok, doc, err = pcall(_fetch, app)
  app.cache.resources_busy = nil
  if not ok then error(doc, 0) end
  if not doc then
    return errors.fail(502, "slurm_" .. tostring(err.code), "slurmrestd: " .. tostring(err.message))
  end
  doc.fetched_at = app.now()
  doc.cached = false
  app.cache.resources = { key = tostring(s.updated_at), at = now, doc = doc }
  return 200, doc
end

M.routes = {
  { "GET", "/api/v1/settings/slurm", get,
    summary = "The connection and cluster defaults (JWT and Hugging Face token masked; to a reader who may not "
      .. "change them also token_command and the environment's values), provisioner check-in" },
  { "PUT", "/api/v1/settings/slurm", put, action = "settings.slurm",
    body = "SlurmSettings", query = { { "confirm", enum = { "true", "false" } } },
    changes = { "settings" },
    summary = "Replace the connection and cluster defaults; the mask keeps a stored secret; "
      .. "turning Slurm off while replicas run needs ?confirm=true" },
  { "POST", "/api/v1/settings/slurm/test", test, action = "settings.slurm",
    body = "SlurmConnection", body_optional = true, changes = {}, audit = false, -- a test: not a write
    summary = "Ping slurmrestd with the saved (or posted) connection; API version, release, JWT expiry" },
  { "GET", "/api/v1/slurm/resources", resources,
    summary = "Partitions with the accounts and QoS they allow and deny, nodes and their state, "
      .. "the user's accounts, QoS and associations (cached a few seconds)" },
}

return M
