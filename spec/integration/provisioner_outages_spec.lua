-- Outages: slurmrestd, slurmctld and `obleth serve` (hung: SIGSTOP; crashed:
-- SIGKILL, then started again on its database and port) each go away while a model's two
-- replicas run on the harness cluster. In each case one of the two jobs ends while the part is
-- away, and the spec checks:
--   - while it is away, no replica is marked ended or failed because a poll failed, and nothing
--     is cancelled or submitted;
--   - after it is back, the provisioner's first pass succeeds within one (backed-off) pass
--     interval, the job that ended is recorded with its real Slurm end state (CANCELLED after a
--     scancel, FAILED after the engine was killed, COMPLETED after it exited), and it is
--     replaced exactly once, while the other replica stays healthy on its job throughout.
--
-- slurmrestd "goes down" as in provisioner_daemon_spec: the provisioner reaches it through a
-- proxy (spec/support/outage.lua) that is closed; slurmctld is stopped alone with
-- spec/cluster/ctld.sh, keeping slurmd, slurmrestd and slurmdbd up. In make check each outage
-- lasts OUTAGE s after the provisioner saw it, with a 1 s pass interval and back-off capped at
-- 4 s; make soak (OBLETH_SOAK_SECONDS) makes each outage that long with the shipped cap (60 s).
-- An outage longer than MinJobAge (30 s in the harness) also takes the accounting path: the job
-- that ended is no longer listed and is read from slurmdbd.
local loop = require "obleth.loop"
local sys = require "obleth.sys"
local util = require "spec.support.util"
local server = require "spec.support.server"
local provisioner = require "spec.support.provisioner"
local harness = require "spec.support.harness"
local outage = require "spec.support.outage"
local plain = require("obleth.provisioner.client").plain
local wait_until, count = util.wait_until, outage.count

describe("obleth-provisioner through outages", function()
  if not harness.URL then
    it("needs the harness cluster", function() pending("harness cluster not running (OBLETH_SLURM_URL unset)") end)
    return
  end

  local SOAK = outage.SOAK
  local OUTAGE = SOAK or 12       -- seconds each part stays away once the provisioner has seen it
  local BACKOFF_MAX = SOAK and 60 or 4
  local REQUEST_TIMEOUT = 15      -- the provisioner's requests (Management API and slurmrestd)
  -- the first pass that starts after the part is back succeeds: at most one request still
  -- waiting on the outage, then one backed-off wait (with its 10 % jitter), then that pass
  local RECOVERY_BOUND = REQUEST_TIMEOUT + BACKOFF_MAX * 1.1 + 5

  local h, prov, front, mid
  local times = {}

  local function ok(method, path, body)
    local status, doc, raw = h.srv:request(method, path, body)
    assert(status and status < 300, ("%s %s -> %s %s"):format(method, path, tostring(status), tostring(raw)))
    return plain(doc)
  end
  local function rows(live)
    local doc = ok("GET", ("/api/v1/models/%d/replicas%s"):format(mid, live and "?state=live" or ""))
    local out = doc.replicas or doc
    table.sort(out, function(a, b) return a.slot < b.slot end)
    return out
  end
  local function row(id)
    for _, r in ipairs(rows()) do if r.id == id then return r end end
  end
  local function job_ids()
    local ids = {}
    for _, j in ipairs(h:live_jobs(mid)) do ids[j.id] = true end
    return ids
  end
  -- both replicas healthy, and Slurm runs exactly their two jobs
  local function two_healthy()
    return wait_until(function()
      local live = rows(true)
      if #live ~= 2 then return false, #live .. " live replicas" end
      for _, r in ipairs(live) do
        if r.state ~= "healthy" then return false, ("replica %d is %s"):format(r.id, r.state) end
      end
      local n = #h:live_jobs(mid)
      if n ~= 2 then return false, n .. " live jobs" end
      return live
    end, 120, "two healthy replicas")
  end
  local function slurm_state(job_id)
    local j = h.conn:job(job_id)
    return j and j.state and j.state.base
  end

  local function save_settings(token)
    ok("PUT", "/api/v1/settings/slurm", { enabled = true, url = front.url, user = harness.USER,
      token = token, defaults = { partition = "gpu", account = "research", log_dir = h.logdir,
        port_range = { 26000, 26999 } } })
  end

  setup(function()
    h = harness.start { port_range = { 26000, 26999 } }
    front = outage.front(harness.URL)
    save_settings(harness.TOKEN)
    local m = ok("POST", "/api/v1/models", { name = "outages" })
    mid = (m.model or m).id
    -- startup_grace (also the unhealthy grace) is long: after slurmctld returns, the killed
    -- engine's job is reported ended only on slurmstepd's next retry (up to 15 s later), and its
    -- replica must not be cancelled as unhealthy before that
    ok("PUT", "/api/v1/models/" .. mid .. "/managed", { replicas = 2, partition = "gpu", account = "research",
      time_limit = 240, cpus_per_node = 1, memory_per_node = 200, launch_command = "obleth smoke-engine",
      health = { path = "/health", interval = 1, timeout = 1, startup_grace = 300, failure_threshold = 2 } })
    prov = provisioner.start { base = h.srv.base, token = h.srv.token,
      env = { OBLETH_BACKOFF_MAX = tostring(BACKOFF_MAX) } }
  end)

  teardown(function()
    if prov then prov:stop() end
    if front then front:down() end
    outage.ctld("start")
    if h then h:stop() end
    for _, line in ipairs(times) do io.stderr:write(line, "\n") end
  end)

  -- One outage. c: name, away(), back(), end_job(victim) (while away), state (the end state
  -- Slurm gives it), api (the Management API answers while away), slurm (slurmctld answers while
  -- away), seen (the provisioner log's event for the outage), recovered (its event for the return),
-- last_error (what the provisioner status says meanwhile, when the Management API answers)
  local function run(c)
    local before = two_healthy()
    local keep, victim = before[1], before[2]
    local jobs0 = job_ids()
    local off = #prov:log()
    local function log() return prov:log():sub(off + 1) end

    local is_back = false
    finally(function() if not is_back then c.back() end end)
    c.away()
    wait_until(function() return log():find(c.seen, 1, true) end, REQUEST_TIMEOUT + 30, "the outage seen")
    local t_seen = loop.monotonic()
    c.end_job(victim)
    while loop.monotonic() - t_seen < OUTAGE do
      if c.api then
        -- no replica is marked ended (or anything else) because a poll failed
        local now = rows(true)
        assert.equal(2, #now)
        for i, r in ipairs(now) do
          assert.equal(before[i].id, r.id)
          assert.equal(before[i].job_id, r.job_id)
          assert.equal("healthy", r.state)
        end
        if c.last_error then
          assert.matches(c.last_error, ok("GET", "/api/v1/settings/slurm").provisioner.last_error, 1, true)
        end
      end
      if c.slurm then
        -- nothing submitted, the other job untouched
        for id in pairs(job_ids()) do assert.is_true(jobs0[id], "job " .. id .. " submitted during the outage") end
        assert.equal("RUNNING", slurm_state(keep.job_id))
      end
      loop.sleep(1)
    end
    assert.equal(0, count(log(), "event=job_submit"))
    assert.equal(0, count(log(), "event=job_cancel"))
    assert.equal(1, count(log(), c.seen))
    -- past MinJobAge the controller has forgotten the job: its end comes from slurmdbd
    local source = "its end reported when slurmctld is back"
    if c.slurm then
      source = "from slurmdbd"
      for _, j in ipairs(assert(h.conn:jobs())) do
        if j.id == victim.job_id then source = "listed" end
      end
    end

    c.back()
    is_back = true
    local t_up = loop.monotonic()
    wait_until(function() return log():find(c.recovered, 1, true) end, RECOVERY_BOUND + 30, "the recovery logged")
    local took = loop.monotonic() - t_up
    assert.is_true(took <= RECOVERY_BOUND, ("the first good pass came %.1f s after the return (at most %.0f s)")
      :format(took, RECOVERY_BOUND))
    assert.equal(1, count(log(), c.recovered))
    -- the provisioner kept its lease (renewing its generation is granted also after it expired)
    assert.equal(0, count(log(), "event=lease_lost"))
    assert.equal(0, count(log(), "event=lease_acquired"))

    -- the job that ended while the part was away, with its real end state
    local ended = wait_until(function()
      local r = row(victim.id)
      return r.state == "ended" and r, r.state
    end, 180, "the ended job recorded")
    local took_end = loop.monotonic() - t_up
    assert.equal(c.state, ended["end"].state)
    assert.equal(victim.job_id, ended.job_id)

    -- replaced exactly once; the other replica never left its job or the healthy state
    local after = two_healthy()
    local kept = row(keep.id)
    assert.equal("healthy", kept.state)
    assert.equal(keep.job_id, kept.job_id)
    assert.equal(1, count(log(), "event=job_submit"))
    assert.equal(0, count(log(), "event=job_cancel"))
    local new = after[1].id == keep.id and after[2] or after[1]
    assert.are_not.equal(victim.id, new.id)
    assert.equal(victim.slot, new.slot)
    times[#times + 1] = ("  %s (%d s away): first good pass %.1f s after the return, the ended job (%s) recorded"
      .. " as %s %.1f s after it, replaced once"):format(c.name, math.floor(t_up - t_seen), took, source,
      c.state, took_end)
  end

  -- kill the engine of a replica (the job script execs it: the job's batch step)
  local function kill_engine(sig)
    return function(victim)
      local pid = wait_until(function() return outage.engine_pid(victim.port) end, 10, "the engine's pid")
      assert(sys.kill(pid, sig))
      wait_until(function() return outage.engine_pid(victim.port) == nil end, 30, "the engine gone")
    end
  end
  -- wait until Slurm itself says the job ended so (slurmctld answers during this outage)
  local function slurm_says(state)
    return function(victim)
      wait_until(function() return slurm_state(victim.job_id) == state end, 60, "Slurm reporting " .. state)
    end
  end

  it("slurmrestd down: a job cancelled meanwhile is seen as CANCELLED when it is back", function()
    run { name = "slurmrestd", api = true, slurm = true, state = "CANCELLED",
      seen = "event=slurm_unreachable", recovered = "event=slurm_reachable",
      away = function() front:down() end, back = function() front:up() end,
      end_job = function(victim)
        assert(h.conn:cancel(victim.job_id)) -- scancel: slurmctld is up
        slurm_says("CANCELLED")(victim)
      end }
  end)

  it("slurmctld down: a job whose engine was killed meanwhile is seen as FAILED when it is back", function()
    run { name = "slurmctld", api = true, slurm = false, state = "FAILED", last_error = "slurmctld does not answer",
      seen = "event=slurm_unreachable", recovered = "event=slurm_reachable",
      away = function() outage.ctld("stop") end, back = function() outage.ctld("start") end,
      end_job = kill_engine("KILL") }
  end)

  it("obleth serve hung (SIGSTOP): a job whose engine exited meanwhile is seen as COMPLETED after SIGCONT", function()
    run { name = "obleth serve hung", api = false, slurm = true, state = "COMPLETED",
      seen = "event=pass_failed", recovered = "event=pass_ok",
      away = function() assert(sys.kill(h.srv.pid, "STOP")) end,
      back = function() assert(sys.kill(h.srv.pid, "CONT")) end,
      end_job = function(victim)
        kill_engine("TERM")(victim) -- the smoke engine exits 0 on SIGTERM
        slurm_says("COMPLETED")(victim)
      end }
  end)

  it("obleth serve crashed (SIGKILL, restarted): a job whose engine was killed meanwhile is seen as FAILED", function()
    local old = h.srv
    run { name = "obleth serve crashed", api = false, slurm = true, state = "FAILED",
      seen = "event=pass_failed", recovered = "event=pass_ok",
      away = function() old:stop("KILL") end,
      back = function()
        h.srv = server.start { db = old.db, token = old.token, port = old.port }
      end,
      end_job = function(victim)
        kill_engine("KILL")(victim)
        slurm_says("FAILED")(victim)
      end }
  end)

  -- the other side of telling a stopped slurmctld by slurmdbd's answer: Slurm 22.05 answers a JWT
  -- slurmctld rejects with the same HTTP 500 "Unspecified error"
  it("a JWT Slurm rejects is a failed pass (credentials), not an outage, and changes no replica", function()
    local before = two_healthy()
    local off = #prov:log()
    local function log() return prov:log():sub(off + 1) end
    local foreign = require("obleth.slurm.jwt").mint { key = "not the cluster's key", user = harness.USER,
      lifespan = 3600, now = os.time() }
    finally(function() save_settings(harness.TOKEN) end)
    save_settings(foreign)
    local err = wait_until(function()
      local st = ok("GET", "/api/v1/settings/slurm").provisioner
      return st.failed_passes >= 2 and st.last_error, st.last_error
    end, 60, "passes failing on the credentials")
    assert.matches("credentials", err, 1, true)
    assert.equal(0, count(log(), "event=slurm_unreachable"))
    assert.equal(1, count(log(), "event=pass_failed"))
    save_settings(harness.TOKEN)
    wait_until(function() return ok("GET", "/api/v1/settings/slurm").provisioner.failed_passes == 0 end, 60,
      "a good pass with the right token")
    local after = rows(true)
    for i, r in ipairs(after) do
      assert.equal(before[i].id, r.id)
      assert.equal(before[i].job_id, r.job_id)
      assert.equal("healthy", r.state)
    end
    assert.equal(0, count(log(), "event=job_submit"))
    assert.equal(0, count(log(), "event=job_cancel"))
  end)
end)
