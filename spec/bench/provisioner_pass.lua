-- Benchmark: one steady-state provisioner pass with M models × 2 healthy
-- replicas, against a stand-in slurmrestd that serves the recorded v0.0.38
-- shapes (shared/cases/slurmrestd/v0.0.38/jobs.json's RUNNING job, retagged
-- per replica) on loopback, and a real obleth serve (its store filled before
-- it starts) answering the provisioner's snapshot (a delta after the first:
-- docs/managed-spec.md, "Snapshot versions"), lease and report. Reference in
-- the same run: the same pass with 50 models. Reports slurmrestd requests per
-- pass (must not grow with the number of models), CPU seconds per pass of the
-- provisioner (this process) and of obleth serve (/proc), and resident memory.
--   obleth lua spec/bench/provisioner_pass.lua [models]
local loop = require "obleth.loop"
local http = require "obleth.http"
local cjson = require "cjson"
local tag = require "obleth.job.tag"
local daemon = require "obleth.provisioner"

local BIG = tonumber(arg and arg[1]) or 500
local SMALL = 50
local shared = os.getenv("OBLETH_SHARED") or "../shared"
local fh = assert(io.open(shared .. "/cases/slurmrestd/v0.0.38/jobs.json"), "shared cases not found (OBLETH_SHARED)")
local recorded = cjson.decode(fh:read("a"))
fh:close()
local template
for _, j in ipairs(recorded.jobs) do if j.job_state == "RUNNING" then template = j break end end
local nodes_doc = cjson.decode(assert(io.open(shared .. "/cases/slurmrestd/v0.0.38/nodes.json")):read("a"))
local openapi_paths = {}
for _, p in ipairs({ "/slurm/v0.0.38/jobs", "/slurm/v0.0.38/ping", "/slurm/v0.0.38/nodes" }) do openapi_paths[p] = {} end

local function rss_kib(field)
  for line in io.lines("/proc/self/status") do
    local v = line:match("^" .. (field or "VmRSS") .. ":%s+(%d+)")
    if v then return tonumber(v) end
  end
end

local function nonce(m, s) return ("%08x%08x"):format(m, s) end

-- the world for M models: the snapshot's models and the jobs response body
local function world(M, port, instance)
  local models, jobs = {}, {}
  local id = 1000
  for m = 1, M do
    local reps = {}
    for s = 1, 2 do
      id = id + 1
      local n = nonce(m, s)
      local j = {}
      for k, v in pairs(template) do j[k] = v end
      j.job_id, j.name = id, tag.name(instance, m, s, n)
      j.comment = tag.comment(instance, m, s, n, 1)
      j.nodes = "n0"
      jobs[#jobs + 1] = j
      reps[#reps + 1] = { model_id = m, slot = s, nonce = n, state = "healthy", job_id = id, generation = 1,
        node = "n0", port = 20000 + id, endpoint = ("http://127.0.0.%d:%d"):format(s, port), -- both: the stand-in
        started_at = os.time() - 60, healthy_at = os.time() - 50, check_failures = 0 }
    end
    models[#models + 1] = { id = m, name = "model-" .. m, replicas = reps,
      spec = { enabled = true, replicas = 2, partition = "gpu", time_limit = 24 * 60,
        launch_command = "true", health = { path = "/health", interval = 10, timeout = 5, startup_grace = 600,
          failure_threshold = 3 } } }
  end
  -- other users' jobs on the same cluster (FOREIGN=N, default 0): listed, never obleth's
  for f = 1, tonumber(os.getenv("FOREIGN") or "") or 0 do
    local j = {}
    for k, v in pairs(template) do j[k] = v end
    j.job_id, j.name, j.comment, j.nodes = 5000000 + f, "train-" .. f, "", "n0"
    jobs[#jobs + 1] = j
  end
  return models, cjson.encode({ meta = recorded.meta, errors = {}, jobs = jobs })
end

-- The stand-in slurmrestd (and /health for the replicas) runs in a child
-- process so its work is not counted as the provisioner's:
--   obleth lua spec/bench/provisioner_pass.lua --serve M INSTANCE
if arg and arg[1] == "--serve" then
  local M = tonumber(arg[2])
  local counts = {}
  local jobs_body
  local function handler(req)
    counts[req.path] = (counts[req.path] or 0) + 1
    if req.path == "/openapi/v3" then return { status = 200, body = cjson.encode({ paths = openapi_paths }) } end
    if req.path == "/slurm/v0.0.38/jobs" then return { status = 200, body = jobs_body } end
    if req.path == "/slurm/v0.0.38/nodes" then return { status = 200, body = cjson.encode(nodes_doc) } end
    if req.path == "/health" then return { status = 200, body = "{}" } end
    if req.path == "/counts" then
      local c = counts
      counts = {}
      return { status = 200, body = cjson.encode(c) }
    end
    return { status = 404, body = "{}" }
  end
  local srv = assert(http.server { host = "127.0.0.1", port = 0, handler = handler })
  -- slot 2's replicas answer on 127.0.0.2 (each replica of a model has its own endpoint)
  local srv2 = assert(http.server { host = "127.0.0.2", port = srv:port(), handler = handler })
  local _
  _, jobs_body = world(M, srv:port(), arg[3])
  io.stdout:write(srv:port(), " ", require("obleth.sys").getpid(), "\n")
  io.stdout:flush()
  loop.on_signal("TERM", function()
    srv2:close()
    loop.stop(0)
  end)
  return loop.run()
end

-- The store for M models, filled before obleth serve starts on it (in a child process, so that this
-- one's memory is the provisioner's): the stand-in's port in every endpoint.
--   obleth lua spec/bench/provisioner_pass.lua --fill DB M PORT INTERVAL
if arg and arg[1] == "--fill" then
  local db, M, port, interval = arg[2], tonumber(arg[3]), tonumber(arg[4]), tonumber(arg[5])
  local store = assert(require("obleth.store").open(db))
  local models = world(M, port, store:instance())
  assert(store:transaction(function()
    local reps = {}
    for _, m in ipairs(models) do
      local row = assert(store:create_model { name = m.name })
      assert(row.id == m.id, "the bench expects model ids 1..M")
      m.spec.health.interval = interval
      assert(store:put_spec(m.id, m.spec))
      for _, r in ipairs(m.replicas) do reps[#reps + 1] = r end
    end
    assert(store:apply_report({ pass = { started_at = os.time(), duration = 0.1 }, replicas = reps, outcomes = {},
      endpoints = {}, provision_errors = {}, acknowledged = { restart = {}, clear_lost = {} } }, os.time()))
    return true
  end))
  assert(store:put_settings { enabled = true, url = ("http://127.0.0.1:%d"):format(port), user = "obleth",
    token = "x", defaults = { port_range = { 20000, 29999 } } })
  store:close()
  return
end

local sys = require "obleth.sys"
local server = require "spec.support.server"
local client = require "obleth.provisioner.client"
local HZ = 100 -- USER_HZ: /proc's clock ticks on Linux

-- CPU seconds of a process so far: /proc/PID/schedstat's time on CPU (nanoseconds), else /proc/PID/stat's
-- utime + stime (10 ms ticks, too coarse for a steady pass's share of obleth serve)
local function cpu_seconds(pid)
  local f = io.open(("/proc/%d/schedstat"):format(pid))
  if f then
    local ns = tonumber(f:read("a"):match("^(%d+)"))
    f:close()
    if ns then return ns / 1e9 end
  end
  f = assert(io.open(("/proc/%d/stat"):format(pid)))
  local line = f:read("a")
  f:close()
  local fields = {}
  for x in line:match("%) (.*)$"):gmatch("%S+") do fields[#fields + 1] = x end
  return (tonumber(fields[12]) + tonumber(fields[13])) / HZ
end

local function spawn_server(M, instance)
  local p = assert(io.popen(("exec %q lua spec/bench/provisioner_pass.lua --serve %d %s"):format(sys.paths.exe, M,
    instance)))
  local port, pid = p:read("l"):match("^(%d+) (%d+)$")
  return p, tonumber(port), tonumber(pid)
end

local function counts(port)
  local r = assert(http.request { url = ("http://127.0.0.1:%d/counts"):format(port) })
  return cjson.decode(r.body)
end

local function fill(db, M, port, interval)
  assert(os.execute(("%q lua spec/bench/provisioner_pass.lua --fill %q %d %d %s"):format(sys.paths.exe, db, M, port,
    tostring(interval))), "filling the store failed")
end

local last_report_bytes, reported_rows = 0, 0
local first_report = {} -- models -> the first pass's report {kb, rows, parts}

-- PROFILE=1: a Lua-level sampler over the measured passes (every 1,000 VM instructions: the function
-- running, by where it is defined, and the first frame of obleth's own code above it), printed at the end
local PROFILE = os.getenv("PROFILE") and { self = {}, n = 0 }
local profiling -- only the big size, no check due
if PROFILE then
  PROFILE.hook = function()
    local info = debug.getinfo(2, "S")
    if not info then return end
    local k = info.short_src .. ":" .. info.linedefined
    PROFILE.self[k] = (PROFILE.self[k] or 0) + 1
    PROFILE.n = PROFILE.n + 1
  end
end

local function measure(M, interval)
  local db = server.tmpdb()
  local st = assert(require("obleth.store").open(db)) -- the instance id comes with the store
  local instance = st:instance()
  st:close()
  collectgarbage("collect")
  local child, port, pid = spawn_server(M, instance)
  fill(db, M, port, interval)
  -- the first pass reports every row once (the filled store has no Slurm view yet): at 10,000 replicas
  -- that is about 4.7 MB, over the default 1 MiB body limit, so it goes in parts (docs/managed-spec.md,
  -- "A report in parts"); the steady passes measured report none
  local srv = server.start { db = db }
  local api = client.new(srv.base, srv.token, tonumber(os.getenv("API_TIMEOUT") or "") or 120)
  local report = getmetatable(api).__index.report
  api.report = function(self, rep)
    last_report_bytes = #cjson.encode(rep)
    if os.getenv("BENCH_DEBUG") then io.stderr:write("report bytes ", last_report_bytes, "\n") end
    reported_rows = #rep.replicas
    local res, err = report(self, rep)
    if res and not first_report[M] then
      first_report[M] = { kb = last_report_bytes / 1024, rows = reported_rows, parts = res.parts }
    end
    return res, err
  end
  local d = daemon.new { api = api }
  for _ = 1, 2 do -- warm-up: connects (discovery), resolves node addresses, reports what the store lacks
    local ok, err = d:pass()
    if not ok then
      sys.kill(pid, "TERM") -- else closing the pipe waits for the stand-in forever
      child:close()
      if os.getenv("BENCH_DEBUG") then io.stderr:write(srv:log():sub(-3000)) end
      srv:cleanup()
      error("provisioner_pass bench: a warm-up pass failed: " .. tostring(err and err.message or err), 0)
    end
  end
  counts(port)
  profiling = PROFILE and M == BIG and interval > 1
  if profiling and not PROFILE.wrapped then -- CPU seconds spent in each part of the measured passes
    PROFILE.wrapped, PROFILE.t = true, {}
    local function wrap(tbl, name, label)
      local f = tbl[name]
      tbl[name] = function(...)
        local t0 = os.clock()
        local r = table.pack(f(...))
        if profiling then PROFILE.t[label] = (PROFILE.t[label] or 0) + os.clock() - t0 end
        return table.unpack(r, 1, r.n)
      end
    end
    local plan = require "obleth.provisioner.plan"
    for _, n in ipairs({ "baseline", "reconcile", "changed", "health", "due_checks" }) do wrap(plan, n, "plan." .. n) end
    wrap(require("obleth.slurm.normalize"), "jobs", "normalize.jobs (Lua)")
    wrap(getmetatable(d.conn).__index, "jobs", "conn:jobs (transfer, cjson decode, normalize)")
    wrap(getmetatable(api).__index, "snapshot", "api:snapshot (delta, merge, copy)")
    wrap(api, "report", "api:report")
    wrap(getmetatable(api).__index, "lease", "api:lease")
  end
  local passes, cpu, slurm_calls, checks, tidy = 5, 0, 0, 0, 0
  local serve0, resyncs0 = cpu_seconds(srv.pid), api.resyncs
  for _ = 1, passes do
    if interval < 1 then loop.sleep(interval) end
    local t0 = os.clock()
    if profiling then debug.sethook(PROFILE.hook, "", 1000) end
    assert(d:pass())
    if profiling then debug.sethook() end
    local t1 = os.clock()
    daemon.tidy() -- as the daemon's loop does after each pass
    tidy = tidy + (os.clock() - t1)
    cpu = cpu + (os.clock() - t0)
    for path, n in pairs(counts(port)) do
      if path:match("^/slurm") or path:match("^/openapi") then slurm_calls = slurm_calls + n end
      if path == "/health" then checks = checks + n end
    end
  end
  local serve = cpu_seconds(srv.pid) - serve0
  local rss = rss_kib()
  collectgarbage("collect")
  local rss_gc, peak = rss_kib(), rss_kib("VmHWM")
  if os.getenv("BENCH_DEBUG") then
    io.stderr:write(("Lua heap after a full collection: %.1f MiB\n"):format(collectgarbage("count") / 1024))
  end
  assert(api.resyncs == resyncs0, "a steady pass asked for the full snapshot")
  srv:cleanup()
  sys.kill(pid, "TERM")
  child:close()
  collectgarbage("collect")
  return { models = M, slurm = slurm_calls / passes, cpu = cpu / passes, serve = serve / passes,
    checks = checks / passes, rss = rss, rss_gc = rss_gc, tidy = tidy / passes, peak = peak, report_kb = last_report_bytes / 1024,
    reported = reported_rows }
end

require("obleth.log").set_level("warn")
if os.getenv("STEADY_ONLY") then
  -- only the steady passes at the big size, no check due (spec/bench/provisioner_instructions.sh runs
  -- this under callgrind: each measured pass's tidy ends one dump)
  local r = measure(BIG, 3600)
  print(("%d replicas, steady pass, no check due: %.1f ms CPU per pass (provisioner %.1f, serve %.1f); provisioner "
    .. "RSS between passes %.1f MiB"):format(BIG * 2, (r.cpu + r.serve) * 1000, r.cpu * 1000, r.serve * 1000,
    r.rss / 1024))
  return
end
local rows = {
  measure(SMALL, 3600), measure(BIG, 3600), -- no health check due in the pass
  measure(SMALL, 0.05), measure(BIG, 0.05), -- every replica checked in the pass
}
print(("%-8s %15s %11s %13s %19s %9s %10s %14s"):format("models", "slurm req/pass", "CPU s/pass", "serve CPU s",
  "health checks/pass", "RSS MiB", "report KB", "rows reported"))
for _, r in ipairs(rows) do
  print(("%-8d %15.1f %11.4f %13.3f %19.1f %9.1f %10.1f %14d"):format(r.models, r.slurm, r.cpu, r.serve, r.checks,
    r.rss / 1024, r.report_kb, r.reported))
end
-- the goal: 20 ms of CPU per pass per 1,000 replicas in steady state (no check due), provisioner and
-- obleth serve together (serve's CPU as the kernel counts it, /proc/PID/schedstat)
local per = (BIG * 2 / 1000)
print(("per 1,000 replicas: %.1f ms CPU per pass (provisioner + serve), goal 20 (provisioner %.1f, serve %.1f)")
  :format((rows[2].cpu + rows[2].serve) * 1000 / per, rows[2].cpu * 1000 / per, rows[2].serve * 1000 / per))
print(("provisioner RSS between passes at %d replicas: %.1f MiB no check due, %.1f MiB every replica checked, goal 32 "
  .. "at 10,000 (peak during the passes: %.1f MiB; the collection and trim after each pass: %.1f ms of the CPU above)")
  :format(BIG * 2, rows[2].rss / 1024, rows[4].rss / 1024, rows[4].peak / 1024, rows[2].tidy * 1000))
print(("report at %d replicas, steady state: %.1f KB, %d rows (obleth serve refuses bodies over 1,024 KB)"):format(
  BIG * 2, rows[2].report_kb, rows[2].reported))
do
  local f = first_report[BIG]
  print(("report at %d replicas, first pass (every row): %.1f KB, %d rows, sent in %d part(s) under obleth serve's "
    .. "default body limit (1,024 KB)"):format(BIG * 2, f.kb, f.rows, f.parts))
end
print(("slurmrestd requests per pass, %d vs %d models: ratio %.2f (must stay 1.00)"):format(BIG, SMALL,
  rows[2].slurm / rows[1].slurm))
print(("CPU per pass per model, %d vs %d models, no checks due: ratio %.2f; every replica checked: ratio %.2f"):format(
  BIG, SMALL, (rows[2].cpu / BIG) / (rows[1].cpu / SMALL), (rows[4].cpu / BIG) / (rows[3].cpu / SMALL)))
if PROFILE then
  print(("CPU per measured pass at %d models, no check due (5 passes), ms:"):format(BIG))
  local t_ = {}
  for k, v in pairs(PROFILE.t) do t_[#t_ + 1] = { k, v } end
  table.sort(t_, function(a, b) return a[2] > b[2] end)
  for _, r in ipairs(t_) do print(("%9.1f  %s"):format(r[2] * 1000 / 5, r[1])) end
  local rows_ = {}
  for k, n in pairs(PROFILE.self) do rows_[#rows_ + 1] = { k, n } end
  table.sort(rows_, function(a, b) return a[2] > b[2] end)
  print(("Lua samples (every 1,000 instructions) over the measured passes: %d"):format(PROFILE.n))
  for i = 1, math.min(25, #rows_) do print(("%6.1f %%  %s"):format(100 * rows_[i][2] / PROFILE.n, rows_[i][1])) end
end
