-- What an operator relies on from the provisioner daemon:
-- the systemd watchdog is fed while the loop is alive, also while every pass
-- fails because slurmrestd is down; passes back off (capped) and the outage is
-- logged once; it recovers on the first pass after slurmrestd returns and no
-- replica is marked ended because a poll failed. A broken policy edit is a
-- policy error (file, line, since), not a failed pass.
--
-- slurmrestd "goes down" by closing a proxy in front of the harness's real
-- slurmrestd (spec/support/outage.lua: the connection is refused exactly as with
-- a stopped daemon), so the other specs' cluster keeps running. With OBLETH_SOAK_SECONDS (make soak)
-- the outage lasts the issue's three minutes and the watchdog interval is the
-- shipped unit's WatchdogSec; the in-suite run uses a 12 s outage and a 3 s watchdog.
local loop = require "obleth.loop"
local sys = require "obleth.sys"
local util = require "spec.support.util"
local server = require "spec.support.server"
local provisioner = require "spec.support.provisioner"
local harness = require "spec.support.harness"
local outage = require "spec.support.outage"
local wait_until, count = util.wait_until, outage.count
local plain = require("obleth.provisioner.client").plain

-- A unix datagram socket listening as systemd does; returns its path, the file of what it
-- received, and a stop function.
local function notify_socket()
  local dir = os.tmpname()
  os.remove(dir)
  assert(sys.mkdir(dir))
  local path, out = dir .. "/notify", dir .. "/received"
  local fh = assert(io.popen(("exec sh -c 'echo $$; exec python3 %s %s %s'"):format(
    util.shq(util.root() .. "/spec/support/notify_listener.py"), util.shq(path), util.shq(out))))
  local pid = tonumber(fh:read("l"))
  assert(fh:read("l") == "ready", "notify_listener.py did not start")
  return path, out, function()
    sys.kill(pid, "TERM")
    fh:close()
    os.execute("rm -rf " .. util.shq(dir))
  end
end

-- WATCHDOG=1 times (CLOCK_MONOTONIC, the same clock as loop.monotonic) received so far.
local function pings(out)
  local t = {}
  for line in util.slurp(out):gmatch("[^\n]+") do
    local at, msg = line:match("^(%S+) (.*)$")
    if msg and msg:find("WATCHDOG=1", 1, true) then t[#t + 1] = tonumber(at) end
  end
  return t
end

describe("obleth-provisioner as a systemd service", function()
  if not harness.URL then
    it("needs the harness cluster", function() pending("harness cluster not running (OBLETH_SLURM_URL unset)") end)
    return
  end
  if util.sh("command -v python3") ~= 0 then
    it("needs python3", function() pending("python3 is not installed (the notify socket listener)") end)
    return
  end

  local SOAK = outage.SOAK
  local OUTAGE = SOAK and 180 or 12 -- seconds (the issue's three minutes under make soak)
  local BACKOFF_MAX = SOAK and 60 or 4
  local WATCHDOG_USEC
  if SOAK then
    local unit = util.slurp(util.root() .. "/deploy/systemd/obleth-provisioner.service")
    WATCHDOG_USEC = math.tointeger(tonumber(unit:match("\nWatchdogSec=(%d+)")) * 1000000)
  else
    WATCHDOG_USEC = 3000000
  end

  local h, srv, prov, front, sock, received, stop_sock

  local function ok(method, path, body)
    local status, doc, raw = srv:request(method, path, body)
    assert(status and status < 300, ("%s %s -> %s %s"):format(method, path, tostring(status), tostring(raw)))
    return plain(doc)
  end

  setup(function()
    h = harness.start { port_range = { 24000, 24999 } }
    srv = h.srv
    front = outage.front(harness.URL)
    ok("PUT", "/api/v1/settings/slurm", { enabled = true, url = front.url,
      user = harness.USER, token = harness.TOKEN, defaults = { partition = "gpu", account = "research",
        log_dir = h.logdir, port_range = { 24000, 24999 } } })
    sock, received, stop_sock = notify_socket()
  end)

  teardown(function()
    if prov then prov:stop() end
    if front then front:down() end
    if stop_sock then stop_sock() end
    if h then h:stop() end
  end)

  it("feeds the watchdog through a slurmrestd outage, logs it once, backs off, and recovers on the next pass", function()
    local m = ok("POST", "/api/v1/models", { name = "watchdog" })
    local mid = (m.model or m).id
    ok("PUT", "/api/v1/models/" .. mid .. "/managed", { replicas = 1, partition = "gpu", account = "research",
      time_limit = 30, cpus_per_node = 1, memory_per_node = 200, launch_command = "obleth smoke-engine",
      health = { path = "/health", interval = 1, timeout = 1, startup_grace = 30, failure_threshold = 2 } })
    prov = provisioner.start { base = srv.base, token = srv.token, env = { NOTIFY_SOCKET = sock,
      WATCHDOG_USEC = tostring(WATCHDOG_USEC), OBLETH_BACKOFF_MAX = tostring(BACKOFF_MAX) } }
    local function replica()
      local doc = ok("GET", ("/api/v1/models/%d/replicas?state=live"):format(mid))
      return (doc.replicas or doc)[1]
    end
    wait_until(function() local r = replica(); return r and r.state == "healthy" end, 90, "a healthy replica")
    local rep = replica()
    assert.matches("READY=1", util.slurp(received), 1, true)

    -- slurmrestd goes away
    local passes0 = ok("GET", "/api/v1/settings/slurm").provisioner.passes
    front:down()
    local t_down = loop.monotonic()
    wait_until(function() return prov:log():find("event=slurm_unreachable", 1, true) end, 30, "the outage logged")
    while loop.monotonic() - t_down < OUTAGE do
      -- no replica is marked ended because a poll failed
      local r = replica()
      assert.equal(rep.id, r.id)
      assert.equal("healthy", r.state)
      loop.sleep(1)
    end
    local st = ok("GET", "/api/v1/settings/slurm").provisioner
    local failed = st.passes - passes0
    assert.is_true(st.failed_passes >= 2, "passes failed while slurmrestd was down")
    -- with a 1 s interval, unbacked-off passes would be about OUTAGE; doubling capped at
    -- BACKOFF_MAX leaves at most log2(cap) + outage / cap + 1
    local bound = math.ceil(math.log(BACKOFF_MAX, 2)) + math.ceil(OUTAGE / BACKOFF_MAX) + 1
    assert.is_true(failed <= bound, ("%d passes in a %d s outage (at most %d with back-off)"):format(failed, OUTAGE,
      bound))
    assert.equal(1, count(prov:log(), "event=slurm_unreachable"))
    assert.equal(0, count(prov:log(), "event=pass_failed"))

    -- it returns: the first pass after that succeeds (at most one back-off wait later)
    front:up()
    local t_up = loop.monotonic()
    wait_until(function() return prov:log():find("event=slurm_reachable", 1, true) end, BACKOFF_MAX + 10,
      "the recovery logged")
    local took = loop.monotonic() - t_up
    assert.is_true(took <= BACKOFF_MAX * 1.1 + 3, ("recovered %.1f s after slurmrestd returned"):format(took))
    wait_until(function() return ok("GET", "/api/v1/settings/slurm").provisioner.failed_passes == 0 end, 10,
      "a successful pass")
    assert.equal(1, count(prov:log(), "event=slurm_reachable"))
    local r = replica()
    assert.equal(rep.id, r.id)
    assert.equal("healthy", r.state)

    -- the watchdog was fed at least every half interval throughout, outage included
    -- (from before the outage until now: every gap, and the time since the last ping)
    local t = pings(received)
    assert.is_true(#t >= 2, "WATCHDOG=1 received")
    assert.is_true(t[1] <= t_down, "pinged before the outage")
    local half, worst = WATCHDOG_USEC / 2e6, loop.monotonic() - t[#t]
    for i = 2, #t do worst = math.max(worst, t[i] - t[i - 1]) end
    assert.is_true(worst <= half, ("the longest gap between WATCHDOG=1 was %.2f s (half the interval: %.2f s)")
      :format(worst, half))
    prov:stop()
    prov = nil
    assert.matches("STOPPING=1", util.slurp(received), 1, true)
    ok("DELETE", "/api/v1/models/" .. mid .. "/managed")
  end)
end)

describe("a broken policy edit", function()
  local srv, prov, dir
  setup(function()
    srv = server.start()
    dir = os.tmpname()
    os.remove(dir)
    assert(sys.mkdir(dir))
  end)
  teardown(function()
    if prov then prov:stop() end
    srv:stop(); srv:cleanup()
    os.execute("rm -rf " .. util.shq(dir))
  end)

  local function status()
    local _, doc = srv:request("GET", "/api/v1/settings/slurm")
    return plain(doc).provisioner
  end

  local function write(text)
    local fh = assert(io.open(dir .. "/lost.lua", "w"))
    fh:write(text)
    fh:close()
  end

  it("is a policy error with file, line and since, logged once, and passes keep succeeding", function()
    prov = provisioner.start { base = srv.base, token = srv.token, env = { OBLETH_POLICY_DIR = dir } }
    wait_until(function() return status().passes >= 1 end, 20, "a first pass")
    local t_edit = os.time()
    write("return {\n  check = function(ends)\n    return {lost = false\n  end,\n}\n")
    local pe = wait_until(function() local s = status(); return s.policy_error ~= nil and s.policy_error end, 20,
      "the policy error reported")
    assert.equal(dir .. "/lost.lua", pe.file)
    assert.equal(4, pe.line)
    assert.matches("expected", pe.message)
    assert.is_true(pe.since >= t_edit - 1 and pe.since <= os.time())
    -- several passes later: none failed, one log line
    local passes = status().passes
    wait_until(function() return status().passes >= passes + 3 end, 20, "three more passes")
    local s = status()
    assert.equal(0, s.failed_passes)
    assert.is_nil(s.last_error)
    assert.equal(pe.since, s.policy_error.since)
    assert.equal(1, count(prov:log(), "event=policy_error"))
    -- fixed: the error clears, logged once
    write("return {}\n")
    wait_until(function() return status().policy_error == nil end, 20, "the policy error cleared")
    assert.equal(1, count(prov:log(), "event=policy_ok"))
  end)
end)
