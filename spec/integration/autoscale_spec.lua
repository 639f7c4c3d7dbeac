-- Autoscaling end to end (docs/autoscaling.md): obleth serve + the provisioner + the harness Slurm
-- cluster, with real jobs running the smoke engine. A model at min 0 stays at zero without demand,
-- wakes on a request and answers it (held rather than refused), scales up to max under concurrent
-- load, drains back, and returns to zero after idle. Slow: a couple of minutes.
local loop = require "obleth.loop"
local http = require "obleth.http"
local cjson = require "cjson"
local util = require "spec.support.util"
local wait_until = util.wait_until
local harness = require "spec.support.harness"
local provisioner = require "spec.support.provisioner"

describe("autoscaling on the harness cluster", function()
  if not harness.URL then
    it("needs the harness cluster", function() pending("harness cluster not running (OBLETH_SLURM_URL unset)") end)
    return
  end

  local h, srv, prov
  local policy_dir = os.tmpname()
  os.remove(policy_dir)
  os.execute("mkdir -p " .. util.shq(policy_dir))
  local plain = require("obleth.provisioner.client").plain

  local function ok(method, path, body)
    local status, doc, raw = srv:request(method, path, body)
    assert(status and status < 300, ("%s %s -> %s %s"):format(method, path, tostring(status), tostring(raw)))
    return plain(doc)
  end

  local function live(mid)
    local doc = ok("GET", ("/api/v1/models/%d/replicas?state=live"):format(mid))
    return doc.replicas or doc
  end

  local function count(mid, state)
    local n = 0
    for _, r in ipairs(live(mid)) do if not state or r.state == state then n = n + 1 end end
    return n
  end

  local function passes() return ok("GET", "/api/v1/settings/slurm").provisioner.passes or 0 end

  local function chat(name, stream)
    return http.request { url = srv.base .. "/v1/chat/completions", method = "POST", timeout = 120,
      headers = { ["Content-Type"] = "application/json" },
      body = cjson.encode { model = name, stream = stream or nil, messages = { { role = "user", content = "hello" } } } }
  end

  setup(function()
    -- a replica of the smoke engine starts in seconds on the harness: the router may hold a request
    -- long enough for it
    h = harness.start { port_range = { 22000, 22999 }, env = { OBLETH_WAKE_WAIT = "90" } }
    srv = h.srv
    ok("PUT", "/api/v1/settings/router", { keyless = true })
    prov = provisioner.start { base = srv.base, token = srv.token, env = { OBLETH_POLICY_DIR = policy_dir } }
  end)

  teardown(function()
    if prov then prov:stop() end
    if h then h:stop() end
    os.execute("rm -rf " .. util.shq(policy_dir))
  end)

  it("wakes from zero on a request, scales up to max under load, drains back, and returns to zero", function()
    local m = ok("POST", "/api/v1/models", { name = "auto-1" })
    m = m.model or m
    -- streamed answers last 30 × 0.5 s = 15 s (requests in flight); plain ones return at once
    ok("PUT", "/api/v1/models/" .. m.id .. "/managed", { partition = "gpu", account = "research", time_limit = 10,
      nodes = 1, cpus_per_node = 1, memory_per_node = 200,
      launch_command = "obleth smoke-engine --startup-delay 1 --tokens 30 --token-delay 0.5",
      health = { path = "/health", interval = 1, timeout = 1, startup_grace = 60, failure_threshold = 2 },
      autoscale = { min_replicas = 0, max_replicas = 2, target_inflight = 2, scale_down_after = 5,
        idle_to_zero_after = 40 } })

    -- at zero without demand: three passes later still no job
    local p0 = passes()
    wait_until(function() return passes() >= p0 + 3, passes() end, 60, "three provisioner passes")
    assert.equal(0, count(m.id))
    assert.equal(0, #h:live_jobs(m.id))

    -- a request wakes it, and is held until the replica serves, then answered
    local r = assert(chat("auto-1"))
    assert.equal(200, r.status, r.body)
    assert.equal("[" , cjson.decode(r.body).choices[1].message.content:sub(1, 1))
    assert.equal(1, count(m.id, "healthy"))

    -- six streams in flight at target_inflight 2 want 3: capped at max_replicas 2
    local done = {}
    for i = 1, 6 do
      loop.spawn(function()
        local s = chat("auto-1", true)
        done[i] = s and s.status == 200 and s.body:find("data: [DONE]", 1, true) ~= nil
      end)
    end
    wait_until(function() return count(m.id, "healthy") == 2, count(m.id, "healthy") end, 90, "2 healthy replicas")
    wait_until(function() return #done == 6, #done end, 120, "the six streams to end")
    for i = 1, 6 do assert.is_true(done[i], "stream " .. i .. " was answered whole") end

    -- the deployment page's chart: the history of the last hour has the six streams in flight at once,
    -- the seven requests finished and two replicas wanted (GET /api/v1/models/{id}/load)
    -- (a client reads [DONE] before the router has closed the stream and counted it finished: wait for
    -- the seventh rather than read once)
    local ld, peak, fin, wanted
    wait_until(function()
      ld = ok("GET", ("/api/v1/models/%d/load?hours=1"):format(m.id))
      peak, fin, wanted = 0, 0, 0
      for _, p in ipairs(ld.points) do
        peak, fin, wanted = math.max(peak, p.inflight), fin + p.finished, math.max(wanted, p.desired or 0)
      end
      return fin >= 7, fin
    end, 30, "the load history to count the seven finished requests")
    assert.same({ 6, 7, 2, 2 }, { peak, fin, wanted, ld.max_replicas })

    -- the load is gone: back to 1 after scale_down_after; the replica that went drained first
    wait_until(function() return count(m.id) == 1, count(m.id) end, 90, "one replica left")
    local all = ok("GET", ("/api/v1/models/%d/replicas"):format(m.id))
    all = all.replicas or all
    local scaled_down = 0
    for _, x in ipairs(all) do if x.cancel_why == "scaled down" then scaled_down = scaled_down + 1 end end
    assert.equal(1, scaled_down)

    -- no request for idle_to_zero_after: zero, and no job left in Slurm
    wait_until(function() return count(m.id) == 0 and #h:live_jobs(m.id) == 0, count(m.id) end, 120, "zero replicas")
  end)

  it("a scale.lua in policy.d changes the decision on the next pass, and removing it brings the built-in back", function()
    local m = ok("POST", "/api/v1/models", { name = "auto-2" })
    m = m.model or m
    ok("PUT", "/api/v1/models/" .. m.id .. "/managed", { partition = "gpu", account = "research", time_limit = 10,
      nodes = 1, cpus_per_node = 1, memory_per_node = 200, launch_command = "obleth smoke-engine --startup-delay 1",
      health = { path = "/health", interval = 1, timeout = 1, startup_grace = 60, failure_threshold = 2 },
      autoscale = { min_replicas = 0, max_replicas = 2, target_inflight = 2, scale_down_after = 0,
        idle_to_zero_after = 5 } })
    local p0 = passes()
    wait_until(function() return passes() >= p0 + 2, passes() end, 60, "two provisioner passes")
    assert.equal(0, count(m.id), "no request: the built-in policy keeps it at zero")
    -- an operator keeps one replica warm in working hours (here: always), without touching the spec
    local fh = assert(io.open(policy_dir .. "/scale.lua", "w"))
    fh:write([[
      return {
        decide = function(f, opts)
          local d = builtin.decide(f, opts)
          if d.desired < 1 then d.desired, d.change, d.reason = 1, "up", "kept warm by policy.d" end
          return d
        end,
      }]])
    fh:close()
    wait_until(function() return count(m.id, "healthy") == 1, count(m.id) end, 90, "one warm replica")
    -- the file goes: no request for idle_to_zero_after, the built-in scales it to zero again
    os.remove(policy_dir .. "/scale.lua")
    wait_until(function() return count(m.id) == 0 and #h:live_jobs(m.id) == 0, count(m.id) end, 90, "zero again")
  end)
end)
