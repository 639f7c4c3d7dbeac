--- obleth.serve — the process of `obleth serve`, built in one place from its parts: the context
-- they share (obleth.serve.context), the Management API (obleth.api), the OpenAI-compatible router
-- (obleth.router), the dashboard's files (obleth.web) and the process's metrics
-- (obleth.serve.metrics). Each part receives the context; none requires another.
--
-- Dispatch (`:handler()`): a path that is not canonical is refused first; `/v1`, `/v1/...` and
-- `/metrics` go to the router, `/api` and `/api/...` to the API, anything else to the dashboard's
-- files. After an API request that wrote, the router forgets what it read from the store.
--
--   local srv = require("obleth.serve").new{store = store, admin_token = token}
--   http.server{handler = srv:handler()}
--   ... srv:drain(); wait while srv.context.inflight > 0
local api = require "obleth.api"
local errors = require "obleth.api.errors"
local context = require "obleth.serve.context"
local dispatch = require "obleth.serve.dispatch"
local web = require "obleth.web"
local router = require "obleth.router"

local M = {}

M.origin_of = context.origin_of

M.canonical_path = dispatch.canonical_path

local Serve = {}
Serve.__index = Serve

--- Build the process's parts.
---@param opts {store: table, admin_token: string, log: table|nil, modules: string[]|nil, now: function|nil,
---  clock: function|nil, router: table|nil, web_dir: string|nil, public_url: string|nil,
---  max_streams: integer|nil, http: table|nil, load_share: table|false|nil}  router: more options for
---  obleth.router.new (e.g. transport); modules: the API's route modules; web_dir: the built dashboard
---  (obleth.web.default_dir()); public_url: the origin the dashboard is reached at when a proxy in
---  front rewrites Host; load_share: {interval, expiry} (seconds) of the window shared with the other
---  instances (obleth.serve.load_share; default on a shared store: PostgreSQL), false for none; the
---  rest: obleth.serve.context.new
---@return table serve {context, api, router, web, routes, load_share} with :handler() and :drain();
---  load_share: the shared window (nil when not shared), which the caller publishes every interval
function M.new(opts)
  local ctx = context.new(opts)
  local ropts = { context = ctx, admin_token = opts.admin_token }
  for k, v in pairs(opts.router or {}) do ropts[k] = v end
  -- the per-model load window: the router counts into it, the provisioner's snapshot reads it; on a
  -- database several obleth serve share (PostgreSQL), read as the sum over the live instances
  -- (obleth.serve.load_share; the command publishes it every share.interval s)
  local share
  if not ropts.load then
    local window = require("obleth.router.load").new { now = ctx.now }
    local sopts = opts.load_share
    if sopts == nil and ctx.store.shared then sopts = {} end
    if sopts then
      share = require("obleth.serve.load_share").new { window = window, store = ctx.store, now = ctx.now, log = ctx.log,
        interval = sopts.interval, expiry = sopts.expiry }
    end
    ropts.load = share or window
  end
  ctx.load = ropts.load
  -- the load and replicas minute by minute over the last hours (the deployment page's chart), read from
  -- the window: it counts nothing itself
  ctx.load_history = require("obleth.deployment.load_history").new { now = ctx.now }
  -- the router's requests for a pass now (wake on demand), which GET /api/v1/provisioner/wait answers
  ctx.wakeups = require("obleth.router.wakeups").new()
  local self = setmetatable({
    context = ctx,
    api = api.new(ctx, { modules = opts.modules }),
    router = router.new(ropts),
    web = web.new { dir = opts.web_dir or web.default_dir() },
    load_share = share,
  }, Serve)
  self.routes = self.api.routes
  local rt = self.router
  ctx._flush_key_usage = function() return rt:flush_usage() end
  require("obleth.serve.metrics").register(ctx, opts.http or ropts.http)
  return self
end

--- Sample every model's load and replicas into the history (obleth.deployment.load_history; the
--- command's timer calls it every load_history.SAMPLE seconds). It runs on its own coroutine and yields
--- to the event loop between pages of models, so thousands of models never hold the loop for more than
--- a page's work; a sample still running when the next is due makes that one a no-op. Errors are logged,
--- never raised.
function Serve:sample_load()
  local ctx = self.context
  if self.sampling then return end
  self.sampling = true
  local loop = require "obleth.loop"
  loop.spawn(function()
    local ok, err = pcall(ctx.load_history.sample_all, ctx.load_history, ctx.store, ctx.load,
      require("obleth.policy").get("scale"), function() loop.sleep(0) end)
    self.sampling = false
    if not ok then ctx.log.warn("load_history_failed", { error = tostring(err) }) end
  end)
end

--- Start shutting down: new requests get 503 shutting_down; event streams end.
function Serve:drain()
  self.context:drain()
end

local function _ms(ctx, t0) return math.floor((ctx.clock() - t0) * 100000 + 0.5) / 100 end

--- GET /healthz, the readiness check for a load balancer or a Kubernetes probe (no token): 200
--- `{"status":"ok"}` when the store answers a query, 503 `{"status":"unavailable","reason":...}` while it
--- does not (PostgreSQL unreachable or restarting) or while the server shuts down.
function Serve:healthz(req)
  local ctx = self.context
  local t0 = ctx.clock()
  local status, body
  if req.method ~= "GET" and req.method ~= "HEAD" then
    status, body = 405, { status = "method_not_allowed" }
  elseif ctx.draining then
    status, body = 503, { status = "unavailable", reason = "shutting_down" }
  else
    local ok, row, err = pcall(ctx.store.db.first, ctx.store.db, "SELECT 1 AS ok")
    if ok and row then status, body = 200, { status = "ok" } else
      status, body = 503, { status = "unavailable", reason = "storage" }
      ctx.log.warn("healthz_storage", { error = tostring(ok and err or row) })
    end
  end
  ctx.log.info("http_request", { method = req.method, path = req.path, status = status, ms = _ms(ctx, t0) })
  return { status = status, headers = { ["Content-Type"] = "application/json", ["Cache-Control"] = "no-store",
    Allow = status == 405 and "GET, HEAD" or nil }, body = require("cjson").encode(body) }
end

--- A function for http.server{handler = ...} (see the dispatch above).
---@return fun(req: table, res: table): table|nil
function Serve:handler()
  local ctx, rt, app, files = self.context, self.router, self.api, self.web
  return function(req, res)
    local p = req.path or "/"
    local part = dispatch.part(p)
    local to_router = part == "router"
    if not dispatch.canonical_path(p) then
      local msg = "the path must not have empty, '.' or '..' segments, nor an encoded '/' or '\\'"
      ctx.log.info("http_request", { method = req.method, path = p, status = 400, code = "bad_path" })
      if to_router then -- a client of the OpenAI API gets its error shape
        res:send(400, { ["Content-Type"] = "application/json" },
          router.error_body(msg, "invalid_request_error", nil, "bad_path"))
        return
      end
      local out = api.reply(errors.fail(400, "bad_path", msg))
      -- outside /api/ this is the dashboard's ground: its headers too
      if p:sub(1, 5) ~= "/api/" then
        for k, v in pairs(web.HEADERS) do out.headers[k] = v end
      end
      return out
    end
    if to_router then return rt:serve(req, res) end
    if part == "health" then return self:healthz(req) end
    if part == "web" then
      local t0 = ctx.clock()
      local out = ctx.draining and web.text(503, "the server is shutting down") or files:serve(req)
      ctx.log.info("http_request", { method = req.method, path = p, status = out.status, ms = _ms(ctx, t0) })
      return out
    end
    local out = app:handle(req, res)
    -- every store write comes through a write request: the router reads afresh after one
    -- that changed something (not after a refused one, nor a sign-in: a request that wrote
    -- nothing must not be a way to keep the router's cache cold)
    if out.wrote then rt:invalidate() end
    return out
  end
end

return M
