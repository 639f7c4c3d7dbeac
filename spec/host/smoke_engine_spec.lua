-- The smoke engine speaks the OpenAI HTTP shapes over real sockets: the
-- handler is mounted on an in-process server for the API cases, and
-- `obleth smoke-engine` runs as a child process for the lifecycle cases
-- (flags, environment, signals, exit codes).
local cjson = require("cjson")
local http = require("obleth.http")
local loop = require("obleth.loop")
local sys = require("obleth.sys")
local util = require("spec.support.util")
local smoke = require("obleth.smoke_engine")
local cli = require("obleth.cli.smoke_engine")

local MODEL = "smoke-test-model"

-- Start an engine on 127.0.0.1:<free port>; returns engine, base url, server.
local function start(opts)
  opts = opts or {}
  opts.model = opts.model or MODEL
  local engine = smoke.new(opts)
  local srv = assert(http.server{ host = "127.0.0.1", port = 0, handler = engine:handler() })
  return engine, "http://127.0.0.1:" .. srv:port(), srv
end

local function get(url)
  return assert(http.request{ url = url, timeout = 5 })
end

local function post(url, body)
  return assert(http.request{
    url = url, method = "POST", timeout = 5,
    headers = { ["Content-Type"] = "application/json" },
    body = type(body) == "string" and body or cjson.encode(body),
  })
end

-- POST with stream = true; returns the number of reads, the SSE payloads
-- (the text after "data: " of each event), the response and the seconds taken.
local function post_stream(url, body)
  local t0 = loop.monotonic()
  local resp = assert(http.request{
    url = url, method = "POST", timeout = 5, stream = true,
    headers = { ["Content-Type"] = "application/json" }, body = cjson.encode(body),
  })
  local reads, buf = 0, {}
  while true do
    local chunk, err = resp:read()
    assert.is_nil(err)
    if not chunk then break end
    reads = reads + 1
    buf[#buf + 1] = chunk
  end
  local payloads = {}
  local text = table.concat(buf)
  for event in text:gmatch("(.-)\n\n") do
    payloads[#payloads + 1] = assert(event:match("^data: (.*)$"), "not an SSE data line: " .. event)
  end
  assert.equal("", (text:gsub(".-\n\n", "")), "bytes after the last event")
  return reads, payloads, resp, loop.monotonic() - t0
end

local function chat_body(extra)
  local b = { model = MODEL, messages = {
    { role = "system", content = "be brief" },
    { role = "user", content = "first question" },
    { role = "assistant", content = "first answer" },
    { role = "user", content = "ping from the spec" },
  } }
  for k, v in pairs(extra or {}) do b[k] = v end
  return b
end

local function assert_openai_error(resp, status, param, code)
  assert.equal(status, resp.status)
  assert.matches("application/json", resp.headers["content-type"], 1, true)
  local e = cjson.decode(resp.body).error
  assert.is_table(e)
  assert.equal("invalid_request_error", e.type)
  assert.is_string(e.message)
  assert.equal(param == nil and cjson.null or param, e.param)
  assert.equal(code == nil and cjson.null or code, e.code)
end

describe("smoke engine API (in-process server)", function()
  -- the per-request log lines are pinned by the process cases; keep this output readable
  local log = require("obleth.log")
  local level
  setup(function() level = log.level(); log.set_level("warn") end)
  teardown(function() log.set_level(level) end)

  it("/health is 503 during the startup delay and 200 after; /v1/models is 200 all along", function()
    local _, base, srv = start{ startup_delay = 0.3 }
    finally(function() srv:close() end)
    local h = get(base .. "/health")
    assert.equal(503, h.status)
    local m = get(base .. "/v1/models")
    assert.equal(200, m.status)
    loop.sleep(0.35)
    h = get(base .. "/health")
    assert.equal(200, h.status)
    assert.same({ status = "ok" }, cjson.decode(h.body))
  end)

  it("/v1/models has the OpenAI list shape with the served name", function()
    local _, base, srv = start()
    finally(function() srv:close() end)
    local m = get(base .. "/v1/models")
    assert.equal(200, m.status)
    local body = cjson.decode(m.body)
    assert.equal("list", body.object)
    assert.equal(1, #body.data)
    local d = body.data[1]
    assert.equal(MODEL, d.id)
    assert.equal("model", d.object)
    assert.equal("obleth-smoke", d.owned_by)
    assert.is_true(math.abs(d.created - os.time()) < 60)
  end)

  it("never-healthy keeps /health at 503 while /v1/models answers 200", function()
    local _, base, srv = start{ mode = "never-healthy" }
    finally(function() srv:close() end)
    for _ = 1, 3 do
      assert.equal(503, get(base .. "/health").status)
      assert.equal(200, get(base .. "/v1/models").status)
      loop.sleep(0.02)
    end
  end)

  it("flaky-health alternates 200 and 503, starting healthy", function()
    local _, base, srv = start{ mode = "flaky-health" }
    finally(function() srv:close() end)
    local seen = {}
    for i = 1, 4 do seen[i] = get(base .. "/health").status end
    assert.same({ 200, 503, 200, 503 }, seen)
  end)

  it("a chat completion has the OpenAI shape and echoes the last user message with the replica label", function()
    local _, base, srv = start{ replica = "replica-7", tokens = 3 }
    finally(function() srv:close() end)
    local r = post(base .. "/v1/chat/completions", chat_body())
    assert.equal(200, r.status)
    assert.equal("replica-7", r.headers["x-obleth-replica"])
    assert.matches("application/json", r.headers["content-type"], 1, true)
    local b = cjson.decode(r.body)
    assert.matches("^chatcmpl%-", b.id)
    assert.equal("chat.completion", b.object)
    assert.equal(MODEL, b.model)
    assert.is_true(math.abs(b.created - os.time()) < 60)
    assert.equal(1, #b.choices)
    local c = b.choices[1]
    assert.equal(0, c.index)
    assert.equal("stop", c.finish_reason)
    assert.same({ role = "assistant", content = "[replica-7] ping from the spec" }, c.message)
    -- prompt words: "be brief" 2 + "first question" 2 + "first answer" 2 + "ping from the spec" 4
    assert.same({ prompt_tokens = 10, completion_tokens = 3, total_tokens = 13 }, b.usage)
  end)

  it("a streamed chat completion arrives as several chunks, role first, stop last, then [DONE]", function()
    local _, base, srv = start{ replica = "r1", tokens = 5, token_delay = 0.04 }
    finally(function() srv:close() end)
    local reads, payloads, resp, took = post_stream(base .. "/v1/chat/completions", chat_body{ stream = true })
    assert.equal(200, resp.status)
    assert.matches("text/event-stream", resp.headers["content-type"], 1, true)
    assert.equal("r1", resp.headers["x-obleth-replica"])
    assert.is_true(reads >= 3, "the stream came in " .. reads .. " read(s)")
    assert.is_true(took >= 4 * 0.04 - 0.01, "five tokens with 40 ms between them took " .. took .. " s")
    -- 5 token chunks + the finish chunk + [DONE]
    assert.equal(7, #payloads)
    assert.equal("[DONE]", payloads[7])
    local text, id = {}, nil
    for i = 1, 5 do
      local c = cjson.decode(payloads[i])
      assert.equal("chat.completion.chunk", c.object)
      assert.equal(MODEL, c.model)
      id = id or c.id
      assert.equal(id, c.id)
      assert.equal(0, c.choices[1].index)
      assert.equal(cjson.null, c.choices[1].finish_reason)
      if i == 1 then
        assert.equal("assistant", c.choices[1].delta.role)
      else
        assert.is_nil(c.choices[1].delta.role)
      end
      text[i] = c.choices[1].delta.content
    end
    assert.matches("^chatcmpl%-", id)
    assert.equal("[r1] ping from the spec", table.concat(text))
    local last = cjson.decode(payloads[6])
    assert.equal("stop", last.choices[1].finish_reason)
    assert.same({}, last.choices[1].delta)
  end)

  it("stream_options.include_usage adds a usage chunk with empty choices before [DONE]", function()
    local _, base, srv = start{ tokens = 2, token_delay = 0 }
    finally(function() srv:close() end)
    local _, payloads = post_stream(base .. "/v1/chat/completions",
      chat_body{ stream = true, stream_options = { include_usage = true } })
    assert.equal(5, #payloads)
    assert.equal("[DONE]", payloads[5])
    assert.matches('"choices":[]', payloads[4], 1, true)
    assert.same({ prompt_tokens = 10, completion_tokens = 2, total_tokens = 12 }, cjson.decode(payloads[4]).usage)
  end)

  it("stops streaming when the client goes away", function()
    local engine, base, srv = start{ tokens = 50, token_delay = 0.02 }
    finally(function() srv:close() end)
    local resp = assert(http.request{
      url = base .. "/v1/chat/completions", method = "POST", stream = true, timeout = 5,
      body = cjson.encode(chat_body{ stream = true }),
    })
    assert.truthy(resp:read())
    resp:close()
    -- 50 tokens take a second; the engine must notice well before that
    local t0 = loop.monotonic()
    while engine:stats().streams_aborted == 0 and loop.monotonic() - t0 < 0.5 do loop.sleep(0.02) end
    assert.equal(1, engine:stats().streams_aborted)
  end)

  it("a model other than the served one is a 404 model_not_found in the OpenAI error shape", function()
    local _, base, srv = start()
    finally(function() srv:close() end)
    local r = post(base .. "/v1/chat/completions", chat_body{ model = "gpt-4o" })
    assert_openai_error(r, 404, "model", "model_not_found")
    assert.matches("gpt-4o", cjson.decode(r.body).error.message, 1, true)
    assert_openai_error(post(base .. "/v1/completions", { model = "other", prompt = "x" }), 404, "model",
      "model_not_found")
  end)

  it("bad JSON, a non-object body, no model and no messages are 400s in the OpenAI error shape", function()
    local _, base, srv = start()
    finally(function() srv:close() end)
    local url = base .. "/v1/chat/completions"
    assert_openai_error(post(url, "{not json"), 400)
    assert_openai_error(post(url, "[1, 2]"), 400)
    assert_openai_error(post(url, { messages = { { role = "user", content = "hi" } } }), 400, "model")
    assert_openai_error(post(url, { model = MODEL }), 400, "messages")
    assert_openai_error(post(url, { model = MODEL, messages = "hi" }), 400, "messages")
    assert_openai_error(post(url, { model = MODEL, messages = { { content = "no role" } } }), 400,
      "messages[0].role")
  end)

  it("unknown paths are 404 and wrong methods 405 with Allow, both with the replica header", function()
    local _, base, srv = start{ replica = "rx" }
    finally(function() srv:close() end)
    local r = get(base .. "/v1/nope")
    assert.equal(404, r.status)
    assert.equal("rx", r.headers["x-obleth-replica"])
    r = get(base .. "/v1/chat/completions")
    assert.equal(405, r.status)
    assert.equal("POST", r.headers["allow"])
    assert.equal("rx", r.headers["x-obleth-replica"])
  end)

  it("/v1/completions answers text_completion, plain and streamed", function()
    local _, base, srv = start{ replica = "rc", tokens = 3, token_delay = 0.01 }
    finally(function() srv:close() end)
    local r = post(base .. "/v1/completions", { model = MODEL, prompt = "once upon a time" })
    assert.equal(200, r.status)
    local b = cjson.decode(r.body)
    assert.matches("^cmpl%-", b.id)
    assert.equal("text_completion", b.object)
    assert.equal(MODEL, b.model)
    assert.equal("[rc] once upon a time", b.choices[1].text)
    assert.equal("stop", b.choices[1].finish_reason)
    assert.same({ prompt_tokens = 4, completion_tokens = 3, total_tokens = 7 }, b.usage)

    local _, payloads = post_stream(base .. "/v1/completions", { model = MODEL, prompt = "once upon a time",
      stream = true })
    assert.equal(5, #payloads) -- 3 pieces, finish, [DONE]
    assert.equal("[DONE]", payloads[5])
    local text = {}
    for i = 1, 3 do
      local c = cjson.decode(payloads[i])
      assert.equal("text_completion", c.object)
      assert.equal(cjson.null, c.choices[1].finish_reason)
      text[i] = c.choices[1].text
    end
    assert.equal("[rc] once upon a time", table.concat(text))
    assert.equal("stop", cjson.decode(payloads[4]).choices[1].finish_reason)
    assert_openai_error(post(base .. "/v1/completions", { model = MODEL }), 400, "prompt")
  end)

  it("/v1/embeddings gives deterministic unit vectors, as floats or base64 float32", function()
    local _, base, srv = start()
    finally(function() srv:close() end)
    local url = base .. "/v1/embeddings"
    local r = post(url, { model = MODEL, input = { "alpha", "beta", "alpha" } })
    assert.equal(200, r.status)
    local b = cjson.decode(r.body)
    assert.equal("list", b.object)
    assert.equal(MODEL, b.model)
    assert.same({ prompt_tokens = 3, total_tokens = 3 }, b.usage)
    assert.equal(3, #b.data)
    for i, d in ipairs(b.data) do
      assert.equal("embedding", d.object)
      assert.equal(i - 1, d.index)
      assert.equal(smoke.EMBEDDING_DIMENSIONS, #d.embedding)
      local norm = 0
      for _, x in ipairs(d.embedding) do norm = norm + x * x end
      assert.is_true(math.abs(norm - 1) < 1e-4, "norm^2 " .. norm)
    end
    assert.same(b.data[1].embedding, b.data[3].embedding)
    assert.are_not.same(b.data[1].embedding, b.data[2].embedding)

    local one = cjson.decode(post(url, { model = MODEL, input = "alpha", dimensions = 4 }).body)
    assert.equal(4, #one.data[1].embedding)

    local b64 = cjson.decode(post(url, { model = MODEL, input = "alpha", encoding_format = "base64" }).body)
    local s = b64.data[1].embedding
    assert.is_string(s)
    -- decode base64 independently of the engine
    local alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    local bits = s:gsub("=", ""):gsub(".", function(ch)
      local v = alphabet:find(ch, 1, true) - 1
      local out = {}
      for k = 5, 0, -1 do out[#out + 1] = (v >> k) & 1 end
      return table.concat(out)
    end)
    local bytes = bits:gsub("%d%d%d%d%d%d%d%d", function(byte) return string.char(tonumber(byte, 2)) end)
    bytes = bytes:sub(1, 4 * smoke.EMBEDDING_DIMENSIONS)
    for k = 1, smoke.EMBEDDING_DIMENSIONS do
      local x = string.unpack("<f", bytes, 4 * k - 3)
      assert.is_true(math.abs(x - b.data[1].embedding[k]) < 1e-6)
    end
    assert_openai_error(post(url, { model = MODEL, input = "" }), 400, "input")
  end)
end)

describe("smoke-engine arguments", function()
  local function env_of(t) return function(name) return t[name] end end

  it("takes the port and served name from OBLETH_PORT and OBLETH_API_MODEL_NAME when no flags say", function()
    local opts = assert(cli.parse({}, env_of{ OBLETH_PORT = "8123", OBLETH_API_MODEL_NAME = "org/m-7b",
      OBLETH_REPLICA_ID = "job42-r0" }))
    assert.equal(8123, opts.port)
    assert.equal("org/m-7b", opts.model)
    assert.equal("job42-r0", opts.replica_id)
    assert.equal("0.0.0.0", opts.host)
    assert.equal("ok", opts.mode)
  end)

  it("flags win over the environment and accept --flag=value", function()
    local opts = assert(cli.parse({ "--port=9001", "--model", "flag-model", "--host", "::1", "--tokens", "7",
      "--token-delay", "0", "--startup-delay", "1.5", "--mode", "flaky-health", "--fail-port-in-use" },
      env_of{ OBLETH_PORT = "8123", OBLETH_API_MODEL_NAME = "env-model" }))
    assert.equal(9001, opts.port)
    assert.equal("flag-model", opts.model)
    assert.equal("::1", opts.host)
    assert.equal(7, opts.tokens)
    assert.equal(0, opts.token_delay)
    assert.equal(1.5, opts.startup_delay)
    assert.equal("flaky-health", opts.mode)
    assert.is_true(opts.fail_port_in_use)
  end)

  it("rejects bad ports, hosts, modes and flags with a message naming the culprit", function()
    local none = env_of{}
    local cases = {
      { {}, "OBLETH_PORT" },
      { { "--port", "65536" }, "65536" },
      { { "--port", "80a" }, "80a" },
      { { "--port", "-1" }, "-1" },
      { { "--port" }, "needs a value" },
      { { "--port", "1", "--host", "localhost" }, "localhost" },
      { { "--port", "1", "--host", "256.1.1.1" }, "256.1.1.1" },
      { { "--port", "1", "--mode", "sleepy" }, "sleepy" },
      { { "--port", "1", "--mode", "exit" }, "--exit-after" },
      { { "--port", "1", "--tokens", "0" }, "--tokens" },
      { { "--port", "1", "--bogus" }, "--bogus" },
    }
    for _, c in ipairs(cases) do
      local opts, err = cli.parse(c[1], none)
      assert.is_nil(opts, table.concat(c[1], " "))
      assert.matches(c[2], err, 1, true)
    end
    assert.is_nil((cli.parse({}, env_of{ OBLETH_PORT = "http" })))
  end)
end)

describe("obleth smoke-engine process", function()
  local function listening_port(proc)
    local line = proc:wait_line("listening on", 5)
    assert.truthy(line, "the engine never said it was listening")
    return tonumber(line:match(":(%d+) model="))
  end

  it("serves on the given host, logs its start and each request, and exits 0 on SIGTERM", function()
    local proc = util.spawn_obleth({ "smoke-engine", "--port", "0", "--host", "127.0.0.1", "--model", "m1",
      "--tokens", "2" }, 20)
    local port = listening_port(proc)
    local base = "http://127.0.0.1:" .. port
    local h = get(base .. "/health")
    assert.equal(200, h.status)
    assert.equal(sys.hostname() .. ":" .. port, h.headers["x-obleth-replica"])
    local r = post(base .. "/v1/chat/completions", { model = "m1", messages = { { role = "user", content = "hi" } } })
    assert.equal(200, r.status)
    assert.equal(("[%s:%d] hi"):format(sys.hostname(), port), cjson.decode(r.body).choices[1].message.content)
    proc:kill("TERM")
    local status, _, err = proc:wait()
    assert.equal(0, status)
    assert.matches("event=smoke_engine_started", err, 1, true)
    assert.matches("port=" .. port, err, 1, true)
    assert.matches("model=m1", err, 1, true)
    assert.matches("event=smoke_request duration=[%d.]+ method=POST path=/v1/chat/completions[^\n]*status=200", err)
    assert.matches("event=smoke_engine_signal[^\n]*signal=TERM", err)
  end)

  it("runs with no flags from OBLETH_PORT, OBLETH_API_MODEL_NAME and OBLETH_REPLICA_ID, and exits 0 on SIGINT",
    function()
      -- find a free port, then hand it over through the environment
      local probe = assert(http.server{ host = "127.0.0.1", port = 0, handler = function() return 200 end })
      local port = probe:port()
      probe:close()
      local errf = os.tmpname()
      -- the pid read back is the engine's own (sh and env exec into it): a signal sent through a
      -- wrapper such as timeout(1) races the wrapper's fork and can end it with 130 instead
      local fh = assert(io.popen(("sh -c 'echo $$; exec \"$0\" \"$@\"' env OBLETH_PORT=%d " ..
        "OBLETH_API_MODEL_NAME=env/model OBLETH_REPLICA_ID=job9-r2 %s smoke-engine 2>%s")
        :format(port, util.shq(util.obleth()), util.shq(errf))))
      local pid = tonumber(fh:read("l"))
      local reaped = false
      finally(function()
        if not reaped then pcall(sys.kill, pid, "KILL") end -- an assertion failed before it ended
        os.remove(errf)
      end)
      assert.matches("listening on 0.0.0.0:" .. port, fh:read("l"), 1, true)
      local base = "http://127.0.0.1:" .. port
      local m = cjson.decode(get(base .. "/v1/models").body)
      assert.equal("env/model", m.data[1].id)
      local r = post(base .. "/v1/chat/completions",
        { model = "env/model", messages = { { role = "user", content = "who?" } } })
      assert.equal("job9-r2", r.headers["x-obleth-replica"])
      assert.equal("[job9-r2] who?", cjson.decode(r.body).choices[1].message.content)
      sys.kill(pid, "INT")
      local _, _, status = fh:close()
      reaped = true
      assert.equal(0, status)
    end)

  it("--exit-after alone exits 0 after that time; --mode exit exits 1", function()
    local t0 = loop.monotonic()
    local status = util.run_obleth({ "smoke-engine", "--port", "0", "--host", "127.0.0.1", "--exit-after", "0.2" },
      10)
    local took = loop.monotonic() - t0
    assert.equal(0, status)
    assert.is_true(took >= 0.2, "exited after " .. took .. " s")
    local status_exit, _, err = util.run_obleth({ "smoke-engine", "--port", "0", "--host", "127.0.0.1",
      "--mode", "exit", "--exit-after", "0.1" }, 10)
    assert.equal(1, status_exit)
    assert.matches("event=smoke_engine_exit_after", err, 1, true)
  end)

  it("crash-on-start exits 3 at once without serving", function()
    local t0 = loop.monotonic()
    local status, out, err = util.run_obleth({ "smoke-engine", "--port", "0", "--mode", "crash-on-start" }, 10)
    assert.equal(3, status)
    assert.is_true(loop.monotonic() - t0 < 2)
    assert.equal("", out)
    assert.matches("failed to load model", err, 1, true)
  end)

  it("a port someone else holds exits 98 under --fail-port-in-use, 1 otherwise", function()
    local holder = assert(http.server{ host = "127.0.0.1", port = 0, handler = function() return 200 end })
    finally(function() holder:close() end)
    local port = tostring(holder:port())
    local status, _, err = util.run_obleth({ "smoke-engine", "--port", port, "--host", "127.0.0.1",
      "--fail-port-in-use" }, 10)
    assert.equal(98, status)
    assert.matches("cannot bind 127.0.0.1:" .. port, err, 1, true)
    status = util.run_obleth({ "smoke-engine", "--port", port, "--host", "127.0.0.1" }, 10)
    assert.equal(1, status)
  end)

  it("bad arguments exit 2 with the usage on stderr", function()
    for _, args in ipairs({
      { "smoke-engine", "--port", "99999" },
      { "smoke-engine", "--port", "8000", "--host", "not-an-ip" },
    }) do
      local status, out, err = util.run_obleth(args, 10)
      assert.equal(2, status)
      assert.equal("", out)
      assert.matches(args[#args], err, 1, true)
      assert.matches("usage: obleth smoke-engine", err, 1, true)
    end
    local status, out = util.run_obleth({ "smoke-engine", "--help" }, 10)
    assert.equal(0, status)
    assert.matches("usage: obleth smoke-engine", out, 1, true)
  end)
end)
