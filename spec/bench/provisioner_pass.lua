-- Benchmark: one steady-state provisioner pass with M models × 2 healthy
-- replicas, against a stand-in slurmrestd that serves the recorded v0.0.38
-- shapes (shared/cases/slurmrestd/v0.0.38/jobs.json's RUNNING job, retagged
-- per replica) on loopback. The Management API side is in-process (the
-- snapshot is built directly; the report is captured) so the numbers are
-- the provisioner's own. Reference in the same run: the same pass with 50
-- models. Reports slurmrestd requests per pass (must not grow with the
-- number of models), CPU seconds per pass, and resident memory.
--   obleth lua spec/bench/provisioner_pass.lua [models]
local loop = require "obleth.loop"
local http = require "obleth.http"
local cjson = require "cjson"
local tag = require "obleth.job.tag"
local daemon = require "obleth.provisioner"

local BIG = tonumber(arg and arg[1]) or 500
local SMALL = 50
local INSTANCE = "0be4c4ba"
local shared = os.getenv("OBLETH_SHARED") or "../shared"
local fh = assert(io.open(shared .. "/cases/slurmrestd/v0.0.38/jobs.json"), "shared cases not found (OBLETH_SHARED)")
local recorded = cjson.decode(fh:read("a"))
fh:close()
local template
for _, j in ipairs(recorded.jobs) do if j.job_state == "RUNNING" then template = j break end end
local nodes_doc = cjson.decode(assert(io.open(shared .. "/cases/slurmrestd/v0.0.38/nodes.json")):read("a"))
local openapi_paths = {}
for _, p in ipairs({ "/slurm/v0.0.38/jobs", "/slurm/v0.0.38/ping", "/slurm/v0.0.38/nodes" }) do openapi_paths[p] = {} end

local function rss_kib()
  for line in io.lines("/proc/self/status") do
    local v = line:match("^VmRSS:%s+(%d+)")
    if v then return tonumber(v) end
  end
end

local function nonce(m, s) return ("%08x%08x"):format(m, s) end

-- the world for M models: the snapshot and the jobs response body
local function world(M, port)
  local models, jobs = {}, {}
  local id = 1000
  for m = 1, M do
    local reps = {}
    for s = 1, 2 do
      id = id + 1
      local n = nonce(m, s)
      local j = {}
      for k, v in pairs(template) do j[k] = v end
      j.job_id, j.name = id, tag.name(INSTANCE, m, s, n)
      j.comment = tag.comment(INSTANCE, m, s, n, 1)
      j.nodes = "n0"
      jobs[#jobs + 1] = j
      reps[#reps + 1] = { id = id, model_id = m, slot = s, nonce = n, state = "healthy", job_id = id,
        node = "n0", port = 20000 + id, endpoint = ("http://127.0.0.1:%d"):format(port),
        started_at = os.time() - 60, healthy_at = os.time() - 50, check_failures = 0 }
    end
    models[#models + 1] = { id = m, name = "model-" .. m, status = "active", replicas = reps, recent_ends = {},
      spec = { enabled = true, replicas = 2, partition = "gpu", time_limit = 24 * 60, generation = 1,
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
  return { instance = INSTANCE, now = os.time(), models = models, restart = {}, clear_lost = {},
    settings = { enabled = true, url = ("http://127.0.0.1:%d"):format(port), user = "obleth", token = "x",
      defaults = { port_range = { 20000, 29999 } } } }, cjson.encode({ meta = recorded.meta, errors = {}, jobs = jobs })
end

-- The stand-in slurmrestd (and /health for the replicas) runs in a child
-- process so its work is not counted as the provisioner's:
--   obleth lua spec/bench/provisioner_pass.lua --serve M
if arg and arg[1] == "--serve" then
  local M = tonumber(arg[2])
  local counts = {}
  local jobs_body
  local srv = assert(http.server { port = 0, handler = function(req)
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
  end })
  local _
  _, jobs_body = world(M, srv:port())
  io.stdout:write(srv:port(), " ", require("obleth.sys").getpid(), "\n")
  io.stdout:flush()
  loop.on_signal("TERM", function() loop.stop(0) end)
  return loop.run()
end

local function spawn_server(M)
  local exe = require("obleth.sys").paths.exe
  local p = assert(io.popen(("exec %q lua spec/bench/provisioner_pass.lua --serve %d"):format(exe, M)))
  local port, pid = p:read("l"):match("^(%d+) (%d+)$")
  return p, tonumber(port), tonumber(pid)
end

local function counts(port)
  local r = assert(http.request { url = ("http://127.0.0.1:%d/counts"):format(port) })
  return cjson.decode(r.body)
end

local last_report_bytes, reported_rows = 0, 0

local function measure(M, interval)
  local child, port, pid = spawn_server(M)
  local snap = world(M, port)
  for _, m in ipairs(snap.models) do m.spec.health.interval = interval end
  -- the Management API in-process: this provisioner holds the lease, reports are taken
  local api = {
    lease = function() return { lease = { generation = 1, expires_at = os.time() + 3600 }, acquired = true, ttl = 3600 } end,
    snapshot = function() return snap end,
    -- the store's side of a report, enough for the next snapshot: rows upserted by nonce (fields
    -- not sent kept), endpoint lists replaced for the models named
    report = function(_, rep)
      last_report_bytes = #cjson.encode(rep)
      reported_rows = #rep.replicas
      local by_nonce, by_id = {}, {}
      for _, m in ipairs(snap.models) do
        by_id[tostring(m.id)] = m
        for _, r in ipairs(m.replicas) do by_nonce[r.nonce] = r end
      end
      for _, r in ipairs(rep.replicas) do
        local cur = by_nonce[r.nonce]
        if cur then for k, v in pairs(r) do cur[k] = v end end
      end
      for id, eps in pairs(rep.endpoints) do if by_id[id] then by_id[id].endpoints = eps end end
      return { ok = true }
    end,
  }
  local d = daemon.new { api = api }
  local ok, err = d:pass() -- warm-up: connects (discovery), resolves node addresses
  if not ok then
    require("obleth.sys").kill(pid, "TERM") -- else closing the pipe waits for the stand-in forever
    child:close()
    error("provisioner_pass bench: the warm-up pass failed: " .. tostring(err and err.message or err), 0)
  end
  counts(port)
  local passes, cpu, slurm_calls, checks = 5, 0, 0, 0
  for _ = 1, passes do
    if interval < 1 then loop.sleep(interval) end
    local t0 = os.clock()
    assert(d:pass())
    cpu = cpu + (os.clock() - t0)
    for path, n in pairs(counts(port)) do
      if path:match("^/slurm") or path:match("^/openapi") then slurm_calls = slurm_calls + n end
      if path == "/health" then checks = checks + n end
    end
  end
  collectgarbage("collect")
  require("obleth.sys").kill(pid, "TERM")
  child:close()
  return { models = M, slurm = slurm_calls / passes, cpu = cpu / passes, checks = checks / passes, rss = rss_kib(),
    report_kb = last_report_bytes / 1024, reported = reported_rows }
end

require("obleth.log").set_level("warn")
local rows = {
  measure(SMALL, 3600), measure(BIG, 3600), -- no health check due in the pass
  measure(SMALL, 0.05), measure(BIG, 0.05), -- every replica checked in the pass
}
print(("%-8s %15s %11s %19s %9s %10s %14s"):format("models", "slurm req/pass", "CPU s/pass", "health checks/pass",
  "RSS MiB", "report KB", "rows reported"))
for _, r in ipairs(rows) do
  print(("%-8d %15.1f %11.4f %19.1f %9.1f %10.1f %14d"):format(r.models, r.slurm, r.cpu, r.checks, r.rss / 1024,
    r.report_kb, r.reported))
end
-- the goal: 20 ms of CPU per pass per 1,000 replicas in steady state (no check due), provisioner and
-- obleth serve together; only the provisioner's share is measured here (the Management API is in-process)
print(("per 1,000 replicas: %.1f ms CPU per pass (provisioner only; obleth serve's share not measured here), goal 20")
  :format(rows[2].cpu * 1000 / (BIG * 2 / 1000)))
print(("report at %d replicas, steady state: %.1f KB, %d rows (obleth serve refuses bodies over 1,024 KB)"):format(
  BIG * 2, rows[2].report_kb, rows[2].reported))
print(("slurmrestd requests per pass, %d vs %d models: ratio %.2f (must stay 1.00)"):format(BIG, SMALL,
  rows[2].slurm / rows[1].slurm))
print(("CPU per pass per model, %d vs %d models, no checks due: ratio %.2f; every replica checked: ratio %.2f"):format(
  BIG, SMALL, (rows[2].cpu / BIG) / (rows[1].cpu / SMALL), (rows[4].cpu / BIG) / (rows[3].cpu / SMALL)))
