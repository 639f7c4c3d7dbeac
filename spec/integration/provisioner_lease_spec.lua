-- One provisioner at a time: the Management API leases the
-- provisioner role, refuses reports and submit records of a stale lease, and two
-- provisioners on the harness cluster never run more jobs than replicas.
--
-- OBLETH_SOAK_SECONDS (make soak) keeps two provisioners running that long, killing
-- and restarting the holder every minute, instead of the short in-suite version.
local loop = require "obleth.loop"
local util = require "spec.support.util"
local server = require "spec.support.server"
local wait_until = util.wait_until
local plain = require("obleth.provisioner.client").plain

describe("the provisioner lease (Management API)", function()
  local srv
  setup(function() srv = server.start() end)
  teardown(function() srv:stop(); srv:cleanup() end)

  -- token: the lease token to present (Obleth-Lease-Token), as the holder that got it does
  local function req(method, path, body, token)
    local status, doc, raw = srv:request(method, path, body, token and { ["Obleth-Lease-Token"] = token } or nil)
    return status, plain(doc), raw
  end
  local tokens = {} -- holder -> the token its acquisition answered

  local A = { holder = "prov-a", host = "alpha", pid = 101, ttl = 2 }
  local B = { holder = "prov-b", host = "beta", pid = 202, ttl = 2 }

  local function with(t, extra)
    local o = {}
    for k, v in pairs(t) do o[k] = v end
    for k, v in pairs(extra or {}) do o[k] = v end
    return o
  end

  it("grants one holder, tells a second who holds it, and hands over after expiry with a new generation", function()
    local st, a = req("POST", "/api/v1/provisioner/lease", A)
    assert.equal(200, st)
    assert.is_true(a.acquired)
    local g1 = a.lease.generation
    assert.equal("prov-a", a.lease.holder)
    assert.matches("^%x+$", a.token)
    tokens.A = a.token

    local st2, b = req("POST", "/api/v1/provisioner/lease", B)
    assert.equal(409, st2)
    assert.equal("lease_held", b.error.code)
    assert.same({ "prov-a", "alpha", 101, g1 }, { b.error.lease.holder, b.error.lease.host, b.error.lease.pid,
      b.error.lease.generation })
    assert.matches("prov%-a on alpha %(pid 101%)", b.error.message)

    -- the holder renews with its generation and its token: same generation, later expiry, no new token
    local _, r = req("POST", "/api/v1/provisioner/lease", with(A, { generation = g1 }), tokens.A)
    assert.is_false(r.acquired)
    assert.equal(g1, r.lease.generation)
    assert.is_true(r.lease.expires_at >= a.lease.expires_at)
    assert.is_nil(r.token)

    -- the settings show the holder, never the token (nor the 409 body)
    local _, s, raw = req("GET", "/api/v1/settings/slurm")
    assert.is_nil(raw:find(tokens.A, 1, true))
    assert.is_nil(select(3, req("POST", "/api/v1/provisioner/lease", B)):find(tokens.A, 1, true))
    assert.same({ holder = "prov-a", host = "alpha", pid = 101, generation = g1 },
      { holder = s.provisioner.lease.holder, host = s.provisioner.lease.host, pid = s.provisioner.lease.pid,
        generation = s.provisioner.lease.generation })
    assert.equal(r.lease.expires_at, s.provisioner.lease.expires_at)

    -- A stops renewing: B gets it once it expired, with generation + 1
    local got = wait_until(function()
      local st3, doc = req("POST", "/api/v1/provisioner/lease", B)
      return st3 == 200 and doc
    end, 10, "B to take over")
    assert.is_true(got.acquired)
    assert.equal(g1 + 1, got.lease.generation)
    assert.equal("prov-b", got.lease.holder)
    tokens.B = got.token
    assert.are_not.equal(tokens.A, tokens.B)
    assert.matches("event=provisioner_lease_acquired", srv:log(), 1, true)

    -- A comes back with its old generation: told B holds it
    local st4, again = req("POST", "/api/v1/provisioner/lease", with(A, { generation = g1 }), tokens.A)
    assert.equal(409, st4)
    assert.equal("prov-b", again.error.lease.holder)
  end)

  -- the generation is public (GET settings, the 409 body), and posting it
  -- renewed the holder's lease for anyone
  it("someone else's generation, read from the settings or the 409 body, renews nothing and fences nothing", function()
    local _, cur = req("GET", "/api/v1/settings/slurm")
    local g = cur.provisioner.lease.generation
    local before = cur.provisioner.lease.expires_at
    local st, doc = req("POST", "/api/v1/provisioner/lease", with(A, { generation = g }))
    assert.equal(409, st)
    assert.equal("lease_held", doc.error.code)
    assert.equal("prov-b", doc.error.lease.holder)
    st = req("POST", "/api/v1/provisioner/lease", with(A, { generation = g }), tokens.A) -- A's old token
    assert.equal(409, st)
    local _, after = req("GET", "/api/v1/settings/slurm")
    assert.equal(before, after.provisioner.lease.expires_at)
    -- nor does it let a report, a submit record or a release through
    st, doc = req("POST", "/api/v1/provisioner/report", { lease_generation = g,
      pass = { started_at = os.time(), duration = 0.1 } })
    assert.equal(409, st)
    assert.matches("lease token", doc.error.message)
    st = req("POST", "/api/v1/provisioner/submits", { lease_generation = g, replicas = {} }, "not-the-token")
    assert.equal(409, st)
    local _, rel = req("DELETE", "/api/v1/provisioner/lease?generation=" .. g)
    assert.is_false(rel.released)
  end)

  it("refuses a report and a submit record carrying a stale generation, and accepts the holder's", function()
    local _, m = req("POST", "/api/v1/models", { name = "fenced" })
    m = m.model or m
    local _, cur = req("GET", "/api/v1/settings/slurm")
    local holder_gen = cur.provisioner.lease.generation
    local stale = holder_gen - 1
    local row = { nonce = "00000000000000f1", model_id = m.id, slot = 1, state = "pending", port = 20001 }

    local st, doc = req("POST", "/api/v1/provisioner/submits", { lease_generation = stale, replicas = { row } })
    assert.equal(409, st)
    assert.equal("lease_lost", doc.error.code)
    assert.matches("stale", doc.error.message)
    st, doc = req("POST", "/api/v1/provisioner/report", { lease_generation = stale,
      pass = { started_at = os.time(), duration = 0.1 }, replicas = { row } })
    assert.equal(409, st)
    assert.equal("lease_lost", doc.error.code)
    -- a report without a generation while a lease is live is refused too
    st = req("POST", "/api/v1/provisioner/report", { pass = { started_at = os.time(), duration = 0.1 } })
    assert.equal(409, st)
    -- nothing of the refused writes was stored
    local _, reps = req("GET", "/api/v1/models/" .. m.id .. "/replicas")
    assert.equal(0, #(reps.replicas or reps))

    -- the holder (renewing first: the 2 s lease may have run out) records and reports
    local _, h = req("POST", "/api/v1/provisioner/lease", with(B, { generation = holder_gen }), tokens.B)
    assert.equal(holder_gen, h.lease.generation)
    st, doc = req("POST", "/api/v1/provisioner/submits", { lease_generation = holder_gen, replicas = { row } },
      tokens.B)
    assert.equal(200, st, doc and doc.error and doc.error.message)
    _, reps = req("GET", "/api/v1/models/" .. m.id .. "/replicas")
    reps = reps.replicas or reps
    assert.equal(1, #reps)
    assert.equal("pending", reps[1].state)
    st = req("POST", "/api/v1/provisioner/report", { lease_generation = holder_gen,
      pass = { started_at = os.time(), duration = 0.1 } }, tokens.B)
    assert.equal(200, st)

    -- a submit record needs a live lease: after expiry it is refused, a report is not
    wait_until(function()
      local _, s = req("GET", "/api/v1/settings/slurm")
      return s.provisioner.lease.expires_at < os.time() - 0.5
    end, 10, "the lease to expire")
    st, doc = req("POST", "/api/v1/provisioner/submits", { lease_generation = holder_gen, replicas = { row } },
      tokens.B)
    assert.equal(409, st)
    assert.matches("expired", doc.error.message)
  end)

  it("a clean stop releases the lease at once; a bad lease request names its field", function()
    local _, cur = req("GET", "/api/v1/settings/slurm")
    local g = cur.provisioner.lease.generation
    local _, r = req("POST", "/api/v1/provisioner/lease", with(B, { generation = g, ttl = 600 }), tokens.B)
    assert.equal(g, r.lease.generation)
    local st, doc = req("DELETE", "/api/v1/provisioner/lease?generation=" .. g, nil, tokens.B)
    assert.equal(200, st)
    assert.is_true(doc.released)
    local st2, a = req("POST", "/api/v1/provisioner/lease", A)
    assert.equal(200, st2)
    assert.equal(g + 1, a.lease.generation)
    local st3, bad = req("POST", "/api/v1/provisioner/lease", with(A, { ttl = 0.5 }))
    assert.equal(400, st3)
    assert.equal("ttl", bad.error.field)
  end)
end)

local harness = require "spec.support.harness"
local sys = require "obleth.sys"
local provisioner = require "spec.support.provisioner"

describe("two provisioners on the harness cluster", function()
  if not harness.URL then
    it("needs the harness cluster", function() pending("harness cluster not running (OBLETH_SLURM_URL unset)") end)
    return
  end

  local TTL = 4
  local SOAK = tonumber(os.getenv("OBLETH_SOAK_SECONDS") or "")
  local h, srv
  local procs = {}
  local max_jobs, replicas_wanted = 0, 0

  local function ok(method, path, body)
    local status, doc, raw = srv:request(method, path, body)
    assert(status and status < 300, ("%s %s -> %s %s"):format(method, path, tostring(status), tostring(raw)))
    return plain(doc)
  end

  local function start(env)
    local e = { OBLETH_LEASE_TTL = tostring(TTL) }
    for k, v in pairs(env or {}) do e[k] = v end
    local p = provisioner.start { base = srv.base, token = srv.token, env = e }
    procs[#procs + 1] = p
    return p
  end

  local function count(s, plain_text)
    return select(2, s:gsub(plain_text:gsub("%p", "%%%0"), ""))
  end

  local function lease() return ok("GET", "/api/v1/settings/slurm").provisioner.lease end

  local mid
  local function jobs() return #h:live_jobs(mid) end
  local function healthy()
    local n = 0
    local doc = ok("GET", ("/api/v1/models/%d/replicas?state=live"):format(mid))
    for _, r in ipairs(doc.replicas or doc) do
      if r.state == "healthy" then n = n + 1 end
    end
    return n
  end
  -- every check of the job count also records the largest seen
  local function sample()
    local n = jobs()
    if n > max_jobs then max_jobs = n end
    assert(n <= replicas_wanted, ("%d jobs for %d replicas"):format(n, replicas_wanted))
    return n
  end

  local function spec(n)
    replicas_wanted = math.max(replicas_wanted, n)
    return { replicas = n, partition = "gpu", account = "research", time_limit = 30, cpus_per_node = 1,
      memory_per_node = 200, launch_command = "obleth smoke-engine --startup-delay 1",
      health = { path = "/health", interval = 1, timeout = 1, startup_grace = 30, failure_threshold = 2 } }
  end

  setup(function()
    h = harness.start { port_range = { 23000, 23999 } }
    srv = h.srv
    local m = ok("POST", "/api/v1/models", { name = "leased" })
    mid = (m.model or m).id
  end)

  teardown(function()
    for _, p in ipairs(procs) do
      if p:alive() then
        sys.kill(p.pid, "CONT")
        p:stop("KILL")
      end
    end
    if h then h:stop() end
  end)

  it("the second provisioner waits (logged once), the replicas never exceed the spec, and killing the holder "
    .. "hands over within the lease", function()
    local a = start()
    wait_until(function() return a:log():find("event=lease_acquired", 1, true) end, 20, "a lease for A")
    local b = start()
    wait_until(function() return b:log():find("event=lease_held", 1, true) end, 20, "B told who holds it")
    ok("PUT", "/api/v1/models/" .. mid .. "/managed", spec(2))
    wait_until(function() sample(); return healthy() == 2 end, 90, "2 healthy replicas")
    local t_soak = loop.monotonic() + (SOAK or 0)
    local holder, waiting = a, b
    repeat
      -- a few more of B's passes: still one lease_held line, no submit from B
      local gen0 = lease().generation
      local renewed = lease().expires_at
      wait_until(function() sample(); return lease().expires_at > renewed + 2 end, 10, "two more renewals")
      assert.equal(gen0, lease().generation)
      assert.equal(1, count(waiting:log(), "event=lease_held"))
      assert.equal(0, count(waiting:log(), "event=job_submit"))

      -- kill the holder: the other takes over within the lease's ttl, plus one retry interval of
      -- the waiting provisioner (and one more renewal the holder may have made since the read);
      -- measured with the server's own times (acquired_at), not this spec's polling
      local gen = lease().generation
      local t_kill = loop.now()
      holder:stop("KILL")
      local new = wait_until(function() sample(); local l = lease(); return l.generation == gen + 1 and l end,
        TTL + 10, "a hand-over")
      local took = new.acquired_at - t_kill
      assert.is_true(took <= TTL + 2 * 1.1 + 0.5, ("the hand-over took %.1f s (lease %d s)"):format(took, TTL))
      assert.equal(waiting.pid, new.pid)
      wait_until(function() sample(); return healthy() == 2 end, 60, "2 healthy replicas after the hand-over")
      holder, waiting = waiting, start()
      wait_until(function() return waiting:log():find("event=lease_held", 1, true) end, 20, "the new one waits")
      if SOAK then
        local t_next = loop.monotonic() + 60
        while loop.monotonic() < t_next do sample(); loop.sleep(1) end
      end
    until loop.monotonic() >= t_soak
    assert.equal(2, sample())
    h.holder, h.waiting = holder, waiting
  end)

  it("a holder paused (SIGSTOP) in a pass and resumed after losing its lease submits nothing", function()
    -- restart the holder with a pause point between deciding and submitting
    -- (a clean stop releases the lease, so the new one gets it at once)
    h.waiting:stop("TERM")
    h.holder:stop("TERM")
    local paused = start { OBLETH_FAULT = "stop_before_submit" }
    wait_until(function() return lease().pid == paused.pid end, TTL + 10, "the pausing provisioner to hold the lease")
    -- a third replica makes it decide to submit, and it stops itself there
    ok("PUT", "/api/v1/models/" .. mid .. "/managed", spec(3))
    wait_until(function() return paused:log():find("point=stop_before_submit", 1, true) end, 20, "the pause")
    local gen = lease().generation
    local other = start()
    wait_until(function() sample(); return lease().generation == gen + 1 end, TTL + 10, "the other to take over")
    wait_until(function() sample(); return healthy() == 3 end, 90, "3 healthy replicas under the new holder")
    local before = count(paused:log(), "event=job_submit")
    sys.kill(paused.pid, "CONT")
    wait_until(function() return paused:log():find("event=lease_lost", 1, true) end, 20, "the resumed one notices")
    wait_until(function() return paused:log():find("event=lease_held", 1, true) end, 20, "and waits")
    assert.equal(before, count(paused:log(), "event=job_submit"))
    assert.equal(3, sample())
    assert.equal(other.pid, lease().pid)
    assert.is_true(max_jobs <= 3)
    ok("DELETE", "/api/v1/models/" .. mid .. "/managed")
    wait_until(function() return jobs() == 0 end, 30, "no job")
  end)
end)
