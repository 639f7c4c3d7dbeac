-- Client keys with limits and usage (docs/router.md "Limits and usage"): obleth serve's
-- application on a real port in front of a smoke engine on a real port. The router's clock
-- is the spec's own (moved by hand), so a window passes without waiting for it.
local has_host = pcall(require, "obleth.http")

local function suite(transport)
describe("client key limits and usage (" .. transport .. ")", function()
  if not has_host then
    it("needs the obleth runtime", function() pending("obleth.http is missing: run under build/obleth lua") end)
    return
  end
  local http = require "obleth.http"
  local cjson = require "cjson"

  local ADMIN = "admin-token-for-key-limits-spec-01"
  local t = 1000 -- the router's clock (seconds)
  local rig = require("spec.support.router_rig").new()
  local store, app

  local function admin(method, path, body)
    local h = { Authorization = "Bearer " .. ADMIN }
    if body then h["Content-Type"] = "application/json" end
    local r = assert(http.request { url = rig.base .. path, method = method, headers = h,
      body = body and cjson.encode(body), timeout = 10 })
    return r.status, r.body ~= "" and cjson.decode(r.body) or nil, r
  end

  local function chat(key, text, extra, opts)
    local b = { model = "m", messages = { { role = "user", content = text or "one two three" } } }
    for k, v in pairs(extra or {}) do b[k] = v end
    return rig:req("POST", "/v1/chat/completions", b, { Authorization = "Bearer " .. key }, opts)
  end

  local function new_key(body)
    local st, k = admin("POST", "/api/v1/keys", body)
    assert.equal(201, st)
    return k
  end

  setup(function()
    store, app = rig:start { admin_token = ADMIN, router = { transport = transport }, clock = function() return t end }
    local _, url = rig:engine("a", { model = "m", tokens = 4, token_delay = 0 })
    local m = assert(store:create_model { name = "m" })
    assert(store:add_endpoint(m.id, url))
  end)
  teardown(function() rig:close() end)

  it("a key with requests_per_minute 5 gets 429 with Retry-After on its sixth request within a minute", function()
    local k = new_key { name = "ci", requests_per_minute = 5 }
    assert.equal(5, k.requests_per_minute)
    assert.equal(cjson.null, k.max_concurrent)
    for i = 1, 5 do
      t = 1000 + i -- requests at 1001 .. 1005
      assert.equal(200, chat(k.key).status)
    end
    t = 1010
    local r = chat(k.key)
    assert.equal(429, r.status)
    -- the first request (at 1001) leaves the window at 1061: 51 s after 1010
    assert.equal("51", r.headers["retry-after"])
    local e = cjson.decode(r.body).error
    assert.equal("rate_limit_exceeded", e.code)
    assert.equal("requests", e.type)
    assert.equal(cjson.null, e.param)
    assert.truthy(e.message:find("5 requests per minute", 1, true))
    assert.equal("5", r.headers["x-ratelimit-limit-requests"])
    -- 40 s later the first is still in the window: 11 s to go
    t = 1050
    assert.equal("11", chat(k.key).headers["retry-after"])
    -- at 1061 the first has left the window: one more is let in, then the second (1002) holds it
    t = 1061
    assert.equal(200, chat(k.key).status)
    r = chat(k.key)
    assert.equal(429, r.status)
    assert.equal("1", r.headers["retry-after"])
    -- its usage counts the 6 answered requests and the 3 refused ones; tokens from the engine's usage:
    -- "one two three" is 3 prompt tokens, the engine answers 4 completion tokens
    local st, u = admin("GET", "/api/v1/keys/" .. ("%d"):format(k.id) .. "/usage")
    assert.equal(200, st)
    assert.same({ 6, 3, 18, 24, 42, "ci" },
      { u.requests, u.limited, u.prompt_tokens, u.completion_tokens, u.total_tokens, u.name })
    assert.equal("token:admin", u.owner)
  end)

  it("another key is not held back by the first one's limit", function()
    local a = new_key { requests_per_minute = 1 }
    local b = new_key {}
    t = 2000
    assert.equal(200, chat(a.key).status)
    assert.equal(429, chat(a.key).status)
    for _ = 1, 3 do assert.equal(200, chat(b.key).status) end
  end)

  it("counts the tokens of a streamed answer from the usage in its last chunk", function()
    local k = new_key { name = "stream" }
    t = 3000
    local r = chat(k.key, "a b c d e", { stream = true, stream_options = { include_usage = true } })
    assert.equal(200, r.status)
    assert.truthy(r.body:find('"usage"', 1, true))
    r = chat(k.key, "a b", { stream = true }) -- no usage asked for: the request counts, no tokens
    assert.equal(200, r.status)
    local _, u = admin("GET", "/api/v1/keys/" .. ("%d"):format(k.id) .. "/usage")
    assert.same({ 2, 5, 4 }, { u.requests, u.prompt_tokens, u.completion_tokens })
  end)

  it("a key with max_concurrent 1 gets 429 while its first request is being answered", function()
    local k = new_key { max_concurrent = 1 }
    local _, slow_url = rig:engine("slow", { model = "slow", tokens = 3, token_delay = 0.5 })
    local m = assert(store:create_model { name = "slow" })
    assert(store:add_endpoint(m.id, slow_url))
    app.router:invalidate()
    -- the first request's answer has started (its headers came) and is still being streamed
    local first = rig:req("POST", "/v1/chat/completions", { model = "slow", stream = true,
      messages = { { role = "user", content = "x" } } }, { Authorization = "Bearer " .. k.key }, { stream = true })
    assert.equal(200, first.status)
    local r = chat(k.key)
    assert.equal(429, r.status)
    assert.equal("concurrency_limit_exceeded", cjson.decode(r.body).error.code)
    assert.equal("1", r.headers["retry-after"])
    repeat local chunk = first:read() until not chunk
    assert.equal(200, chat(k.key).status)
  end)

  it("lists each key with its limits, owner and usage, and /metrics counts requests and tokens per key", function()
    local k = new_key { name = "listed", owner = "team-nlp", requests_per_minute = 100, max_concurrent = 7 }
    t = 4000
    assert.equal(200, chat(k.key, "one").status)
    local _, doc = admin("GET", "/api/v1/keys")
    local row
    for _, x in ipairs(doc.keys) do if x.id == k.id then row = x end end
    assert.same({ "team-nlp", 100, 7, 1, 1, 4 }, { row.owner, row.requests_per_minute, row.max_concurrent,
      row.usage.requests, row.usage.prompt_tokens, row.usage.completion_tokens })
    assert.is_nil(row.key)
    local text = rig:req("GET", "/metrics").body
    local id = ("%d"):format(k.id)
    assert.truthy(text:find('obleth_router_key_requests_total{key="' .. id .. '",result="admitted"} 1', 1, true))
    assert.truthy(text:find('obleth_router_key_tokens_total{key="' .. id .. '",kind="completion"} 4', 1, true))
  end)

  it("refuses limits that are not whole numbers in range, naming the field", function()
    for _, bad in ipairs({ { requests_per_minute = 0 }, { requests_per_minute = 1.5 },
      { max_concurrent = "2" }, { requests_per_minute = 100001 } }) do
      local st, doc = admin("POST", "/api/v1/keys", bad)
      assert.equal(400, st)
      assert.equal(next(bad), doc.error.field)
    end
  end)

  it("an engine's usage above 2^31-1 tokens in one answer is not believed; counters never wrap", function()
    local k = new_key { name = "big-usage" }
    k.id = math.tointeger(k.id)
    local router = require "obleth.router"
    -- what an engine answering "prompt_tokens": 90071992547409929 makes the router count, 111 times
    for _ = 1, 111 do app.router:_count_key({ key_id = k.id, model = "m" }, 90071992547409929, 3) end
    app.router:_count_key({ key_id = k.id, model = "m" }, router.USAGE_MAX, nil)
    local _, u = admin("GET", "/api/v1/keys/" .. ("%d"):format(k.id) .. "/usage")
    assert.same({ 112, router.USAGE_MAX, 333 }, { u.requests, u.prompt_tokens, u.completion_tokens })
    assert.equal(router.USAGE_MAX + 333, u.total_tokens)
    local text = rig:req("GET", "/metrics").body
    assert.truthy(text:find('obleth_router_key_tokens_total{key="' .. ("%d"):format(k.id) .. '",kind="prompt"} '
      .. router.USAGE_MAX, 1, true))
  end)

  it("keeps usage across a flush that fails, and writes it with the next one", function()
    local k = new_key {}
    t = 5000
    assert.equal(200, chat(k.key, "w").status)
    local add = store.add_api_key_usage
    store.add_api_key_usage = function() return nil, { code = "storage", message = "disk full" } end
    assert.is_nil((app.router:flush_usage()))
    store.add_api_key_usage = add
    assert.equal(200, chat(k.key, "w").status)
    local _, u = admin("GET", "/api/v1/keys/" .. ("%d"):format(k.id) .. "/usage")
    assert.equal(2, u.requests)
  end)
end)
end

suite("proxy")
suite("client")
