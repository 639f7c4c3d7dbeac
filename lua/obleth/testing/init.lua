--- A tiny stand-in inference engine that speaks the OpenAI HTTP API shapes
--- (the parts vLLM, SGLang, llama.cpp and Ollama serve), so the path
--- Slurm job -> health check -> router can be proven without a GPU.
---
--- Answers are deterministic: a chat reply echoes the last user message,
--- prefixed with the replica label, so a test can tell which replica answered.
---
---   local engine = require("obleth.testing").new{model = "m"}
---   http.server{port = 0, handler = engine:handler()}
---
--- Routes: GET /health, GET /v1/models, POST /v1/chat/completions,
--- POST /v1/completions, POST /v1/embeddings. Every response carries
--- `X-Obleth-Replica: <label>`; every request is logged once (event
--- `smoke_request`) when its answer is complete.
local M = {}

local cjson = require("cjson")
local loop = require("obleth.loop")
local log = require("obleth.log")
local sys = require("obleth.sys")

--- Health behaviours the engine itself implements (process lifecycle
--- modes such as exit and crash-on-start belong to the CLI).
M.health_modes = { ok = true, ["never-healthy"] = true, ["flaky-health"] = true }

M.OWNER = "obleth-smoke"
M.DEFAULT_MODEL = "obleth-smoke"
M.DEFAULT_TOKENS = 5
M.DEFAULT_TOKEN_DELAY = 0.05
M.EMBEDDING_DIMENSIONS = 8

local Engine = {}
Engine.__index = Engine

local NULL = cjson.null

-- ---- small helpers -----------------------------------------------------------

local function _is_array(t)
  if type(t) ~= "table" then return false end
  local n = #t
  if n == 0 then return next(t) == nil end
  local count = 0
  for _ in pairs(t) do count = count + 1 end
  return count == n
end

--- Words in a string: the smoke engine's deterministic stand-in for tokens.
local function _count_words(s)
  local n = 0
  for _ in tostring(s):gmatch("%S+") do n = n + 1 end
  return n
end

--- The text of a chat message content: a string, or an array of parts of
--- which the {type = "text", text = ...} ones count; nil/null is "".
local function _content_text(content)
  if type(content) == "string" then return content end
  if type(content) == "table" then
    local parts = {}
    for _, p in ipairs(content) do
      if type(p) == "table" and p.type == "text" and type(p.text) == "string" then
        parts[#parts + 1] = p.text
      end
    end
    return table.concat(parts, " ")
  end
  return ""
end

--- Split text into exactly n pieces (some may be empty when the text is
--- shorter than n), never cutting a UTF-8 sequence; concatenated they give
--- the text back.
local function _split(text, n)
  local cps = {}
  if utf8.len(text) then
    for _, c in utf8.codes(text) do cps[#cps + 1] = utf8.char(c) end
  else
    for i = 1, #text do cps[i] = text:sub(i, i) end
  end
  local pieces, len = {}, #cps
  for i = 1, n do
    local from, to = (i - 1) * len // n + 1, i * len // n
    pieces[i] = table.concat(cps, "", from, to)
  end
  return pieces
end

local function _fnv1a(s)
  local h = 2166136261
  for i = 1, #s do
    h = ((h ~ s:byte(i)) * 16777619) & 0xffffffff
  end
  return h
end

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

local function _base64(s)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = s:byte(i, i + 2)
    local n = (a << 16) | ((b or 0) << 8) | (c or 0)
    local q = {}
    for k = 1, 4 do
      local idx = (n >> (6 * (4 - k))) & 63
      q[k] = B64:sub(idx + 1, idx + 1)
    end
    if not b then q[3], q[4] = "=", "=" elseif not c then q[4] = "=" end
    out[#out + 1] = table.concat(q)
  end
  return table.concat(out)
end

--- A deterministic unit vector for a string, rounded to 6 decimals.
local function _embed(s, dims)
  local v, norm = {}, 0
  for k = 1, dims do
    local x = (_fnv1a(k .. ":" .. s) % 2000001) / 1000000 - 1
    v[k] = x
    norm = norm + x * x
  end
  norm = math.sqrt(norm)
  for k = 1, dims do
    local x = norm > 0 and v[k] / norm or 0
    v[k] = math.floor(x * 1e6 + 0.5) / 1e6
  end
  return v
end

-- OpenAI error body: {"error": {"message", "type", "param", "code"}}.
local function _err(status, message, param, code, kind)
  return status, { error = {
    message = message,
    type = kind or "invalid_request_error",
    param = param or NULL,
    code = code or NULL,
  } }
end

-- ---- construction -------------------------------------------------------------

---@class obleth.SmokeEngineOpts
---@field model string|nil          served model name (default "obleth-smoke")
---@field replica string|nil        label for X-Obleth-Replica and answers (default "<hostname>")
---@field mode string|nil           "ok" | "never-healthy" | "flaky-health" (default "ok")
---@field startup_delay number|nil  seconds /health answers 503 after new() (default 0)
---@field tokens integer|nil        pieces a streamed answer is cut into, >= 1 (default 5)
---@field token_delay number|nil    seconds between streamed pieces (default 0.05)

--- Make an engine. Raises on a malformed option (a programming error: the
--- CLI validates user input first).
---@param opts obleth.SmokeEngineOpts|nil
---@return table engine with :handler(), :ready(), :set_replica(label), :stats()
function M.new(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("smoke_engine.new: opts must be a table", 2) end
  local mode = opts.mode or "ok"
  if not M.health_modes[mode] then error("smoke_engine.new: unknown mode '" .. tostring(mode) .. "'", 2) end
  local model = opts.model or M.DEFAULT_MODEL
  if type(model) ~= "string" or model == "" then error("smoke_engine.new: model must be a non-empty string", 2) end
  local tokens = opts.tokens or M.DEFAULT_TOKENS
  if math.type(tokens) ~= "integer" or tokens < 1 then error("smoke_engine.new: tokens must be an integer >= 1", 2) end
  local delay = opts.startup_delay or 0
  local token_delay = opts.token_delay or M.DEFAULT_TOKEN_DELAY
  if type(delay) ~= "number" or delay < 0 or type(token_delay) ~= "number" or token_delay < 0 then
    error("smoke_engine.new: startup_delay and token_delay must be numbers >= 0", 2)
  end
  return setmetatable({
    model = model,
    mode = mode,
    tokens = tokens,
    token_delay = token_delay,
    startup_delay = delay,
    replica = opts.replica or sys.hostname(),
    _started = loop.monotonic(),
    _created = math.floor(loop.now()),
    _health_calls = 0,
    _stats = { requests = 0, streams = 0, streams_aborted = 0 },
  }, Engine)
end

--- Set the label used in X-Obleth-Replica and answers (e.g. once the port is known).
---@param label string
function Engine:set_replica(label)
  if type(label) ~= "string" or label == "" then error("set_replica: label must be a non-empty string", 2) end
  self.replica = label
end

--- True once the startup delay has passed (regardless of mode).
---@return boolean
function Engine:ready()
  return loop.monotonic() - self._started >= self.startup_delay
end

--- Counters: {requests = n, streams = n, streams_aborted = n}.
---@return table
function Engine:stats()
  local s = {}
  for k, v in pairs(self._stats) do s[k] = v end
  return s
end

-- ---- routes --------------------------------------------------------------------
-- Each route returns status, body-table (sent as JSON), or handles the
-- response itself through res and returns status, nil, log-fields.

function Engine:_health()
  if not self:ready() then return 503, { status = "starting" } end
  if self.mode == "never-healthy" then return 503, { status = "unhealthy" } end
  if self.mode == "flaky-health" then
    self._health_calls = self._health_calls + 1
    if self._health_calls % 2 == 0 then return 503, { status = "unhealthy" } end
  end
  return 200, { status = "ok" }
end

function Engine:_models()
  return 200, { object = "list", data = {
    { id = self.model, object = "model", created = self._created, owned_by = M.OWNER },
  } }
end

-- Decode a POST body into an object and check its model; returns the
-- table, or nil, status, error-body.
function Engine:_request_body(req)
  local ok, body = pcall(cjson.decode, req.body or "")
  if not ok then
    return nil, _err(400, "We could not parse the JSON body of your request: " .. tostring(body):gsub("^.-: ", ""))
  end
  if type(body) ~= "table" or _is_array(body) and next(body) ~= nil then
    return nil, _err(400, "The request body must be a JSON object.")
  end
  if body.model == nil or body.model == NULL then
    return nil, _err(400, "you must provide a model parameter", "model")
  end
  if body.model ~= self.model then
    return nil, _err(404, ("The model `%s` does not exist."):format(tostring(body.model)),
      "model", "model_not_found")
  end
  if body.stream ~= nil and body.stream ~= NULL and type(body.stream) ~= "boolean" then
    return nil, _err(400, "'stream' must be a boolean", "stream")
  end
  return body
end

function Engine:_json_headers()
  return { ["Content-Type"] = "application/json", ["X-Obleth-Replica"] = self.replica }
end

function Engine:_sse_start(res)
  self._stats.streams = self._stats.streams + 1
  return res:start(200, {
    ["Content-Type"] = "text/event-stream",
    ["Cache-Control"] = "no-cache",
    ["X-Obleth-Replica"] = self.replica,
  })
end

local function _sse(res, payload)
  return res:write("data: " .. payload .. "\n\n")
end

-- A usage-only chunk has "choices": []; cjson 2.1.0 has no empty-array
-- marker (an empty table encodes as {}), so the array is spliced in.
local function _usage_chunk(fields)
  return '{"choices":[],' .. cjson.encode(fields):sub(2)
end

--- Stream pieces as SSE events: make(i, piece) builds each chunk table,
--- finish() the closing one. Returns log fields; stops when the client goes.
function Engine:_stream(res, pieces, make, finish, usage_fields)
  if not self:_sse_start(res) then
    self._stats.streams_aborted = self._stats.streams_aborted + 1
    return { aborted = true, events = 0 }
  end
  local events = 0
  local function send(payload)
    if not _sse(res, payload) then return false end
    events = events + 1
    return true
  end
  for i, piece in ipairs(pieces) do
    if i > 1 and self.token_delay > 0 then loop.sleep(self.token_delay) end
    if not send(cjson.encode(make(i, piece))) then
      self._stats.streams_aborted = self._stats.streams_aborted + 1
      res:finish()
      return { aborted = true, events = events }
    end
  end
  local ok = send(cjson.encode(finish()))
  if ok and usage_fields then ok = send(_usage_chunk(usage_fields)) end
  if ok then ok = send("[DONE]") end
  res:finish()
  if not ok then self._stats.streams_aborted = self._stats.streams_aborted + 1 end
  return { aborted = not ok or nil, events = events }
end

local function _include_usage(body)
  return type(body.stream_options) == "table" and body.stream_options.include_usage == true
end

function Engine:_chat(req, res)
  local body, status, err = self:_request_body(req)
  if not body then return status, err end
  local messages = body.messages
  if type(messages) ~= "table" or not _is_array(messages) or #messages == 0 then
    return _err(400, "'messages' is required and must be a non-empty array", "messages")
  end
  local prompt_tokens, last_user = 0, nil
  for i, m in ipairs(messages) do
    if type(m) ~= "table" or type(m.role) ~= "string" then
      return _err(400, ("'messages[%d]' must be an object with a string 'role'"):format(i - 1),
        ("messages[%d].role"):format(i - 1))
    end
    local text = _content_text(m.content)
    prompt_tokens = prompt_tokens + _count_words(text)
    if m.role == "user" then last_user = text end
  end
  local text = ("[%s] %s"):format(self.replica, last_user or "(no user message)")
  local n = self.tokens
  local usage = { prompt_tokens = prompt_tokens, completion_tokens = n, total_tokens = prompt_tokens + n }
  local id = "chatcmpl-" .. sys.random_hex(12)
  local created = math.floor(loop.now())
  if body.stream ~= true then
    return 200, {
      id = id, object = "chat.completion", created = created, model = self.model,
      choices = { { index = 0, message = { role = "assistant", content = text }, logprobs = NULL,
        finish_reason = "stop" } },
      usage = usage,
    }
  end
  local with_usage = _include_usage(body)
  local function chunk(delta, finish_reason)
    return {
      id = id, object = "chat.completion.chunk", created = created, model = self.model,
      choices = { { index = 0, delta = delta, logprobs = NULL, finish_reason = finish_reason } },
      usage = with_usage and NULL or nil,
    }
  end
  local fields = self:_stream(res, _split(text, n),
    function(i, piece)
      return chunk(i == 1 and { role = "assistant", content = piece } or { content = piece }, NULL)
    end,
    function() return chunk({}, "stop") end,
    with_usage and { id = id, object = "chat.completion.chunk", created = created, model = self.model,
      usage = usage } or nil)
  return 200, nil, fields
end

function Engine:_completions(req, res)
  local body, status, err = self:_request_body(req)
  if not body then return status, err end
  local prompts = body.prompt
  if type(prompts) == "string" then prompts = { prompts } end
  local ok = type(prompts) == "table" and _is_array(prompts) and #prompts > 0
  for _, p in ipairs(ok and prompts or {}) do ok = ok and type(p) == "string" end
  if not ok then
    return _err(400, "'prompt' is required and must be a string or a non-empty array of strings", "prompt")
  end
  local n = self.tokens
  local prompt_tokens, texts = 0, {}
  for i, p in ipairs(prompts) do
    prompt_tokens = prompt_tokens + _count_words(p)
    texts[i] = ("[%s] %s"):format(self.replica, p)
  end
  local completion_tokens = n * #prompts
  local usage = { prompt_tokens = prompt_tokens, completion_tokens = completion_tokens,
    total_tokens = prompt_tokens + completion_tokens }
  local id = "cmpl-" .. sys.random_hex(12)
  local created = math.floor(loop.now())
  local function chunk(index, text, finish_reason)
    return { id = id, object = "text_completion", created = created, model = self.model,
      choices = { { index = index, text = text, logprobs = NULL, finish_reason = finish_reason } } }
  end
  if body.stream ~= true then
    local choices = {}
    for i, t in ipairs(texts) do
      choices[i] = { index = i - 1, text = t, logprobs = NULL, finish_reason = "stop" }
    end
    return 200, { id = id, object = "text_completion", created = created, model = self.model,
      choices = choices, usage = usage }
  end
  -- several prompts stream one after the other, each with its own index
  local pieces, index_of = {}, {}
  for i, t in ipairs(texts) do
    for _, piece in ipairs(_split(t, n)) do
      pieces[#pieces + 1] = piece
      index_of[#pieces] = i - 1
    end
  end
  local fields = self:_stream(res, pieces,
    function(i, piece) return chunk(index_of[i], piece, NULL) end,
    function() return chunk(#texts - 1, "", "stop") end,
    _include_usage(body) and { id = id, object = "text_completion", created = created, model = self.model,
      usage = usage } or nil)
  return 200, nil, fields
end

function Engine:_embeddings(req)
  local body, status, err = self:_request_body(req)
  if not body then return status, err end
  local input = body.input
  local inputs
  if type(input) == "string" then
    inputs = { input }
  elseif type(input) == "table" and _is_array(input) and #input > 0 then
    if type(input[1]) == "number" then inputs = { input } else inputs = input end
  end
  local valid = inputs ~= nil
  for i, x in ipairs(inputs or {}) do
    if type(x) == "table" then
      -- token ids: embed their decimal spelling
      valid = valid and _is_array(x) and #x > 0
      for _, t in ipairs(x) do valid = valid and math.type(t) ~= nil and t == math.floor(t) end
      if valid then inputs[i] = "tokens:" .. table.concat(x, ",") end
    else
      valid = valid and type(x) == "string" and x ~= ""
    end
  end
  if not valid then
    return _err(400, "'input' must be a non-empty string, an array of non-empty strings or of token ids", "input")
  end
  local dims = body.dimensions
  if dims == nil or dims == NULL then
    dims = M.EMBEDDING_DIMENSIONS
  elseif math.type(dims) == nil or dims ~= math.floor(dims) or dims < 1 or dims > 4096 then
    return _err(400, "'dimensions' must be an integer from 1 to 4096", "dimensions")
  end
  dims = math.tointeger(dims)
  local format = body.encoding_format
  if format == nil or format == NULL then format = "float" end
  if format ~= "float" and format ~= "base64" then
    return _err(400, "'encoding_format' must be \"float\" or \"base64\"", "encoding_format")
  end
  local data, prompt_tokens = {}, 0
  for i, s in ipairs(inputs) do
    prompt_tokens = prompt_tokens + _count_words(s)
    local v = _embed(s, dims)
    local value = v
    if format == "base64" then
      local packed = {}
      for k, x in ipairs(v) do packed[k] = string.pack("<f", x) end
      value = _base64(table.concat(packed))
    end
    data[i] = { object = "embedding", index = i - 1, embedding = value }
  end
  return 200, { object = "list", data = data, model = self.model,
    usage = { prompt_tokens = prompt_tokens, total_tokens = prompt_tokens } }
end

local ROUTES = {
  ["/health"] = { GET = Engine._health },
  ["/v1/models"] = { GET = Engine._models },
  ["/v1/chat/completions"] = { POST = Engine._chat },
  ["/v1/completions"] = { POST = Engine._completions },
  ["/v1/embeddings"] = { POST = Engine._embeddings },
}

function Engine:_dispatch(req, res)
  local route = ROUTES[req.path]
  if not route then
    return _err(404, ("Unknown path %s"):format(req.path), nil, "not_found")
  end
  local method = req.method == "HEAD" and "GET" or req.method
  local fn = route[method]
  if not fn then
    local allowed = {}
    for m in pairs(route) do allowed[#allowed + 1] = m end
    local status, body = _err(405, ("Method %s not allowed on %s"):format(req.method, req.path),
      nil, "method_not_allowed")
    return status, body, nil, { Allow = table.concat(allowed, ", ") }
  end
  return fn(self, req, res)
end

--- The request handler for http.server: answers every route above and
--- logs one `smoke_request` line per request (method, path, status,
--- duration in seconds; streams also give events and aborted).
---@return fun(req: table, res: userdata)
function Engine:handler()
  return function(req, res)
    local t0 = loop.monotonic()
    self._stats.requests = self._stats.requests + 1
    local ok, status, body, fields, extra_headers = xpcall(self._dispatch, debug.traceback, self, req, res)
    local line = { method = req.method, path = req.path, remote = req.remote_addr }
    if not ok then
      line.status, line.duration = 500, ("%.3f"):format(loop.monotonic() - t0)
      log.info("smoke_request", line)
      error(status, 0) -- the server logs the traceback and answers 500
    end
    if body ~= nil then
      local headers = self:_json_headers()
      for k, v in pairs(extra_headers or {}) do headers[k] = v end
      -- HEAD gets the GET status and headers, never a body (the host would send one)
      res:send(status, headers, req.method == "HEAD" and "" or cjson.encode(body))
    end
    line.status, line.duration = status, ("%.3f"):format(loop.monotonic() - t0)
    for k, v in pairs(fields or {}) do line[k] = v end
    log.info("smoke_request", line)
  end
end

-- exposed for specs of the helpers
M._split = _split
M._base64 = _base64
M._embed = _embed

return M
