-- `make chaos-ha`: three `obleth serve` on one PostgreSQL behind HAProxy on loopback, against the
-- harness cluster. Chat completions go through the balancer at a steady rate to smoke-test replicas
-- the provisioner (itself talking to the balancer) keeps; a writer creates models and client keys
-- through the balancer. Every few seconds one instance is SIGKILLed and started again on its port;
-- PostgreSQL is restarted once, half-way. At the end: every acknowledged write is read back through
-- the balancer, and the sampler (squeue against the store, as spec/chaos/run.lua does) has counted
-- duplicate jobs. A table is printed; the exit status is non-zero on any lost write or duplicate.
--
--   build/obleth lua spec/chaos/ha.lua    (spec/chaos/ha.sh: the harness cluster up, its env exported)
--
-- Environment: CHAOS_HA_SECONDS (length of the chaos phase, default 90), CHAOS_HA_KILL_EVERY (s between
-- kills, default 6), CHAOS_HA_SERVE_PORT (the first of three serve ports, default 8660),
-- CHAOS_HA_LB_PORT (the balancer, default 8670), CHAOS_HA_PG_PORT (PostgreSQL, default 5470),
-- CHAOS_HA_DIR (state: PostgreSQL's data, the HAProxy config, pids; default build/chaos-ha),
-- CHAOS_HA_RATE (chat completions per second, default 10).
local root = require("obleth.sys").paths.share
package.path = root .. "/?.lua;" .. package.path

local loop = require "obleth.loop"
local sys = require "obleth.sys"
local http = require "obleth.http"
local cjson = require "cjson"
local tag = require "obleth.job.tag"
local slurm = require "obleth.slurm"
local LIVE = require("obleth.provisioner.plan").LIVE
local plain = require("obleth.provisioner.client").plain
local util = require "spec.support.util"
local server = require "spec.support.server"
local harness = require "spec.support.harness"

local SECONDS = tonumber(os.getenv("CHAOS_HA_SECONDS") or "") or 90
local KILL_EVERY = tonumber(os.getenv("CHAOS_HA_KILL_EVERY") or "") or 6
local SERVE_PORT = tonumber(os.getenv("CHAOS_HA_SERVE_PORT") or "") or 8660
local LB_PORT = tonumber(os.getenv("CHAOS_HA_LB_PORT") or "") or 8670
local PG_PORT = tonumber(os.getenv("CHAOS_HA_PG_PORT") or "") or 5470
local RATE = tonumber(os.getenv("CHAOS_HA_RATE") or "") or 10
local DIR = os.getenv("CHAOS_HA_DIR") or (util.root() .. "/build/chaos-ha")
-- HAProxy's health check (haproxy.cfg below; docs/operations.md states the window it makes)
local INTER_MS, FALL, RISE, CHECK_TIMEOUT_MS = 500, 2, 1, 500

local t_start = loop.monotonic()
local function now() return loop.monotonic() - t_start end
local function say(fmt, ...)
  io.stdout:write(("[chaos-ha %6.1fs] "):format(now()), fmt:format(...), "\n")
  io.stdout:flush()
end

if not harness.URL then
  io.stderr:write("chaos-ha: the harness cluster is not up (spec/chaos/ha.sh starts it)\n")
  os.exit(2)
end

local LB = "http://127.0.0.1:" .. LB_PORT
local TOKEN = sys.random_hex(24)
local violations = { lost = {}, duplicate = {}, orphan = {}, final = {} }
local function violation(kind, msg)
  local v = violations[kind]
  if #v < 20 then say("VIOLATION %s: %s", kind, msg) end
  v[#v + 1] = msg
end

-- processes: every pid goes to DIR/pids too, so spec/chaos/ha.sh's trap stops them whatever happens
local pidfile = DIR .. "/pids"
local function note_pid(pid)
  local f = assert(io.open(pidfile, "a"))
  f:write(pid, "\n")
  f:close()
end

local function request(base, method, path, body, headers, timeout)
  local h = { Authorization = "Bearer " .. TOKEN }
  for k, v in pairs(headers or {}) do h[k] = v end
  if type(body) == "table" then body = cjson.encode(body); h["Content-Type"] = "application/json" end
  local r, err = http.request { url = base .. path, method = method, headers = h, body = body, timeout = timeout or 10 }
  if not r then return nil, nil, err end
  local ok, doc = pcall(cjson.decode, r.body)
  return r.status, ok and plain(server.ints(doc)) or nil, r.body
end
local function api(method, path, body) return request(LB, method, path, body) end
local function must(method, path, body)
  local st, doc, raw = api(method, path, body)
  assert(st and st < 300, ("%s %s -> %s %s"):format(method, path, tostring(st), tostring(raw)))
  return doc
end

-- PostgreSQL ---------------------------------------------------------------------------------------
local PGDIR = DIR .. "/pg"
local PG = util.root() .. "/spec/support/pg.sh"
local function sh_ok(cmd) local ok = os.execute(cmd) return ok == true end
local url
do
  local fh = assert(io.popen(("%s start %s %d"):format(util.shq(PG), util.shq(PGDIR), PG_PORT)))
  url = fh:read("l")
  fh:close()
  assert(url and url:match("^postgresql://"), "PostgreSQL did not start (" .. PGDIR .. "/server.log)")
end

-- the three instances -----------------------------------------------------------------------------
local srvs = {}
local function start_serve(i)
  local s = server.start { db = url, token = TOKEN, port = SERVE_PORT + i - 1 }
  note_pid(s.pid)
  srvs[i] = s
  return s
end
for i = 1, 3 do start_serve(i) end

-- HAProxy ------------------------------------------------------------------------------------------
local cfg = DIR .. "/haproxy.cfg"
do
  local lines = {
    "global", "  maxconn 2000", "",
    "defaults", "  mode http", "  timeout connect 1s", "  timeout client 60s", "  timeout server 60s",
    ("  timeout check %dms"):format(CHECK_TIMEOUT_MS),
    -- a connection refused (the instance is dead) is tried again on another instance; a request already
    -- sent is never sent twice (a killed instance may have committed it)
    "  retries 2", "  option redispatch 1", "  retry-on conn-failure", "",
    "frontend obleth", ("  bind 127.0.0.1:%d"):format(LB_PORT), "  default_backend serve", "",
    "backend serve", "  balance roundrobin",
    -- /healthz needs no token and queries the database: 503 while PostgreSQL is unreachable
    "  option httpchk GET /healthz", "  http-check expect status 200",
    ("  default-server inter %dms fall %d rise %d"):format(INTER_MS, FALL, RISE),
  }
  for i = 1, 3 do lines[#lines + 1] = ("  server serve%d 127.0.0.1:%d check"):format(i, SERVE_PORT + i - 1) end
  local f = assert(io.open(cfg, "w"))
  f:write(table.concat(lines, "\n"), "\n")
  f:close()
end
local hap_fh = assert(io.popen(("exec sh -c %s"):format(util.shq(("echo $$; exec haproxy -db -f %s >%s 2>&1")
  :format(util.shq(cfg), util.shq(DIR .. "/haproxy.log"))))))
local hap_pid = tonumber(hap_fh:read("l"))
note_pid(hap_pid)
util.wait_until(function() return api("GET", "/api/v1/models") == 200 end, 20, "HAProxy to answer")
say("PostgreSQL on %d, obleth serve on %d-%d, HAProxy on %d (check inter %d ms, fall %d)", PG_PORT, SERVE_PORT,
  SERVE_PORT + 2, LB_PORT, INTER_MS, FALL)

-- Slurm settings, through the balancer
local conn = assert(slurm.connect { url = harness.URL, user = harness.USER, token = harness.TOKEN })
local logdir = DIR .. "/joblogs"
os.execute("mkdir -p " .. util.shq(logdir) .. " && chmod 1777 " .. util.shq(logdir))
must("PUT", "/api/v1/settings/slurm", { enabled = true, url = harness.URL, user = harness.USER,
  token = harness.TOKEN, defaults = { partition = "gpu", account = "research", log_dir = logdir,
    port_range = { 27100, 27399 } } })
local instance = must("GET", "/api/v1/provisioner/snapshot").instance

local function live_jobs(model_id)
  local out = {}
  for _, j in ipairs(assert(conn:jobs())) do
    local t = tag.parse(j)
    if t and t.instance == instance and (model_id == nil or t.model_id == model_id) and LIVE[j.state.base] then
      out[#out + 1] = j
    end
  end
  return out
end

-- the provisioner, against the balancer
local prov_err = DIR .. "/provisioner.log"
local prov_fh = assert(io.popen("exec sh -c " .. util.shq(("echo $$; OBLETH_ADMIN_BASE_URL=%s OBLETH_ADMIN_TOKEN=%s "
  .. "OBLETH_PASS_INTERVAL=1 OBLETH_LEASE_TTL=5 OBLETH_BACKOFF_MAX=2 exec %s provisioner 2>>%s"):format(
  util.shq(LB), util.shq(TOKEN), util.shq(util.obleth()), util.shq(prov_err)))))
local prov_pid = tonumber(prov_fh:read("l"))
note_pid(prov_pid)

local stopping = false
local function stop_all()
  if stopping then return end
  stopping = true
  pcall(function() for _, j in ipairs(live_jobs()) do conn:cancel(j.id) end end)
  sys.kill(prov_pid, "TERM")
  pcall(function() prov_fh:read("a") prov_fh:close() end)
  for _, s in pairs(srvs) do pcall(s.stop, s) end
  sys.kill(hap_pid, "TERM")
  pcall(function() hap_fh:read("a") hap_fh:close() end)
  sh_ok(("%s stop %s"):format(util.shq(PG), util.shq(PGDIR)))
end
loop.on_signal("INT", function() loop.spawn(function() say("SIGINT: stopping") stop_all() os.exit(130) end) end)
loop.on_signal("TERM", function() loop.spawn(function() say("SIGTERM: stopping") stop_all() os.exit(130) end) end)

-- results
local chat = { sent = 0, ok = 0, failed = 0, fail_at = {} } -- fail_at: end times of failed requests
local writes = { ok = 0, failed = 0, models = {}, keys = {} }
local events = {} -- {label, at, until_ok, failed}
local samples, samples_skipped = 0, 0

local MODEL = "ha-smoke"
local REPLICAS = 2
local function managed(n)
  return { replicas = n, partition = "gpu", account = "research", time_limit = 120, cpus_per_node = 1,
    memory_per_node = 200, launch_command = "obleth smoke-engine",
    health = { path = "/health", interval = 2, timeout = 2, startup_grace = 60, failure_threshold = 3 } }
end

-- the sampler: the cluster's jobs, then the records (a record is written before its job is submitted)
local ending_since = {}
local ENDING_GRACE = 60
local function sample(model_id)
  local jobs = conn:jobs()
  if not jobs then samples_skipped = samples_skipped + 1 return end
  local st, doc = api("GET", "/api/v1/replicas")
  if st ~= 200 or type(doc) ~= "table" then samples_skipped = samples_skipped + 1 return end
  samples = samples + 1
  local rec = {}
  for _, r in ipairs(doc.replicas or {}) do rec[r.nonce] = r end
  local t = loop.monotonic()
  local per_slot, n = {}, 0
  for _, j in ipairs(jobs) do
    local tg = tag.parse(j)
    if tg and tg.instance == instance and LIVE[j.state.base] then
      local r = rec[tg.nonce]
      if not r then
        violation("orphan", ("job %s (nonce %s) has no replica record"):format(j.id, tg.nonce))
      elseif r.state == "ending" then
        ending_since[tg.nonce] = ending_since[tg.nonce] or t
      end
      if tg.model_id == model_id and not (r and r.state == "ending" and t - ending_since[tg.nonce] <= ENDING_GRACE) then
        n = n + 1
        local key = tg.model_id .. "/" .. tg.slot
        per_slot[key] = (per_slot[key] or 0) + 1
        if per_slot[key] == 2 then violation("duplicate", ("slot %s has two live jobs"):format(key)) end
      end
    end
  end
  if n > REPLICAS then violation("duplicate", ("model %s runs %d live jobs, wants %d"):format(MODEL, n, REPLICAS)) end
end

local function healthy(model_id)
  local st, doc = api("GET", ("/api/v1/models/%d/replicas?state=live"):format(model_id))
  if st ~= 200 then return false end
  local n = 0
  for _, r in ipairs(doc.replicas) do if r.state == "healthy" then n = n + 1 end end
  return n >= REPLICAS
end

-- how many times HAProxy has marked instance i down so far (it logs each change of state to stderr)
local function down_count(i)
  local n = 0
  for _ in util.slurp(DIR .. "/haproxy.log"):gmatch("Server serve/serve" .. i .. " is DOWN") do n = n + 1 end
  return n
end

local function main()
  local m = must("POST", "/api/v1/models", { name = MODEL })
  m = m.model or m
  must("PUT", "/api/v1/models/" .. m.id .. "/managed", managed(REPLICAS))
  local key = must("POST", "/api/v1/keys", { name = "chaos-ha" }).key
  util.wait_until(function() return healthy(m.id) end, 180, "the smoke-test replicas to be healthy")
  say("%d replicas of %s healthy; chaos for %d s", REPLICAS, MODEL, SECONDS)

  local running = true
  local tasks = 0
  local function task(fn) tasks = tasks + 1 loop.spawn(function() local ok, e = pcall(fn) if not ok then
    say("task error: %s", tostring(e)) end tasks = tasks - 1 end) end

  -- chat completions at a steady rate (each on its own, so a slow one does not lower the rate)
  task(function()
    local body = cjson.encode { model = MODEL, messages = { { role = "user", content = "hello" } } }
    local next_at = loop.monotonic()
    while running do
      chat.sent = chat.sent + 1
      loop.spawn(function()
        local r = http.request { url = LB .. "/v1/chat/completions", method = "POST", timeout = 20, body = body,
          headers = { Authorization = "Bearer " .. key, ["Content-Type"] = "application/json" } }
        if r and r.status == 200 then chat.ok = chat.ok + 1 else
          chat.failed = chat.failed + 1
          chat.fail_at[#chat.fail_at + 1] = now()
          if chat.failed <= 10 then say("chat failed: %s", r and (r.status .. " " .. r.body:sub(1, 120)) or "no answer") end
        end
      end)
      next_at = next_at + 1 / RATE
      loop.sleep(math.max(0, next_at - loop.monotonic()))
    end
  end)
  -- the writer: a model and a client key at a time, each acknowledged one remembered
  task(function()
    local i = 0
    while running do
      i = i + 1
      local st, doc = api("POST", "/api/v1/models", { name = ("ha-w-%d"):format(i) })
      if st == 201 then writes.ok = writes.ok + 1 writes.models[#writes.models + 1] = { id = doc.id, name = doc.name }
      else writes.failed = writes.failed + 1 end
      local st2, k = api("POST", "/api/v1/keys", { name = ("ha-w-%d"):format(i) })
      if st2 == 201 then writes.ok = writes.ok + 1 writes.keys[#writes.keys + 1] = k.id
      else writes.failed = writes.failed + 1 end
      loop.sleep(0.1)
    end
  end)
  task(function()
    while running do
      sample(m.id)
      loop.sleep(0.5)
    end
  end)

  -- the killer: one instance at a time, round robin; PostgreSQL once, half-way
  local t_end = loop.monotonic() + SECONDS
  local k, pg_done = 0, false
  while loop.monotonic() < t_end do
    loop.sleep(KILL_EVERY)
    if not pg_done and loop.monotonic() > t_end - SECONDS / 2 then
      pg_done = true
      local at = now()
      say("restarting PostgreSQL")
      local marker = DIR .. "/pg-restarted"
      os.remove(marker)
      os.execute(("(%s restart %s; echo $? >%s) >/dev/null 2>&1 &"):format(util.shq(PG), util.shq(PGDIR),
        util.shq(marker)))
      util.wait_until(function() return util.slurp(marker) ~= "" end, 90, "PostgreSQL to restart")
      say("PostgreSQL restarted (%s)", util.slurp(marker):gsub("%s+$", ""))
      events[#events + 1] = { label = "PostgreSQL restart (pg_ctl restart -m fast)", at = at }
    else
      k = k + 1
      local i = (k - 1) % 3 + 1
      local at = now()
      local downs = down_count(i)
      srvs[i]:stop("KILL")
      say("SIGKILL obleth serve %d (port %d)", i, SERVE_PORT + i - 1)
      local e = { label = ("SIGKILL serve%d"):format(i), at = at }
      events[#events + 1] = e
      -- when HAProxy's health check marked it down (its log: "Server serve/serveN is DOWN")
      loop.spawn(function()
        local t_kill = loop.monotonic()
        while down_count(i) == downs and loop.monotonic() - t_kill < 30 do loop.sleep(0.02) end
        if down_count(i) > downs then e.down_after = loop.monotonic() - t_kill end
      end)
      loop.sleep(2)
      local ok, err
      for _ = 1, 50 do
        ok, err = pcall(start_serve, i)
        if ok then break end
        loop.sleep(0.2)
      end
      assert(ok, "obleth serve did not restart: " .. tostring(err))
    end
  end
  loop.sleep(KILL_EVERY)
  running = false
  util.wait_until(function() return tasks == 0 end, 60, "the clients to stop")
  -- the requests still in flight
  util.wait_until(function() return chat.ok + chat.failed == chat.sent end, 60, "the chat requests to end")

  -- every acknowledged write, read back through the balancer
  for _, w in ipairs(writes.models) do
    local st, got = api("GET", "/api/v1/models/" .. w.id)
    if st ~= 200 or got.name ~= w.name then
      violation("lost", ("model %s (%s) acknowledged, then missing (HTTP %s)"):format(w.id, w.name, tostring(st)))
    end
  end
  local st, keys = api("GET", "/api/v1/keys")
  assert(st == 200, "listing the keys: HTTP " .. tostring(st))
  local have = {}
  for _, kk in ipairs(keys.keys or {}) do have[kk.id] = true end
  for _, id in ipairs(writes.keys) do
    if not have[id] then violation("lost", ("client key %s acknowledged, then missing"):format(id)) end
  end
  -- the model still runs exactly its replicas, healthy
  local ok, why = pcall(util.wait_until, function()
    sample(m.id)
    return healthy(m.id) and #live_jobs(m.id) == REPLICAS
  end, 120, "the model to run exactly its replicas, healthy")
  if not ok then violation("final", tostring(why)) end
end

local main_ok, main_err = xpcall(main, debug.traceback)
if not main_ok then
  say("ERROR: %s", tostring(main_err))
  violations.final[#violations.final + 1] = tostring(main_err)
end
stop_all()

-- the table -----------------------------------------------------------------------------------------
-- each event's window runs to the next one; in it: the chat requests that failed, and how long after
-- the event the last of them ended (requests succeeded again from then on; 0: none failed)
table.sort(events, function(a, b) return a.at < b.at end)
for n, e in ipairs(events) do
  local to = events[n + 1] and events[n + 1].at or math.huge
  e.failed, e.until_ok = 0, 0
  for _, f in ipairs(chat.fail_at) do
    if f >= e.at and f < to then e.failed = e.failed + 1 e.until_ok = math.max(e.until_ok, f - e.at) end
  end
end
print()
print(("chaos-ha: %.0f s of chaos, 3 obleth serve on PostgreSQL behind HAProxy (check inter %d ms, fall %d, "
  .. "rise %d: detection window %.1f s)"):format(SECONDS, INTER_MS, FALL, RISE, (INTER_MS * FALL + CHECK_TIMEOUT_MS) / 1000))
print(("  %-44s %8s %15s %12s %15s"):format("event", "at", "marked down", "chat failed", "until ok again"))
for _, e in ipairs(events) do
  print(("  %-44s %7.1fs %15s %12d %14.2fs"):format(e.label, e.at,
    e.down_after and ("%.2fs"):format(e.down_after) or "-", e.failed, e.until_ok))
end
print()
local lost, dup = #violations.lost, #violations.duplicate + #violations.orphan
print(("  %-64s %d"):format("acknowledged writes lost (of " .. #writes.models + #writes.keys .. ")", lost))
print(("  %-64s %d"):format("duplicate (or orphaned) jobs, " .. samples .. " samples", dup))
print(("  %-64s %d of %d"):format("chat completions through the balancer that failed", chat.failed, chat.sent))
print(("  %-64s %d of %d"):format("writes through the balancer that failed (not acknowledged)", writes.failed,
  writes.failed + writes.ok))
print(("  %-64s %d"):format("final state not exact (or the run failed)", #violations.final))
local failed = lost + dup + #violations.final
print(failed == 0 and "chaos-ha: ok" or "chaos-ha: FAILED")
io.stdout:flush()
os.exit(failed == 0 and 0 or 1)
