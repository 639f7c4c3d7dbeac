--- obleth.serve.context — what the parts of `obleth serve` share, made once by the process root
-- (obleth.serve) and handed to the API, the router and the dashboard's files. None of them builds
-- it or reaches into another part through it.
--
-- Fields: store (obleth.store), log (obleth.log), now() (epoch seconds), clock() (monotonic
-- seconds), draining (true once shutdown began), inflight (requests being answered that a shutdown
-- waits for), sessions (obleth.api.sessions), events (obleth.api.changes), metrics (the process's
-- Prometheus registry, obleth.util.prometheus), load (the per-model load window the router counts
-- into and the provisioner's snapshot reads, obleth.router.load; set by obleth.serve), load_history (each
-- model's load and replicas per minute, obleth.deployment.load_history; set by obleth.serve), wakeups (the
-- router's requests for a provisioner pass now, obleth.router.wakeups; set by obleth.serve),
-- public_origin ("scheme://host[:port]" or nil), cache (per-process memo tables of the API's
-- handlers, by name), _token (the admin token).
-- Methods: slurm_settings(), slurm_connect(over), slurm_tokens(), register_secrets(s),
-- secure_cookie(req), flush_key_usage(), access_policy(), drain(), share_changes(list),
-- follow_changes(on_remote). auth_proxy: the trusted proxy that names users
-- (obleth.api.access.proxy_from_env; nil: none). ldap: the directory users sign in with
-- (obleth.api.ldap.from_env; nil: none).
local json = require "obleth.util.json"
local cjson = require "cjson"

local M = {}

local Context = {}
Context.__index = Context

--- "scheme://host[:port]" of an absolute http(s) URL (lowercase scheme and host), or nil.
---@param url string|nil
---@return string|nil
function M.origin_of(url)
  if type(url) ~= "string" then return nil end
  local scheme, host = url:match("^(https?)://([^/?#]+)")
  if not scheme or host:find("@", 1, true) then return nil end
  return scheme:lower() .. "://" .. host:lower()
end

--- Make the context. Raises on a missing admin token or a public_url that is not http(s) (the
--- command line checks both first).
---@param opts {store: table, admin_token: string, log: table|nil, now: function|nil, clock: function|nil,
---  public_url: string|nil, max_streams: integer|nil}  public_url: the origin the dashboard is reached
---  at when a proxy in front rewrites Host (its scheme https makes the session cookie Secure);
---  max_streams: live-update streams at most (obleth.api.changes); auth_proxy: the trusted proxy
---  (obleth.api.access.proxy_from_env); ldap: the directory users sign in with (obleth.api.ldap.from_env);
---  access_policy: the access policy module to use (default: the
---  policy set's "access", policy.d overrides included)
---@return table context
--- The largest change notice sent with its model ids (bytes of JSON); a larger one is sent as its
--- topics only. PostgreSQL's NOTIFY refuses payloads of 8000 bytes or more (obleth.store.base).
M.NOTICE_MAX = 7900

function M.new(opts)
  if type(opts.admin_token) ~= "string" or opts.admin_token == "" then error("serve context: admin_token", 2) end
  local log = opts.log or require("obleth.log")
  log.add_secret(opts.admin_token)
  if opts.ldap and opts.ldap.bind_password and #opts.ldap.bind_password >= 4 then
    log.add_secret(opts.ldap.bind_password)
  end
  local now = opts.now or function() return require("obleth.loop").now() end
  local public_origin
  if opts.public_url then
    public_origin = M.origin_of(opts.public_url)
    if not public_origin then error("serve context: public_url must be http(s)://host[:port]", 2) end
  end
  local ctx = setmetatable({
    store = opts.store, log = log, now = now,
    clock = opts.clock or function() return require("obleth.loop").monotonic() end,
    draining = false, inflight = 0, cache = {}, _token = opts.admin_token, public_origin = public_origin,
    -- a store shared by several instances (PostgreSQL) keeps the sessions: valid on every one
    sessions = require("obleth.api.sessions").new { now = now, store = opts.store and opts.store.shared and opts.store },
    events = require("obleth.api.changes").new { max = opts.max_streams },
    metrics = require("obleth.util.prometheus").new(),
    auth_proxy = opts.auth_proxy, _access_policy = opts.access_policy, ldap = opts.ldap,
    -- this instance, among several sharing the store: its own change notices are not news to it
    instance_tag = require("obleth.sys").random_hex(8),
  }, Context)
  ctx:register_secrets()
  -- the policies are loaded now, not by the first request (which may come when descriptors are short)
  local ok, perr = pcall(ctx.access_policy, ctx)
  if not ok then log.warn("policy_load_failed", { error = tostring(perr) }) end
  return ctx
end

-- Seconds between looks at policy.d/access.lua (a changed file takes effect within this).
local POLICY_RELOAD = 2

--- The access policy in force (obleth.policy.access, or its policy.d override).
function Context:access_policy()
  if self._access_policy then return self._access_policy end
  local policy = require "obleth.policy"
  local t = self.clock()
  if not self._policy_checked or t - self._policy_checked >= POLICY_RELOAD then
    self._policy_checked = t
    local ok, perr = pcall(policy.reload)
    if not ok then self.log.warn("policy_reload_failed", { error = tostring(perr) }) end
  end
  return policy.get("access")
end

--- The stored Slurm settings with defaults filled in (secrets in clear); registers the
--- secrets with the log so they never print.
function Context:slurm_settings()
  local s = self.store:get_settings("slurm") or {}
  self:register_secrets(s)
  local d = s.defaults or {}
  local nn = json.nonnull
  return {
    enabled = s.enabled == true, url = nn(s.url), socket = nn(s.socket), user = nn(s.user), token = nn(s.token),
    verify = s.verify ~= false, ca_file = nn(s.ca_file), api_version = nn(s.api_version) or "auto",
    timeout = nn(s.timeout) or 10, updated_at = s.updated_at,
    token_source = nn(s.token_source) or "static", token_key_file = nn(s.token_key_file),
    token_command = nn(s.token_command), token_lifespan = nn(s.token_lifespan),
    defaults = {
      model_cache_dir = nn(d.model_cache_dir), image_dir = nn(d.image_dir), log_dir = nn(d.log_dir),
      modules = json.array(d.modules or {}), partition = nn(d.partition), account = nn(d.account),
      qos = nn(d.qos), hf_token = nn(d.hf_token), hf_token_path = nn(d.hf_token_path),
      port_range = json.array(d.port_range or { 20000, 20999 }), environment = d.environment or {},
      user_groups = nn(d.user_groups), enforce_part_limits = nn(d.enforce_part_limits),
    },
  }
end

--- Make the stored (or given) settings' secrets unprintable in the log.
---@param s table|nil the Slurm settings (default: the stored ones)
function Context:register_secrets(s)
  if not s then
    local ok, got = pcall(self.store.get_settings, self.store, "slurm")
    s = ok and got or nil
  end
  if type(s) ~= "table" then return end
  if type(s.token) == "string" and #s.token >= 4 then self.log.add_secret(s.token) end
  local d = s.defaults
  if type(d) == "table" and type(d.hf_token) == "string" and #d.hf_token >= 4 then self.log.add_secret(d.hf_token) end
end

--- Connect to slurmrestd with the saved settings, overridden by `over` (fields of the connection).
---@param over table|nil
---@return table|nil conn, table|nil err {code, message, field?} (docs/errors.md)
function Context:slurm_connect(over)
  local s = self:slurm_settings()
  for k, v in pairs(over or {}) do s[k] = v end
  if not s.url and not s.socket then
    return nil, { code = "not_configured", message = "no slurmrestd connection is set up (PUT /api/v1/settings/slurm)" }
  end
  -- a renewable token (token_source key_file / command) is had on this host, like the provisioner's
  local token = s.token
  if s.token_source ~= "static" and (over == nil or over.token == nil) then -- over.token false: none
    local terr
    token, terr = self:slurm_tokens():token(s)
    if not token then return nil, { code = "auth", message = terr.message, field = terr.field } end
  end
  local slurm = require "obleth.slurm"
  return slurm.connect { url = s.url, socket = s.socket, user = s.user, token = token or nil, version = s.api_version,
    timeout = s.timeout, verify = s.verify, ca_file = s.ca_file }
end

--- This process's Slurm token source (obleth.slurm.token_source), made on first use.
function Context:slurm_tokens()
  if not self._tokens then
    local ts = require "obleth.slurm.token_source"
    -- the key file may never be this server's own database or under its state directory
    self._tokens = ts.new { log = self.log, protected = ts.protected_paths(self.store and self.store.path) }
  end
  return self._tokens
end

--- True when a session cookie set for this request should be Secure: the dashboard is
--- reached over https (--public-url https://..., or a proxy's X-Forwarded-Proto: https).
function Context:secure_cookie(req)
  if self.public_origin and self.public_origin:sub(1, 6) == "https:" then return true end
  local p = (req.headers or {})["x-forwarded-proto"]
  return type(p) == "string" and p:lower():match("^%s*https") ~= nil
end

--- Write the client keys' usage the router counted and has not written yet (obleth.serve hands the
--- router's writer to the context; without one there is nothing to write).
---@return boolean|nil ok, table|nil err
function Context:flush_key_usage()
  if self._flush_key_usage then return self._flush_key_usage() end
  return true
end

--- Start shutting down: new requests get 503 shutting_down; event streams end; the provisioner's long
--- polls (GET /api/v1/provisioner/wait) are answered and the requests the router holds for a model at
--- zero get 503 shutting_down, at once (the wake-ups close).
function Context:drain()
  self.draining = true
  self.events:close_all()
  if self.wakeups then self.wakeups:close() end
end

--- Tell the other instances sharing the store (PostgreSQL) about changes this one published to its
--- event streams, {{topic, model_id|nil}, ...}, in a task of its own (the reply does not wait).
--- A no-op on a store nobody shares.
function Context:share_changes(list)
  if not (self.store and self.store.shared) or #list == 0 then return end
  local changes = {}
  for i, c in ipairs(list) do changes[i] = { c[1], c[2] or cjson.null } end
  local payload = cjson.encode({ from = self.instance_tag, changes = changes })
  if #payload > M.NOTICE_MAX then
    -- PostgreSQL refuses a NOTIFY payload of 8000 bytes or more: a pass touching many models is
    -- shared as its topics without ids (the others publish each topic for every model)
    local seen, topics = {}, {}
    for _, c in ipairs(list) do
      if not seen[c[1]] then seen[c[1]] = true; topics[#topics + 1] = c[1] end
    end
    table.sort(topics)
    payload = cjson.encode({ from = self.instance_tag, topics = topics })
  end
  require("obleth.loop").spawn(function()
    local ok, err = self.store:notify_changes(payload)
    if not ok then self.log.warn("changes_not_shared", { error = err and err.message }) end
  end)
end

--- Follow the changes the other instances sharing the store make: they reach this one's event
--- streams, then on_remote() runs (obleth.serve: the router reads afresh). After a lost database
--- connection came back, every topic is published (anything may have changed meanwhile).
--- Returns a handle with close(), or nil on a store nobody shares.
---@param on_remote function|nil
function Context:follow_changes(on_remote)
  if not (self.store and self.store.shared) then return nil end
  local topics = require("obleth.api.changes").TOPICS
  return self.store:listen_changes(function(payload)
    local ok, doc = pcall(cjson.decode, payload or "null")
    if payload and (not ok or type(doc) ~= "table" or doc.from == self.instance_tag) then return end
    if payload and type(doc.topics) == "table" then -- a pass too big for ids: each topic, every model
      for _, t in ipairs(doc.topics) do
        if topics[t] then self.events:publish(t) end
      end
    elseif payload then
      for _, c in ipairs(type(doc.changes) == "table" and doc.changes or {}) do
        if type(c) == "table" and topics[c[1]] then self.events:publish(c[1], math.tointeger(c[2])) end
      end
    else
      for topic in pairs(topics) do self.events:publish(topic) end
    end
    if on_remote then on_remote() end
  end)
end

return M
