--- obleth.api — the Management API of `obleth serve` (/api/...): routing, auth, JSON bodies,
-- errors and the request log, around the route modules. The process root (obleth.serve) makes
-- it with the serve context (obleth.serve.context) and sends it every /api request.
--
-- Route modules (`lua/obleth/api/<area>.lua`) return
--   { routes = { {method, "/api/v1/models/{id}/managed", handler, summary = "...", tag = "..."}, ... } }
-- handler(ctx) returns `status, body_table[, headers]` (encoded as JSON) or
-- `status, "text", headers`. ctx = {req, res, params = {id = "3"}, query, json (decoded body or nil),
-- app (the serve context: store, log, now, clock, cache, sessions, events, slurm_settings(), ...),
-- routes (every loaded route), auth = "bearer"|"session", session_id (when signed in by cookie)}.
-- Adding a module is one line in M.ROUTE_MODULES.
--
-- A route's optional fields: `changes` = the event topics (obleth.api.changes) a 2xx answer to it
-- published (every route that writes declares them; the handler may set ctx.changes to
-- {{topic, model_id}, ...} instead, and ctx.model_id); `public = true`: no credentials needed;
-- `stream = true`: the handler answers through ctx.res itself (an event stream: not counted among the
-- requests a shutdown waits for); `parts = true`: a large answer the handler sends through ctx.res in
-- parts (obleth.api.parts), counted like any other; `query` (the parameters it takes) and `body` (its
-- request schema's name; `body_optional = true` when none is fine; `body_schema`: the schema as data,
-- obleth.schema, and `body_check`: its check with the rules between fields): checked before the handler
-- runs (obleth.api.request), so a handler reads ctx.query, ctx.json and ctx.body (the checked body) as
-- declared. `action`: what the route
-- does, as the access policy names it (obleth.policy.access: "read", "deployments.launch", ...); a GET
-- route without one is "read", and every other route that is not public must declare one.
local json = require "obleth.util.json"
local errors = require "obleth.api.errors"
local api_params = require "obleth.api.params"
local access = require "obleth.api.access"
local audit = require "obleth.api.audit"
local request = require "obleth.api.request"
local sessions = require "obleth.api.sessions"

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
  "obleth.api.audit",
  "obleth.api.tokens",
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
        public = r.public, stream = r.stream, parts = r.parts, headers = r.headers, body_optional = r.body_optional,
        body_schema = r.body_schema, body_check = r.body_check, action = action, audit = r.audit,
        response = r.response }
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

--- Make the API.
---@param context table the serve context (obleth.serve.context)
---@param opts {modules: string[]|nil}|nil  modules: the route modules (default M.ROUTE_MODULES)
---@return table api with :handle(req, res) and .routes
function M.new(context, opts)
  if type(context) ~= "table" or type(context._token) ~= "string" then error("api.new: a serve context", 2) end
  return setmetatable({ ctx = context, routes = M.load_routes((opts or {}).modules) }, App)
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

--- Who is asking, with the role the access policy gives them, or nil.
---@return table|nil identity (obleth.api.access), string|nil session_id, table|nil err a trusted proxy's
---  headers refused (obleth.api.access.from_proxy): answered 400, never taken for nobody
function App:identity(req)
  local c = self.ctx
  -- a personal access token: the user it was made by, with its role
  local bearer = (req.headers or {})["authorization"]
  local pat = type(bearer) == "string" and bearer:match("^[Bb]earer%s+(obp_%x+)%s*$")
  if pat then
    local t = c.store:personal_token_by_hash(require("obleth.crypto").sha256_hex(pat))
    if not t then return nil end
    return access.resolve({ user = t.user, groups = {}, via = "pat", token_role = t.role, token_id = t.id },
      c:access_policy())
  end
  local how, sid, sess = self:_auth(req)
  local ident, perr
  if sess and sess.user then -- a user signed in with the directory: their groups give the role
    ident = { user = sess.user, groups = sess.groups or {}, via = "session" }
  elseif how then
    ident = { admin = true, via = how == "bearer" and "token" or "session", groups = {} }
  elseif c.auth_proxy and not (req.headers or {})["authorization"] then
    ident, perr = access.from_proxy(c.auth_proxy, req, c.log)
  end
  if not ident then return nil, nil, perr end
  -- the admin token is admin whatever the policy says: it never depends on policy.d loading
  return access.resolve(ident, not ident.admin and c:access_policy() or nil), sid
end

--- Who is asking: "bearer" (the admin token), "session" (a live session cookie) or nil.
---@return string|nil how, string|nil session_id, table|nil session {expires_at, user, groups}
function App:_auth(req)
  local hs = req.headers or {}
  local h = hs["authorization"]
  if type(h) == "string" then
    local tok = h:match("^[Bb]earer%s+(%S+)%s*$")
    if tok and require("obleth.sys").consteq(tok, self.ctx._token) then return "bearer" end
    return nil -- a wrong Authorization header is not rescued by a cookie
  end
  local sid = sessions.cookie(hs["cookie"], sessions.COOKIE)
  local s = sid and self.ctx.sessions:check(sid, self.ctx._token)
  if s then return "session", sid, s end
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
    if origin ~= M.request_origin(req) and origin ~= self.ctx.public_origin then
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
  for _, c in ipairs(list) do self.ctx.events:publish(c[1], c[2]) end
  if #list > 0 then self.ctx:share_changes(list) end
  return #list > 0
end

-- xpcall's message handler: a raised table is kept (the store's errors are), with the traceback
local function _keep(e)
  return { raised = e, trace = debug.traceback(tostring(e), 2) }
end

--- The answer when `e` (raised while handling) says the store cannot be reached: 503 `storage` with
--- Retry-After (docs/errors.md), logged as a warning; nil for any other error (a bug: 500).
function App:_unavailable(e, req)
  local st = self.ctx.store
  if not (st and st.unavailable and st:unavailable(e)) then return nil end
  self.ctx.log.warn("store_unavailable", { method = req.method, path = req.path, error = tostring(e.message) })
  local status, body = errors.fail(503, "storage", "the database cannot be reached right now; try again shortly")
  return _reply(status, body, { ["Retry-After"] = "5" })
end

function App:_dispatch(req, res, found)
  if self.ctx.draining then
    return _reply(errors.fail(503, "shutting_down", "the server is shutting down"))
  end
  local path = req.path or "/"
  local route, params, allowed = found[1], found[2], found[3]
  -- every /api/ route needs someone (the admin token, a session, or a user a trusted proxy vouches
  -- for), except the sign-in ones; what they may do is the access policy's
  local ident, sid, perr = self:identity(req)
  if perr then return _reply(errors.fail(400, perr.code, perr.message, perr.field)) end
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
  if ident and not ident.admin and route and not route.public then
    local pol = self.ctx:access_policy()
    local ok, needs = pol.allows(ident.role, route.action, pol.DEFAULTS)
    if not ok then
      self.ctx.log.info("access_refused", { actor = ident.actor, role = ident.role, action = route.action,
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
  local ctx = { req = req, res = res, params = params, query = req.query or {}, json = body, app = self.ctx,
    routes = self.routes, route = route, auth = auth, session_id = sid, identity = ident,
    actor = ident and ident.actor }
  req.actor = ctx.actor
  -- the route's declared query and body, checked before its handler runs
  local bad, bad_body = request.check(route, ctx)
  if bad then return _reply(bad, bad_body) end
  local ok, status, rbody, headers = xpcall(route.handler, _keep, ctx)
  if not ok then
    local down = self:_unavailable(status.raised, req)
    if down then return down end
    self.ctx.log.error("api_handler_error", { method = req.method, path = path, error = status.trace })
    return _reply(errors.fail(500, "internal", "internal server error (see the server log)"))
  end
  if (route.stream or route.parts) and res and res:sent() then
    return type(status) == "table" and status or { status = 200, streamed = true }
  end
  if type(status) ~= "number" then
    self.ctx.log.error("api_handler_error", { method = req.method, path = path, error = "handler returned no status" })
    return _reply(errors.fail(500, "internal", "internal server error (see the server log)"))
  end
  -- every write someone made goes to the audit trail (obleth.api.audit)
  if audit.wanted(route, ctx, status) then audit.record(self.ctx, route, ctx, status, rbody) end
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
  local c = self.ctx
  local t0 = c.clock()
  local found = table.pack(M.route(self.routes, req.method, req.path or "/"))
  -- an event stream lasts as long as its client: it does not hold up a shutdown
  local counted = not (found[1] and found[1].stream)
  if counted then c.inflight = c.inflight + 1 end
  local ok, out = pcall(self._dispatch, self, req, res, found)
  if counted then c.inflight = c.inflight - 1 end
  if not ok then
    local down = self:_unavailable(out, req)
    if down then
      out = down
    else
      c.log.error("api_handler_error", { method = req.method, path = req.path, error = tostring(out) })
      out = _reply(errors.fail(500, "internal", "internal server error (see the server log)"))
    end
  end
  c.log.info("http_request", { method = req.method, path = req.path, status = out.status, actor = req.actor,
    ms = math.floor((c.clock() - t0) * 100000 + 0.5) / 100 })
  return out
end

--- An error answer in the API's shape, with its headers (obleth.serve answers a bad path with it).
---@return table {status, headers, body}
function M.reply(status, body, headers)
  return _reply(status, body, headers)
end

return M
