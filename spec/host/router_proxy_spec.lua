-- The router in-process: obleth serve's application on a real port in front of
-- in-process smoke engines on real ports, over a SQLite store in memory.
-- Needs the obleth runtime (sockets, event loop); under plain lua5.4 it is pending.
local has_host = pcall(require, "obleth.http")

-- Every case runs over both ways of passing a request on: res:proxy (http://
-- endpoints) and the HTTP client (https:// endpoints, or transport = "client").
local function suite(transport)
describe("router in-process (" .. transport .. ")", function()
  if not has_host then
    it("needs the obleth runtime", function() pending("obleth.http is missing: run under build/obleth lua") end)
    return
  end

  local http = require "obleth.http"
  local loop = require "obleth.loop"
  local cjson = require "cjson"

  local ADMIN = "admin-token-for-router-spec-0123"
  local store, app
  local rig = require("spec.support.router_rig").new()
  local function engine(label, opts) return rig:engine(label, opts) end
  local dead_url = rig.dead_url
  local function req(...) return rig:req(...) end

  local function chat(model, text, extra)
    local b = { model = model, messages = { { role = "user", content = text or "hello" } } }
    for k, v in pairs(extra or {}) do b[k] = v end
    return req("POST", "/v1/chat/completions", b)
  end

  local function model(name, urls)
    local m = assert(store:create_model { name = name })
    for _, u in ipairs(urls or {}) do assert(store:add_endpoint(m.id, u)) end
    return m
  end

  local function decode(r)
    return cjson.decode(r.body)
  end

  setup(function()
    store, app = rig:start { admin_token = ADMIN, router = { transport = transport } }
  end)

  teardown(function() rig:close() end)

  it("lists every model in the OpenAI list shape", function()
    model("listed-a")
    local r = req("GET", "/v1/models")
    assert.equal(200, r.status)
    local doc = decode(r)
    assert.equal("list", doc.object)
    local found
    for _, d in ipairs(doc.data) do
      if d.id == "listed-a" then found = d end
    end
    assert.equal("model", found.object)
    assert.equal("obleth", found.owned_by)
    assert.is_number(found.created)
    local one = req("GET", "/v1/models/listed-a")
    assert.equal(200, one.status)
    assert.equal("listed-a", decode(one).id)
    assert.equal(404, req("GET", "/v1/models/nope").status)
  end)

  it("forwards a chat completion, an embedding and a completion with their bodies unchanged", function()
    local _, u = engine("fwd-1")
    model("m", { u })
    local r = chat("m", "hi there")
    assert.equal(200, r.status)
    assert.equal("[fwd-1] hi there", decode(r).choices[1].message.content)
    assert.equal("fwd-1", r.headers["x-obleth-replica"])
    local e = req("POST", "/v1/embeddings", { model = "m", input = "abc" })
    assert.equal(200, e.status)
    assert.equal(8, #decode(e).data[1].embedding)
    local c = req("POST", "/v1/completions", { model = "m", prompt = "once" })
    assert.equal(200, c.status)
    assert.equal("[fwd-1] once", decode(c).choices[1].text)
  end)

  it("keeps an upstream error's status and body", function()
    local r = req("POST", "/v1/chat/completions", { model = "m", messages = {} })
    assert.equal(400, r.status)
    assert.equal("messages", decode(r).error.param)
    -- other /v1/ paths pass through, model from ?model=
    local p = req("GET", "/v1/nothing-here?model=m")
    assert.equal(404, p.status)
    assert.matches("Unknown path /v1/nothing%-here", decode(p).error.message)
  end)

  it("answers 404 for an unknown model and 400 without a model, in the OpenAI error shape", function()
    local r = chat("no-such-model")
    assert.equal(404, r.status)
    local e = decode(r).error
    assert.equal("model_not_found", e.code)
    assert.equal("invalid_request_error", e.type)
    assert.equal("model", e.param)
    assert.matches("no%-such%-model", e.message)
    local r2 = req("POST", "/v1/chat/completions", { messages = {} })
    assert.equal(400, r2.status)
    assert.equal("model", decode(r2).error.param)
    local r3 = req("POST", "/v1/chat/completions", "{not json", { ["Content-Type"] = "application/json" })
    assert.equal(400, r3.status)
    assert.equal("bad_json", decode(r3).error.code)
  end)

  -- once the last of a repeated key won, invalid UTF-8 passed and the byte came back: now refused
  it("refuses a key given twice (at any depth) as 400 duplicate_key naming it, and invalid UTF-8 as 400 bad_json",
    function()
      local ct = { ["Content-Type"] = "application/json" }
      local r = req("POST", "/v1/chat/completions", '{"model":"no-such-model","model":"other","messages":[]}', ct)
      assert.equal(400, r.status)
      local e = decode(r).error
      assert.equal("duplicate_key", e.code)
      assert.equal("model", e.param)
      assert.matches('"model" twice', e.message)
      r = req("POST", "/v1/chat/completions",
        '{"model":"no-such-model","messages":[{"role":"user","role":"system","content":"x"}]}', ct)
      assert.equal(400, r.status)
      assert.equal("role", decode(r).error.param)
      r = req("POST", "/v1/chat/completions", '{"model":"no-such-model\255","messages":[]}', ct)
      assert.equal(400, r.status)
      assert.equal("bad_json", decode(r).error.code)
      assert.is_nil(r.body:find("\255", 1, true))
      -- a name from the query string with a raw byte: the 404 shows it escaped
      r = req("GET", "/v1/models/x%FF%0Ay")
      assert.equal(404, r.status)
      assert.is_nil(r.body:find("[\255\n]"))
      assert.matches("x\\xFF\\x0Ay", decode(r).error.message)
    end)

  it("finds model and stream at the top of a long body, after the messages, and never inside them", function()
    local _, u = engine("long", { model = "long" })
    model("long", { u })
    local msgs = {}
    for i = 1, 400 do
      msgs[i] = { role = i % 2 == 1 and "user" or "assistant", content = ("word %d "):format(i):rep(30) }
    end
    msgs[#msgs + 1] = { role = "user", content = "the end", model = "not-this-one" }
    local body = cjson.encode({ messages = msgs }):sub(1, -2) .. ',"stream":true,"model":"long"}'
    assert.is_true(#body > 100000)
    local r = req("POST", "/v1/chat/completions", body, { ["Content-Type"] = "application/json" })
    assert.equal(200, r.status)
    assert.matches("text/event-stream", r.headers["content-type"], 1, true)
    assert.matches("data: %[DONE%]", r.body)
    local nested = req("POST", "/v1/chat/completions",
      '{"messages":[{"role":"user","content":"hi","model":"long"}]}', { ["Content-Type"] = "application/json" })
    assert.equal(400, nested.status)
    assert.equal("missing_model", decode(nested).error.code)
  end)

  it("answers 503 with Retry-After and the Slurm reason while no replica is healthy", function()
    local m = model("staged-1")
    assert(store:put_spec(m.id, { replicas = 1, enabled = true, partition = "gpu", launch_command = "x" }))
    assert(store:apply_report({ pass = { started_at = loop.now(), duration = 0.1, error = cjson.null },
      replicas = { { nonce = "0123456789abcdef", model_id = m.id, slot = 1, state = "submitted", job_id = 4242,
        pending_reason = "Resources" } },
      outcomes = {}, endpoints = {}, provision_errors = {}, acknowledged = { restart = {}, clear_lost = {} } },
      loop.now()))
    local r = chat("staged-1")
    assert.equal(503, r.status)
    assert.equal("15", r.headers["retry-after"])
    local e = decode(r).error
    assert.equal("model_not_ready", e.code)
    assert.equal("server_error", e.type)
    assert.equal(cjson.null, e.param)
    assert.matches("job 4242 is pending in Slurm (reason: Resources)", e.message, 1, true)
  end)

  it("spreads requests round robin, and sends to the endpoint with fewest in flight", function()
    local _, u1 = engine("rr-1", { model = "rr", tokens = 10, token_delay = 0.1 })
    local _, u2 = engine("rr-2", { model = "rr" })
    model("rr", { u1, u2 })
    local seen = {}
    for i = 1, 4 do seen[i] = chat("rr").headers["x-obleth-replica"] end
    assert.same({ "rr-1", "rr-2", "rr-1", "rr-2" }, seen)
    -- hold a stream on rr-1: the next three requests all go to rr-2
    local done = false
    loop.spawn(function()
      local r = req("POST", "/v1/chat/completions", { model = "rr", stream = true,
        messages = { { role = "user", content = "slow" } } }, nil, { stream = true })
      assert.equal("rr-1", r.headers["x-obleth-replica"])
      while r:read() do end
      done = true
    end)
    loop.sleep(0.1)
    for _ = 1, 3 do assert.equal("rr-2", chat("rr").headers["x-obleth-replica"]) end
    while not done do loop.sleep(0.05) end
  end)

  it("retries a request whose connection failed on another replica; with none left answers 502", function()
    local _, u = engine("alive", { model = "half-dead" })
    local dead = dead_url()
    model("half-dead", { dead, u })
    for _ = 1, 6 do
      local r = chat("half-dead")
      assert.equal(200, r.status)
      assert.equal("alive", r.headers["x-obleth-replica"])
    end
    local text = req("GET", "/metrics", nil, { Authorization = false }).body
    assert.matches('obleth_router_upstream_retries_total{model="half-dead"} 1\n', text, 1, true)
    model("all-dead", { dead_url(), dead_url() })
    local r = chat("all-dead")
    assert.equal(502, r.status)
    local e = decode(r).error
    assert.equal("upstream_unreachable", e.code)
    assert.equal("server_error", e.type)
    assert.not_matches("127.0.0.1", e.message, 1, true) -- endpoints stay internal
  end)

  it("streams server-sent events chunk by chunk as the engine writes them", function()
    local _, u = engine("sse", { model = "sse", tokens = 6, token_delay = 0.1 })
    model("sse", { u })
    local t0 = loop.monotonic()
    local r = req("POST", "/v1/chat/completions", { model = "sse", stream = true,
      messages = { { role = "user", content = "one two three four five six" } } }, nil, { stream = true })
    assert.equal(200, r.status)
    assert.matches("text/event-stream", r.headers["content-type"], 1, true)
    local arrivals, text = {}, {}
    while true do
      local c, err = r:read()
      assert.is_nil(err)
      if not c then break end
      arrivals[#arrivals + 1] = loop.monotonic() - t0
      text[#text + 1] = c
    end
    local all = table.concat(text)
    assert.matches("data: %[DONE%]\n\n$", all)
    assert.is_true(#arrivals >= 5, "chunks: " .. #arrivals)
    -- the first piece came long before the last: nothing was held back
    assert.is_true(arrivals[#arrivals] - arrivals[1] >= 0.4, ("first %.3f last %.3f"):format(arrivals[1],
      arrivals[#arrivals]))
  end)

  it("cancels the upstream request when the client of a stream goes away", function()
    local e, u = engine("cancel", { model = "cancel", tokens = 50, token_delay = 0.05 })
    model("cancel", { u })
    local r = req("POST", "/v1/chat/completions", { model = "cancel", stream = true,
      messages = { { role = "user", content = "long answer please" } } }, nil, { stream = true })
    assert.truthy(r:read())
    -- a stream held open is in flight (and obleth serve waits for it at shutdown)
    assert.equal(1, app.context.inflight)
    local during = req("GET", "/metrics", nil, { Authorization = false }).body
    assert.matches('obleth_router_in_flight_requests{model="cancel"} 1', during, 1, true)
    r:close()
    local t_end = loop.monotonic() + 3
    while e:stats().streams_aborted == 0 and loop.monotonic() < t_end do loop.sleep(0.05) end
    assert.equal(1, e:stats().streams_aborted)
    local text = req("GET", "/metrics", nil, { Authorization = false }).body
    assert.matches('obleth_router_requests_total{model="cancel",status="499"} 1', text, 1, true)
    assert.matches('obleth_router_in_flight_requests{model="cancel"} 0', text, 1, true)
  end)

  it("answers 503 shutting_down while the server drains", function()
    local _, u = engine("drain", { model = "drain" })
    model("drain", { u })
    assert.equal(200, chat("drain").status)
    app.context.draining = true
    local ok, r = pcall(chat, "drain")
    app.context.draining = false
    assert(ok, r)
    assert.equal(503, r.status)
    assert.equal("1", r.headers["retry-after"])
    assert.equal("shutting_down", decode(r).error.code)
  end)

  it("counts each request once in the metrics: requests and latency", function()
    local _, u = engine("cnt-1", { model = "cnt" })
    model("cnt", { u })
    for _ = 1, 5 do assert.equal(200, chat("cnt").status) end
    for _ = 1, 2 do -- a scrape does not change the counts
      local t = req("GET", "/metrics", nil, { Authorization = false }).body
      assert.matches('obleth_router_requests_total{model="cnt",status="200"} 5\n', t, 1, true)
      assert.matches('obleth_router_upstream_latency_seconds_count{model="cnt"} 5\n', t, 1, true)
      assert.matches('obleth_router_upstream_latency_seconds_bucket{model="cnt",le="+Inf"} 5\n', t, 1, true)
    end
  end)

  it("sees a store write made behind its back once its cache is older than CACHE_TTL", function()
    local _, u1 = engine("ttl-1", { model = "ttl" })
    local _, u2 = engine("ttl-2", { model = "ttl" })
    local m = model("ttl", { u1 })
    assert.equal("ttl-1", chat("ttl").headers["x-obleth-replica"])
    assert(store:remove_endpoint(m.id, u1))
    assert(store:add_endpoint(m.id, u2))
    loop.sleep(require("obleth.router").CACHE_TTL + 0.1)
    assert.equal("ttl-2", chat("ttl").headers["x-obleth-replica"])
  end)

  it("keeps its cache after a write request refused with 401 (no way to keep it cold)", function()
    local _, u = engine("cold-1", { model = "cold" })
    model("cold", { u })
    assert.equal(200, chat("cold").status)
    local reads, route_model = 0, store.route_model
    store.route_model = function(...) reads = reads + 1; return route_model(...) end
    local ok, err = pcall(function()
      assert.equal(401, req("POST", "/api/v1/models", { name = "x" }, { Authorization = "Bearer wrong" }).status)
      assert.equal(200, chat("cold").status)
    end)
    store.route_model = nil -- the method again
    assert(ok, err)
    assert.equal(0, reads)
  end)

  it("answers through the other endpoint when one's host is longer than a DNS name (a retry, never a 500)", function()
    local _, live = engine("long-live", { model = "long-host" })
    model("long-host", { "http://" .. ("a"):rep(300) .. ":8000", live })
    for _ = 1, 4 do
      local r = chat("long-host")
      assert.equal(200, r.status, r.body)
    end
  end)

  it("takes endpoint changes at once, and lets a request in flight to a leaving endpoint finish", function()
    local _, u1 = engine("chg-1", { model = "chg", tokens = 5, token_delay = 0.1 })
    local _, u2 = engine("chg-2", { model = "chg" })
    local m = model("chg", { u1 })
    local finished
    loop.spawn(function()
      local r = req("POST", "/v1/chat/completions", { model = "chg", stream = true,
        messages = { { role = "user", content = "drain me" } } }, nil, { stream = true })
      local parts = {}
      while true do
        local c = r:read()
        if not c then break end
        parts[#parts + 1] = c
      end
      finished = table.concat(parts)
    end)
    loop.sleep(0.1)
    -- the provisioner's report swaps the endpoints (a rollover drains chg-1)
    local rep = req("POST", "/api/v1/provisioner/report", { pass = { started_at = loop.now(), duration = 0.1 },
      endpoints = { [tostring(m.id)] = { u2 } } }, { Authorization = "Bearer " .. ADMIN })
    assert.equal(200, rep.status, rep.body)
    for _ = 1, 3 do assert.equal("chg-2", chat("chg").headers["x-obleth-replica"]) end
    local t_end = loop.monotonic() + 3
    while not finished and loop.monotonic() < t_end do loop.sleep(0.05) end
    assert.matches("data: %[DONE%]", finished)
  end)

  describe("client keys", function()
    local function status(headers)
      return req("GET", "/v1/models", nil, headers).status
    end

    it("needs a key: none, a wrong one and the admin token get 401 in the OpenAI shape", function()
      local r = req("GET", "/v1/models", nil, { Authorization = false })
      assert.equal(401, r.status)
      assert.equal("missing_api_key", decode(r).error.code)
      assert.equal("invalid_request_error", decode(r).error.type)
      assert.equal(401, status { Authorization = "Bearer obk_wrongwrongwrong" })
      local a = req("GET", "/v1/models", nil, { Authorization = "Bearer " .. ADMIN })
      assert.equal(401, a.status)
      assert.matches("admin token is not a client API key", decode(a).error.message, 1, true)
    end)

    it("are made, listed without secrets and revoked through the Management API", function()
      local admin = { Authorization = "Bearer " .. ADMIN }
      local c = req("POST", "/api/v1/keys", { name = "team-a" }, admin)
      assert.equal(201, c.status)
      local k = decode(c)
      assert.matches("^obk_%x+$", k.key)
      assert.equal(k.key:sub(1, 12), k.prefix)
      assert.equal(200, status { Authorization = "Bearer " .. k.key })
      local l = decode(req("GET", "/api/v1/keys", nil, admin))
      local listed
      for _, x in ipairs(l.keys) do
        assert.is_nil(x.key)
        assert.is_nil(x.hash)
        if math.tointeger(x.id) == math.tointeger(k.id) then listed = x end
      end
      assert.equal("team-a", listed.name)
      assert.equal(cjson.null, listed.revoked_at)
      -- only the hash is stored
      local row = store.db:first("SELECT * FROM api_keys WHERE id = ?", math.tointeger(k.id))
      assert.equal(require("obleth.crypto").sha256_hex(k.key), row.hash)
      assert.is_nil(store.db:first("SELECT 1 AS x FROM api_keys WHERE hash = ? OR prefix = ?", k.key, k.key))
      local d = req("DELETE", "/api/v1/keys/" .. math.tointeger(k.id), nil, admin)
      assert.equal(200, d.status)
      assert.is_number(decode(d).revoked_at)
      assert.equal(401, status { Authorization = "Bearer " .. k.key })
      assert.equal(404, req("DELETE", "/api/v1/keys/999999", nil, admin).status)
      -- the client key is no admin token
      assert.equal(401, req("GET", "/api/v1/keys", nil, { Authorization = "Bearer " .. rig.key }).status)
    end)

    it("are not needed when the router setting allows keyless access", function()
      local admin = { Authorization = "Bearer " .. ADMIN }
      assert.equal(400, req("PUT", "/api/v1/settings/router", { keyless = "yes" }, admin).status)
      assert.equal(200, req("PUT", "/api/v1/settings/router", { keyless = true }, admin).status)
      assert.is_true(decode(req("GET", "/api/v1/settings/router", nil, admin)).keyless)
      assert.equal(200, status { Authorization = false })
      assert.equal(200, req("PUT", "/api/v1/settings/router", { keyless = false }, admin).status)
      assert.equal(401, status { Authorization = false })
    end)
  end)

  it("serves /metrics without a key: requests by model and status, latency, in flight, healthy replicas", function()
    local r = req("GET", "/metrics", nil, { Authorization = false })
    assert.equal(200, r.status)
    assert.matches("text/plain; version=0.0.4", r.headers["content-type"], 1, true)
    local t = r.body
    assert.matches('obleth_router_requests_total{model="m",status="200"} %d+', t)
    assert.not_matches('model="no-such-model"', t, 1, true) -- unknown names never become labels
    assert.matches('obleth_router_requests_total{model="",status="404"} %d+', t)
    assert.matches('obleth_router_upstream_latency_seconds_bucket{model="m",le="+Inf"} ', t, 1, true)
    assert.matches('obleth_router_in_flight_requests{model="m"} 0', t, 1, true)
    assert.matches('obleth_model_healthy_replicas{model="m"} 0', t, 1, true)
    assert.matches('obleth_model_endpoints{model="rr"} 2', t, 1, true)
    assert.matches("obleth_provisioner_last_checkin_age_seconds %d", t)
    -- the proxy's connection pool: connections are opened, kept and reused
    local opened = tonumber(t:match("\nobleth_router_upstream_connections_opened_total (%d+)"))
    local reused = tonumber(t:match("\nobleth_router_upstream_connections_reused_total (%d+)"))
    assert.matches("\nobleth_router_upstream_idle_connections %d+", t)
    if transport == "proxy" then
      assert.is_true(opened >= 1 and reused >= 1, ("opened %s, reused %s"):format(opened, reused))
    end
    -- with a trailing slash too; and /v1 itself is the router's, in its error shape
    assert.equal(200, req("GET", "/metrics/", nil, { Authorization = false }).status)
    local v1 = req("GET", "/v1")
    assert.equal(400, v1.status)
    assert.equal("missing_model", decode(v1).error.code)
  end)
  it("never forwards hop-by-hop headers, nor the headers the client's Connection header names", function()
    local seen
    local up = assert(http.server { host = "127.0.0.1", port = 0, handler = function(r)
      seen = r.headers
      return { status = 200, headers = { ["Content-Type"] = "application/json" }, body = "{}" }
    end })
    rig.servers[#rig.servers + 1] = up
    model("hop", { "http://127.0.0.1:" .. up:port() })
    local r = req("POST", "/v1/chat/completions", { model = "hop", messages = {} },
      { Connection = "keep-alive, X-Hop-Secret", ["X-Hop-Secret"] = "1", ["X-Kept"] = "2", Via = "1.0 fred" })
    assert.equal(200, r.status)
    assert.is_nil(seen["x-hop-secret"])
    assert.equal("2", seen["x-kept"])
    assert.is_nil(seen.authorization) -- the client's key stays with obleth
    -- obleth names itself after the client's Via entries (RFC 9110 7.6.3)
    assert.matches("^1%.0 fred, 1%.1 obleth%-%x+$", seen.via)
  end)

  it("answers 508 loop_detected when an endpoint points back at obleth itself, at once", function()
    local admin = { Authorization = "Bearer " .. ADMIN }
    assert.equal(200, req("PUT", "/api/v1/settings/router", { keyless = true }, admin).status)
    model("loop", { rig.base })
    local r = req("POST", "/v1/chat/completions", { model = "loop", messages = {} }, { Authorization = false })
    assert.equal(200, req("PUT", "/api/v1/settings/router", { keyless = false }, admin).status)
    assert.equal(508, r.status)
    assert.equal("loop_detected", decode(r).error.code)
  end)
end)
end

suite("proxy")
suite("client")

-- The line each request leaves in obleth serve's log (docs/router.md, Metrics).
describe("the router's request line (obleth serve)", function()
  if not has_host then
    it("needs the obleth runtime", function() pending("obleth.http is missing: run under build/obleth lua") end)
    return
  end
  it("names the client key's id, method, model, milliseconds, path, status and upstream, and never the client key",
    function()
    local http = require "obleth.http"
    local server = require "spec.support.server"
    local eng = require("obleth.testing").new { model = "lm", replica = "lm-1" }
    local es = assert(http.server { host = "127.0.0.1", port = 0, handler = eng:handler() })
    local srv = server.start()
    local _, m = srv:request("POST", "/api/v1/models", { name = "lm" })
    local st = srv:request("POST", ("/api/v1/models/%d/endpoints"):format(m.id), { url = "http://127.0.0.1:" .. es:port() })
    assert.equal(200, st)
    local _, made = srv:request("POST", "/api/v1/keys", { name = "l" })
    local auth = { Authorization = "Bearer " .. made.key }
    local body = { model = "lm", messages = { { role = "user", content = "hi" } } }
    assert.equal(200, (srv:request("POST", "/v1/chat/completions", body, auth)))
    assert.equal(200, (srv:request("POST", "/v1/chat/completions", body, auth)))
    local _, _, err = srv:stop()
    srv:cleanup()
    es:close()
    local lines = {}
    for line in err:gmatch("[^\n]+") do
      if line:find("method=POST model=lm", 1, true) then lines[#lines + 1] = line end
    end
    assert.equal(2, #lines, err)
    local pat = "^ts=%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ level=info event=http_request key="
      .. ("%d"):format(made.id) .. " method=POST model=lm "
      .. "ms=%d+%.%d+ path=/v1/chat/completions status=200 upstream=http://127%.0%.0%.1:%d+$"
    for _, line in ipairs(lines) do assert.matches(pat, line) end
    assert.is_nil(err:find(made.key, 1, true)) -- no client key in the log
  end)
end)
