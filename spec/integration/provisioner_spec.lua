-- obleth-provisioner end to end: obleth serve + the provisioner + the harness
-- Slurm cluster, with real jobs running the smoke-test engine and real
-- health checks. Slow: several minutes.
local loop = require "obleth.loop"
local util = require "spec.support.util"
local wait_until, sh = util.wait_until, util.sh
local harness = require "spec.support.harness"
local provisioner = require "spec.support.provisioner"
local events = require "spec.support.events"

describe("obleth-provisioner on the harness cluster", function()
  if not harness.URL then
    it("needs the harness cluster", function() pending("harness cluster not running (OBLETH_SLURM_URL unset)") end)
    return
  end

  local h, srv, prov, conn

  local plain = require("obleth.provisioner.client").plain
  local function api(method, path, body)
    local status, doc, raw = srv:request(method, path, body)
    return status, plain(doc), raw
  end

  local function ok(method, path, body)
    local status, doc, raw = api(method, path, body)
    assert(status and status < 300, ("%s %s -> %s %s"):format(method, path, tostring(status), tostring(raw)))
    return doc
  end

  -- live tagged jobs of a model, from Slurm itself
  local function slurm_jobs(model_id) return h:live_jobs(model_id) end

  local function replicas(mid, live)
    local doc = ok("GET", ("/api/v1/models/%d/replicas%s"):format(mid, live and "?state=live" or ""))
    return doc.replicas or doc
  end

  local function model(mid)
    local doc = ok("GET", "/api/v1/models/" .. mid)
    return doc.model or doc
  end

  local function healthy(mid)
    local n = 0
    for _, r in ipairs(replicas(mid, true)) do if r.state == "healthy" then n = n + 1 end end
    return n
  end

  local function spec(over)
    local s = { replicas = 1, partition = "gpu", account = "research", time_limit = 10, nodes = 1, cpus_per_node = 1,
      memory_per_node = 200, launch_command = "obleth smoke-engine --startup-delay 1",
      health = { path = "/health", interval = 1, timeout = 1, startup_grace = 30, failure_threshold = 2 } }
    for k, v in pairs(over or {}) do s[k] = v end
    return s
  end

  local counter = 0
  -- unchecked: store a spec the cluster checks of PUT would refuse (?check=false), to see what the
  -- provisioner makes of Slurm's own answer
  local function launch(over, name, unchecked)
    counter = counter + 1
    local m = ok("POST", "/api/v1/models", { name = name or ("spec-" .. counter) })
    m = m.model or m
    ok("PUT", "/api/v1/models/" .. m.id .. "/managed" .. (unchecked and "?check=false" or ""), spec(over))
    return m.id
  end

  setup(function()
    h = harness.start { port_range = { 21000, 21999 } }
    srv, conn = h.srv, h.conn
    prov = provisioner.start { base = srv.base, token = srv.token }
  end)

  teardown(function()
    if prov then prov:stop() end
    if h then h:stop() end
  end)

  it("submits a new spec's replicas, they become healthy, join the endpoints, and the model turns active", function()
    -- the dashboard's view: every step is announced on the event stream (GET /api/v1/events)
    local stream = assert(events.open(srv))
    local steps, watching = {}, true
    loop.spawn(function()
      local seen = 0
      while watching do
        for i = seen + 1, #stream.events do
          local e = stream.events[i]
          if e.event == "change" and e.data.topic == "replicas" and e.data.model_id == steps.mid then
            for _, r in ipairs(replicas(steps.mid)) do
              steps[r.id] = steps[r.id] or {}
              if steps[r.id][#steps[r.id]] ~= r.state then table.insert(steps[r.id], r.state) end
            end
          end
          seen = i
        end
        loop.sleep(0.05)
      end
    end)
    local mid = launch({ replicas = 2 })
    steps.mid = mid
    assert.equal("staged", model(mid).status)
    wait_until(function() return healthy(mid) == 2, healthy(mid) .. " healthy" end, 60, "2 healthy replicas")
    -- refetching on the events alone saw each replica reach healthy (the stream missed no step)
    wait_until(function()
      local n = 0
      for id, list in pairs(steps) do if id ~= "mid" and list[#list] == "healthy" then n = n + 1 end end
      return n == 2, n
    end, 5, "both replicas healthy as seen through the events")
    watching = false
    stream.resp:close()
    -- each replica's job as Slurm shows it: running, its start, and the end its time limit sets
    for _, r in ipairs(replicas(mid, true)) do
      assert.equal("RUNNING", r.slurm.state)
      assert.equal(10, r.slurm.time_limit)
      assert.is_false(r.slurm.estimated)
      assert.is_number(r.slurm.start_time)
      assert.near(r.slurm.start_time + 600, r.slurm.end_time, 2)
    end
    local m = model(mid)
    assert.equal("active", m.status)
    assert.equal(2, #m.endpoints)
    local reps = replicas(mid, true)
    assert.not_equal(reps[1].port, reps[2].port)
    for _, r in ipairs(reps) do
      assert.matches("^http://127%.0%.0%.1:%d+$", r.endpoint)
      local res = assert(require("obleth.http").request { url = r.endpoint .. "/health", timeout = 3 })
      assert.equal(200, res.status)
    end
    assert.equal(2, #slurm_jobs(mid))
    -- replicas 2 -> 1 cancels exactly one job
    ok("PUT", "/api/v1/models/" .. mid .. "/managed", spec({ replicas = 1 }))
    wait_until(function() return #slurm_jobs(mid) == 1 end, 30, "one job left")
    loop.sleep(3)
    assert.equal(1, #slurm_jobs(mid))
    wait_until(function() return #model(mid).endpoints == 1 end, 15, "one endpoint")
    -- enabled: false cancels all
    ok("PUT", "/api/v1/models/" .. mid .. "/managed", spec({ replicas = 1, enabled = false }))
    wait_until(function() return #slurm_jobs(mid) == 0 end, 30, "no job")
    wait_until(function() return #model(mid).endpoints == 0 end, 15, "no endpoint")
  end)

  it("replaces a replica whose job was cancelled outside obleth (scancel)", function()
    local mid = launch({ replicas = 1 })
    wait_until(function() return healthy(mid) == 1 end, 60, "a healthy replica")
    local job = slurm_jobs(mid)[1]
    assert.is_true(conn:cancel(job.id))
    wait_until(function()
      local js = slurm_jobs(mid)
      return #js == 1 and js[1].id ~= job.id and healthy(mid) == 1
    end, 60, "a healthy replacement")
    -- the end was recorded with Slurm's state
    local ended
    for _, r in ipairs(replicas(mid)) do if r.job_id == job.id then ended = r end end
    assert.equal("ended", ended.state)
    assert.equal("CANCELLED", ended["end"].state)
    ok("DELETE", "/api/v1/models/" .. mid .. "/managed")
    wait_until(function() return #slurm_jobs(mid) == 0 end, 30, "no job after DELETE")
    wait_until(function() return #model(mid).endpoints == 0 end, 15, "endpoints removed")
  end)

  it("takes a change of the saved connection on its next pass, without a restart: Slurm off, then on", function()
    local mid = launch({ replicas = 1 })
    wait_until(function() return healthy(mid) == 1 end, 60, "a healthy replica")
    local first = slurm_jobs(mid)[1]
    local s = ok("GET", "/api/v1/settings/slurm")
    s.enabled = false
    ok("PUT", "/api/v1/settings/slurm?confirm=true", s)
    wait_until(function() return #slurm_jobs(mid) == 0 end, 60, "the job cancelled once Slurm is off")
    local ended
    for _, r in ipairs(replicas(mid)) do if r.job_id == first.id then ended = r end end
    assert.equal("Slurm turned off", ended.cancel_why)
    s.enabled = true
    ok("PUT", "/api/v1/settings/slurm", s)
    wait_until(function() return healthy(mid) == 1 end, 60, "a healthy replica once Slurm is on again")
    assert.are_not.equal(first.id, slurm_jobs(mid)[1].id)
    ok("DELETE", "/api/v1/models/" .. mid .. "/managed")
    wait_until(function() return #slurm_jobs(mid) == 0 end, 30, "no job after DELETE")
  end)

  it("gives two replicas on the same node different ports, and both become healthy", function()
    local mid = launch({ replicas = 2, exclude = "n[1-3]" })
    wait_until(function() return healthy(mid) == 2 end, 60, "2 healthy replicas on n0")
    local reps = replicas(mid, true)
    assert.equal("n0", reps[1].node)
    assert.equal("n0", reps[2].node)
    assert.not_equal(reps[1].port, reps[2].port)
    ok("DELETE", "/api/v1/models/" .. mid .. "/managed")
    wait_until(function() return #slurm_jobs(mid) == 0 end, 30, "no job")
  end)

  it("records a node failure with the node's name and replaces the replica on another node", function()
    local mid = launch({ replicas = 1, exclude = "n0" })
    wait_until(function() return healthy(mid) == 1 end, 60, "a healthy replica")
    local r = replicas(mid, true)[1]
    local node, job_id = r.node, r.job_id
    local code, out = sh(util.shq(util.root() .. "/spec/cluster/node.sh") .. " stop " .. node)
    assert.equal(0, code, out)
    local ok_restart, restart_err = pcall(function()
      wait_until(function()
        for _, x in ipairs(replicas(mid)) do
          if x.job_id == job_id and x.state == "ended" then return x end
        end
      end, 60, "the failed job's end")
      local ended
      for _, x in ipairs(replicas(mid)) do if x.job_id == job_id then ended = x end end
      assert.equal("NODE_FAIL", ended["end"].state)
      assert.equal(node, ended["end"].node)
      wait_until(function()
        local live = replicas(mid, true)
        return #live == 1 and live[1].state == "healthy" and live[1].node ~= node and live[1].job_id ~= job_id
      end, 240, "a healthy replacement on another node")
      -- never two jobs for the replica, never a stale endpoint
      assert.equal(1, #slurm_jobs(mid))
      local m = model(mid)
      assert.equal(1, #m.endpoints)
      assert.equal(replicas(mid, true)[1].endpoint, type(m.endpoints[1]) == "table" and m.endpoints[1].url or m.endpoints[1])
    end)
    sh(util.shq(util.root() .. "/spec/cluster/node.sh") .. " start " .. node)
    ok("DELETE", "/api/v1/models/" .. mid .. "/managed")
    wait_until(function() return #slurm_jobs(mid) == 0 end, 30, "no job")
    assert.is_true(ok_restart, tostring(restart_err))
  end)

  it("a refused submit becomes the spec's provision_error, with no resubmission loop", function()
    local before = select(2, prov:log():gsub("event=job_refused", ""))
    local mid = launch({ replicas = 1, account = "nosuch" }, nil, true)
    local perr = wait_until(function()
      local doc = ok("GET", "/api/v1/models/" .. mid .. "/managed")
      local s = doc.spec or doc
      return s.provision_error
    end, 30, "provision_error")
    assert.matches("Invalid account", perr.message)
    assert.equal("account", perr.field)
    assert.equal("refused", perr.code)
    assert.equal(2045, perr.slurm_code) -- ESLURM_INVALID_ACCOUNT, in its own field
    loop.sleep(4) -- several passes
    local after = select(2, prov:log():gsub("event=job_refused", ""))
    assert.equal(1, after - before)
    -- dismissing it allows one more try (refused again: still one per dismissal)
    ok("PATCH", "/api/v1/models/" .. mid .. "/managed/provision-error", {})
    wait_until(function() return select(2, prov:log():gsub("event=job_refused", "")) - before == 2 end, 20,
      "one more refusal after the dismissal")
    ok("DELETE", "/api/v1/models/" .. mid .. "/managed")
  end)

  it("shows a job Slurm accepted but will never start as a problem on its replica", function()
    local mid = launch({ replicas = 1, partition = "debug", account = "teaching", time_limit = 5 }, nil, true)
    -- first Slurm's submit warning, then (next pass) the pending reason that means never
    local r = wait_until(function()
      for _, x in ipairs(replicas(mid, true)) do
        if x.problem and x.problem:find("never start", 1, true) then return x end
      end
    end, 30, "a never-start problem on the replica")
    assert.equal("submitted", r.state)
    assert.matches("never start", r.problem)
    -- Slurm's own view for the page: pending, with the same reason
    assert.equal("PENDING", r.slurm.state)
    assert.equal(r.pending_reason, r.slurm.reason)
    assert.is_true(r.slurm.estimated)
    assert.equal(5, r.slurm.time_limit)
    ok("DELETE", "/api/v1/models/" .. mid .. "/managed")
    wait_until(function() return #slurm_jobs(mid) == 0 end, 30, "no job")
  end)

  it("adopts the job of a provisioner killed right after submitting, never submitting twice", function()
    prov:stop()
    local crashing = provisioner.start { base = srv.base, token = srv.token, env = { OBLETH_FAULT = "exit_after_submit" } }
    local mid = launch({ replicas = 1 })
    local code = crashing:wait()
    assert.equal(137, code)
    assert.equal(1, #slurm_jobs(mid))
    prov = provisioner.start { base = srv.base, token = srv.token }
    local max_jobs = 0
    wait_until(function()
      max_jobs = math.max(max_jobs, #slurm_jobs(mid))
      return healthy(mid) == 1
    end, 60, "the adopted replica healthy")
    assert.equal(1, max_jobs)
    assert.matches("event=job_adopted", prov:log(), 1, true)
    ok("DELETE", "/api/v1/models/" .. mid .. "/managed")
    wait_until(function() return #slurm_jobs(mid) == 0 end, 30, "no job")
  end)

  it("on SIGTERM in the middle of a pass exits 0 after the pass, and the job it submitted is recorded", function()
    prov:stop()
    local p = provisioner.start { base = srv.base, token = srv.token, env = { OBLETH_FAULT = "pause_after_submit" } }
    local mid = launch({ replicas = 1 })
    wait_until(function() return p:log():find("pause_after_submit", 1, true) end, 20, "a submit")
    p:stop("TERM")
    prov = provisioner.start { base = srv.base, token = srv.token } -- the next cases need one, whatever this finds
    assert.equal(0, p.code)
    local reps = replicas(mid)
    assert.equal(1, #reps)
    assert.is_number(reps[1].job_id)
    -- the job Slurm took is the one recorded (asked by id: it may have ended since)
    local j = assert(conn:job(reps[1].job_id))
    assert.matches("^obleth%-%x+%-m" .. mid .. "%-s1%-" .. reps[1].nonce .. "$", j.name)
    ok("DELETE", "/api/v1/models/" .. mid .. "/managed")
    wait_until(function() return #slurm_jobs(mid) == 0 end, 30, "no job")
  end)

  it("a never-healthy engine becomes lost after the threshold, and Try once more tries again", function()
    local mid = launch({ replicas = 1, launch_command = "obleth smoke-engine --mode never-healthy",
      health = { path = "/health", interval = 1, timeout = 1, startup_grace = 3, failure_threshold = 2 } })
    wait_until(function()
      for _, r in ipairs(replicas(mid, true)) do if r.state == "lost" then return true end end
    end, 120, "a lost replica")
    loop.sleep(3)
    assert.equal(0, #slurm_jobs(mid))
    ok("POST", "/api/v1/models/" .. mid .. "/replicas/clear-lost", {})
    wait_until(function() return #slurm_jobs(mid) == 1 end, 30, "a new job after Try once more")
    ok("DELETE", "/api/v1/models/" .. mid .. "/managed")
    wait_until(function() return #slurm_jobs(mid) == 0 end, 30, "no job")
  end)

  it("rolls a replica over before its 3-minute time limit with no moment without a healthy endpoint", function()
    local mid = launch({ replicas = 1, time_limit = 3, rollover_margin = 1 })
    wait_until(function() return #model(mid).endpoints == 1 end, 60, "a first endpoint")
    local first_job = replicas(mid, true)[1].job_id
    local gaps, samples = 0, 0
    local t_end = loop.monotonic() + 200
    local jobs_seen = {}
    while loop.monotonic() < t_end do
      samples = samples + 1
      if #model(mid).endpoints == 0 then gaps = gaps + 1 end
      for _, r in ipairs(replicas(mid, true)) do if r.job_id then jobs_seen[r.job_id] = true end end
      loop.sleep(1)
    end
    local n_jobs = 0
    for _ in pairs(jobs_seen) do n_jobs = n_jobs + 1 end
    assert.equal(0, gaps, ("%d of %d samples had no endpoint"):format(gaps, samples))
    assert.is_true(n_jobs >= 2, "no successor was started")
    assert.is_nil(jobs_seen[first_job] and #slurm_jobs(mid) > 2 or nil)
    ok("DELETE", "/api/v1/models/" .. mid .. "/managed")
    wait_until(function() return #slurm_jobs(mid) == 0 end, 30, "no job")
  end)
end)
