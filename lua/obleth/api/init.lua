--- obleth.api — the HTTP application of `obleth serve`: the router, auth,
-- JSON bodies, errors and the request log, around the route modules.
--
-- Route modules (`lua/obleth/api/<area>.lua`) return
--   { routes = { {method, "/api/v1/models/{id}/managed", handler, summary = "...", tag = "..."}, ... } }
-- handler(ctx) returns `status, body_table[, headers]` (encoded as JSON) or
-- `status, "text", headers`. ctx = {req, res, params = {id = "3"}, query, json (decoded body or nil), app,
-- auth = "bearer"|"session", session_id (when signed in by cookie)}.
-- Adding a module is one line in M.ROUTE_MODULES.
--
-- A route's optional fields: `changes` = the event topics (obleth.web.events) a 2xx answer to it
-- published (every route that writes declares them; the handler may set ctx.changes to
-- {{topic, model_id}, ...} instead, and ctx.model_id); `public = true`: no credentials needed;
-- `stream = true`: the handler answers through ctx.res itself (an event stream: not counted among the
-- requests a shutdown waits for); `parts = true`: a large answer the handler sends through ctx.res in
-- parts (obleth.api.parts), counted like any other. `action`: what the route does, as the access
-- policy names it (obleth.policy.access: "read", "deployments.launch", "keys.manage", ...); a GET
-- route without one is "read", and every other route that is not public must declare one.
local json = require "obleth.util.json"
local errors = require "obleth.api.errors"
local api_params = require "obleth.api.params"
local access = require "obleth.api.access"

local M = {}

--- The route modules `obleth serve` loads, in order.
M.ROUTE_MODULES = {
  "obleth.api.models",
  "obleth.api.managed",
  "obleth.api.replicas",
  "obleth.api.replica_logs",
  "obleth.api.settings",
  "obleth.api.provisioner",
  "obleth.api.recipes",
  "obleth.api.hf",
  "obleth.api.deployments",
  "obleth.api.keys",
  "obleth.api.session",
  "obleth.api.events",
  "obleth.api.openapi",
  "obleth.api.docs",
}

M.METHODS = { GET = true, POST = true, PUT = true, PATCH = true, DELETE = true }

local function _segments(path)
  local segs = {}
  for s in path:gmatch("[^/]+") do segs[#segs + 1] = s end
  return segs
end

local function _unescape(s)
  return (s:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

--- Load route modules into one table of compiled routes.
--- Raises on a malformed route or a duplicate method + path (a programming error).
---@param modules string[]|nil default M.ROUTE_MODULES
---@return table[] routes {method, path, handler, summary, segs, module}
function M.load_routes(modules)
  local routes, seen = {}, {}
  for _, name in ipairs(modules or M.ROUTE_MODULES) do
    local mod = require(name)
    if type(mod) ~= "table" or type(mod.routes) ~= "table" then
      error(("route module %s does not return {routes = {...}}"):format(name), 2)
    end
    for i, r in ipairs(mod.routes) do
      local method, path, handler = r[1] or r.method, r[2] or r.path, r[3] or r.handler
      if not M.METHODS[method] or type(path) ~= "string" or path:sub(1, 1) ~= "/" or type(handler) ~= "function" then
        error(("route module %s: route %d is not {method, path, handler}"):format(name, i), 2)
      end
      local action = r.action or ((method == "GET" or method == "HEAD") and "read" or nil)
      if not action and not r.public then
        error(("route module %s: %s %s declares no action (obleth.policy.access)"):format(name, method, path), 2)
      end
      local key = method .. " " .. path:gsub("{[^}]+}", "{}")
      if seen[key] then error(("route %s %s is registered twice (%s and %s)"):format(method, path, seen[key], name), 2) end
      seen[key] = name
      local segs = {}
      for _, s in ipairs(_segments(path)) do
        local p = s:match("^{([%w_]+)}$")
        segs[#segs + 1] = p and { param = p } or { lit = s }
      end
      routes[#routes + 1] = { method = method, path = path, handler = handler, summary = r.summary,
        description = r.description, body = r.body, query = r.query, tag = r.tag or name:match("[^.]+$"),
        segs = segs, module = name, raw_body = r.raw_body, schemas = mod.schemas, changes = r.changes,
        public = r.public, stream = r.stream, parts = r.parts, headers = r.headers, action = action }
    end
  end
  return routes
end

-- Match path against a route's segments; returns params or nil, and a specificity key.
local function _match(route, segs)
  if #route.segs ~= #segs then return nil end
  local params, spec = {}, {}
  for i, s in ipairs(route.segs) do
    if s.lit then
      if s.lit ~= segs[i] then return nil end
      spec[i] = "1"
    else
      params[s.param] = _unescape(segs[i])
      spec[i] = "0"
    end
  end
  return params, table.concat(spec)
end

--- Find the route for method + path.
---@return table|nil route, table|nil params, string[]|nil allowed (when the path exists but not the method)
function M.route(routes, method, path)
  local segs = _segments(path)
  local best, best_params, best_spec
  local by_method = {}
  for _, r in ipairs(routes) do
    local params, spec = _match(r, segs)
    if params then
      local cur = by_method[r.method]
      if not cur or spec > cur.spec then by_method[r.method] = { route = r, params = params, spec = spec } end
    end
  end
  local want = method == "HEAD" and "GET" or method
  local hit = by_method[want]
  if hit then best, best_params, best_spec = hit.route, hit.params, hit.spec end
  -- a more specific path registered for another method wins over a generic one for this method
  if best then
    for _, h in pairs(by_method) do
      if h.spec > best_spec then best = nil break end
    end
  end
  if best then return best, best_params end
  if not next(by_method) then return nil end
  local top = ""
  for _, h in pairs(by_method) do if h.spec > top then top = h.spec end end
  local allowed = {}
  for m, h in pairs(by_method) do if h.spec == top then allowed[#allowed + 1] = m end end
  if by_method.GET and by_method.GET.spec == top then allowed[#allowed + 1] = "HEAD" end
  table.sort(allowed)
  return nil, nil, allowed
end

---------------------------------------------------------------------------
-- the application
---------------------------------------------------------------------------

local App = {}
App.__index = App

--- Create the application.
---@param opts {store: table, admin_token: string, log: table|nil, modules: string[]|nil, now: function|nil,
---  clock: function|nil, router: table|nil, web_dir: string|nil, public_url: string|nil,
---  max_streams: integer|nil}  router: options for obleth.router.new (e.g. transport);
---  web_dir: the built dashboard (obleth.web.default_dir()); public_url: the origin the dashboard is
---  reached at when a proxy in front rewrites Host (its scheme https makes the session cookie Secure);
---  auth_proxy: the trusted proxy (obleth.api.access.proxy_from_env); access_policy: the access policy
---  module to use (default: the policy set's "access", policy.d overrides included)
function M.new(opts)
  if type(opts.admin_token) ~= "string" or opts.admin_token == "" then error("server.new: admin_token", 2) end
  local log = opts.log or require("obleth.log")
  log.add_secret(opts.admin_token)
  local now = opts.now or function() return require("obleth.loop").now() end
  local public_origin
  if opts.public_url then
    public_origin = M.origin_of(opts.public_url)
    if not public_origin then error("server.new: public_url must be http(s)://host[:port]", 2) end
  end
  local app = setmetatable({
    store = opts.store, log = log, routes = M.load_routes(opts.modules), inflight = 0, draining = false,
    cache = {}, _token = opts.admin_token, _router_opts = opts.router, now = now,
    clock = opts.clock or function() return require("obleth.loop").monotonic() end,
    sessions = require("obleth.web.sessions").new { now = now },
    events = require("obleth.web.events").new { max = opts.max_streams },
    web = require("obleth.web").new { dir = opts.web_dir or require("obleth.web").default_dir() },
    public_origin = public_origin, auth_proxy = opts.auth_proxy, _access_policy = opts.access_policy,
  }, App)
  app:register_secrets()
  return app
end

--- The stored Slurm settings with defaults filled in (secrets in clear); registers the
--- secrets with the log so they never print.
function App:slurm_settings()
  local s = self.store:get_settings("slurm") or {}
  self:register_secrets(s)
  local d = s.defaults or {}
  local function nn(v) if v == json.null then return nil end return v end
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

--- Start shutting down: new requests get 503 shutting_down; event streams end.
function App:drain()
  self.draining = true
  self.events:close_all()
end

--- "scheme://host[:port]" of an absolute http(s) URL (lowercase scheme and host), or nil.
function M.origin_of(url)
  if type(url) ~= "string" then return nil end
  local scheme, host = url:match("^(https?)://([^/?#]+)")
  if not scheme or host:find("@", 1, true) then return nil end
  return scheme:lower() .. "://" .. host:lower()
end

--- Make the stored (or given) settings' secrets unprintable in the log.
function App:register_secrets(s)
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
---@return table|nil conn, table|nil err {code, message, field?} (docs/errors.md)
function App:slurm_connect(over)
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
function App:slurm_tokens()
  if not self._tokens then
    local ts = require "obleth.slurm.token_source"
    -- the key file may never be this server's own database or under its state directory
    self._tokens = ts.new { log = self.log, protected = ts.protected_paths(self.store and self.store.path) }
  end
  return self._tokens
end

local function _reply(status, body, headers)
  headers = headers or {}
  if type(body) == "table" then
    headers["Content-Type"] = headers["Content-Type"] or "application/json"
    body = json.encode(body)
  end
  headers["Cache-Control"] = headers["Cache-Control"] or "no-store"
  headers["X-Content-Type-Options"] = "nosniff"
  headers["Referrer-Policy"] = "no-referrer"
  return { status = status, headers = headers, body = body or "" }
end

-- Seconds between looks at policy.d/access.lua (a changed file takes effect within this).
local POLICY_RELOAD = 2

--- The access policy in force (obleth.policy.access, or its policy.d override).
function App:access_policy()
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

--- Who is asking, with the role the access policy gives them, or nil.
---@return table|nil identity (obleth.api.access), string|nil session_id
function App:identity(req)
  local how, sid = self:_auth(req)
  local ident
  if how then
    ident = { admin = true, via = how == "bearer" and "token" or "session", groups = {} }
  elseif self.auth_proxy and not (req.headers or {})["authorization"] then
    ident = access.from_proxy(self.auth_proxy, req, self.log)
  end
  if not ident then return nil end
  return access.resolve(ident, self:access_policy()), sid
end

--- Who is asking: "bearer" (the admin token), "session" (a live session cookie) or nil.
---@return string|nil how, string|nil session_id
function App:_auth(req)
  local hs = req.headers or {}
  local h = hs["authorization"]
  if type(h) == "string" then
    local tok = h:match("^[Bb]earer%s+(%S+)%s*$")
    if tok and require("obleth.sys").consteq(tok, self._token) then return "bearer" end
    return nil -- a wrong Authorization header is not rescued by a cookie
  end
  local sid = require("obleth.web.sessions").cookie(hs["cookie"], require("obleth.web.sessions").COOKIE)
  if sid and self.sessions:check(sid, self._token) then return "session", sid end
  return nil
end

--- The origin the request was sent to: scheme (X-Forwarded-Proto, else http) :// Host.
function M.request_origin(req)
  local hs = req.headers or {}
  local proto = (hs["x-forwarded-proto"] or "http"):match("^%s*([%a]+)") or "http"
  local host = hs["host"]
  if not host then return nil end
  return proto:lower() .. "://" .. host:lower()
end

--- True when a session cookie set for this request should be Secure: the dashboard is
--- reached over https (--public-url https://..., or a proxy's X-Forwarded-Proto: https).
function App:secure_cookie(req)
  if self.public_origin and self.public_origin:sub(1, 6) == "https:" then return true end
  local p = (req.headers or {})["x-forwarded-proto"]
  return type(p) == "string" and p:lower():match("^%s*https") ~= nil
end

-- A write authenticated by the session cookie must come from the dashboard itself.
function App:_csrf_ok(req)
  local hs = req.headers or {}
  if hs["x-requested-with"] ~= "obleth" then
    return false, "a write with the session cookie needs the header X-Requested-With: obleth"
  end
  local site = hs["sec-fetch-site"]
  if site and site ~= "same-origin" and site ~= "none" then
    return false, "a write with the session cookie must come from this server's own pages"
  end
  local origin = hs["origin"]
  if origin then
    origin = origin:lower()
    if origin ~= M.request_origin(req) and origin ~= self.public_origin then
      return false, "a write with the session cookie must come from this server's own origin"
    end
  end
  return true
end

-- Publish the changes a successful write made; true when there were any.
function App:_publish(route, ctx, rbody)
  local list = ctx.changes
  if not list then
    if not route.changes then return false end
    local mid = ctx.model_id
    if mid == nil and route.path:match("^/api/v1/models/{id}") then mid = api_params.int_param(ctx, "id") end
    if mid == nil and type(rbody) == "table" and math.type(rbody.model_id) == "integer" then mid = rbody.model_id end
    list = {}
    for _, t in ipairs(route.changes) do list[#list + 1] = { t, mid } end
  end
  for _, c in ipairs(list) do self.events:publish(c[1], c[2]) end
  return #list > 0
end

function App:_dispatch(req, res, found)
  if self.draining then
    return _reply(errors.fail(503, "shutting_down", "the server is shutting down"))
  end
  local path = req.path or "/"
  local route, params, allowed = found[1], found[2], found[3]
  -- every /api/ route needs someone (the admin token, a session, or a user a trusted proxy vouches
  -- for), except the sign-in ones; what they may do is the access policy's
  local ident, sid = self:identity(req)
  if not ident and not (route and route.public) then
    return _reply(401, { error = { code = "unauthorized",
      message = "this route needs the admin token: Authorization: Bearer <OBLETH_ADMIN_TOKEN>, "
        .. "or the dashboard's session (sign in on /signin)" } },
      { ["WWW-Authenticate"] = 'Bearer realm="obleth"' })
  end
  local auth = ident and (ident.via == "token" and "bearer" or ident.via) or nil
  if (auth == "session" or auth == "proxy") and req.method ~= "GET" and req.method ~= "HEAD" then
    local ok, why = self:_csrf_ok(req)
    if not ok then return _reply(errors.fail(403, "csrf", why)) end
  end
  if ident and route and not route.public then
    local pol = self:access_policy()
    local ok, needs = pol.allows(ident.role, route.action, pol.DEFAULTS)
    if not ok then
      self.log.info("access_refused", { actor = ident.actor, role = ident.role, action = route.action,
        needs = needs, method = req.method, path = path })
      return _reply(access.refusal(ident, route.action, needs))
    end
  end
  if not route then
    if allowed then
      return _reply(405, { error = { code = "method_not_allowed",
        message = ("%s is not allowed on %s (allowed: %s)"):format(req.method, path, table.concat(allowed, ", ")) } },
        { Allow = table.concat(allowed, ", ") })
    end
    return _reply(errors.fail(404, "no_route", ("no route %s %s"):format(req.method, path)))
  end
  local body
  if not route.raw_body and req.body and req.body:find("%S") and req.method ~= "GET" and req.method ~= "HEAD" then
    local v, err, key = json.decode(req.body)
    if v == nil then
      local at = err and tonumber(err:match("at character (%d+)"))
      if key then
        return _reply(errors.fail(400, "duplicate_key", "the body names a key twice: " .. tostring(err), nil,
          { at = at, key = key }))
      end
      return _reply(errors.fail(400, "bad_json", "the body is not valid JSON: " .. tostring(err), nil,
        { at = at }))
    end
    body = v
  end
  local ctx = { req = req, res = res, params = params, query = req.query or {}, json = body, app = self,
    route = route, auth = auth, session_id = sid, identity = ident, actor = ident and ident.actor }
  req.actor = ctx.actor
  local ok, status, rbody, headers = xpcall(route.handler, debug.traceback, ctx)
  if not ok then
    self.log.error("api_handler_error", { method = req.method, path = path, error = tostring(status) })
    return _reply(errors.fail(500, "internal", "internal server error (see the server log)"))
  end
  if (route.stream or route.parts) and res and res:sent() then
    return type(status) == "table" and status or { status = 200, streamed = true }
  end
  if type(status) ~= "number" then
    self.log.error("api_handler_error", { method = req.method, path = path, error = "handler returned no status" })
    return _reply(errors.fail(500, "internal", "internal server error (see the server log)"))
  end
  local wrote = status >= 200 and status < 300 and req.method ~= "GET" and req.method ~= "HEAD"
    and self:_publish(route, ctx, rbody)
  local out = _reply(status, rbody, headers)
  out.wrote = wrote or nil
  return out
end

--- Handle one request (the http.server handler).
---@param req table
---@param res table|nil the response object (for streaming routes)
---@return table {status, headers, body}
function App:handle(req, res)
  local t0 = self.clock()
  local found = table.pack(M.route(self.routes, req.method, req.path or "/"))
  -- an event stream lasts as long as its client: it does not hold up a shutdown
  local counted = not (found[1] and found[1].stream)
  if counted then self.inflight = self.inflight + 1 end
  local ok, out = pcall(self._dispatch, self, req, res, found)
  if counted then self.inflight = self.inflight - 1 end
  if not ok then
    self.log.error("api_handler_error", { method = req.method, path = req.path, error = tostring(out) })
    out = _reply(errors.fail(500, "internal", "internal server error (see the server log)"))
  end
  self.log.info("http_request", { method = req.method, path = req.path, status = out.status, actor = req.actor,
    ms = math.floor((self.clock() - t0) * 100000 + 0.5) / 100 })
  return out
end

--- A function for http.server{handler = ...}: `/v1/...` and `/metrics` go to the
--- OpenAI-compatible router (obleth.router, which may stream through res), the rest here.
--- True when path is canonical: it starts with "/", and no segment is empty,
--- "." or ".." (percent-encoded ones included) or hides a "/" or "\".
--- Anything else is refused before routing, so "//api/..." cannot dodge the
--- admin check and "/v1/../health" cannot reach an engine path outside /v1.
---@param path string
---@return boolean
function M.canonical_path(path)
  if type(path) ~= "string" or path:sub(1, 1) ~= "/" then return false end
  if path == "/" then return true end
  -- the common case, decided by one scan: no "%", ".", "\\" or empty segment
  if not path:find("[%%%.\\%z]") and not path:find("//", 1, true) then return true end
  local body = path:sub(2)
  if body:sub(-1) == "/" then body = body:sub(1, -2) end -- one trailing slash is fine
  for seg in (body .. "/"):gmatch("([^/]*)/") do
    local d = seg:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end)
    if seg == "" or d == "." or d == ".." or d:find("[/\\%z]") then return false end
  end
  return true
end

function App:handler()
  local ropts = { app = self, admin_token = self._token }
  for k, v in pairs(self._router_opts or {}) do ropts[k] = v end
  local router = require("obleth.router").new(ropts)
  self.router = router
  return function(req, res)
    local p = req.path or "/"
    local to_router = p == "/v1" or p:sub(1, 4) == "/v1/" or p == "/metrics" or p == "/metrics/"
    if not M.canonical_path(p) then
      local msg = "the path must not have empty, '.' or '..' segments, nor an encoded '/' or '\\'"
      self.log.info("http_request", { method = req.method, path = p, status = 400, code = "bad_path" })
      if to_router then -- a client of the OpenAI API gets its error shape
        res:send(400, { ["Content-Type"] = "application/json" },
          require("obleth.router").error_body(msg, "invalid_request_error", nil, "bad_path"))
        return
      end
      local out = _reply(errors.fail(400, "bad_path", msg))
      -- outside /api/ this is the dashboard's ground: its headers too
      if p:sub(1, 5) ~= "/api/" then
        for k, v in pairs(require("obleth.web").HEADERS) do out.headers[k] = v end
      end
      return out
    end
    if to_router then return router:serve(req, res) end
    if p ~= "/api" and p:sub(1, 5) ~= "/api/" then
      local t0 = self.clock()
      local out = self.draining and require("obleth.web").text(503, "the server is shutting down")
        or self.web:serve(req)
      self.log.info("http_request", { method = req.method, path = p, status = out.status,
        ms = math.floor((self.clock() - t0) * 100000 + 0.5) / 100 })
      return out
    end
    local out = self:handle(req, res)
    -- every store write comes through a write request: the router reads afresh after one
    -- that changed something (not after a refused one, nor a sign-in: a request that wrote
    -- nothing must not be a way to keep the router's cache cold)
    if out.wrote then router:invalidate() end
    return out
  end
end

return M
