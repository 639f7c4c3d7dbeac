-- Benchmark: obleth serve's side of one provisioner pass at scale, and how long the router stalls
-- meanwhile. For each size (REPLICAS: 1,000, 5,000 and 10,000 by default; models of 2 replicas each)
-- the store is filled before obleth serve starts on it; then, PASSES times, the provisioner's two
-- requests are made as a pass makes them (GET /api/v1/provisioner/snapshot, read whole, and
-- POST /api/v1/provisioner/report with no changed replica): first with the full snapshot (a resync),
-- then as a steady pass makes them (the snapshot since the last version: a delta), while a probe sends one small chat
-- completion after another through the router to a smoke engine and keeps the longest answer.
-- Prints obleth serve's CPU per pass (user + system, /proc/PID/stat) and the longest router answer
-- during the passes, each beside its goal (docs/performance.md).
-- BENCH_BACKEND=postgresql: the store on PostgreSQL (a database on Debian's server, started by
-- spec.support.pg with fsync on, as SQLite's synchronous=FULL), else SQLite.
--   obleth lua spec/bench/serve_pass.lua [replicas ...]
local cjson = require "cjson"
local http = require "obleth.http"
local loop = require "obleth.loop"
local sys = require "obleth.sys"
local server = require "spec.support.server"

-- The probe runs in a child process, so that this one's own work (reading a full snapshot of several
-- MB) never counts as the router's: one chat completion after another, a line "<start> <seconds>" each
-- (start: the monotonic clock, shared by the processes), printed when TERM stops it.
--   obleth lua spec/bench/serve_pass.lua --probe BASE_URL KEY
if arg and arg[1] == "--probe" then
  local url, key = arg[2] .. "/v1/chat/completions", arg[3]
  local body = cjson.encode { model = "probe", messages = { { role = "user", content = "hi" } }, max_tokens = 1 }
  local lines, running = {}, true
  loop.on_signal("TERM", function() running = false end)
  loop.spawn(function()
    while running do
      local t0 = loop.monotonic()
      local r = assert(http.request { url = url, method = "POST", body = body,
        headers = { Authorization = "Bearer " .. key, ["Content-Type"] = "application/json" }, timeout = 60 })
      assert(r.status == 200, "probe: HTTP " .. r.status)
      lines[#lines + 1] = ("%.6f %.6f"):format(t0, loop.monotonic() - t0)
      loop.sleep(0.002)
    end
    io.stdout:write(table.concat(lines, "\n"), "\n")
    io.stdout:flush()
    loop.stop(0)
  end)
  return loop.run()
end

local sizes = {}
for _, a in ipairs(arg or {}) do sizes[#sizes + 1] = tonumber(a) end
if #sizes == 0 then sizes = { 1000, 5000, 10000 } end
local PASSES = tonumber(os.getenv("PASSES") or "") or 3
local BACKEND = os.getenv("BENCH_BACKEND") or "sqlite"
local HZ = 100 -- USER_HZ: /proc's clock ticks on Linux

local function cpu_ticks(pid)
  local f = assert(io.open(("/proc/%d/stat"):format(pid)))
  local line = f:read("a")
  f:close()
  local rest = line:match("%) (.*)$")
  local fields = {}
  for x in rest:gmatch("%S+") do fields[#fields + 1] = x end
  return tonumber(fields[12]) + tonumber(fields[13]) -- utime, stime (fields 14, 15 of the line)
end

local function fill(db, replicas)
  local store = assert(require("obleth.store").open(db))
  local reps = {}
  for m = 1, replicas // 2 do
    local model = assert(store:create_model { name = ("model-%d"):format(m) })
    for s = 1, 2 do
      reps[#reps + 1] = { nonce = ("%08x%08x"):format(m, s), model_id = model.id, slot = s, state = "healthy",
        job_id = 1000 + 2 * m + s, node = "n1", port = 20000 + s, endpoint = ("http://n1:%d"):format(20000 + s),
        started_at = os.time() - 60, healthy_at = os.time() - 50, check_failures = 0,
        slurm = { state = "RUNNING", start_time = os.time() - 60, end_time = os.time() + 3540, estimated = false } }
    end
  end
  assert(store:apply_report({ pass = { started_at = os.time(), duration = 0.1 }, replicas = reps, outcomes = {},
    endpoints = {}, provision_errors = {}, acknowledged = { restart = {}, clear_lost = {} } }, os.time()))
  store:close()
end

local free_port = require("spec.support.util").free_port

local engine_port = free_port()
local engine = assert(io.popen(("exec sh -c 'echo $$; exec %q smoke-engine --host 127.0.0.1 --port %d --model probe "
  .. ">/dev/null 2>&1'"):format(sys.paths.exe, engine_port)))
local engine_pid = tonumber(engine:read("l"))

local function measure(replicas)
  local db, drop
  if BACKEND == "postgresql" then db, drop = require("spec.support.pg").database() else db = server.tmpdb() end
  fill(db, replicas)
  local srv = server.start { db = db }
  local function api(method, path, body)
    local st, doc = srv:request(method, path, body)
    assert(st >= 200 and st < 300, ("%s %s: HTTP %s"):format(method, path, tostring(st)))
    return doc
  end
  local probe = api("POST", "/api/v1/models", { name = "probe" })
  api("POST", ("/api/v1/models/%d/endpoints"):format(probe.id), { url = ("http://127.0.0.1:%d"):format(engine_port) })
  local key = api("POST", "/api/v1/keys", { name = "bench" }).key
  local body = cjson.encode { model = "probe", messages = { { role = "user", content = "hi" } }, max_tokens = 1 }
  local function chat()
    local t0 = loop.monotonic()
    local r = assert(http.request { url = srv.base .. "/v1/chat/completions", method = "POST", body = body,
      headers = { Authorization = "Bearer " .. key, ["Content-Type"] = "application/json" }, timeout = 60 })
    assert(r.status == 200, "probe: HTTP " .. r.status)
    return loop.monotonic() - t0
  end
  for _ = 1, 20 do chat() end -- warm: connections, the router's cache
  local quiet = 0
  for _ = 1, 50 do quiet = math.max(quiet, chat()) end
  local prober = assert(io.popen(("exec %q lua spec/bench/serve_pass.lua --probe %q %q & echo $!"):format(
    sys.paths.exe, srv.base, key)))
  local prober_pid = tonumber(prober:read("l"))
  local auth = { Authorization = "Bearer " .. srv.token, ["Content-Type"] = "application/json" }
  local report = cjson.encode { pass = { started_at = os.time(), duration = 0.1 }, replicas = {}, outcomes = {},
    endpoints = {}, provision_errors = {}, acknowledged = { restart = {}, clear_lost = {} } }
  local only = os.getenv("ONLY") -- "snapshot" or "report": one of the pass's two requests
  local version
  -- delta: a steady pass (the snapshot since the version the last one answered); else a full resync
  local function passes(delta)
    local t0, bytes = cpu_ticks(srv.pid), 0
    for _ = 1, PASSES do
      if only ~= "report" then
        local r = assert(http.request { url = srv.base .. "/api/v1/provisioner/snapshot"
          .. (delta and version and ("?since=" .. version) or ""), headers = auth, timeout = 600 })
        assert(r.status == 200, "snapshot: HTTP " .. r.status)
        bytes = #r.body
        local doc = cjson.decode(r.body)
        assert(doc.delta == (delta and version ~= nil), "a steady pass's snapshot was no delta")
        version = doc.version
      end
      if only ~= "snapshot" then
        local r = assert(http.request { url = srv.base .. "/api/v1/provisioner/report", method = "POST", body = report,
          headers = auth, timeout = 600 })
        assert(r.status == 200, "report: HTTP " .. r.status .. " " .. r.body)
      end
    end
    return (cpu_ticks(srv.pid) - t0) / HZ / PASSES, bytes
  end
  loop.sleep(0.2) -- the probe's first answers
  local t_full = loop.monotonic()
  local t_steady, cpu, bytes, steady_cpu, steady_bytes
  local ok, err = pcall(function()
    cpu, bytes = passes(false)
    passes(true) -- the version to start from
    t_steady = loop.monotonic()
    steady_cpu, steady_bytes = passes(true)
  end)
  local t_end = loop.monotonic()
  sys.kill(prober_pid, "TERM")
  if not ok then -- the probe stopped first: else it runs on after the bench
    prober:close()
    srv:stop()
    error(err, 0)
  end
  -- the longest answer of the probes that started in each phase
  local full_stall, longest, probes = 0, 0, 0
  for line in prober:lines() do
    local t0, d = line:match("^(%S+) (%S+)$")
    t0, d = tonumber(t0), tonumber(d)
    if t0 then
      probes = probes + 1
      if t0 >= t_full and t0 < t_steady then full_stall = math.max(full_stall, d) end
      if t0 >= t_steady and t0 < t_end then longest = math.max(longest, d) end
    end
  end
  prober:close()
  local _, _, serr = srv:stop()
  if os.getenv("BENCH_DEBUG") then io.stderr:write(serr) end
  if drop then drop() else os.remove(db) end
  return { replicas = replicas, cpu = cpu, stall = full_stall, steady_stall = longest, steady_cpu = steady_cpu,
    steady_kb = steady_bytes / 1024, quiet = quiet, probes = probes, snapshot_kb = bytes / 1024,
    part_ms = only == "report" and 0
      or cpu * 1000 / math.max(1, math.ceil(replicas / 2 / require("obleth.api.parts").PART_ITEMS)) }
end

require("obleth.log").set_level("warn")
print("store: " .. BACKEND)
print("full: a pass with a full snapshot (a resync); steady: a pass with a snapshot delta (docs/managed-spec.md)")
print(("%-9s %17s %19s %23s %14s %12s %16s %19s %21s %16s"):format("replicas", "full CPU s/pass", "per 1,000 replicas",
  "longest router answer", "quiet longest", "snapshot KB", "CPU per part", "steady CPU ms/pass", "steady longest answer",
  "steady snap KB"))
local rows = {}
for _, n in ipairs(sizes) do
  local r = measure(n)
  rows[#rows + 1] = r
  print(("%-9d %17.3f %16.1f ms %20.1f ms %11.1f ms %12.0f %13.1f ms %19.1f %18.1f ms %16.1f"):format(r.replicas, r.cpu,
    r.cpu * 1000 / (n / 1000), r.stall * 1000, r.quiet * 1000, r.snapshot_kb, r.part_ms, r.steady_cpu * 1000,
    r.steady_stall * 1000, r.steady_kb))
end
local big = rows[#rows]
print(("serve per 1,000 replicas at %d: %.1f ms CPU per steady pass (%.1f per full resync; the serve share of the "
  .. "goal of 20 ms, provisioner + serve)"):format(big.replicas, big.steady_cpu * 1000 / (big.replicas / 1000),
  big.cpu * 1000 / (big.replicas / 1000)))
print(("longest router stall during a pass at %d replicas: %.1f ms steady, %.1f ms during a full resync (goal <= 10 ms; "
  .. "%.1f ms without a pass; a full snapshot's parts cost %.1f ms of CPU each on average, an upper bound on a stall "
  .. "on an idle machine)"):format(big.replicas, big.steady_stall * 1000, big.stall * 1000, big.quiet * 1000,
  big.part_ms))
sys.kill(engine_pid, "TERM")
engine:close()
