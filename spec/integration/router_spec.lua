-- The OpenAI-compatible router end to end: obleth serve + obleth-provisioner +
-- the harness Slurm cluster, with two smoke-test replicas running as real jobs.
-- Slow: about a minute.
local loop = require "obleth.loop"
local http = require "obleth.http"
local cjson = require "cjson"
local util = require "spec.support.util"
local wait_until = util.wait_until
local harness = require "spec.support.harness"
local provisioner = require "spec.support.provisioner"

describe("the router on the harness cluster", function()
  if not harness.URL then
    it("needs the harness cluster", function() pending("harness cluster not running (OBLETH_SLURM_URL unset)") end)
    return
  end

  local NAME = "router-smoke"
  local cluster, srv, prov, conn, mid, key

  local function ok(method, path, body)
    local status, doc, raw = srv:request(method, path, body)
    assert(status and status < 300, ("%s %s -> %s %s"):format(method, path, tostring(status), tostring(raw)))
    return doc
  end

  -- a client request to /v1/ with the client key (or the given Authorization, false for none)
  local function v1(method, path, body, auth, opts)
    local h = { ["Content-Type"] = "application/json" }
    if auth == nil then h.Authorization = "Bearer " .. key elseif auth then h.Authorization = auth end
    local o = { url = srv.base .. path, method = method, headers = h, timeout = 20,
      body = type(body) == "table" and cjson.encode(body) or body }
    for k, v in pairs(opts or {}) do o[k] = v end
    return http.request(o)
  end

  local function chat(text, extra)
    local b = { model = NAME, messages = { { role = "user", content = text or "hello" } } }
    for k, v in pairs(extra or {}) do b[k] = v end
    return v1("POST", "/v1/chat/completions", b)
  end

  local function live_jobs() return cluster:live_jobs(mid) end

  local function healthy_replicas()
    local doc = ok("GET", ("/api/v1/models/%d/replicas?state=live"):format(mid))
    local out = {}
    for _, r in ipairs(doc.replicas) do if r.state == "healthy" then out[#out + 1] = r end end
    return out
  end

  setup(function()
    cluster = harness.start { port_range = { 23000, 23999 } }
    srv, conn = cluster.srv, cluster.conn
    key = ok("POST", "/api/v1/keys", { name = "router spec" }).key
    prov = provisioner.start { base = srv.base, token = srv.token }
  end)

  teardown(function()
    if mid then
      srv:request("DELETE", "/api/v1/models/" .. mid .. "/managed")
      pcall(wait_until, function() return #live_jobs() == 0 end, 30, "no live job")
    end
    if prov then prov:stop() end
    -- leave no job behind, even when the wait above timed out
    if cluster then cluster:stop() end
  end)

  it("answers 503 with Retry-After and a reason until the first replica is healthy, then 200", function()
    mid = ok("POST", "/api/v1/models", { name = NAME }).id
    ok("PUT", "/api/v1/models/" .. mid .. "/managed", { replicas = 2, partition = "gpu", time_limit = 10,
      cpus_per_node = 1, memory_per_node = 200, launch_command = "obleth smoke-engine --startup-delay 2",
      health = { path = "/health", interval = 1, timeout = 1, startup_grace = 30, failure_threshold = 2 } })
    local r = assert(chat())
    assert.equal(503, r.status)
    assert.matches("^%d+$", r.headers["retry-after"])
    local e = cjson.decode(r.body).error
    assert.equal("model_not_ready", e.code)
    assert.matches('model "router-smoke" has no healthy replica yet: ', e.message, 1, true)
    local reasons = {}
    local got = wait_until(function()
      local x = assert(chat("first"))
      if x.status == 503 then
        assert.is_string(x.headers["retry-after"])
        reasons[cjson.decode(x.body).error.message] = true
        return nil, "503"
      end
      return x
    end, 90, "a 200 through the router")
    assert.equal(200, got.status)
    assert.matches("%] first$", cjson.decode(got.body).choices[1].message.content)
    -- the reasons along the way named what was happening (queued, pending, starting, ...)
    local text = {}
    for m in pairs(reasons) do text[#text + 1] = m end
    text = table.concat(text, "\n")
    assert.is_truthy(text:find("waiting", 1, true) or text:find("Slurm", 1, true) or text:find("starting", 1, true),
      text)
  end)

  it("spreads requests over both healthy replicas", function()
    wait_until(function() return #healthy_replicas() == 2 end, 60, "2 healthy replicas")
    local seen = {}
    for _ = 1, 6 do
      local r = assert(chat())
      assert.equal(200, r.status)
      seen[r.headers["x-obleth-replica"]] = true
    end
    local n = 0
    for _ in pairs(seen) do n = n + 1 end
    assert.equal(2, n)
  end)

  it("streams a completion as several chunks before it ends", function()
    local t0 = loop.monotonic()
    local r = assert(v1("POST", "/v1/chat/completions", { model = NAME, stream = true,
      messages = { { role = "user", content = "stream this answer please" } } }, nil, { stream = true }))
    assert.equal(200, r.status)
    assert.matches("text/event-stream", r.headers["content-type"], 1, true)
    local arrivals, parts = {}, {}
    while true do
      local c, err = r:read()
      assert.is_nil(err)
      if not c then break end
      arrivals[#arrivals + 1] = loop.monotonic() - t0
      parts[#parts + 1] = c
    end
    assert.is_true(#arrivals >= 3, "chunks: " .. #arrivals)
    assert.is_true(arrivals[#arrivals] - arrivals[1] >= 0.1, "all chunks arrived together")
    assert.matches("data: %[DONE%]\n\n$", table.concat(parts))
  end)

  it("answers 404 for an unknown model and 401 for a missing or wrong key", function()
    local r = assert(v1("POST", "/v1/chat/completions", { model = "no-such-model", messages = {} }))
    assert.equal(404, r.status)
    assert.equal("model_not_found", cjson.decode(r.body).error.code)
    local none = assert(v1("POST", "/v1/chat/completions", { model = NAME, messages = {} }, false))
    assert.equal(401, none.status)
    assert.equal("missing_api_key", cjson.decode(none.body).error.code)
    local wrong = assert(v1("GET", "/v1/models", nil, "Bearer obk_" .. string.rep("0", 48)))
    assert.equal(401, wrong.status)
    assert.equal("invalid_api_key", cjson.decode(wrong.body).error.code)
    local admin = assert(v1("GET", "/v1/models", nil, "Bearer " .. srv.token))
    assert.equal(401, admin.status)
  end)

  it("loses no request when one of two replicas is killed mid-run", function()
    wait_until(function() return #healthy_replicas() == 2 end, 60, "2 healthy replicas")
    local victim = healthy_replicas()[1]
    local statuses, total, running = {}, 0, 4
    local stop_at = loop.monotonic() + 8
    for w = 1, 4 do
      loop.spawn(function()
        local i = 0
        while loop.monotonic() < stop_at do
          i = i + 1
          local r, err = chat(("w%d-%d"):format(w, i))
          local st = r and r.status or ("error " .. tostring(err and err.code))
          statuses[st] = (statuses[st] or 0) + 1
          total = total + 1
        end
        running = running - 1
      end)
    end
    loop.sleep(2)
    assert.is_true(conn:cancel(victim.job_id))
    while running > 0 do loop.sleep(0.1) end
    assert.is_true(total > 50, "only " .. total .. " requests")
    assert.same({ [200] = total }, statuses)
    -- the router noticed: at least one request went to the other replica after a failed connection
    local _, _, metrics_text = srv:request("GET", "/metrics", nil, { Authorization = false })
    local retries = tonumber(metrics_text:match('obleth_router_upstream_retries_total{model="router%-smoke"} (%d+)'))
    assert.is_true(retries ~= nil and retries >= 1, "no retry counted")
    assert.matches('obleth_router_requests_total{model="router-smoke",status="200"} ', metrics_text, 1, true)
    assert.matches('obleth_model_healthy_replicas{model="router-smoke"} ', metrics_text, 1, true)
    assert.matches("obleth_provisioner_last_checkin_age_seconds %d", metrics_text)
  end)

  it("stops sending to the model once its deployment is deleted and its jobs end", function()
    ok("DELETE", "/api/v1/models/" .. mid .. "/managed")
    wait_until(function() return #live_jobs() == 0 end, 30, "no live job")
    wait_until(function()
      local r = assert(chat())
      return r.status == 503
    end, 15, "503 after the jobs ended")
    local r = assert(chat())
    assert.matches("no deployment", cjson.decode(r.body).error.message, 1, true)
    mid = nil
  end)
end)
