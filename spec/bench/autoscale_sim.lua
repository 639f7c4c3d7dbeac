-- Benchmark (a simulation): replays one day-long synthetic request trace against the scale policy
-- (obleth.policy.scale, as shipped) with a modelled start-up, and prints, per deployment, the
-- GPU-hours used against a fixed deployment sized for the peak, and the requests that waited with
-- P50 / P99 of the wait. docs/autoscaling.md keeps the table and says how the trace is made.
--   obleth lua spec/bench/autoscale_sim.lua        (or lua5.4 with LUA_PATH=lua/?.lua)
--
-- The trace (seed 30, its own splitmix64 generator, so it is the same on every machine):
--   * a working-day curve, requests per second, linear between the points of CURVE: a quiet night
--     (0.0002/s, about one request an hour, 22:30-06:30), a ramp to 1.0/s at 09:00, a lunch dip to
--     0.5/s, an afternoon at 1.2/s, down to 0.1/s at 19:00 and 0.02/s at 22:00;
--   * 6 bursts (a batch script hitting the API): start uniform in 08:00-18:00, 3-10 min long,
--     1.5-3 extra requests per second;
--   * arrivals Poisson per second at the rate of that second; each request is served in
--     2 s + an exponential of mean 8 s (a mean of 10 s), whatever else the replica serves.
-- The model of a replica: it serves SLOTS (16) requests at once (the engine's batch; more wait in the
-- router's queue, first come first served); a submit waits in Slurm's queue an exponential of mean
-- 60 s in working hours (08-18) and 20 s otherwise (capped at 15 min; the estimated start Slurm
-- gives is that time), then loads the model for LOAD (90 s) before it is healthy. One GPU per
-- replica, held from the job's start (loading included) to its end; a replica scaled down leaves
-- the endpoints at once and ends when its last request finishes (the drain); a pending one is
-- cancelled without cost. The provisioner's pass runs every 10 s, and at once when a request comes
-- to a model with no replica (wake on demand). A request the router would have held past 30 s gets
-- a 503 with Retry-After in the real system; here it stays queued (the client retries) and is
-- counted in ">30 s".
local scale = require "obleth.policy.scale"

local DAY = 86400
local SLOTS = 16
local LOAD = 90
local PASS = 10
local HOLD = 30
local SEED = 30

-- splitmix64: u() in [0, 1)
local function rng(seed)
  local x = seed
  return function()
    x = x + 0x9E3779B97F4A7C15
    local z = x
    z = (z ~ (z >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ~ (z >> 27)) * 0x94D049BB133111EB
    z = z ~ (z >> 31)
    return (z >> 11) * (1.0 / 9007199254740992.0)
  end
end

local function expo(u, mean) return -mean * math.log(1 - u()) end

local function poisson(u, lambda)
  local l, k, p = math.exp(-lambda), 0, 1
  repeat k = k + 1; p = p * u() until p <= l
  return k - 1
end

local H = 3600
local CURVE = { { 0, 0.0002 }, { 6.5 * H, 0.0002 }, { 7.5 * H, 0.3 }, { 9 * H, 1.0 }, { 11.5 * H, 1.0 },
  { 12 * H, 0.5 }, { 13 * H, 0.5 }, { 13.5 * H, 1.2 }, { 16.5 * H, 1.2 }, { 17.5 * H, 0.5 }, { 19 * H, 0.1 },
  { 22 * H, 0.02 }, { 22.5 * H, 0.0002 }, { DAY, 0.0002 } }

local function curve(t)
  for i = 2, #CURVE do
    local a, b = CURVE[i - 1], CURVE[i]
    if t < b[1] then return a[2] + (b[2] - a[2]) * (t - a[1]) / (b[1] - a[1]) end
  end
  return CURVE[#CURVE][2]
end

-- the trace: {at, service}, sorted by arrival
local function trace()
  local u = rng(SEED)
  local bursts = {}
  for i = 1, 6 do
    bursts[i] = { from = 8 * H + u() * 10 * H, len = 180 + u() * 420, extra = 1.5 + u() * 1.5 }
  end
  local reqs = {}
  for t = 0, DAY - 1 do
    local lambda = curve(t)
    for _, b in ipairs(bursts) do
      if t >= b.from and t < b.from + b.len then lambda = lambda + b.extra end
    end
    local n = poisson(u, lambda)
    local at = {}
    for i = 1, n do at[i] = t + u() end
    table.sort(at)
    for i = 1, n do reqs[#reqs + 1] = { at = at[i], service = 2 + expo(u, 8) } end
  end
  return reqs, bursts
end

-- a binary heap of events {t, seq, kind, ...}
local function heap()
  local h, seq = {}, 0
  local function less(a, b) return a.t < b.t or (a.t == b.t and a.seq < b.seq) end
  local q = {}
  function q.push(e)
    seq = seq + 1
    e.seq = seq
    h[#h + 1] = e
    local i = #h
    while i > 1 do
      local p = i // 2
      if less(h[i], h[p]) then h[i], h[p] = h[p], h[i]; i = p else break end
    end
  end
  function q.pop()
    local top = h[1]
    if not top then return nil end
    h[1] = h[#h]
    h[#h] = nil
    local i = 1
    while true do
      local l, r, m = 2 * i, 2 * i + 1, i
      if h[l] and less(h[l], h[m]) then m = l end
      if h[r] and less(h[r], h[m]) then m = r end
      if m == i then break end
      h[i], h[m] = h[m], h[i]
      i = m
    end
    return top
  end
  return q
end

local function percentile(sorted, p)
  if #sorted == 0 then return 0 end
  local i = math.max(1, math.ceil(p / 100 * #sorted))
  return sorted[i]
end

-- Replay the trace against one deployment: fixed = N replicas all day, or autoscale settings.
local function run(reqs, dep)
  local u = rng(SEED + 1)
  local q = heap()
  local replicas = {} -- {id, state = pending|starting|healthy|draining|ended, start, ready, inflight, gpu_from}
  local queue, qhead, qtail = {}, 1, 0
  local gpu_seconds = 0
  local waits, over_hold = {}, 0
  local changes, last_desired = 0, nil
  local last_dir, last_change_at, shortest_flip = nil, nil, math.huge
  local samples = {}
  local bucket = { at = 0, span = PASS, inflight = 0, queued = 0 }
  local inflight_total, last_request_at = 0, nil
  local recent = {} -- {at, service} of finished requests, for rate and latency
  local arrivals = {} -- arrival times, for the rate
  local next_id = 0
  local peak_replicas = 0

  local function queued() return qtail - qhead + 1 end
  local function note()
    local d = inflight_total + queued()
    if d > bucket.inflight then bucket.inflight = d end
  end
  local function finish_gpu(r, t)
    if r.gpu_from then gpu_seconds = gpu_seconds + (t - r.gpu_from); r.gpu_from = nil end
  end

  local function dispatch(t)
    while qhead <= qtail do
      local best
      for _, r in ipairs(replicas) do
        if r.state == "healthy" and r.inflight < SLOTS and (not best or r.inflight < best.inflight) then best = r end
      end
      if not best then return end
      local req = queue[qhead]
      queue[qhead] = nil
      qhead = qhead + 1
      local w = t - req.at
      waits[#waits + 1] = w
      if w > HOLD then over_hold = over_hold + 1 end
      best.inflight = best.inflight + 1
      inflight_total = inflight_total + 1
      q.push({ t = t + req.service, kind = "done", r = best, req = req })
    end
  end

  local function submit(t)
    next_id = next_id + 1
    local h = (t % DAY) / H
    local qwait = math.min(900, expo(u, (h >= 8 and h < 18) and 60 or 20))
    local r = { id = next_id, state = "pending", start = t + qwait, inflight = 0 }
    replicas[#replicas + 1] = r
    q.push({ t = r.start, kind = "start", r = r })
  end

  local function live()
    local out = {}
    for _, r in ipairs(replicas) do
      if r.state == "pending" or r.state == "starting" or r.state == "healthy" then out[#out + 1] = r end
    end
    return out
  end

  local function remove(r, t)
    if r.state == "pending" then
      r.state = "ended"
    elseif r.state == "starting" then
      r.state = "ended"
      finish_gpu(r, t)
    else
      r.state = "draining"
      if r.inflight == 0 then r.state = "ended"; finish_gpu(r, t) end
    end
  end

  local function pass(t)
    if dep.fixed then return end
    -- the window: 10 s buckets over the last hour
    while #samples > 0 and samples[1].at < t - 3600 do table.remove(samples, 1) end
    while #arrivals > 0 and arrivals[1] < t - 60 do table.remove(arrivals, 1) end
    local lat, n = 0, 0
    for i = #recent, 1, -1 do
      if recent[i].at < t - 60 then break end
      lat, n = lat + recent[i].service, n + 1
    end
    while #recent > 0 and recent[1].at < t - 60 do table.remove(recent, 1) end
    local rows = {}
    for _, r in ipairs(live()) do
      local state = r.state == "healthy" and "healthy" or (t < r.start and "pending" or "starting")
      rows[#rows + 1] = { slot = r.id, job_id = r.id, state = state, r = r,
        slurm = { reason = state == "pending" and "Priority" or nil, start_time = r.start } }
    end
    local d = scale.decide({ now = t, autoscale = dep.autoscale, replicas = rows, load = {
      inflight = inflight_total, queued = queued(), rate = #arrivals / 60, latency = n > 0 and lat / n or nil,
      last_request_at = last_request_at, observed_since = 0, samples = samples } })
    if last_desired and d.desired ~= last_desired then
      changes = changes + 1
      local dir = d.desired > last_desired and 1 or -1
      if last_dir and dir ~= last_dir and t - last_change_at < shortest_flip then shortest_flip = t - last_change_at end
      last_dir, last_change_at = dir, t
      if os.getenv("SIM_LOG") == dep.name then
        print(("%s %d -> %d %s: %s"):format(os.date("!%H:%M:%S", math.floor(t)), last_desired, d.desired, d.change, d.reason))
      end
    end
    last_desired = d.desired
    if d.desired > d.current then
      for _ = 1, d.desired - d.current do submit(t) end
    elseif d.desired < d.current then
      -- the ones that cost least go first: pending (latest start first), then starting, then the
      -- healthy replica with the fewest requests in flight
      local rank = { pending = 1, starting = 2, healthy = 3 }
      table.sort(rows, function(a, b)
        if rank[a.state] ~= rank[b.state] then return rank[a.state] < rank[b.state] end
        if a.state == "healthy" then return a.r.inflight < b.r.inflight end
        return a.r.start > b.r.start
      end)
      for i = 1, d.current - d.desired do remove(rows[i].r, t) end
    end
    local n_live = #live()
    if n_live > peak_replicas then peak_replicas = n_live end
  end

  if dep.fixed then
    for i = 1, dep.fixed do
      replicas[i] = { id = i, state = "healthy", start = 0, inflight = 0, gpu_from = 0 }
    end
    peak_replicas = dep.fixed
  else
    for _ = 1, dep.autoscale.min_replicas do submit(-600) end
  end
  for _, r in ipairs(reqs) do q.push({ t = r.at, kind = "arrive", req = r }) end
  for t = 0, DAY, PASS do q.push({ t = t, kind = "tick" }) end

  while true do
    local e = q.pop()
    if not e or e.t > DAY then break end
    local t = e.t
    if e.kind == "arrive" then
      qtail = qtail + 1
      queue[qtail] = e.req
      last_request_at = t
      arrivals[#arrivals + 1] = t
      note()
      local any = false
      for _, r in ipairs(replicas) do
        if r.state == "pending" or r.state == "starting" or r.state == "healthy" then any = true break end
      end
      dispatch(t)
      if not any and not dep.fixed then pass(t) end -- wake on demand: the next pass runs at once
      note()
    elseif e.kind == "done" then
      local r = e.r
      r.inflight = r.inflight - 1
      inflight_total = inflight_total - 1
      recent[#recent + 1] = { at = t, service = e.req.service }
      if r.state == "draining" and r.inflight == 0 then r.state = "ended"; finish_gpu(r, t) end
      dispatch(t)
    elseif e.kind == "start" then
      local r = e.r
      if r.state == "pending" then
        r.state, r.gpu_from = "starting", math.max(0, t)
        q.push({ t = math.max(0, t) + LOAD, kind = "ready", r = r })
      end
    elseif e.kind == "ready" then
      if e.r.state == "starting" then e.r.state = "healthy"; dispatch(t) end
    elseif e.kind == "tick" then
      bucket.queued = 0
      samples[#samples + 1] = bucket
      bucket = { at = t, span = PASS, inflight = inflight_total + queued(), queued = 0 }
      pass(t)
    end
  end
  for _, r in ipairs(replicas) do finish_gpu(r, DAY) end
  local waited = {}
  for _, w in ipairs(waits) do if w > 0 then waited[#waited + 1] = w end end
  table.sort(waited)
  return { gpu_hours = gpu_seconds / H, requests = #waits, waited = #waited, p50 = percentile(waited, 50),
    p99 = percentile(waited, 99), max = waited[#waited] or 0, over_hold = over_hold, changes = changes,
    peak_replicas = peak_replicas, left = queued(), shortest_flip = shortest_flip }
end

local t0 = os.clock()
local reqs = trace()
-- the peak: most requests at once if every request were served on arrival
local ev = {}
for _, r in ipairs(reqs) do ev[#ev + 1] = { r.at, 1 }; ev[#ev + 1] = { r.at + r.service, -1 } end
table.sort(ev, function(a, b) return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2]) end)
local cur, peak = 0, 0
for _, e in ipairs(ev) do cur = cur + e[2]; if cur > peak then peak = cur end end
local TARGET = 8
local N = math.ceil(peak / TARGET)

local function as(over)
  local s = { min_replicas = 1, max_replicas = N, target_inflight = TARGET, scale_down_after = 300,
    idle_to_zero_after = 1200 }
  for k, v in pairs(over or {}) do s[k] = v end
  return s
end

local deployments = {
  { name = ("fixed, %d replicas (peak %d / %d)"):format(N, peak, TARGET), fixed = N },
  { name = "autoscale min 1", autoscale = as() },
  { name = "autoscale min 0, idle 20 min", autoscale = as({ min_replicas = 0 }) },
  { name = "autoscale min 0, down after 15 min", autoscale = as({ min_replicas = 0, scale_down_after = 900 }) },
  { name = "autoscale min 0, target 12", autoscale = as({ min_replicas = 0, target_inflight = 12 }) },
}

print(("trace: seed %d, %d requests in 24 h, peak %d at once; %d slots per replica, load %d s, pass %d s"):format(
  SEED, #reqs, peak, SLOTS, LOAD, PASS))
print(("max_replicas %d, target_inflight %d, scale_down_after 300 s unless the row says otherwise"):format(N, TARGET))
print()
local head = { "deployment", "GPU-h", "vs fixed", "waited", "P50 wait", "P99 wait", "max wait", ">30 s",
  "changes", "shortest flip" }
local rows, base = {}, nil
for _, d in ipairs(deployments) do
  local r = run(reqs, d)
  assert(r.left == 0 and r.requests == #reqs,
    ("every request is served by the end of the day (%d left, %d of %d)"):format(r.left, r.requests, #reqs))
  base = base or r.gpu_hours
  rows[#rows + 1] = { d.name, ("%.1f"):format(r.gpu_hours), ("%+.0f %%"):format((r.gpu_hours / base - 1) * 100),
    ("%d (%.2f %%)"):format(r.waited, r.waited / r.requests * 100), ("%.1f s"):format(r.p50),
    ("%.1f s"):format(r.p99), ("%.0f s"):format(r.max), tostring(r.over_hold), tostring(r.changes),
    r.shortest_flip == math.huge and "-" or ("%d s"):format(r.shortest_flip) }
end
local w = {}
for i, h in ipairs(head) do
  w[i] = #h
  for _, r in ipairs(rows) do w[i] = math.max(w[i], utf8.len(r[i])) end
end
local function line(r)
  local out = {}
  for i, c in ipairs(r) do out[i] = c .. string.rep(" ", w[i] - utf8.len(c)) end
  return "| " .. table.concat(out, " | ") .. " |"
end
print(line(head))
local sep = {}
for i = 1, #head do sep[i] = string.rep("-", w[i]) end
print(line(sep))
for _, r in ipairs(rows) do print(line(r)) end
print()
print(("waited = requests not dispatched on arrival; P50 / P99 / max of their wait; >30 s = held past the "
  .. "router's 30 s (a 503 with Retry-After live); changes = times the desired count changed; shortest flip = "
  .. "least time between a change and the next one the other way. %.1f s CPU"):format(
  os.clock() - t0))
