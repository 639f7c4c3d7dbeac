-- hf.inspect and POST /api/v1/hf/inspect against the stand-in Hub
-- (spec/support/fake_hub.lua), which serves the Hub API's response shapes.
local cjson = require("cjson")
local fake_hub = require("spec.support.fake_hub")
local hf = require("obleth.hf")
local loop = require("obleth.loop")
local util = require("spec.support.util")

local T = fake_hub.TOKENS

local function engines_of(r)
  local out = {}
  for _, e in ipairs(r.engines) do out[#out + 1] = e.engine end
  return out
end

-- every string anywhere in v, concatenated (to look for a token in it)
local function all_text(v, acc)
  acc = acc or {}
  if type(v) == "string" then acc[#acc + 1] = v
  elseif type(v) == "table" then
    for k, x in pairs(v) do all_text(k, acc); all_text(x, acc) end
  end
  return table.concat(acc, "\n")
end

local function slurp(path)
  local fh = io.open(path)
  if not fh then return nil end
  local s = fh:read("a")
  fh:close()
  return s
end

-- Run a child obleth in the background (so this process keeps serving the
-- stand-in Hub) and wait for it: returns exit code, stdout, stderr.
local function run_child(env, script, timeout)
  local out, err, rc = os.tmpname(), os.tmpname(), os.tmpname()
  os.remove(rc)
  local path = util.tmpfile(script)
  local envs = {}
  for k, v in pairs(env) do envs[#envs + 1] = k .. "=" .. util.shq(v) end
  local cmd = ("%s timeout %d %s lua %s >%s 2>%s; echo $? >%s.tmp && mv %s.tmp %s"):format(
    table.concat(envs, " "), timeout or 30, util.shq(util.obleth()), util.shq(path), util.shq(out), util.shq(err),
    util.shq(rc), util.shq(rc), util.shq(rc))
  os.execute("(" .. cmd .. ") >/dev/null 2>&1 &")
  local t0 = loop.monotonic()
  local code
  while loop.monotonic() - t0 < (timeout or 30) + 5 do
    code = tonumber(slurp(rc) or "")
    if code then break end
    loop.sleep(0.05)
  end
  local o, e = slurp(out), slurp(err)
  for _, f in ipairs({ out, err, rc, path }) do os.remove(f) end
  return code, o, e
end

describe("obleth.hf.inspect", function()
  local hub, other, level
  local log = require("obleth.log")

  setup(function()
    level = log.level()
    log.set_level("warn") -- one hf_inspect line per call is noise here
    other = fake_hub.start_other()
    hub = fake_hub.start { offsite = other.url }
  end)

  teardown(function()
    hub.close()
    other.close()
    log.set_level(level)
  end)

  before_each(function()
    hub.reset()
    other.requests = {}
  end)

  local function inspect(repo, opts, client)
    opts = opts or {}
    opts.endpoint = opts.endpoint or hub.url
    return (client or hf.client()):inspect(repo, opts)
  end

  it("reads /api/models/<repo>?blobs=true and sends no Authorization without a token", function()
    local r = assert(inspect("Qwen/Qwen2.5-0.5B-Instruct"))
    assert.equal(1, #hub.requests)
    local q = hub.requests[1]
    assert.equal("GET", q.method)
    assert.equal("/api/models/Qwen/Qwen2.5-0.5B-Instruct", q.path)
    assert.equal("true", q.query.blobs)
    assert.is_nil(q.authorization)
    assert.equal("Qwen/Qwen2.5-0.5B-Instruct", r.repo_id)
    assert.equal("7ae557604adf67be50417f59c2c2f167def9a775", r.revision)
    assert.is_false(r.gated)
    assert.is_false(r.private)
    assert.equal("public", r.access)
    assert.same({ "vllm", "sglang" }, engines_of(r))
    assert.equal(988097824, r.engines[1].size_bytes)
  end)

  it("asks for a revision with '/' percent-encoded, and reports the commit", function()
    local r = assert(inspect("Qwen/Qwen2.5-0.5B-Instruct", { revision = "refs/pr/1" }))
    assert.equal("/api/models/Qwen/Qwen2.5-0.5B-Instruct/revision/refs%2Fpr%2F1", hub.requests[1].path)
    assert.equal("refs/pr/1", r.requested_revision)
    assert.equal("7ae557604adf67be50417f59c2c2f167def9a775", r.revision)
  end)

  it("an unknown revision is not_found on the revision field", function()
    local r, err = inspect("Qwen/Qwen2.5-0.5B-Instruct", { revision = "v9.9" })
    assert.is_nil(r)
    assert.equal("not_found", err.code)
    assert.equal("revision", err.field)
    assert.truthy(err.message:find("v9.9", 1, true))
  end)

  it("detects every repo shape through the API", function()
    local want = {
      ["Qwen/Qwen2.5-0.5B-Instruct"] = { "vllm", "sglang" },
      ["Qwen/Qwen2.5-7B-Instruct"] = { "vllm", "sglang" },
      ["bartowski/Llama-3.2-1B-Instruct-GGUF"] = { "llama.cpp", "ollama" },
      ["unsloth/Qwen3-235B-A22B-GGUF"] = { "llama.cpp", "ollama" },
      ["google/gemma-2b"] = { "vllm", "sglang", "llama.cpp", "ollama" },
      ["facebook/opt-125m"] = { "vllm", "sglang" },
      ["obleth-fixtures/llama-3.1-8b-sql-lora"] = { "vllm" },
      ["tloen/alpaca-lora-7b"] = { "vllm" },
      ["mistralai/Mistral-7B-Instruct-v0.3"] = { "vllm", "sglang" },
      ["mistralai/Pixtral-12B-2409"] = { "vllm" },
      ["obleth-fixtures/sparse"] = {},
      ["obleth-fixtures/no-sizes"] = { "vllm", "sglang", "llama.cpp", "ollama" },
    }
    for repo, engines in pairs(want) do
      local r, err = inspect(repo, { gpu_type = "h100" })
      assert(r, repo .. ": " .. tostring(err and err.message))
      assert.same(engines, engines_of(r), repo)
    end
  end)

  it("a gated repo without a token: gated_no_token, telling where to set the token", function()
    local r, err = inspect("meta-llama/Llama-3.1-8B-Instruct")
    assert.is_nil(r)
    assert.equal("gated_no_token", err.code)
    assert.truthy(err.message:find("set the Hugging Face token in Cluster defaults", 1, true))
    for _, q in ipairs(hub.requests) do assert.is_nil(q.authorization) end
  end)

  it("a gated repo with a token that has no access: no_access, pointing at the repo page", function()
    local r, err = inspect("meta-llama/Llama-3.1-8B-Instruct", { token = T.no_access })
    assert.is_nil(r)
    assert.equal("no_access", err.code)
    assert.truthy(err.message:find("request access on the repo page " .. hub.url
      .. "/meta-llama/Llama-3.1-8B-Instruct", 1, true), err.message)
    assert.equal("/api/models/meta-llama/Llama-3.1-8B-Instruct/auth-check", hub.requests[2].path)
    assert.equal("Bearer " .. T.no_access, hub.requests[2].authorization)
  end)

  it("a gated repo with a token that has access: the inspection, gated = manual", function()
    local r = assert(inspect("meta-llama/Llama-3.1-8B-Instruct", { token = T.granted }))
    assert.equal("manual", r.gated)
    assert.equal("granted", r.access)
    assert.same({ "vllm", "sglang" }, engines_of(r))
  end)

  it("an unknown repo without a token (the Hub's 401) is not_found, mentioning private repos", function()
    local r, err = inspect("nobody/no-such-model")
    assert.is_nil(r)
    assert.equal("not_found", err.code)
    assert.equal("repo_id", err.field)
    assert.truthy(err.message:find("private", 1, true))
  end)

  it("an unknown repo with a token (the Hub's 404) is not_found", function()
    local _, err = inspect("nobody/no-such-model", { token = T.granted })
    assert.equal("not_found", err.code)
  end)

  it("a private repo: not_found without a token, the inspection with one that can see it", function()
    local _, err = inspect("obleth-fixtures/private-model")
    assert.equal("not_found", err.code)
    local r = assert(inspect("obleth-fixtures/private-model", { token = T.granted }))
    assert.is_true(r.private)
  end)

  it("a token the Hub rejects: invalid_token", function()
    local _, err = inspect("Qwen/Qwen2.5-0.5B-Instruct", { token = "hf_notARealToken000000000000000" })
    assert.equal("invalid_token", err.code)
  end)

  it("rate limited: retry_after from Retry-After, else from the RateLimit header", function()
    local _, err = inspect("obleth-fixtures/rate-limited")
    assert.equal("rate_limited", err.code)
    assert.equal(42, err.retry_after)
    assert.truthy(err.message:find("42 s", 1, true))
    _, err = inspect("obleth-fixtures/rate-limited-2")
    assert.equal(55, err.retry_after)
  end)

  it("a Hub answering 503, a closed port and a timeout are hub_unreachable", function()
    local _, err = inspect("obleth-fixtures/server-error")
    assert.equal("hub_unreachable", err.code)
    local http = require("obleth.http")
    local srv = assert(http.server { host = "127.0.0.1", port = 0, handler = function() return { status = 200 } end })
    local dead = ("http://127.0.0.1:%d"):format(srv:port())
    srv:close()
    _, err = inspect("Qwen/Qwen2.5-0.5B-Instruct", { endpoint = dead })
    assert.equal("hub_unreachable", err.code)
    assert.truthy(err.message:find(dead, 1, true))
    _, err = inspect("obleth-fixtures/slow", { timeout = 0.5 })
    assert.equal("hub_unreachable", err.code)
  end)

  it("a repo id that is not one makes no request at all", function()
    for _, bad in ipairs({ "../../api/whoami-v2", "a/b/c", "http://evil.example/x", "a/b?x=1", "a/b%2F..",
      "a/b#x", " a/b", "", "a/b\r\nHost: evil" }) do
      local r, err = inspect(bad, { token = T.granted })
      assert.is_nil(r)
      assert.equal("invalid_repo_id", err.code)
      assert.equal("repo_id", err.field)
    end
    local _, err = inspect("Qwen/Qwen2.5-0.5B-Instruct", { revision = "../../x" })
    assert.equal("invalid_revision", err.code)
    assert.equal(0, #hub.requests)
  end)

  it("answers are cached per endpoint, repo, revision and token presence; errors are not", function()
    local now = 1000
    local c = hf.client { now = function() return now end }
    assert.is_false(assert(inspect("Qwen/Qwen2.5-0.5B-Instruct", nil, c)).cached)
    assert.is_true(assert(inspect("Qwen/Qwen2.5-0.5B-Instruct", nil, c)).cached)
    assert.equal(1, #hub.requests)
    inspect("Qwen/Qwen2.5-0.5B-Instruct", { revision = "main" }, c)
    inspect("Qwen/Qwen2.5-0.5B-Instruct", { token = T.granted }, c)
    assert.equal(3, #hub.requests)
    now = now + 61
    assert.is_false(assert(inspect("Qwen/Qwen2.5-0.5B-Instruct", nil, c)).cached)
    assert.equal(4, #hub.requests)
    -- errors are asked again; not_found is kept a few seconds
    inspect("obleth-fixtures/rate-limited", nil, c)
    inspect("obleth-fixtures/rate-limited", nil, c)
    assert.equal(6, #hub.requests)
    inspect("nobody/no-such-model", nil, c)
    inspect("nobody/no-such-model", nil, c)
    assert.equal(7, #hub.requests)
    now = now + 6
    inspect("nobody/no-such-model", nil, c)
    assert.equal(8, #hub.requests)
  end)

  it("follows the Hub's redirect for a renamed repo, keeping the token on the Hub", function()
    local r = assert(inspect("old-name/renamed-model", { token = T.granted }))
    assert.equal(2, #hub.requests)
    assert.equal("/api/models/Qwen/Qwen2.5-0.5B-Instruct", hub.requests[2].path)
    assert.equal("Bearer " .. T.granted, hub.requests[2].authorization)
    assert.truthy(table.concat(r.notes, "\n"):find("renamed", 1, true))
  end)

  it("never sends the token to another host a redirect points at", function()
    local r = assert(inspect("obleth-fixtures/offsite", { token = T.granted }))
    assert.equal("obleth-fixtures/offsite", r.repo_id)
    assert.equal("Bearer " .. T.granted, hub.requests[1].authorization)
    assert.equal(1, #other.requests)
    assert.is_nil(other.requests[1].authorization)
    assert.is_nil(all_text(other.requests):find(T.granted, 1, true))
  end)

  it("a different host name for the same address is another origin: no token", function()
    assert(inspect("obleth-fixtures/other-name", { token = T.granted }))
    assert.equal(2, #hub.requests)
    assert.equal("localhost:" .. hub.port, hub.requests[2].headers.host)
    assert.is_nil(hub.requests[2].authorization)
  end)

  it("the token appears in no result and no error", function()
    for _, repo in ipairs({ "Qwen/Qwen2.5-0.5B-Instruct", "meta-llama/Llama-3.1-8B-Instruct", "nobody/x",
      "obleth-fixtures/rate-limited", "obleth-fixtures/server-error", "obleth-fixtures/offsite" }) do
      for _, token in ipairs({ T.granted, T.no_access }) do
        local r, err = inspect(repo, { token = token })
        assert.is_nil(all_text(r or err):find(token, 1, true), repo)
        assert.is_nil(cjson.encode(r or err):find(token, 1, true), repo)
      end
    end
  end)
end)

describe("POST /api/v1/hf/inspect in a child obleth pointed at the stand-in Hub by HF_ENDPOINT", function()
  local hub, other

  setup(function()
    other = fake_hub.start_other()
    hub = fake_hub.start { offsite = other.url }
  end)

  teardown(function()
    hub.close()
    other.close()
  end)

  -- The child runs the route handler for each body and prints the answers as JSON.
  local CHILD = [[
local api = require("obleth.api.hf")
local json = require("obleth.util.json")
local log = require("obleth.log")
log.set_level("debug")
local token = os.getenv("OBLETH_TEST_HF_TOKEN")
local app = {}
local mode = os.getenv("OBLETH_TEST_SETTINGS")
if mode == "secrets" then
  app.settings_secrets = function() return { hf_token = token } end
elseif mode == "slurm" then
  app.slurm_settings = function(self) assert(self == app); return { defaults = { hf_token = token } } end
else
  app.hf_token = token
end
local route = api.routes[1]
assert(route[1] == "POST" and route[2] == "/api/v1/hf/inspect")
local out = {}
for _, repo in ipairs({ "Qwen/Qwen2.5-0.5B-Instruct", "meta-llama/Llama-3.1-8B-Instruct", "nobody/no-such-model",
    "obleth-fixtures/rate-limited", "../etc/passwd", "obleth-fixtures/offsite", "obleth-fixtures/server-error" }) do
  local status, body, headers = route[3]({ json = { repo_id = repo }, app = app })
  log.info("hf_route", { repo = repo, status = status, message = body.error and body.error.message })
  out[repo] = { status = status, body = body, headers = headers }
end
io.write(json.encode(out))
]]

  local function run(token, settings)
    hub.reset()
    other.requests = {}
    local code, out, err = run_child({ HF_ENDPOINT = hub.url, OBLETH_TEST_HF_TOKEN = token or "",
      OBLETH_TEST_SETTINGS = settings or "" }, CHILD)
    assert.equal(0, code, err)
    return cjson.decode(out), out, err
  end

  it("with a token that has access: answers per error kind, the token only ever sent to HF_ENDPOINT", function()
    local res, out, err = run(T.granted, "secrets")
    assert.equal(200, res["Qwen/Qwen2.5-0.5B-Instruct"].status)
    assert.equal(200, res["meta-llama/Llama-3.1-8B-Instruct"].status)
    assert.equal("manual", res["meta-llama/Llama-3.1-8B-Instruct"].body.gated)
    assert.equal(404, res["nobody/no-such-model"].status)
    assert.equal("not_found", res["nobody/no-such-model"].body.error.code)
    assert.equal(429, res["obleth-fixtures/rate-limited"].status)
    assert.equal("42", res["obleth-fixtures/rate-limited"].headers["Retry-After"])
    assert.equal(42, res["obleth-fixtures/rate-limited"].body.error.retry_after)
    assert.equal(400, res["../etc/passwd"].status)
    assert.equal("repo_id", res["../etc/passwd"].body.error.field)
    assert.equal(502, res["obleth-fixtures/server-error"].status)
    assert.equal(200, res["obleth-fixtures/offsite"].status)
    -- the child used HF_ENDPOINT: the stand-in Hub got its requests, with the token
    assert.truthy(#hub.requests >= 6)
    local authorized = 0
    for _, q in ipairs(hub.requests) do
      if q.authorization == "Bearer " .. T.granted then authorized = authorized + 1 end
    end
    assert.truthy(authorized >= 6)
    -- ...and the other host did not
    assert.equal(1, #other.requests)
    assert.is_nil(other.requests[1].authorization)
    assert.is_nil(all_text(other.requests):find(T.granted, 1, true))
    -- never in an answer or a log line
    assert.is_nil(out:find(T.granted, 1, true))
    assert.truthy(err:find("hf_inspect", 1, true), "the child logged nothing")
    assert.is_nil(err:find(T.granted, 1, true))
  end)

  it("with a token without access (from app:slurm_settings()): 403 no_access, token in no log line", function()
    local res, out, err = run(T.no_access, "slurm")
    local llama = res["meta-llama/Llama-3.1-8B-Instruct"]
    assert.equal(403, llama.status)
    assert.equal("no_access", llama.body.error.code)
    assert.truthy(llama.body.error.message:find("request access on the repo page", 1, true))
    assert.is_nil(out:find(T.no_access, 1, true))
    assert.is_nil(err:find(T.no_access, 1, true))
  end)

  it("without a token: 403 gated_no_token, and no Authorization header anywhere", function()
    local res = run(nil, "field")
    local llama = res["meta-llama/Llama-3.1-8B-Instruct"]
    assert.equal(403, llama.status)
    assert.equal("gated_no_token", llama.body.error.code)
    assert.truthy(llama.body.error.message:find("set the Hugging Face token in Cluster defaults", 1, true))
    assert.equal(404, res["nobody/no-such-model"].status)
    for _, q in ipairs(hub.requests) do assert.is_nil(q.authorization) end
  end)
end)
