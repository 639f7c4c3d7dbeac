-- Wake on demand in the router (docs/autoscaling.md): a request to an autoscaled model with no
-- replica is held (counted as queued, which the next pass reads as demand) until an endpoint
-- appears, then answered; past the wait it gets a 503 naming the job on its way, with Retry-After
-- from Slurm's estimated start. In-process obleth serve in front of a smoke engine.
local has_host = pcall(require, "obleth.http")

describe("router wake on demand", function()
  if not has_host then
    it("needs the obleth runtime", function() pending("obleth.http is missing: run under build/obleth lua") end)
    return
  end
  local loop = require "obleth.loop"
  local cjson = require "cjson"
  local rig = require("spec.support.router_rig").new()
  local store, app
  local AS = { min_replicas = 0, max_replicas = 2, target_inflight = 4, scale_down_after = 300,
    idle_to_zero_after = 1200 }

  local ADMIN = "admin-token-for-router-wake-spec-1"
  setup(function() store, app = rig:start { admin_token = ADMIN } end)
  teardown(function() rig:close() end)

  local function report(replicas)
    assert(store:apply_report({ pass = { started_at = loop.now(), duration = 0.1, error = cjson.null },
      replicas = replicas, outcomes = {}, endpoints = {}, provision_errors = {},
      acknowledged = { restart = {}, clear_lost = {} } }, loop.now()))
  end

  it("holds a request while the model wakes and answers it once a replica serves (streamed too)", function()
    local _, url = rig:engine("wake-1", { model = "sleepy" })
    local m = assert(store:create_model { name = "sleepy" })
    assert(store:put_spec(m.id, { enabled = true, partition = "gpu", launch_command = "x", autoscale = AS }))
    report({})
    -- the replica comes up once the router counts the held request (what the pass wakes on)
    local seen_queued
    loop.spawn(function()
      while app.router.load:view("sleepy").queued == 0 do loop.sleep(0.02) end
      seen_queued = app.router.load:view("sleepy").queued
      assert(store:add_endpoint(m.id, url))
    end)
    local r = rig:req("POST", "/v1/chat/completions", { model = "sleepy", stream = true,
      messages = { { role = "user", content = "wake up" } } }, nil, { timeout = 60 })
    assert.equal(200, r.status)
    assert.matches('"content":"e up"', r.body, 1, true)
    assert.matches("data: [DONE]", r.body, 1, true)
    assert.equal(1, seen_queued)
    local v = app.router.load:view("sleepy")
    assert.equal(0, v.queued)
    assert.equal(1, v.finished)
    local arrivals = 0
    for _, s in ipairs(v.samples) do arrivals = arrivals + s.arrivals end
    assert.equal(1, arrivals, "held then served: one request")
  end)

  it("a held request whose client goes away is let go: its key's slot and its queued load are released", function()
    local m = assert(store:create_model { name = "sleepy-gone" })
    assert(store:put_spec(m.id, { enabled = true, partition = "gpu", launch_command = "x", autoscale = AS }))
    report({})
    local g = require("obleth.api.keys").generate()
    assert(store:create_api_key { name = "one-at-a-time", prefix = g.prefix, hash = g.hash, max_concurrent = 1 })
    local h = { Authorization = "Bearer " .. g.key }
    -- the client gives up while its request is held (the wait is 30 s)
    local held
    loop.spawn(function()
      while app.router.load:view("sleepy-gone").queued == 0 do loop.sleep(0.02) end
      held = true
    end)
    local r = require("obleth.http").request { url = rig.base .. "/v1/chat/completions", method = "POST",
      headers = { Authorization = h.Authorization, ["Content-Type"] = "application/json" },
      body = cjson.encode { model = "sleepy-gone", messages = { { role = "user", content = "x" } } }, timeout = 1 }
    assert.is_nil(r)
    assert.is_true(held)
    -- the router lets go of it (the event, well before the 30 s wait would end it)
    local until_ = loop.now() + 10
    while app.router.load:view("sleepy-gone").queued > 0 and loop.now() < until_ do loop.sleep(0.02) end
    assert.equal(0, app.router.load:view("sleepy-gone").queued)
    -- and its key's one slot is free again: the next request is not refused for concurrency
    local r2 = rig:req("POST", "/v1/chat/completions", { model = "no-such-model", messages = {} }, h)
    assert.equal(404, r2.status)
  end)

  it("past the wait: 503 naming the pending job, its reason and estimated start, with Retry-After", function()
    local m = assert(store:create_model { name = "sleepy-2" })
    assert(store:put_spec(m.id, { enabled = true, partition = "gpu", launch_command = "x", autoscale = AS }))
    local start = math.floor(loop.now()) + 600
    report({ { nonce = "00000000000000a1", model_id = m.id, slot = 1, state = "submitted", job_id = 123,
      pending_reason = "Priority", slurm = { state = "PENDING", reason = "Priority", start_time = start,
        estimated = true } } })
    app.router.wake_wait = 0.2
    local r = rig:req("POST", "/v1/chat/completions", { model = "sleepy-2", messages = { { role = "user", content = "x" } } })
    app.router.wake_wait = 30
    assert.equal(503, r.status)
    local e = cjson.decode(r.body).error
    assert.equal(('model "sleepy-2" is scaled to zero, waking: job 123 pending (Priority), estimated start %s')
      :format(os.date("!%H:%M UTC", start)), e.message)
    local retry = tonumber(r.headers["retry-after"])
    assert.is_true(retry > 500 and retry <= 600, "Retry-After is the time until Slurm's estimated start")
  end)

  it("a held request asks the provisioner for a pass now: GET /api/v1/provisioner/wait answers woken", function()
    local m = assert(store:create_model { name = "sleepy-3" })
    assert(store:put_spec(m.id, { enabled = true, partition = "gpu", launch_command = "x", autoscale = AS }))
    local admin = { Authorization = "Bearer " .. ADMIN }
    local first = cjson.decode(rig:req("GET", "/api/v1/provisioner/wait", nil, admin).body)
    assert.is_false(first.woken, "without since: the counter, at once")
    local got
    loop.spawn(function()
      got = rig:req("GET", ("/api/v1/provisioner/wait?since=%d&timeout=60"):format(first.seq), nil, admin,
        { timeout = 70 })
    end)
    app.router.wake_wait = 0.2
    local r = rig:req("POST", "/v1/chat/completions", { model = "sleepy-3", messages = { { role = "user", content = "x" } } })
    app.router.wake_wait = 30
    assert.equal(503, r.status)
    while not got do loop.sleep(0.02) end
    assert.equal(200, got.status)
    local doc = cjson.decode(got.body)
    assert.is_true(doc.woken)
    assert.equal("sleepy-3", doc.why)
    assert.equal(first.seq + 1, doc.seq)
    -- a wait that names an older counter answers at once
    local again = cjson.decode(rig:req("GET", ("/api/v1/provisioner/wait?since=%d&timeout=60"):format(first.seq),
      nil, admin).body)
    assert.is_true(again.woken)
    assert.equal(400, rig:req("GET", "/api/v1/provisioner/wait?since=x", nil, admin).status)
  end)

  it("/metrics exports desired and current replicas per managed model", function()
    local a = assert(store:create_model { name = "gauge-a" })
    local as1 = { min_replicas = 1, max_replicas = 3, target_inflight = 4, scale_down_after = 300,
      idle_to_zero_after = 1200 }
    assert(store:put_spec(a.id, { enabled = true, partition = "gpu", launch_command = "x", autoscale = as1 }))
    local b = assert(store:create_model { name = "gauge-b" })
    assert(store:put_spec(b.id, { replicas = 2, enabled = true, partition = "gpu", launch_command = "x" }))
    report({ { nonce = "00000000000000b1", model_id = b.id, slot = 1, state = "submitted", job_id = 77 } })
    local t = rig:req("GET", "/metrics").body
    -- gauge-a: nothing live, min_replicas 1 → 1 wanted; gauge-b: replicas 2, one submitted
    assert.matches('obleth_model_desired_replicas{model="gauge-a"} 1\n', t, 1, true)
    assert.matches('obleth_model_current_replicas{model="gauge-a"} 0\n', t, 1, true)
    assert.matches('obleth_model_desired_replicas{model="gauge-b"} 2\n', t, 1, true)
    assert.matches('obleth_model_current_replicas{model="gauge-b"} 1\n', t, 1, true)
  end)

  it("a model with a fixed count is not held: 503 at once, as before", function()
    local m = assert(store:create_model { name = "fixed-0" })
    assert(store:put_spec(m.id, { replicas = 1, enabled = true, partition = "gpu", launch_command = "x" }))
    local r = rig:req("POST", "/v1/chat/completions", { model = "fixed-0", messages = { { role = "user", content = "x" } } })
    assert.equal(503, r.status)
    assert.equal(0, app.router.load:view("fixed-0").queued)
    assert.is_nil(cjson.decode(r.body).error.message:find("waking", 1, true))
  end)
end)
