--- obleth.router — the OpenAI-compatible router of `obleth serve` (docs/router.md).
--
-- Clients call `/v1/...` with a client API key; each request goes to a healthy
-- endpoint of the model it names, chosen per request from the store (so the
-- provisioner's endpoint changes take effect at once): fewest requests in
-- flight, round robin on ties. A connection that fails before any byte of the
-- answer is retried once on another replica. Bodies are forwarded as they came
-- (the engines serve the API model name already). Streamed answers are passed
-- through chunk by chunk; a client that goes away cancels its upstream request.
-- `/metrics` serves Prometheus text.
--
--   local router = require("obleth.router").new{context = ctx, admin_token = token}
--   http.server{handler = function(req, res) return router:serve(req, res) end}
-- (obleth.serve builds it and sends it `/v1/...` and `/metrics`.)
--
-- Errors are in the OpenAI shape {"error": {"message", "type", "param", "code"}}.
local cjson = require "cjson"
local json = require "obleth.util.json"
local balancer = require "obleth.router.balancer"
local unavailable = require "obleth.router.unavailable"
local metrics = require "obleth.util.prometheus"
local load_window = require "obleth.router.load"
local limits = require "obleth.router.limits"
-- the host's scanner reads "model" and "stream" without decoding the body (a long chat
-- costs cjson.decode hundreds of µs); plain lua5.4 (unit specs) falls back to cjson
local has_jsonscan, jsonscan = pcall(require, "obleth.jsonscan")

local M = {}

--- Seconds to wait for a connection to an endpoint (a dead node must not hold a request long).
M.CONNECT_TIMEOUT = 5
--- Seconds a whole upstream transfer may take (long generations stream for minutes).
M.TIMEOUT = 3600
--- Seconds a request to an autoscaled model with no replica waits for one (docs/autoscaling.md).
M.WAKE_WAIT = 30
--- Seconds between two looks at a held request's model while it wakes.
M.WAKE_POLL = 0.25

local NULL = cjson.null

-- request headers never forwarded: hop-by-hop, the client's credentials, and what curl sets itself
local DROP_REQUEST = {
  authorization = true, host = true, ["content-length"] = true, connection = true, ["keep-alive"] = true,
  ["transfer-encoding"] = true, te = true, trailer = true, upgrade = true, expect = true,
  ["proxy-authorization"] = true, ["proxy-connection"] = true,
}
-- response headers never passed back (the server frames the answer itself)
local DROP_RESPONSE = {
  connection = true, ["keep-alive"] = true, ["transfer-encoding"] = true, ["content-length"] = true,
  te = true, trailer = true, upgrade = true, ["proxy-authenticate"] = true,
}

local JSON_HEADERS = { ["Content-Type"] = "application/json" }

--- An OpenAI-shaped error body.
---@param message string
---@param kind string the error type ("invalid_request_error", "server_error", ...)
---@param param string|nil the request field it is about
---@param code string|nil a stable short code
---@return string JSON text
function M.error_body(message, kind, param, code)
  return json.encode({ error = { message = message, type = kind, param = param or NULL, code = code or NULL } })
end

-- A name from the request as an error may show it: valid UTF-8 without control characters stays
-- as it is (at most 256 bytes); any other byte is written as \xNN, so no error echoes raw bytes.
local function _shown(name)
  if #name <= 256 and utf8.len(name) and not name:find("[%c\127]") then return name end
  local out, i, n = {}, 1, math.min(#name, 256)
  while i <= n do
    local c = name:byte(i)
    local len = c < 0x80 and 1 or c >= 0xF0 and 4 or c >= 0xE0 and 3 or c >= 0xC2 and 2 or 0
    local ch = len > 0 and name:sub(i, i + len - 1)
    if ch and #ch == len and utf8.len(ch) == 1 and not ch:find("^[%c\127]$") then
      out[#out + 1] = ch; i = i + len
    else
      out[#out + 1] = ("\\x%02X"):format(c); i = i + 1
    end
  end
  if #name > n then out[#out + 1] = "..." end
  return table.concat(out)
end
M._shown = _shown

local function _fail(res, status, message, kind, param, code, headers)
  local h = { ["Content-Type"] = "application/json" }
  for k, v in pairs(headers or {}) do h[k] = v end
  res:send(status, h, M.error_body(message, kind, param, code))
  return status
end

--- The value of a plain (non-file) field of a multipart/form-data body
--- (RFC 7578), or nil. Linear in the body's size: parts are found with plain
--- searches for the delimiter, at most `max_parts` (64) are looked at, and
--- only each part's header block (up to 1 KiB) is matched.
---@param body string
---@param boundary string
---@param field string
---@return string|nil
function M.multipart_field(body, boundary, field)
  local delim = "--" .. boundary
  local pos = body:find(delim, 1, true)
  local parts = 0
  while pos and parts < 64 do
    parts = parts + 1
    local start = pos + #delim
    if body:sub(start, start + 1) == "--" then return nil end -- the closing delimiter
    local nxt = body:find("\r\n" .. delim, start, true)
    local hdr_end = body:find("\r\n\r\n", start, true)
    if not hdr_end or (nxt and hdr_end > nxt) then return nil end
    if hdr_end - start <= 1024 then
      local headers = body:sub(start, hdr_end):lower()
      local disp = headers:match("\r\ncontent%-disposition:[ \t]*form%-data([^\r\n]*)")
      if disp and not disp:find("filename", 1, true) then
        local name = disp:match(';%s*name="([^"]*)"') or disp:match(";%s*name=([^;%s]+)")
        if name == field:lower() then
          return body:sub(hdr_end + 4, (nxt or (#body + 1)) - 1)
        end
      end
    end
    pos = nxt and nxt + 2 or nil
  end
  return nil
end

-- The model a request names: the JSON body's "model", a multipart form field
-- "model", or ?model=. Returns name | nil, stream (the JSON body's "stream" is true),
-- and "bad_json" when the body is not JSON.
local function _model_of(req)
  local body = req.body
  local ctype = req.headers["content-type"] or ""
  if body and body ~= "" then
    if ctype:find("multipart/form-data", 1, true) then
      local b = ctype:match('boundary="([^"]+)"') or ctype:match("boundary=([^;%s]+)")
      if b then
        local name = M.multipart_field(body, b, "model")
        if name then return name end
      end
    elseif body:find("^%s*{") then
      local ok, model, stream, key
      if has_jsonscan then
        -- a key twice or a string not UTF-8 is refused too (nil, message, kind, key)
        ok, model, stream, key = jsonscan.fields(body, "model", "stream")
        if not ok then return nil, nil, stream == "duplicate_key" and "duplicate_key" or "bad_json", key end
      else
        local doc
        ok, doc = pcall(cjson.decode, body)
        if ok and type(doc) == "table" then model, stream = doc.model, doc.stream end
      end
      if not ok then return nil, nil, "bad_json" end
      return type(model) == "string" and model or nil, stream == true
    end
  end
  return req.query and req.query.model or nil
end

local function _base(url)
  url = url:gsub("/+$", "")
  if url:sub(-3) == "/v1" then url = url:sub(1, -4) end
  return url
end

-- An endpoint URL's parts for res:proxy: {host, port, prefix} for plain http
-- ("http://node7:8000", "http://[fd00::7]:8000/v1"), false for anything else
-- (https goes through the HTTP client). Cached per URL (forgotten past 4096 URLs).
local _parsed, _nparsed = {}, 0
local function _http_parts(url)
  local p = _parsed[url]
  if p ~= nil then return p end
  if _nparsed >= 4096 then _parsed, _nparsed = {}, 0 end
  _nparsed = _nparsed + 1
  p = false
  local base = _base(url) -- the prefix comes without trailing slashes or "/v1", as for the HTTP client
  local host, rest = base:match("^[Hh][Tt][Tt][Pp]://%[([%x:%.]+)%](.*)$")
  if not host then host, rest = base:match("^[Hh][Tt][Tt][Pp]://([%w%.%-_]+)(.*)$") end
  if host and #host <= 253 then -- a longer name is no DNS name: the HTTP client gives the error
    local port, path = rest:match("^:(%d+)(.*)$")
    if not port then port, path = "80", rest end
    port = tonumber(port)
    if port and port >= 1 and port <= 65535 and (path == "" or path:sub(1, 1) == "/") then
      p = { host = host, port = port, prefix = path }
    end
  end
  _parsed[url] = p
  return p
end

-- Worth trying another replica: the connection failed before any byte of an answer.
local function _retryable(err)
  if err.code == "unreachable" or err.code == "closed" then return true end
  if err.code == "timeout" then
    local m = tostring(err.message)
    return m:find("onnect", 1, true) ~= nil or m:find("esolv", 1, true) ~= nil
  end
  return false
end

local Router = {}
Router.__index = Router

--- Make a router.
---@param opts {context: table, admin_token: string, http: table|nil, connect_timeout: number|nil,
---  timeout: number|nil, transport: "proxy"|"client"|nil, limit_window: number|nil, load: table|nil,
---  wake_wait: number|nil}
---  context: obleth.serve.context (store, log, clock, now, draining, inflight, metrics: the registry
---  the router adds its series to and /metrics renders).
---  load: the per-model load window (obleth.router.load; default a new one on the context's clock) the
---  snapshot hands to the provisioner: requests in flight, held and finished per model.
---  wake_wait: seconds a request to an autoscaled model with no replica is held while it wakes
---  (default $OBLETH_WAKE_WAIT or WAKE_WAIT; 0 answers 503 at once)
---  transport: "proxy" (default) passes requests to http:// endpoints with res:proxy (host/http_proxy.c)
---  and to others (https://) with the HTTP client; "client" sends every request with the HTTP client.
---  limit_window: seconds of a key's requests_per_minute window (default 60; specs shorten it).
function M.new(opts)
  local ctx = opts.context
  if type(ctx) ~= "table" or not ctx.store then error("router.new: a context with a store is required", 2) end
  local transport = opts.transport or "proxy"
  if transport ~= "proxy" and transport ~= "client" then
    error("router.new: transport must be \"proxy\" or \"client\"", 2)
  end
  local reg = ctx.metrics or metrics.new()
  local self = setmetatable({
    ctx = ctx, store = ctx.store, log = ctx.log or require("obleth.log"),
    clock = ctx.clock or require("obleth.loop").monotonic,
    now = ctx.now or require("obleth.loop").now,
    http = opts.http or require("obleth.http"),
    consteq = require("obleth.sys").consteq, sha256 = require("obleth.crypto").sha256_hex,
    admin_token = opts.admin_token,
    connect_timeout = opts.connect_timeout or M.CONNECT_TIMEOUT, timeout = opts.timeout or M.TIMEOUT,
    registry = reg, use_proxy = transport == "proxy",
    _label_sets = {}, _status_sets = {}, _nstatus_sets = 0, _inflight = {},
    limiter = limits.new { window = opts.limit_window }, _usage = {}, _key_labels = {},
  }, Router)
  -- this router's name in the Via header it adds (RFC 9110 7.6.3): a request that comes back
  -- carrying it went round a loop (an endpoint that points at obleth itself)
  self.via_name = "obleth-" .. require("obleth.sys").random_hex(6)
  self.via = "1.1 " .. self.via_name
  self._proxy_opts = { connect_timeout = self.connect_timeout, timeout = self.timeout,
    buffer_limit = M.BUFFER_LIMIT, via = self.via }
  local http = self.http
  self.balancer = balancer.new(opts.balancer)
  self.load = opts.load or load_window.new { now = self.now }
  self.wake_wait = opts.wake_wait or tonumber(os.getenv("OBLETH_WAKE_WAIT") or "") or M.WAKE_WAIT
  self:invalidate()
  self.m_requests = reg:counter("obleth_router_requests_total",
    "Client requests to /v1/ by model and HTTP status (499: the client went away first)", { "model", "status" })
  self.m_latency = reg:histogram("obleth_router_upstream_latency_seconds",
    "Time from sending a request to an endpoint until its answer's headers arrived (time to first byte)",
    { "model" }, metrics.LATENCY_BUCKETS)
  local inflight = self._inflight
  reg:gauge("obleth_router_in_flight_requests", "Client requests being answered by a replica",
    { "model" }, function(set)
      for name, n in pairs(inflight) do set({ name }, n) end
    end)
  self.m_retries = reg:counter("obleth_router_upstream_retries_total",
    "Requests retried on another replica after a failed connection", { "model" })
  self.m_key_requests = reg:counter("obleth_router_key_requests_total",
    "Client requests by client key id, and whether a limit refused them (result: admitted, limited)",
    { "key", "result" })
  self.m_key_tokens = reg:counter("obleth_router_key_tokens_total",
    "Tokens of the answers to a client key, from the engine's usage (kind: prompt, completion)",
    { "key", "kind" })
  local store = self.store
  local rows -- one store read per scrape, shared by the two per-model gauges
  reg:gauge("obleth_model_healthy_replicas", "Healthy replicas per model", { "model" }, function(set)
    rows = store:route_models()
    for _, r in ipairs(rows) do set({ r.name }, r.healthy) end
  end)
  reg:gauge("obleth_model_endpoints", "Endpoints the router sends to, per model", { "model" }, function(set)
    for _, r in ipairs(rows or {}) do set({ r.name }, r.endpoints) end
  end)
  local scaled -- one read per scrape, shared by the two gauges
  local specs = {} -- the decoded specs the scaling rows keep between scrapes
  reg:gauge("obleth_model_desired_replicas", "Replicas a managed model wants: its replicas, or for an autoscaled "
    .. "model the scale policy's count from its load (docs/autoscaling.md)", { "model" }, function(set)
      scaled = require("obleth.deployment.scaling").rows(store, self.load, require("obleth.policy").get("scale"),
        self.now(), specs)
      for _, r in ipairs(scaled) do set({ r.model }, r.desired) end
    end)
  reg:gauge("obleth_model_current_replicas", "Replicas of a managed model that hold or wait for a job "
    .. "(pending, starting, healthy, unhealthy)", { "model" }, function(set)
      for _, r in ipairs(scaled or {}) do set({ r.model }, r.current) end
    end)
  -- the proxy's connection pool (host/http_proxy.c), read at each scrape
  if http.proxy_stats then
    local pstats -- one read per scrape, shared by the pool's series
    reg:counter("obleth_router_upstream_connections_opened_total",
      "Connections the router opened to endpoints (each is kept alive and reused)", nil, function(set)
        pstats = http.proxy_stats()
        set({}, pstats.connections_opened)
      end)
    reg:counter("obleth_router_upstream_connections_reused_total",
      "Requests that went over a kept-alive connection to an endpoint", nil, function(set)
        set({}, (pstats or http.proxy_stats()).connections_reused)
      end)
    reg:gauge("obleth_router_upstream_idle_connections",
      "Kept-alive connections to endpoints waiting for a request", nil, function(set)
        set({}, (pstats or http.proxy_stats()).idle_connections)
      end)
  end
  return self
end

--- Forget what was read from the store (models, valid keys, settings). obleth serve calls
--- it after every write request to the Management API (every store write comes through
--- one: the provisioner's report, endpoints, keys, settings), so changes take effect at once.
function Router:invalidate()
  self._models, self._keys, self._settings = {}, {}, nil
  self._cached_at = self.clock()
end

-- The cache also expires after CACHE_TTL seconds, for a write made behind obleth's back.
M.CACHE_TTL = 2

function Router:_fresh()
  if self.clock() - self._cached_at > M.CACHE_TTL then self:invalidate() end
end

-- A known model {id, name, status, endpoints} (unknown names are not cached: clients choose them).
function Router:_model(name)
  local m = self._models[name]
  if m then return m end
  m = self.store:route_model(name)
  if m then self._models[name] = m end
  return m
end

--- The Prometheus text of the registry: the router's series and the process's (obleth.serve.metrics).
function Router:metrics_text()
  return self.registry:render()
end

-- Is the request allowed? key | nil, {code = "missing_api_key"|"invalid_api_key", message}
-- key: {id, requests_per_minute, max_concurrent} of the client key, or true (keyless)
function Router:_authorize(req)
  local st = self._settings
  if st == nil then
    st = self.store:get_settings("router") or false
    self._settings = st
  end
  if st and st.keyless == true then return true end
  local h = req.headers.authorization
  local tok = type(h) == "string" and h:match("^[Bb]earer%s+(%S+)%s*$")
  if not tok then
    return nil, { code = "missing_api_key", message = "You didn't provide an API key: send Authorization: "
      .. "Bearer <key> (an operator creates keys with POST /api/v1/keys)." }
  end
  if self.admin_token and self.consteq(tok, self.admin_token) then
    return nil, { code = "invalid_api_key",
      message = "The admin token is not a client API key; create one with POST /api/v1/keys." }
  end
  local key = self._keys[tok]
  if key then return key end
  key = self.store:api_key_limits(self.sha256(tok))
  if key then
    self._keys[tok] = key -- only valid keys are kept (a revocation is a write: it clears them)
    return key
  end
  return nil, { code = "invalid_api_key", message = "Incorrect API key provided (unknown or revoked)." }
end

function Router:_list_models(res)
  local data = json.array()
  for _, r in ipairs(self.store:route_models()) do
    data[#data + 1] = { id = r.name, object = "model", created = r.created_at, owned_by = "obleth" }
  end
  res:send(200, JSON_HEADERS, json.encode({ object = "list", data = data }))
  return 200
end

function Router:_get_model(res, name)
  local m = self.store:route_model(name)
  if not m then
    return _fail(res, 404, ("The model `%s` does not exist."):format(_shown(name)), "invalid_request_error", "model",
      "model_not_found")
  end
  local row = self.store:get_model(m.id)
  res:send(200, JSON_HEADERS, json.encode({ id = name, object = "model", created = row and row.created_at or 0,
    owned_by = "obleth" }))
  return 200
end

-- 503 with the reason nothing can answer now.
function Router:_unavailable(res, model)
  local ok, msg, retry = pcall(function()
    local slurm = self.store:get_settings("slurm")
    local spec = self.store:get_spec(model.id)
    local replicas = self.store:list_replicas({ model_id = model.id, live = true })
    local wake
    if type(spec) == "table" and type(spec.autoscale) == "table" then
      -- the scale policy says what is on its way and when (Slurm's estimated start): the Retry-After
      local view = self.load:view(model.name, nil, true)
      view.queued = math.max(view.queued, 1)
      wake = require("obleth.policy").get("scale").decide({ now = self.now(), autoscale = spec.autoscale,
        replicas = replicas, load = view }).wake
    end
    return unavailable.explain {
      model = model, spec = spec, replicas = replicas, wake = wake,
      slurm_enabled = slurm and slurm.enabled == true, checked_in_at = self.store:provisioner_status().checked_in_at,
      now = self.now(),
    }
  end)
  if not ok then
    self.log.error("router_explain_failed", { model = model.name, error = tostring(msg) })
    msg, retry = ("model %q has no healthy replica yet"):format(model.name), 10
  end
  return _fail(res, 503, msg, "server_error", NULL, "model_not_ready", { ["Retry-After"] = tostring(retry) })
end

local function _headers_out(h)
  local out = {}
  for k, v in pairs(h) do
    if not DROP_RESPONSE[k] then out[k] = v end
  end
  return out
end

--- Bytes of an answer's end read for its usage (as res:proxy's USAGE_TAIL).
M.USAGE_TAIL = 4096

-- The prompt and completion tokens of the last "usage" object in an answer's end, or nil.
local function _usage_of(tail)
  if not has_jsonscan or not tail then return nil end
  return jsonscan.usage(tail)
end

-- Pass an answer through chunk by chunk (first, the chunks already read).
-- Returns the status to record, and why it ended early ("client_gone" | "upstream_broke", err),
-- and the answer's last bytes (tail; at least M.USAGE_TAIL when it is that long).
local function _pipe(res, resp, first)
  if not res:start(resp.status, _headers_out(resp.headers)) then
    resp:close()
    return 499, "client_gone"
  end
  for _, chunk in ipairs(first or {}) do
    if not res:write(chunk) then
      resp:close()
      return 499, "client_gone"
    end
  end
  local tail = first and first[#first] or ""
  while true do
    local chunk, err = resp:read()
    if chunk then
      tail = #tail + #chunk > 2 * M.USAGE_TAIL and (tail .. chunk):sub(-M.USAGE_TAIL) or tail .. chunk
      if not res:write(chunk) then
        resp:close() -- the client went away: cancel the upstream request
        return 499, "client_gone"
      end
    else
      res:finish()
      if err then return resp.status, "upstream_broke", err end
      return resp.status, nil, nil, tail
    end
  end
end

--- Answers up to this size that were not asked as a stream are sent in one piece
--- (with a Content-Length); a longer one, or any text/event-stream, is passed through.
M.BUFFER_LIMIT = 1048576

-- Deliver an upstream answer to the client. Returns status, nil | "client_gone" | "upstream_broke", err
-- (after the client got the answer's start), or nil, {code = "upstream_broke", message} (before).
local function _deliver(res, resp, stream)
  local ctype = resp.headers["content-type"]
  if stream or (ctype and ctype:find("text/event-stream", 1, true)) then return _pipe(res, resp) end
  local parts, size = {}, 0
  while true do
    local chunk, err = resp:read()
    if chunk then
      parts[#parts + 1] = chunk
      size = size + #chunk
      if size > M.BUFFER_LIMIT then return _pipe(res, resp, parts) end
    elseif err then
      -- the answer broke before anything reached the client
      return nil, { code = "upstream_broke", message = err and err.message }
    else
      local body = table.concat(parts)
      res:send(resp.status, _headers_out(resp.headers), body)
      return resp.status, nil, nil, body:sub(-M.USAGE_TAIL)
    end
  end
end

-- Nothing reached the client and the connection failed before any answer: worth another replica.
local RETRYABLE = { unreachable = true, closed = true, connect_timeout = true }

-- One attempt through the HTTP client (an endpoint res:proxy does not take: https).
-- Returns like res:proxy: status, why, message, ttfb[, prompt_tokens, completion_tokens] | nil, {code, message}.
function Router:_through_client(req, res, url, stream)
  local headers = {}
  -- and the headers the client's Connection header names (RFC 9110 7.6.1)
  local named = {}
  for tok in tostring(req.headers.connection or ""):gmatch("[^,%s]+") do named[tok:lower()] = true end
  for k, v in pairs(req.headers) do
    if not DROP_REQUEST[k] and not named[k] then headers[k] = v end
  end
  if req.remote_addr then
    local xff = req.headers["x-forwarded-for"]
    headers["x-forwarded-for"] = xff and (xff .. ", " .. req.remote_addr) or req.remote_addr
  end
  local via = req.headers.via
  headers.via = via and (via .. ", " .. self.via) or self.via
  local body = req.body
  if body == "" and (req.method == "GET" or req.method == "HEAD" or req.method == "DELETE") then body = nil end
  local t0 = self.clock()
  local resp, err = self.http.request { url = _base(url) .. req.target, method = req.method, headers = headers,
    body = body, stream = true, timeout = self.timeout, connect_timeout = self.connect_timeout }
  if not resp then
    local code = err.code
    if code == "timeout" and _retryable(err) then code = "connect_timeout" end
    return nil, { code = code, message = err.message }
  end
  local ttfb = self.clock() - t0
  local ok, st, why, perr, tail = pcall(_deliver, res, resp, stream)
  if not ok then
    resp:close()
    error(st, 0)
  end
  if not st then return nil, why end
  if why == "client_gone" then return 499, why, nil, ttfb end
  if why then return st, why, perr and perr.message, ttfb end
  return st, nil, nil, ttfb, _usage_of(tail)
end

-- The label values {model} of a model's series, made once per model name.
function Router:_labels(name)
  local l = self._label_sets[name]
  if not l then
    l = { name }
    self._label_sets[name] = l
  end
  return l
end

-- The attempts of one request (at most two endpoints). Returns status, endpoint[, prompt_tokens,
-- completion_tokens] (the engine's usage, for a request of a client key).
function Router:_attempts(req, res, model, stream, labels)
  local bal, name = self.balancer, model.name
  local tried, last_code, last_url
  local popts = self._proxy_opts -- res:proxy reads it before it yields: one table serves every request
  for attempt = 1, 2 do
    local url = bal:pick(name, model.endpoints, tried, self.clock())
    if not url then break end
    if attempt > 1 then self.m_retries:inc(labels) end
    bal:acquire(url)
    local parts = self.use_proxy and _http_parts(url)
    local pok, st, why, msg, ttfb, prompt, completion -- status, why, message, ttfb, usage | nil, {code, message}
    if parts then
      popts.host, popts.port, popts.stream = parts.host, parts.port, stream
      popts.usage = req.key_id ~= nil
      popts.target = parts.prefix ~= "" and parts.prefix .. req.target or nil
      pok, st, why, msg, ttfb, prompt, completion = pcall(res.proxy, res, popts)
    else
      pok, st, why, msg, ttfb, prompt, completion = pcall(self._through_client, self, req, res, url, stream)
    end
    bal:release(url)
    if not pok then error(st, 0) end
    if not st then why, msg = why.code, why.message end
    if st then
      self.m_latency:observe(labels, ttfb)
      if why == "upstream_broke" then
        self.log.warn("router_upstream_broke", { model = name, endpoint = url, error = msg })
      end
      return st, url, prompt, completion
    end
    last_code, last_url = why, url
    if why == "upstream_broke" then
      self.log.warn("router_upstream_broke", { model = name, endpoint = url, error = msg })
      return _fail(res, 502, ("The replica of model `%s` broke off its answer; try again."):format(name),
        "server_error", nil, "upstream_broke"), url
    end
    local again = RETRYABLE[why] == true
    self.log.warn("router_upstream_failed", { model = name, endpoint = url, code = why, error = msg,
      retry = again and attempt == 1 and #model.endpoints > 1 })
    if not again then break end
    bal:failed(url, self.clock())
    tried = tried or {}
    tried[url] = true
  end
  if not last_code then
    -- every endpoint was tried (only one, or they left while we tried)
    return self:_unavailable(res, model)
  end
  if last_code == "timeout" then
    return _fail(res, 504, ("The replica of model `%s` did not answer in time."):format(name), "server_error", nil,
      "upstream_timeout"), last_url
  end
  if last_code == "bad_response" then
    return _fail(res, 502, ("The replica of model `%s` sent an answer that is not valid HTTP; try again."):format(
      name), "server_error", nil, "upstream_bad_response"), last_url
  end
  return _fail(res, 502, ("No replica of model `%s` could be reached (%s); try again."):format(name,
    last_code), "server_error", nil, "upstream_unreachable"), last_url
end

-- Send the request to one of the model's endpoints (retrying once elsewhere when
-- the connection fails before any answer), counted in flight. Returns status, endpoint[, prompt_tokens,
-- completion_tokens].
function Router:_forward(req, res, model, stream)
  local name = model.name
  local labels = self:_labels(name)
  local inflight = self._inflight
  inflight[name] = (inflight[name] or 0) + 1
  self.load:begin(name, req.held)
  local t0 = self.clock()
  local ok, status, detail, prompt, completion = pcall(self._attempts, self, req, res, model, stream, labels)
  inflight[name] = inflight[name] - 1
  self.load:finish(name, self.clock() - t0, ok and completion or nil)
  if not ok then error(status, 0) end
  return status, detail, prompt, completion
end

function Router:_route(req, res)
  local path, method = req.path, req.method
  if self.ctx.draining then
    return _fail(res, 503, "The server is shutting down.", "server_error", nil, "shutting_down",
      { ["Retry-After"] = "1" })
  end
  if path == "/metrics" or path == "/metrics/" then
    if method ~= "GET" and method ~= "HEAD" then
      return _fail(res, 405, "Use GET /metrics.", "invalid_request_error", nil, "method_not_allowed", { Allow = "GET, HEAD" })
    end
    res:send(200, { ["Content-Type"] = metrics.CONTENT_TYPE, ["Cache-Control"] = "no-store" }, self:metrics_text())
    return 200
  end
  local via = req.headers.via
  if via and via:find(self.via_name, 1, true) then
    return _fail(res, 508, "This request came back to the obleth that passed it on (its Via header names this "
      .. "server): an endpoint points at obleth itself.", "server_error", nil, "loop_detected")
  end
  self:_fresh()
  local key, aerr = self:_authorize(req)
  if not key then
    return _fail(res, 401, aerr.message, "invalid_request_error", nil, aerr.code,
      { ["WWW-Authenticate"] = 'Bearer realm="obleth"' })
  end
  if key ~= true then
    req.key_id = key.id
    local ok, retry, which, limit = self.limiter:admit(key.id, key, self.clock())
    if not ok then
      req.key_limited = true
      return self:_limited(res, retry, which, limit)
    end
    req.key_admitted = (key.requests_per_minute or key.max_concurrent) and true or nil
  end
  if path == "/v1/models" and (method == "GET" or method == "HEAD") then return self:_list_models(res) end
  if path:sub(1, 11) == "/v1/models/" and (method == "GET" or method == "HEAD") then
    local name = path:sub(12):gsub("%%(%x%x)", function(x) return string.char(tonumber(x, 16)) end)
    return self:_get_model(res, name)
  end
  local name, stream, bad, dup = _model_of(req)
  if bad == "duplicate_key" then
    return _fail(res, 400, ('The JSON body of your request names the key "%s" twice in one object.'):format(dup),
      "invalid_request_error", dup, "duplicate_key")
  elseif bad then
    return _fail(res, 400, "We could not parse the JSON body of your request.", "invalid_request_error", nil,
      "bad_json")
  end
  if not name then
    return _fail(res, 400, "You must provide a model parameter.", "invalid_request_error", "model", "missing_model")
  end
  local model = self:_model(name)
  if not model then
    return _fail(res, 404, ("The model `%s` does not exist."):format(_shown(name)), "invalid_request_error", "model",
      "model_not_found")
  end
  req.model = model.name
  if #model.endpoints == 0 then
    local woke = self:_hold(model, res)
    if not woke and res.closed and res:closed() then return end -- the client went away while held
    if not woke and self.ctx.draining then
      -- held until obleth serve began to stop: another instance (or this one restarted) answers it
      return _fail(res, 503, "The server is shutting down.", "server_error", nil, "shutting_down",
        { ["Retry-After"] = "1" })
    end
    if not woke then return self:_unavailable(res, model) end
    req.held, model = true, woke
  end
  return self:_forward(req, res, model, stream == true)
end

-- A request to an autoscaled model without a replica: counted as queued (the next pass wakes the
-- model), held until an endpoint appears or wake_wait seconds pass, before any byte of the answer
-- (a streaming client gets the whole stream, or the 503); no longer once its client has gone away (the
-- host's res:closed(): then its key's slot and its queued load are released at once). Returns the model
-- with its endpoints, or nil.
function Router:_hold(model, res)
  if self.wake_wait <= 0 then return nil end
  local spec = self.store:get_spec(model.id)
  if type(spec) ~= "table" or type(spec.autoscale) ~= "table" or spec.enabled == false then return nil end
  local loop = require "obleth.loop"
  if not loop.in_task() then return nil end
  local name = model.name
  self.load:hold(name)
  -- the provisioner's pass now, not at the end of its interval
  if self.ctx.wakeups then self.ctx.wakeups:wake(name) end
  local deadline = self.clock() + self.wake_wait
  local found
  local wk = self.ctx.wakeups
  local function gone() return res ~= nil and res.client_gone ~= nil and res:client_gone() end
  while not self.ctx.draining and self.clock() < deadline and not gone() do
    -- a shutdown ends the sleep at once (the wake-ups close)
    local dt = math.min(M.WAKE_POLL, math.max(0, deadline - self.clock()))
    if wk then wk:sleep(dt) else loop.sleep(dt) end
    if self.ctx.draining or gone() then break end
    self._models[name] = nil
    local m = self:_model(name)
    if m and #m.endpoints > 0 then found = m break end
  end
  self.load:release(name)
  return found
end

-- 429 in the OpenAI shape, with Retry-After (whole seconds until the window lets one more in).
function Router._limited(_, res, retry, which, limit)
  local msg, code
  if which == "requests_per_minute" then
    msg = ("Rate limit reached for this API key: %d requests per minute. Please try again in %d s."):format(
      limit, retry)
    code = "rate_limit_exceeded"
  else
    msg = ("Concurrency limit reached for this API key: %d requests at once. Please try again when one "
      .. "has been answered."):format(limit)
    code = "concurrency_limit_exceeded"
  end
  local h = { ["Retry-After"] = tostring(retry) }
  if which == "requests_per_minute" then
    h["x-ratelimit-limit-requests"] = tostring(limit)
    h["x-ratelimit-remaining-requests"] = "0"
    h["x-ratelimit-reset-requests"] = retry .. "s"
  end
  return _fail(res, 429, msg, "requests", nil, code, h)
end

--- The most tokens one answer's usage may count (prompt or completion): 2^31-1. An engine that says
--- more is not believed: the number is ignored (the request still counts), logged once per process.
M.USAGE_MAX = 2147483647
-- What the in-memory sums saturate at (the store's counters' bound, obleth.store.keys)
local USAGE_SUM_MAX = 4611686018427387903

local function _sat_add(a, b)
  if a > USAGE_SUM_MAX - b then return USAGE_SUM_MAX end
  return a + b
end

--- Seconds between writes of the keys' usage to the store (obleth serve's timer; a read of
--- GET /api/v1/keys/{id}/usage writes first).
M.USAGE_FLUSH = 5

-- Count one request of a client key: the one hook where a request's books are kept
-- after it was answered (usage, when the engine sent it).
function Router:_count_key(req, usage_prompt, usage_completion)
  local id = req.key_id
  if not id then return end
  local labels = self._key_labels[id]
  if not labels then
    local k = tostring(id)
    labels = { admitted = { k, "admitted" }, limited = { k, "limited" }, prompt = { k, "prompt" },
      completion = { k, "completion" } }
    self._key_labels[id] = labels
  end
  local u = self._usage[id]
  if not u then
    u = { requests = 0, limited = 0, prompt_tokens = 0, completion_tokens = 0 }
    self._usage[id] = u
  end
  if req.key_limited then
    u.limited = u.limited + 1
    self.m_key_requests:inc(labels.limited)
    return
  end
  u.requests = _sat_add(u.requests, 1)
  self.m_key_requests:inc(labels.admitted)
  for kind, n in pairs({ prompt = usage_prompt, completion = usage_completion }) do
    if math.type(n) ~= "integer" or n < 0 or n > M.USAGE_MAX then
      if n ~= nil and not self._usage_unbelieved then
        self._usage_unbelieved = true
        self.log.warn("usage_ignored", { key = id, kind = kind, value = tostring(n), model = req.model,
          reason = ("over %d tokens in one answer (logged once)"):format(M.USAGE_MAX) })
      end
    else
      local f = kind .. "_tokens"
      u[f] = _sat_add(u[f], n)
      self.m_key_tokens:inc(labels[kind], n)
    end
  end
end

--- Write the keys' usage counted since the last flush to the store (added to what it holds).
--- On a store failure the counts are kept for the next flush.
---@return boolean|nil ok, table|nil err
function Router:flush_usage()
  self.limiter:prune(self.clock())
  if not next(self._usage) then return true end
  local pending = self._usage
  self._usage = {}
  local ok, err = self.store:add_api_key_usage(pending)
  if not ok then
    for id, d in pairs(pending) do -- keep them: added to what came in meanwhile
      local u = self._usage[id]
      if u then
        for k, v in pairs(d) do u[k] = _sat_add(u[k], v) end
      else
        self._usage[id] = d
      end
    end
    self.log.warn("key_usage_not_saved", { error = err and err.message })
    return nil, err
  end
  return true
end

-- The label values {model, status} of a request count, made once per pair (both
-- come from the store and the HTTP status codes, not from what clients send).
function Router:_status_labels(name, status)
  local by = self._status_sets[name]
  if not by then
    if self._nstatus_sets > 4096 then self._status_sets, self._nstatus_sets = {}, 0 end
    by = {}
    self._status_sets[name] = by
    self._nstatus_sets = self._nstatus_sets + 1
  end
  local l = by[status]
  if not l then
    l = { name, tostring(status) }
    by[status] = l
  end
  return l
end

--- Answer one /v1/ or /metrics request (an http.server handler): counts it in the
--- context's in-flight requests (shutdown waits for them), records metrics and logs one line.
function Router:serve(req, res)
  local ctx = self.ctx
  local t0 = self.clock()
  ctx.inflight = (ctx.inflight or 0) + 1
  local ok, status, endpoint, prompt, completion = xpcall(self._route, function(e)
    return { raised = e, trace = debug.traceback(tostring(e), 2) }
  end, self, req, res)
  ctx.inflight = ctx.inflight - 1
  if req.key_admitted then self.limiter:release(req.key_id) end
  if not ok then
    local e = status.raised
    -- the store cannot be reached (PostgreSQL down or restarting): 503 with Retry-After, not a bug
    local down = self.store and self.store.unavailable and self.store:unavailable(e)
    if down then
      self.log.warn("store_unavailable", { method = req.method, path = req.path, error = tostring(e.message) })
    else
      self.log.error("router_error", { method = req.method, path = req.path, error = status.trace })
    end
    status = down and 503 or 500
    if not res:sent() then
      if down then
        _fail(res, 503, "The database cannot be reached right now; try again shortly.", "server_error", nil,
          "storage", { ["Retry-After"] = "5" })
      else
        _fail(res, 500, "Internal server error (see the server log).", "server_error", nil, "internal")
      end
    elseif not res:closed() then
      res:finish()
    end
  end
  if req.path ~= "/metrics" and req.path ~= "/metrics/" then
    self.m_requests:inc(self:_status_labels(req.model or "", status))
    if req.key_id then self:_count_key(req, ok and prompt or nil, ok and completion or nil) end
  end
  self.log.info("http_request", { method = req.method, path = req.path, status = status, model = req.model,
    upstream = type(endpoint) == "string" and endpoint or nil, key = req.key_id,
    ms = math.floor((self.clock() - t0) * 100000 + 0.5) / 100 })
end

return M
