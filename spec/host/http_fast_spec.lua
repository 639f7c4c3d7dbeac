-- The router's fast path (host/http_fast.c): obleth serve's application on a real
-- port with http.server{fast = app.router.fast}, in front of in-process smoke
-- engines, over a SQLite store in memory. What the Lua router decides it teaches the
-- table; the same requests are then answered in C, and everything else still goes
-- to Lua. (The whole router spec also runs over this path: spec/unit/router_proxy_spec.lua.)
local http = require "obleth.http"
local loop = require "obleth.loop"
local cjson = require "cjson"
local smoke = require "obleth.testing"
local router_mod = require "obleth.router"
local balancer = require "obleth.router.balancer"

local ADMIN = "admin-token-for-fast-spec-012345"

describe("the router's fast path", function()
  local store, app, fast
  local rig = require("spec.support.router_rig").new()
  local function engine(label, opts) return rig:engine(label, opts) end
  local dead_url = rig.dead_url
  local function req(...) return rig:req(...) end

  local function chat(model, extra, headers)
    local b = { model = model, messages = { { role = "user", content = "hello" } } }
    for k, v in pairs(extra or {}) do b[k] = v end
    return req("POST", "/v1/chat/completions", b, headers)
  end

  local function admin(method, path, body)
    return req(method, path, body, { Authorization = "Bearer " .. ADMIN })
  end

  local function model(name, urls)
    local m = assert(store:create_model { name = name })
    for _, u in ipairs(urls or {}) do assert(store:add_endpoint(m.id, u)) end
    app.router:invalidate() -- written behind the router's back, as a spec does
    return m
  end

  local function taken() return fast:stats().requests end

  setup(function()
    -- cooldown 0: an endpoint that failed may be picked again at once (the hand-back case)
    store, app = rig:start { admin_token = ADMIN, router = { balancer = { cooldown = 0 } }, fast = true }
    fast = app.router.fast
  end)

  teardown(function() rig:close() end)

  it("answers in C what the Lua router answered once, with the same answer", function()
    local _, u = engine("f-1", { model = "f" })
    model("f", { u })
    local n0 = taken()
    local first = chat("f")
    assert.equal(200, first.status)
    assert.equal(n0, taken()) -- the first one taught the table
    local second = chat("f")
    assert.equal(200, second.status)
    assert.equal(n0 + 1, taken())
    assert.equal(cjson.decode(first.body).choices[1].message.content,
      cjson.decode(second.body).choices[1].message.content)
    assert.equal("f-1", second.headers["x-obleth-replica"])
    assert.equal(first.headers["content-type"], second.headers["content-type"])
    -- a streamed answer too, chunk by chunk
    local r = req("POST", "/v1/chat/completions", { model = "f", stream = true,
      messages = { { role = "user", content = "one two three" } } }, nil, { stream = true })
    local chunks = 0
    while r:read() do chunks = chunks + 1 end
    assert.is_true(chunks >= 2, "chunks: " .. chunks)
    assert.equal(n0 + 2, taken())
  end)

  it("leaves to Lua every request it was not taught, and those still get their answer", function()
    local _, u = engine("d-1", { model = "d" })
    model("d", { u })
    assert.equal(200, chat("d").status) -- taught
    local n0 = taken()
    -- an unknown key, no key, the admin token
    assert.equal(401, chat("d", nil, { Authorization = "Bearer nope" }).status)
    assert.equal(401, chat("d", nil, { Authorization = false }).status)
    assert.equal(401, chat("d", nil, { Authorization = "Bearer " .. ADMIN }).status)
    -- an unknown model, a body that is not JSON, no model
    assert.equal(404, chat("nobody").status)
    assert.equal(400, req("POST", "/v1/chat/completions", "{oops", { ["Content-Type"] = "application/json" }).status)
    assert.equal(400, req("POST", "/v1/chat/completions", { messages = {} }).status)
    -- escapes in the member name or the model: Lua decodes them
    local esc = req("POST", "/v1/chat/completions", '{"m\\u006fdel":"d","messages":[{"role":"user","content":"x"}]}',
      { ["Content-Type"] = "application/json" })
    assert.equal(200, esc.status)
    local esc2 = req("POST", "/v1/chat/completions", '{"model":"\\u0064","messages":[{"role":"user","content":"x"}]}',
      { ["Content-Type"] = "application/json" })
    assert.equal(200, esc2.status)
    -- a GET, and paths that are not plainly canonical
    assert.equal(200, req("GET", "/v1/models").status)
    assert.equal(404, req("POST", "/v1/chat.completions", { model = "d", messages = {} }).status)
    assert.equal(404, req("POST", "/v1/chat%2ecompletions", { model = "d", messages = {} }).status)
    assert.equal(n0, taken())
  end)

  it("forgets keys and endpoints at every Management API write, and after the cache's time", function()
    local _, u1 = engine("w-1", { model = "w" })
    local _, u2 = engine("w-2", { model = "w" })
    local m = model("w", { u1 })
    assert.equal(200, chat("w").status)
    assert.equal("w-1", chat("w").headers["x-obleth-replica"]) -- in C
    -- an endpoint change through the API: the next request goes to the new endpoint
    assert.equal(200, admin("DELETE", "/api/v1/models/" .. m.id .. "/endpoints?url=" .. u1).status)
    assert.equal(200, admin("POST", "/api/v1/models/" .. m.id .. "/endpoints", { url = u2 }).status)
    for _ = 1, 3 do assert.equal("w-2", chat("w").headers["x-obleth-replica"]) end
    -- a revoked key is refused at once
    local made = cjson.decode(admin("POST", "/api/v1/keys", { name = "short-lived" }).body)
    local first = chat("w", nil, { Authorization = "Bearer " .. made.key })
    assert.equal(200, first.status, first.body)
    local n0 = taken()
    assert.equal(200, chat("w", nil, { Authorization = "Bearer " .. made.key }).status)
    assert.equal(n0 + 1, taken())
    assert.equal(200, admin("DELETE", ("/api/v1/keys/%d"):format(made.id)).status)
    assert.equal(401, chat("w", nil, { Authorization = "Bearer " .. made.key }).status)
    -- a write behind obleth's back is seen once the table is older than the cache's time
    assert(store:remove_endpoint(m.id, u2))
    assert(store:add_endpoint(m.id, u1))
    loop.sleep(router_mod.CACHE_TTL + 0.1)
    assert.equal("w-1", chat("w").headers["x-obleth-replica"])
  end)

  it("takes keyless access from the router's setting, and back", function()
    local _, u = engine("k-1", { model = "k" })
    model("k", { u })
    assert.equal(200, admin("PUT", "/api/v1/settings/router", { keyless = true }).status)
    assert.equal(200, chat("k", nil, { Authorization = false }).status)
    local n0 = taken()
    assert.equal(200, chat("k", nil, { Authorization = false }).status)
    assert.equal(n0 + 1, taken())
    assert.equal(200, admin("PUT", "/api/v1/settings/router", { keyless = false }).status)
    assert.equal(401, chat("k", nil, { Authorization = false }).status)
  end)

  it("hands a request whose connection failed to the Lua router, which retries it on another replica", function()
    local _, live = engine("h-live", { model = "h" })
    local dead = dead_url()
    model("h", { dead, live })
    -- the first request (Lua) tries dead, then live; the cursor is back on dead for the next
    assert.equal("h-live", chat("h").headers["x-obleth-replica"])
    local before = fast:stats()
    local r = chat("h")
    assert.equal(200, r.status)
    assert.equal("h-live", r.headers["x-obleth-replica"])
    local after = fast:stats()
    assert.equal(before.requests + 1, after.requests)
    assert.equal(before.handed_back + 1, after.handed_back)
    local t = req("GET", "/metrics", nil, { Authorization = false }).body
    assert.matches('obleth_router_upstream_retries_total{model="h"} 2', t, 1, true)
    assert.matches('obleth_router_requests_total{model="h",status="200"} 2', t, 1, true)
    assert.matches("obleth_router_fast_path_handed_back_total " .. after.handed_back, t, 1, true)
    -- a lone dead endpoint: the Lua router gives the error answer
    model("h2", { dead_url() })
    assert.equal(502, chat("h2").status)
    fast:stats()
    local r2 = chat("h2")
    assert.equal(502, r2.status)
    assert.equal("upstream_unreachable", cjson.decode(r2.body).error.code)
  end)

  it("keeps the decisions a handed-back request was taken with: draining and a revoked key do not undo them",
    function()
      local up, stop = require("spec.support.raw_upstream")("slow_close") -- silent 0.5 s, then closes
      local _, live = engine("p-live", { model = "p" })
      model("p", { "http://127.0.0.1:" .. up, live })
      assert.equal("p-live", chat("p").headers["x-obleth-replica"]) -- Lua: the silent one, then live
      local function in_flight(during, headers)
        local got
        loop.spawn(function() got = chat("p", nil, headers) end)
        loop.sleep(0.2) -- the fast path waits on the silent replica
        during()
        local t_end = loop.monotonic() + 5
        while not got and loop.monotonic() < t_end do loop.sleep(0.02) end
        return got
      end
      local before = fast:stats().handed_back
      -- the server starts draining while the first attempt waits: the retry still answers
      local r = in_flight(function() app:drain() end)
      app.draining = false
      fast:enable(true)
      assert.equal(200, r.status, r.body)
      assert.equal("p-live", r.headers["x-obleth-replica"])
      -- the request's key is revoked meanwhile: it was valid when the request came
      local made = cjson.decode(admin("POST", "/api/v1/keys", { name = "mid-flight" }).body)
      local auth = { Authorization = "Bearer " .. made.key }
      assert.equal(200, chat("p", nil, auth).status) -- Lua: taught the key
      local r2 = in_flight(function()
        assert.equal(200, admin("DELETE", ("/api/v1/keys/%d"):format(made.id)).status)
      end, auth)
      assert.equal(200, r2.status, r2.body)
      assert.equal(before + 2, fast:stats().handed_back)
      assert.equal(401, chat("p", nil, auth).status)
      stop()
    end)

  it("is not emptied by a write request that had no admin token", function()
    local _, u = engine("u-1", { model = "u" })
    model("u", { u })
    assert.equal(200, chat("u").status)
    assert.equal(401, req("POST", "/api/v1/models", { name = "x" }, { Authorization = "Bearer wrong" }).status)
    local n0 = taken()
    assert.equal(200, chat("u").status)
    assert.equal(n0 + 1, taken())
  end)

  it("leaves an endpoint whose host is longer than a DNS name to Lua, which answers without a 500", function()
    local _, live = engine("n-live", { model = "n" })
    model("n", { "http://" .. ("a"):rep(300) .. ":8000", live })
    for _ = 1, 4 do
      local r = chat("n")
      assert.is_true(r.status == 200 or r.status == 502, r.status .. " " .. r.body)
    end
    local n0 = taken()
    assert.equal(200, chat("n").status)
    assert.equal(n0, taken()) -- never taught: one of its endpoints is not res:proxy's
  end)

  it("counts its requests in the router's metrics: requests, latency and in flight", function()
    local e, u = engine("c-1", { model = "c", tokens = 10, token_delay = 0.05 })
    model("c", { u })
    for _ = 1, 5 do assert.equal(200, chat("c").status) end -- 1 in Lua, 4 in C
    local t = req("GET", "/metrics", nil, { Authorization = false }).body
    assert.matches('obleth_router_requests_total{model="c",status="200"} 5', t, 1, true)
    assert.matches('obleth_router_upstream_latency_seconds_count{model="c"} 5', t, 1, true)
    assert.matches('obleth_router_upstream_latency_seconds_bucket{model="c",le="+Inf"} 5', t, 1, true)
    -- a scrape drains what C counted: the next one does not count it twice
    t = req("GET", "/metrics", nil, { Authorization = false }).body
    assert.matches('obleth_router_requests_total{model="c",status="200"} 5', t, 1, true)
    -- a stream held open is in flight (and the server waits for it at shutdown)
    local r = req("POST", "/v1/chat/completions", { model = "c", stream = true,
      messages = { { role = "user", content = "a b c d e f g h" } } }, nil, { stream = true })
    assert.truthy(r:read())
    assert.equal(1, app.router:fast_in_flight())
    assert.is_true(app:busy() >= 1)
    t = req("GET", "/metrics", nil, { Authorization = false }).body
    assert.matches('obleth_router_in_flight_requests{model="c"} 1', t, 1, true)
    -- the client goes away: the upstream request is cancelled, and it is a 499
    r:close()
    local t_end = loop.monotonic() + 3
    while e:stats().streams_aborted == 0 and loop.monotonic() < t_end do loop.sleep(0.05) end
    assert.equal(1, e:stats().streams_aborted)
    assert.equal(0, app.router:fast_in_flight())
    t = req("GET", "/metrics", nil, { Authorization = false }).body
    assert.matches('obleth_router_requests_total{model="c",status="499"} 1', t, 1, true)
    assert.matches('obleth_router_in_flight_requests{model="c"} 0', t, 1, true)
  end)

  it("stops while the server drains: Lua answers 503 shutting_down", function()
    local _, u = engine("s-1", { model = "s" })
    model("s", { u })
    assert.equal(200, chat("s").status)
    local n0 = taken()
    app:drain()
    local r = chat("s")
    app.draining = false
    fast:enable(true)
    assert.equal(503, r.status)
    assert.equal("shutting_down", cjson.decode(r.body).error.code)
    assert.equal(n0, taken())
  end)

  describe("the table", function()
    it("refuses endpoints it could not pass a request to, naming the argument", function()
      local ft = http.fast {}
      assert.has_error(function() ft:set_model("m", "m", {}) end)
      assert.error_matches(function() ft:set_model("m", "m", { { url = "http://a:1", host = "a", port = 0 } }) end,
        "port=1..65535")
      assert.error_matches(function() ft:set_model("m", "m", { { url = "u", host = "a b", port = 80 } }) end,
        "endpoint")
      assert.error_matches(function() ft:set_model("m", "m", { { url = "u", host = ("a"):rep(254), port = 80 } }) end,
        "endpoint")
      assert.error_matches(function()
        ft:set_model("m", "m", { { url = "u", host = "a", port = 80, prefix = "no-slash" } })
      end, "prefix")
      assert.error_matches(function() http.fast { buckets = { 2, 1 } } end, "ascend")
      assert.error_matches(function() http.server { port = 0, handler = function() end, fast = {} } end,
        "'fast' must be a table made by http.fast")
    end)

    -- the C balancer against obleth.router.balancer, the rule written in Lua
    it("picks as obleth.router.balancer does, over random requests, releases, failures and exclusions", function()
      local ft = http.fast { cooldown = 5 }
      local lb = balancer.new { cooldown = 5 }
      local urls = { "http://a:1", "http://b:1", "http://c:1", "http://d:1" }
      local rng = 12345
      local function rand(n)
        rng = (rng * 1103515245 + 12345) % 2147483648
        return rng % n + 1
      end
      local held = {}
      local now = 100
      for step = 1, 3000 do
        local op = rand(10)
        local list = {}
        for i = 1, rand(#urls) do list[i] = urls[i] end
        if op <= 5 then
          local ex = rand(4) == 1 and { [list[1]] = true } or nil
          local name = rand(3) == 1 and "x" or "y"
          local a, b = ft:pick(name, list, ex, now), lb:pick(name, list, ex, now)
          assert.equal(b, a, "step " .. step)
          if a then
            ft:acquire(a)
            lb:acquire(a)
            held[#held + 1] = a
          end
        elseif op <= 8 and #held > 0 then
          local url = table.remove(held, rand(#held))
          ft:release(url)
          lb:release(url)
        elseif op == 9 then
          local url = urls[rand(#urls)]
          ft:failed(url, now)
          lb:failed(url, now)
        else
          now = now + rand(4)
        end
        for _, u in ipairs(urls) do assert.equal(lb:load(u), ft:load(u)) end
      end
    end)
  end)
end)

describe("the fast path's request line (obleth serve)", function()
  it("is the Lua router's line: the same fields, in the same form", function()
    local server = require "spec.support.server"
    local eng = smoke.new { model = "lm", replica = "lm-1" }
    local es = assert(http.server { host = "127.0.0.1", port = 0, handler = eng:handler() })
    local srv = server.start()
    local _, m = srv:request("POST", "/api/v1/models", { name = "lm" })
    local st = srv:request("POST", ("/api/v1/models/%d/endpoints"):format(m.id), { url = "http://127.0.0.1:" .. es:port() })
    assert.equal(200, st)
    local _, made = srv:request("POST", "/api/v1/keys", { name = "l" })
    local auth = { Authorization = "Bearer " .. made.key }
    local body = { model = "lm", messages = { { role = "user", content = "hi" } } }
    assert.equal(200, (srv:request("POST", "/v1/chat/completions", body, auth))) -- Lua
    assert.equal(200, (srv:request("POST", "/v1/chat/completions", body, auth))) -- C
    local _, _, metrics = srv:request("GET", "/metrics", nil, auth)
    assert.matches("obleth_router_fast_path_requests_total 1\n", metrics, 1, true)
    local _, _, err = srv:stop()
    srv:cleanup()
    es:close()
    local lines = {}
    for line in err:gmatch("[^\n]+") do
      if line:find("event=http_request method=POST path=/v1/chat", 1, true)
        or line:find("event=http_request method=POST model=lm", 1, true) then
        lines[#lines + 1] = line
      end
    end
    assert.equal(2, #lines, err)
    local pat = "^ts=%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ level=info event=http_request method=POST model=lm "
      .. "ms=%d+%.%d+ path=/v1/chat/completions status=200 upstream=http://127%.0%.0%.1:%d+$"
    for _, line in ipairs(lines) do assert.matches(pat, line) end
    assert.is_nil(err:find(made.key, 1, true)) -- no client key in the log
  end)
end)
