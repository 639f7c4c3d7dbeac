--- The provisioner protocol (docs/managed-spec.md): one snapshot read and one
-- report per pass. The snapshot is the only answer that carries secrets.
local errors = require "obleth.api.errors"
local validate = require "obleth.deployment.input"
local parts = require "obleth.api.parts"
local json = require "obleth.util.json"
local wire = require "obleth.schema.provisioner"

local crypto = require "obleth.crypto"
local sys = require "obleth.sys"

local M = {}

--- The request header that carries the lease holder's secret (given once, when it acquires the lease).
M.TOKEN_HEADER = "Obleth-Lease-Token"

-- SHA-256 hex of the lease token the request carries, or nil.
local function _proof(ctx)
  local t = ctx.req and ctx.req.headers and ctx.req.headers[M.TOKEN_HEADER:lower()]
  if type(t) ~= "string" or t == "" then return nil end
  return crypto.sha256_hex(t)
end

--- The largest ?ends= a snapshot answers (ends per slot).
M.MAX_ENDS = 1000

-- ?ends=N: each slot's last N ends (the provisioner asks for its lost policy's window), or false for
-- the store's default; nil, {message, field} for a bad query.
local function _ends(ctx)
  local v = ctx.query and ctx.query.ends
  if v == nil then return false end
  local n = math.tointeger(tonumber(v))
  if not n or n < 1 or n > M.MAX_ENDS then
    return nil, { message = ("ends: must be a whole number from 1 to %d"):format(M.MAX_ENDS), field = "ends" }
  end
  return n
end

-- This process's part of a snapshot version: a version another obleth serve (or this one before a
-- restart) answered is never taken as a base for a delta.
local BOOT = sys.random_hex(4)

--- The snapshot version an answer carries: "<boot>.<lease generation>.<counter>" (docs/managed-spec.md,
--- "Snapshot versions").
---@return string
function M.snapshot_version(boot, generation, counter)
  return ("%s.%d.%d"):format(boot, generation, counter)
end

-- The counter a `since` version names when a delta can be made from it: this process's, the current
-- lease generation's, not ahead of the store. Otherwise nil (the full snapshot is sent).
function M.delta_base(since, boot, generation, counter)
  if type(since) ~= "string" then return nil end
  local b, g, n = since:match("^(%x+)%.(%d+)%.(%d+)$")
  if b ~= boot or tonumber(g) ~= generation then return nil end
  n = math.tointeger(tonumber(n))
  if not n or n > counter then return nil end
  return n
end

--- A model's load for the snapshot (the scale policy's `load`): the router's counts, and for a model whose
--- spec has `autoscale` the window's buckets since scale_down_after (+ one bucket) ago.
---@param window table obleth.router.load
---@param md table the snapshot's model {name, spec}
---@param now number
---@return table
function M.load_of(window, md, now)
  local as = type(md.spec) == "table" and md.spec.autoscale
  if type(as) ~= "table" then return window:view(md.name, nil, true) end
  local after = tonumber(as.scale_down_after) or require("obleth.policy").get("scale").DEFAULTS.scale_down_after
  return window:view(md.name, now - after - window.bucket)
end

local function snapshot(ctx)
  local app = ctx.app
  local ends, eerr = _ends(ctx)
  if ends == nil then return errors.invalid(eerr) end
  local s = app:slurm_settings()
  local store = app.store
  -- the version first: a write made while the models are read is sent again by the next delta
  local counter = store:snapshot_version()
  local lease = store:lease()
  local generation = lease and lease.generation or 0
  local base = M.delta_base(ctx.query and ctx.query.since, BOOT, generation, counter)
  local doc = store:snapshot_head(math.floor(app.now()))
  doc.version = M.snapshot_version(BOOT, generation, counter)
  doc.delta = base ~= nil
  doc.settings = {
    enabled = s.enabled, url = s.url, socket = s.socket, user = s.user, token = s.token, verify = s.verify,
    ca_file = s.ca_file, api_version = s.api_version, timeout = s.timeout, defaults = s.defaults,
    token_source = s.token_source, token_key_file = s.token_key_file, token_command = s.token_command,
    token_lifespan = s.token_lifespan,
  }
  for _, k in ipairs({ "url", "socket", "user", "token", "ca_file", "token_key_file", "token_command",
    "token_lifespan" }) do
    if doc.settings[k] == nil then doc.settings[k] = require("cjson").null end
  end
  for _, k in ipairs({ "model_cache_dir", "image_dir", "log_dir", "partition", "account", "qos", "hf_token",
    "hf_token_path" }) do
    if s.defaults[k] == nil then s.defaults[k] = require("cjson").null end
  end
  -- the models in parts, the loop serving other clients between them (thousands of replicas)
  local window = app.load
  local src = store:snapshot_models(base)
  if base then
    -- the changed models no longer listed: the provisioner forgets them
    local listed, removed = {}, json.array()
    for _, m in ipairs(src) do listed[m.id] = true end
    for _, id in ipairs(store:snapshot_changed(base)) do if not listed[id] then removed[#removed + 1] = id end end
    doc.removed = removed
    if window then
      -- the load is the router's, live, not versioned: a delta carries it for the models it leaves out
      -- that the router has seen (`load`, by id), and the load of a model it has not seen (`load_idle`)
      local now, load = app.now(), {}
      for _, name in ipairs(window:names()) do
        local m = store:model_by_name(name)
        if m and not listed[m.id] then
          load[tostring(m.id)] = M.load_of(window, { name = name, spec = store:get_spec(m.id) }, now)
        end
      end
      doc.load, doc.load_idle = load, window:view("", nil, true)
    end
  end
  return parts.answer(ctx, { head = doc, key = "models", src = src,
    make = function(m)
      local md = store:snapshot_model(m, ends or nil)
      if window then md.load = M.load_of(window, md, app.now()) end
      return md
    end, headers = { ["Cache-Control"] = "no-store, private" } })
end

-- The lease as answers show it (no ttl or renewal bookkeeping).
function M.lease_doc(l)
  if not l then return require("cjson").null end
  return { holder = l.holder, host = l.host, pid = l.pid, generation = l.generation,
    acquired_at = l.acquired_at, expires_at = l.expires_at }
end

-- A store refusal of the lease: 409 with who holds it.
local function _lease_refused(serr)
  if serr.code == "lease_held" or serr.code == "lease_lost" then
    return errors.fail(409, serr.code, serr.message, serr.field, { lease = M.lease_doc(serr.lease) })
  end
  return errors.store(serr)
end

local function lease(ctx)
  local req = ctx.body -- checked: the route declares its body (obleth.api.request)
  -- the secret this request gets if it acquires the lease: shown once, kept hashed
  local token = sys.random_hex(32)
  req.token_hash = crypto.sha256_hex(token)
  req.proof = _proof(ctx)
  local res, serr = ctx.app.store:acquire_lease(req, ctx.app.now())
  if not res then return _lease_refused(serr) end
  if res.acquired then
    local prev = res.previous
    ctx.app.log.info("provisioner_lease_acquired", { holder = req.holder, host = req.host, pid = req.pid,
      generation = res.lease.generation, previous_holder = prev and prev.holder or nil,
      previous_host = prev and prev.host or nil, previous_pid = prev and prev.pid or nil })
  end
  -- body_limit: the largest request body this obleth serve takes; a larger report is sent in parts
  -- (docs/managed-spec.md, "A report in parts")
  return 200, { lease = M.lease_doc(res.lease), acquired = res.acquired, ttl = res.lease.ttl,
    token = res.acquired and token or nil, body_limit = ctx.app.body_limit },
    { ["Cache-Control"] = "no-store, private" }
end

local function release(ctx)
  local g = math.tointeger(tonumber(ctx.query.generation)) -- digits (the route declares it)
  if not g then return errors.fail(400, "invalid", "generation: the lease generation to release is required",
    "generation") end
  local released, serr = ctx.app.store:release_lease(g, _proof(ctx), ctx.app.now())
  if released == nil then return errors.store(serr) end
  if released then ctx.app.log.info("provisioner_lease_released", { generation = g }) end
  return 200, { released = released }
end

--- The longest a GET /api/v1/provisioner/wait may wait (seconds).
M.WAIT_MAX = 60

-- A provisioner's wait between passes, cut short when the router asks for a pass (wake on demand).
local function wait(ctx)
  local since = ctx.query.since
  if since ~= nil then
    since = since:match("^%d+$") and math.tointeger(tonumber(since))
    if not since then return errors.fail(400, "invalid", "since: the counter a wait answered", "since") end
  end
  local timeout = ctx.query.timeout
  timeout = timeout and tonumber(timeout)
  if ctx.query.timeout ~= nil and not (timeout and timeout >= 0) then
    return errors.fail(400, "invalid", "timeout: seconds, 0 or more", "timeout")
  end
  local wk = ctx.app.wakeups
  if not wk then return errors.fail(404, "not_found", "no wake-ups in this process") end
  local seq, woken, closed = wk:wait(since, math.min(timeout or 30, M.WAIT_MAX))
  -- obleth serve is stopping: the counter as it is, at once (the provisioner's next call finds it gone)
  if closed and not woken then return 200, { seq = seq, woken = false, why = "shutting_down" } end
  return 200, { seq = seq, woken = woken, why = woken and wk.why or require("cjson").null }
end

local function submits(ctx)
  local req = ctx.body -- checked: the route declares its body (obleth.api.request)
  local res, serr = ctx.app.store:record_submits(req.lease_generation, req.replicas, ctx.app.now(), _proof(ctx))
  if not res then
    if serr.code == "lease_lost" then
      ctx.app.log.warn("provisioner_submit_refused", { generation = req.lease_generation, message = serr.message })
    end
    return _lease_refused(serr)
  end
  -- the recorded replicas, per model, for the event streams
  local seen, changes = {}, {}
  for _, r in ipairs(req.replicas) do
    if not seen[r.model_id] then
      seen[r.model_id] = true
      changes[#changes + 1] = { "replicas", r.model_id }
    end
  end
  ctx.changes = changes
  return 200, res
end

local function report(ctx)
  local rep = ctx.body -- checked: the route declares its body (obleth.api.request)
  rep.lease_proof = _proof(ctx)
  local res, serr = ctx.app.store:apply_report(rep, ctx.app.now())
  if not res then
    if serr.code == "lease_lost" then
      ctx.app.log.warn("provisioner_report_refused", { generation = rep.lease_generation, message = serr.message })
    end
    return _lease_refused(serr)
  end
  if not rep.more and rep.pass.error and rep.pass.error ~= require("cjson").null then
    ctx.app.log.warn("provisioner_pass_failed", { error = rep.pass.error })
  end
  if #res.ignored > 0 then
    ctx.app.log.warn("provisioner_report_ignored", { count = #res.ignored })
  end
  -- what the pass changed, for the event streams: the check-in always, the rest per model
  local changes = {}
  if not rep.more then changes[1] = { "provisioner" } end
  for _, topic in ipairs({ "replicas", "models", "managed", "launches" }) do
    local ids = {}
    for id in pairs(res.changes[topic]) do ids[#ids + 1] = id end
    table.sort(ids)
    for _, id in ipairs(ids) do changes[#changes + 1] = { topic, id } end
  end
  ctx.changes = changes
  res.changes = nil
  return 200, res
end

-- The provisioner's routes answer the admin bearer token only, never a dashboard session: the
-- snapshot carries the Slurm JWT and the Hugging Face token in clear, and no page has a reason to
-- report a pass or take the lease (a script running in the page could, with the cookie).
local function bearer_only(handler)
  return function(ctx)
    if ctx.auth ~= "bearer" then
      return errors.fail(403, "bearer_only",
        "the provisioner's routes need the admin token as a bearer token, not a dashboard session")
    end
    return handler(ctx)
  end
end

M.routes = {
  { "GET", "/api/v1/provisioner/snapshot", snapshot, action = "provisioner", parts = true,
    query = { "since", { "ends", pattern = "^%d+$", rule = "each slot's last job ends to include, 1 to 1000" } },
    summary = "Everything one provisioner pass needs (carries the JWT and the Hugging Face token); with "
      .. "?since=<version>, only the models changed since that version when it can (delta: true); "
      .. "?ends=N: each slot's last N job ends (default 10)" },
  { "POST", "/api/v1/provisioner/report", report, action = "provisioner", body = "ProvisionerReport",
    body_schema = wire.report, body_check = validate.report, changes = { "provisioner" },
    summary = "The outcome of one pass: check-in, replica changes, job outcomes, endpoints, errors; "
      .. "409 lease_lost when its lease_generation is stale" },
  { "POST", "/api/v1/provisioner/lease", lease, action = "provisioner", body = "ProvisionerLease",
    body_schema = wire.lease, body_check = validate.lease_request, changes = { "provisioner" },
    summary = "Acquire or renew the provisioner lease (one provisioner at a time): an acquisition answers the "
      .. "lease token once, a renewal carries it in Obleth-Lease-Token; 409 lease_held names the holder" },
  { "DELETE", "/api/v1/provisioner/lease", release, action = "provisioner",
    query = { { "generation", required = true, pattern = "^%d+$",
    rule = "the lease generation to release is required" } }, changes = { "provisioner" },
    summary = "Give the lease up (a clean stop), so a waiting provisioner takes over at once" },
  { "POST", "/api/v1/provisioner/submits", submits, action = "provisioner", body = "ProvisionerSubmits",
    body_schema = wire.submits, changes = { "replicas" },
    summary = "Record the replicas a provisioner is about to submit; 409 lease_lost unless its lease is live" },
  { "GET", "/api/v1/provisioner/wait", wait, action = "provisioner", query = { "since", "timeout" },
    summary = "Wait between passes: answers {seq, woken, why} when the router asks for a pass after `since` "
      .. "(a request to an autoscaled model with no replica), else after `timeout` s (30, at most 60)" },
}

-- the lease holder's routes take its token (OpenAPI: a header parameter)
local TOKEN_DOC = { { M.TOKEN_HEADER, "the lease token the acquisition answered (the holder's proof)" } }
for _, r in ipairs(M.routes) do
  r[3] = bearer_only(r[3])
  if r[2] ~= "/api/v1/provisioner/snapshot" and r[2] ~= "/api/v1/provisioner/wait" then r.headers = TOKEN_DOC end
end

return M
