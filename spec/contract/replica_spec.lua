-- The contract on each harness release (22.05, 24.11, 26.05; see slurm_spec.lua) through obleth
-- serve and the provisioner: a launch to a partition the user may not use is refused on its field,
-- one replica lives its whole life (submitted, healthy, restarted, rolled over before its walltime,
-- cancelled), and a slurmctld outage is an outage to the bindings and leaves the job running.
local cjson = require "cjson"
local util = require "spec.support.util"
local harness = require "spec.support.harness"
local provisioner = require "spec.support.provisioner"
local outage = require "spec.support.outage"
local read = require "spec.support.preview"
local wait_until = util.wait_until

local RELEASE = os.getenv("OBLETH_CLUSTER_RELEASE") or "22.05"
-- With slurmctld stopped, slurmrestd 22.05 answers HTTP 500 "Unspecified error", the very answer it
-- gives a JWT slurmctld rejects: the bindings call it auth, and a caller tells the two apart by
-- slurmdbd accepting the same token (as the provisioner does). 24.11 and 26.05 answer an outage
-- the bindings see as one.
local CTLD_DOWN_READS_AS_AUTH = RELEASE == "22.05"
local KNOWN = { ["22.05"] = true, ["24.11"] = true, ["26.05"] = true }

describe("Slurm " .. RELEASE .. " contract, through obleth serve and the provisioner:", function()
  if not harness.URL or not KNOWN[RELEASE] then
    it("needs a harness cluster", function() pending("no harness cluster of a known release") end)
    return
  end

  local h, srv, prov
  local plain = require("obleth.provisioner.client").plain
  local function ok(method, path, body)
    local status, doc, raw = srv:request(method, path, body)
    assert(status and status < 300, ("%s %s -> %s %s"):format(method, path, tostring(status), tostring(raw)))
    return plain(doc)
  end

  setup(function()
    h = harness.start { port_range = { 28000, 28999 } }
    srv = h.srv
  end)

  teardown(function()
    if prov then prov:stop() end
    outage.ctld("start")
    if h then h:stop() end
  end)

  -- 22.05 refuses such a job at submit, 24.11 and 26.05 accept it and leave it pending (slurm_spec.lua):
  -- obleth's own check refuses it the same way on all three
  it("a launch to the AllowGroups partition staff is a GroupNotAllowed error on partition", function()
    local pv = ok("POST", "/api/v1/deployments/preview", { recipe_id = "smoke-test", values = { partition = "staff" } })
    assert.is_false(pv.ok)
    local e = read.error_for(pv, "partition")
    assert.truthy(e, cjson.encode(pv.errors))
    assert.equal("GroupNotAllowed", e.code)
    assert.is_false(read.has(pv.partitions_offered, "staff"))
  end)

  it("one replica's life: submitted, healthy, restarted, rolled over before its walltime, cancelled", function()
    prov = provisioner.start { base = srv.base, token = srv.token }
    local m = ok("POST", "/api/v1/models", { name = "contract-life" })
    local mid = (m.model or m).id
    -- a 2-minute time limit and a 1-minute margin: each job is rolled over a minute after it starts
    ok("PUT", "/api/v1/models/" .. mid .. "/managed", { replicas = 1, partition = "gpu", account = "research",
      time_limit = 2, rollover_margin = 1, nodes = 1, cpus_per_node = 1, memory_per_node = 200,
      launch_command = "obleth smoke-engine",
      health = { path = "/health", interval = 1, timeout = 1, startup_grace = 60, failure_threshold = 2 } })
    local function live() return ok("GET", ("/api/v1/models/%d/replicas?state=live"):format(mid)).replicas end
    local function all() return ok("GET", ("/api/v1/models/%d/replicas"):format(mid)).replicas end
    local function healthy_other_than(seen)
      for _, r in ipairs(live()) do
        if r.state == "healthy" and r.job_id and not seen[r.job_id] then return r end
      end
    end
    local function ended(job_id)
      for _, r in ipairs(all()) do if r.job_id == job_id and r.state == "ended" then return r end end
    end

    -- submitted and healthy: Slurm runs its job, the router has its endpoint
    local first = wait_until(function() return healthy_other_than({}) end, 90, "a healthy replica")
    local job = assert(h.conn:job(first.job_id))
    assert.equal("RUNNING", job.state.base)
    assert.equal(2, job.time_limit)
    local res = assert(require("obleth.http").request { url = first.endpoint .. "/health", timeout = 5 })
    assert.equal(200, res.status)

    -- restarted: a new job takes its place, and the old one ends as obleth cancelled it
    ok("POST", "/api/v1/replicas/" .. first.id .. "/restart", {})
    local second = wait_until(function() return healthy_other_than({ [first.job_id] = true }) end, 90,
      "a healthy replica after the restart")
    local was = wait_until(function() return ended(first.job_id) end, 60, "the restarted replica ended")
    assert.equal("restart asked", was.cancel_why)

    -- rolled over: before the second job's walltime a successor is healthy, then the old job goes
    local third = wait_until(function()
      return healthy_other_than({ [first.job_id] = true, [second.job_id] = true })
    end, 150, "a healthy successor before the walltime")
    was = wait_until(function() return ended(second.job_id) end, 90, "the rolled-over replica ended")
    assert.equal("walltime rollover", was.cancel_why)
    assert.equal("RUNNING", assert(h.conn:job(third.job_id)).state.base)

    -- cancelled: deleting the spec cancels the job, and Slurm says so
    ok("DELETE", "/api/v1/models/" .. mid .. "/managed")
    wait_until(function() return #h:live_jobs(mid) == 0 end, 60, "no live job after DELETE")
    wait_until(function()
      local j = h.conn:job(third.job_id)
      return j and j.state.base == "CANCELLED", j and j.state.base
    end, 60, "the last job CANCELLED")
    prov:stop()
    prov = nil
  end)

  it("a slurmctld outage: calls fail (" .. (CTLD_DOWN_READS_AS_AUTH and "as auth while slurmdbd takes the token"
    or "as an outage, never as auth") .. "), never as no jobs, and the job runs on", function()
    local conn = h.conn
    local id = assert(conn:submit({ name = "contract-outage", partition = "gpu", account = "research", time_limit = 10,
      nodes = 1, cpus_per_node = 1, memory_per_node = 100, script = "#!/bin/sh\nsleep 300\n", working_directory = "/tmp",
      -- never /tmp/slurm-%j.out: /tmp is shared by every harness release and run, and a file left there by
      -- another release's user (other uids) makes Slurm fail the job ("Could not open stdout file")
      stdout = "/dev/null", stderr = "/dev/null" }))
    local ok_, e = pcall(function()
      wait_until(function()
        local j = conn:job(id)
        return j and j.state.base == "RUNNING", j and j.state.base
      end, 60, "job running")
      outage.ctld("stop")
      local slow = require("obleth.slurm").connect { url = harness.URL, user = harness.USER, token = harness.TOKEN,
        timeout = 30, version = conn:version() }
      slow = assert(slow)
      local p, err = slow:ping()
      assert.is_true(p == nil or p.ok == false, "ping said the controller is up: " .. cjson.encode(p or {}))
      local jobs, jerr = slow:jobs()
      assert.is_nil(jobs, "jobs answered during the outage: " .. cjson.encode(jobs or {}))
      if CTLD_DOWN_READS_AS_AUTH then
        assert.equal("auth", jerr.code, jerr.message)
        assert.is_true((jerr.http_status or 0) >= 500, jerr.message)
        assert.truthy(slow:clusters(), "slurmdbd refused the token as well")
      else
        if not p then assert.not_equal("auth", err.code, err.message) end
        assert.not_equal("auth", jerr.code, jerr.message)
      end
      outage.ctld("start")
      local j = wait_until(function()
        local x = conn:job(id)
        return x and x.state.base == "RUNNING" and x, x and x.state.base
      end, 60, "the job running after the outage")
      assert.equal(id, j.id)
      assert.is_true(assert(conn:ping()).ok)
    end)
    conn:cancel(id)
    if not ok_ then outage.ctld("start") end
    assert(ok_, e)
  end)
end)
