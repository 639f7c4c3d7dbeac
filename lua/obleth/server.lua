--- obleth.server — the HTTP application of `obleth serve`: the router, auth,
-- JSON bodies, errors and the request log, around the route modules.
--
-- Route modules (`lua/obleth/api/<area>.lua`) return
--   { routes = { {method, "/api/v1/models/{id}/managed", handler, summary = "...", tag = "..."}, ... } }
-- handler(ctx) returns `status, body_table[, headers]` (encoded as JSON) or
-- `status, "text", headers`. ctx = {req, params = {id = "3"}, query, json (decoded body or nil), app}.
-- Adding a module is one line in M.ROUTE_MODULES.
local json = require "obleth.api.json"
local errors = require "obleth.api.errors"

local M = {}

--- The route modules `obleth serve` loads, in order.
M.ROUTE_MODULES = {
  "obleth.api.models",
  "obleth.api.managed",
  "obleth.api.replicas",
  "obleth.api.settings",
  "obleth.api.provisioner",
  "obleth.api.launches",
  "obleth.api.recipes",
  "obleth.api.hf",
  "obleth.api.launch",
  "obleth.api.keys",
  "obleth.api.openapi",
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
        segs = segs, module = name, raw_body = r.raw_body, schemas = mod.schemas }
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
---  clock: function|nil, router: table|nil}  router: options for obleth.router.new (e.g. transport)
function M.new(opts)
  if type(opts.admin_token) ~= "string" or opts.admin_token == "" then error("server.new: admin_token", 2) end
  local log = opts.log or require("obleth.log")
  log.add_secret(opts.admin_token)
  local app = setmetatable({
    store = opts.store, log = log, routes = M.load_routes(opts.modules), inflight = 0, draining = false,
    cache = {}, _token = opts.admin_token, _router_opts = opts.router,
    now = opts.now or function() return require("obleth.loop").now() end,
    clock = opts.clock or function() return require("obleth.loop").monotonic() end,
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
      qos = nn(d.qos), hf_token = nn(d.hf_token),
      port_range = json.array(d.port_range or { 20000, 20999 }), environment = d.environment or {},
    },
  }
end

--- Start shutting down: new requests get 503 shutting_down, in Lua and in the router's fast path.
function App:drain()
  self.draining = true
  if self.router then self.router:drain() end
end

--- Requests being answered now (the Management API's, the router's and its fast path's).
function App:busy()
  return self.inflight + (self.router and self.router:fast_in_flight() or 0)
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
---@return table|nil conn, table|nil err {kind, message}
function App:slurm_connect(over)
  local s = self:slurm_settings()
  for k, v in pairs(over or {}) do s[k] = v end
  if not s.url and not s.socket then
    return nil, { kind = "not_configured", message = "no slurmrestd connection is set up (PUT /api/v1/settings/slurm)" }
  end
  -- a renewable token (token_source key_file / command) is had on this host, like the provisioner's
  local token = s.token
  if s.token_source ~= "static" and not (over and over.token) then
    local terr
    token, terr = self:slurm_tokens():token(s)
    if not token then return nil, { kind = "auth", message = terr.message, field = terr.field } end
  end
  local slurm = require "obleth.slurm"
  return slurm.connect { url = s.url, socket = s.socket, user = s.user, token = token, version = s.api_version,
    timeout = s.timeout, verify = s.verify, ca_file = s.ca_file }
end

--- This process's Slurm token source (obleth.slurm.token_source), made on first use.
function App:slurm_tokens()
  if not self._tokens then self._tokens = require("obleth.slurm.token_source").new { log = self.log } end
  return self._tokens
end

local function _reply(status, body, headers)
  headers = headers or {}
  if type(body) == "table" then
    headers["Content-Type"] = headers["Content-Type"] or "application/json"
    body = json.encode(body)
  end
  headers["Cache-Control"] = headers["Cache-Control"] or "no-store"
  return { status = status, headers = headers, body = body or "" }
end

function App:_authorized(req)
  local h = req.headers and req.headers["authorization"]
  if type(h) ~= "string" then return false end
  local tok = h:match("^[Bb]earer%s+(%S+)%s*$")
  if not tok then return false end
  return require("obleth.sys").consteq(tok, self._token)
end

function App:_dispatch(req)
  if self.draining then
    return _reply(errors.fail(503, "shutting_down", "the server is shutting down"))
  end
  local path = req.path or "/"
  -- every route outside the router (/v1, /metrics) needs the admin token
  if not self:_authorized(req) then
    return _reply(401, { error = { code = "unauthorized",
      message = "this route needs the admin token: Authorization: Bearer <OBLETH_ADMIN_TOKEN>" } },
      { ["WWW-Authenticate"] = 'Bearer realm="obleth"' })
  end
  local route, params, allowed = M.route(self.routes, req.method, path)
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
    local v, err = json.decode(req.body)
    if v == nil then
      local at = err and tonumber(err:match("at character (%d+)"))
      return _reply(errors.fail(400, "bad_json", "the body is not valid JSON: " .. tostring(err), nil,
        { at = at }))
    end
    body = v
  end
  local ctx = { req = req, params = params, query = req.query or {}, json = body, app = self, route = route }
  local ok, status, rbody, headers = xpcall(route.handler, debug.traceback, ctx)
  if not ok then
    self.log.error("api_handler_error", { method = req.method, path = path, error = tostring(status) })
    return _reply(errors.fail(500, "internal", "internal server error (see the server log)"))
  end
  if type(status) ~= "number" then
    self.log.error("api_handler_error", { method = req.method, path = path, error = "handler returned no status" })
    return _reply(errors.fail(500, "internal", "internal server error (see the server log)"))
  end
  return _reply(status, rbody, headers)
end

--- Handle one request (the http.server handler).
---@param req table
---@return table {status, headers, body}
function App:handle(req)
  local t0 = self.clock()
  self.inflight = self.inflight + 1
  local ok, res = pcall(self._dispatch, self, req)
  self.inflight = self.inflight - 1
  if not ok then
    self.log.error("api_handler_error", { method = req.method, path = req.path, error = tostring(res) })
    res = _reply(errors.fail(500, "internal", "internal server error (see the server log)"))
  end
  self.log.info("http_request", { method = req.method, path = req.path, status = res.status,
    ms = math.floor((self.clock() - t0) * 100000 + 0.5) / 100 })
  return res
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
      return _reply(errors.fail(400, "bad_path", msg))
    end
    if to_router then return router:serve(req, res) end
    local out = self:handle(req)
    -- every store write comes through a write request: the router reads afresh (not after
    -- a 401: a request without the admin token wrote nothing, and must not be a way to
    -- keep the router's cache and its fast path cold)
    if req.method ~= "GET" and req.method ~= "HEAD" and out.status ~= 401 then router:invalidate() end
    return out
  end
end

--- An integer path parameter, or nil.
function M.int_param(ctx, name)
  local s = ctx.params[name or "id"]
  local n = s and s:match("^%d+$") and math.tointeger(tonumber(s))
  if n and n >= 1 then return n end
  return nil
end

return M
