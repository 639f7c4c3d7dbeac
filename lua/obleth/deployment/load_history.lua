--- obleth.deployment.load_history — each model's load and replicas minute by minute over the last
-- hours, for the deployment page's chart (GET /api/v1/models/{id}/load, docs/autoscaling.md#load-history).
--
-- A point per model and minute, kept by the model's id (a model deleted and another made with its name,
-- or a model renamed, never shows another's points) (`at`: the minute's start, epoch seconds; STEP = 60 s):
--   inflight, queued   the most requests in flight / held (queued) in the router at once during the minute
--   arrivals, finished requests that arrived / finished during the minute
--   current, desired   replicas holding or waiting for a job, and the count wanted (a fixed spec's
--                      replicas, an autoscaled one's scale decision), as of the minute's last sample;
--                      nil for a model with no managed spec
-- Bounds: HOURS (6) hours are kept, so at most POINTS = 360 points per model; a model with no point
-- left (no spec, no load for 6 h) is forgotten. Minutes no sample saw (obleth serve was not running)
-- have no point. In memory: a restart of obleth serve starts an empty history.
--
-- The history counts nothing itself: each sample reads the router's load window
-- (obleth.router.load's `view`, whose buckets say what happened during the minute, and the counts now)
-- and the scaling row (obleth.deployment.scaling). A minute's sample is idempotent: sampled again, its
-- arrivals and finished are read again from the window, its peaks only grow. `obleth serve` samples
-- every SAMPLE seconds and before each answer. No I/O; the clock is given.
--
--   local h = history.new{now = loop.now}
--   h:sample(model_id, window:view(name, h:minute()), {current = 1, desired = 2})
--   h:points(model_id, since)   -- the points from `since` on, oldest first
local json = require "obleth.util.json"

local M = {}

--- Seconds a point covers.
M.STEP = 60
--- Hours kept.
M.HOURS = 6
--- Points kept per model at most.
M.POINTS = M.HOURS * 3600 // M.STEP
--- Seconds between two samples of `obleth serve`.
M.SAMPLE = 10

local History = {}
History.__index = History

--- A new history.
---@param opts {now: fun(): number}|nil now: epoch seconds (default os.time)
---@return table
function M.new(opts)
  opts = opts or {}
  local now = opts.now or os.time
  -- specs: the decoded managed specs obleth.deployment.scaling.rows keeps between samples
  return setmetatable({ now = now, started_at = now(), models = {}, specs = {} }, History)
end

--- The start of the minute of `t` (default now), epoch seconds.
---@param t number|nil
---@return integer
function History:minute(t)
  t = math.floor(t or self.now())
  return t - t % M.STEP
end

-- drop a model's points older than the kept hours
local function _trim(pts, t)
  -- the current minute and the POINTS - 1 before it
  local keep_from = math.floor(t) - math.floor(t) % M.STEP - (M.POINTS - 1) * M.STEP
  local drop = 0
  while pts[drop + 1] and pts[drop + 1].at < keep_from do drop = drop + 1 end
  if drop > 0 then table.move(pts, drop + 1, #pts + drop, 1) end
end

--- Where a sample's window view starts: the previous minute's start. A sample also completes the
--- previous minute's point from the window's buckets, so requests in a minute's last seconds (after its
--- last sample) are not lost.
---@return integer epoch seconds
function History:since()
  return self:minute() - M.STEP
end

-- the point of minute `at` in pts (points are in time order), made when `make`; nil when none
local function _point(pts, at, make)
  for i = #pts, math.max(1, #pts - 2), -1 do
    if pts[i].at == at then return pts[i] end
    if pts[i].at < at then
      if not make then return nil end
      local p = { at = at, inflight = 0, queued = 0, arrivals = 0, finished = 0 }
      table.insert(pts, i + 1, p)
      return p
    end
  end
  if not make then return nil end
  local p = { at = at, inflight = 0, queued = 0, arrivals = 0, finished = 0 }
  table.insert(pts, 1, p)
  return p
end

--- Record what the window and the scaling row say now: the current minute's point, and the previous
--- minute's completed from the window's buckets.
---@param key integer|string the model's id (any key: a spec may use names)
---@param view table obleth.router.load's view(name, since) with `since` at or before the previous
---  minute's start (History:since): {inflight, queued, samples = {{at, span, inflight, queued, arrivals,
---  finished}}}
---@param row {current: integer, desired: integer}|nil the model's scaling row (nil: not managed)
function History:sample(key, view, row)
  local t = self.now()
  local m = self:minute(t)
  local pts = self.models[key]
  if not pts then
    pts = {}
    self.models[key] = pts
  end
  -- per minute (the previous one and this one): the peaks and the sums of the buckets in it (a sample of
  -- span 0 is the level carried in at the window's start)
  local per = {}
  for _, s in ipairs(view.samples or {}) do
    local at = s.at - s.at % M.STEP
    if at >= m - M.STEP and at <= m then
      local x = per[at] or { inflight = 0, queued = 0, arrivals = 0, finished = 0, active = false }
      per[at] = x
      x.inflight, x.queued = math.max(x.inflight, s.inflight or 0), math.max(x.queued, s.queued or 0)
      if (s.span or 0) > 0 then
        x.arrivals, x.finished = x.arrivals + (s.arrivals or 0), x.finished + (s.finished or 0)
      end
      x.active = x.active or x.inflight + x.queued + x.arrivals + x.finished > 0
    end
  end
  local prev = per[m - M.STEP]
  if prev and prev.active then
    local p = _point(pts, m - M.STEP, true)
    p.inflight, p.queued = math.max(p.inflight, prev.inflight), math.max(p.queued, prev.queued)
    p.arrivals, p.finished = math.max(p.arrivals, prev.arrivals), math.max(p.finished, prev.finished)
  end
  local p = _point(pts, m, true)
  local now = per[m] or { inflight = 0, queued = 0, arrivals = 0, finished = 0 }
  p.inflight = math.max(p.inflight, now.inflight, view.inflight or 0)
  p.queued = math.max(p.queued, now.queued, view.queued or 0)
  p.arrivals, p.finished = math.max(p.arrivals, now.arrivals), math.max(p.finished, now.finished)
  _trim(pts, t)
  -- counts (a spec's replicas may read as a float from the store)
  if row then p.current, p.desired = math.tointeger(row.current) or row.current, math.tointeger(row.desired) or row.desired end
end

--- A model's points from `since` on, oldest first (copies).
---@param key integer|string the model's id
---@param since number|nil epoch seconds (default: all kept)
---@return table[] points {at, inflight, queued, arrivals, finished, current|nil, desired|nil}
function History:points(key, since)
  local out = json.array()
  for _, p in ipairs(self.models[key] or {}) do
    if not since or p.at >= since then
      out[#out + 1] = { at = p.at, inflight = p.inflight, queued = p.queued, arrivals = p.arrivals,
        finished = p.finished, current = p.current, desired = p.desired }
    end
  end
  return out
end

--- Forget the models not in `keep` whose points are all older than the kept hours.
---@param keep table<string, true>
function History:forget(keep)
  local t = self.now()
  for name, pts in pairs(self.models) do
    if not keep[name] then
      _trim(pts, t)
      if #pts == 0 then self.models[name] = nil end
    end
  end
end

--- Managed models sampled per page of sample_all (its caller may yield to the event loop between pages).
M.PAGE = 100

--- Sample every managed model and every model with load in the window (obleth serve's timer), in
--- pages of PAGE managed models, calling `pause()` between two pages (obleth serve: a yield to the
--- event loop, so that a sample of thousands of models never holds it for more than a page's work).
---@param store table obleth.store (spec_generations, get_spec, replica_counts, list_replicas)
---@param window table obleth.router.load
---@param scale table the scale policy module
---@param pause fun()|nil called between two pages
---@return integer models sampled
function History:sample_all(store, window, scale, pause)
  local t = self.now()
  local since = self:minute(t) - M.STEP -- History:since at t
  local scaling = require "obleth.deployment.scaling"
  local seen = {}
  local after
  repeat
    local rows, next_after = scaling.rows(store, window, scale, t, self.specs, { after = after, limit = M.PAGE })
    for _, row in ipairs(rows) do
      seen[row.model_id] = true
      self:sample(row.model_id, window:view(row.model, since), row)
    end
    after = next_after
    if after and pause then pause() end
  until not after
  -- the models with load and no spec: the window knows them by name
  for _, name in ipairs(window:names()) do
    local model = store:route_model(name)
    if model and not seen[model.id] then
      seen[model.id] = true
      self:sample(model.id, window:view(name, since), nil)
    end
  end
  self:forget(seen)
  local n = 0
  for _ in pairs(seen) do n = n + 1 end
  return n
end

-- "12", "1 request", "3 requests"
local function _n(n, word) return ("%d %s%s"):format(n, word, n == 1 and "" or "s") end

--- The answer of GET /api/v1/models/{id}/load: the points of the last `hours`, what the chart draws
--- them against, and the words that say it (the page renders them; it decides nothing).
---@param key integer|string the model's id
---@param name string the model's name (the answer's `model`)
---@param hours integer 1..HOURS
---@param scaling table|nil the model's scaling row (nil: not managed)
---@param settings table|nil the scale policy's settings in force (autoscaled: min_replicas,
---  max_replicas, target_inflight)
---@return table answer {model, step, hours, from, to, observed_since, points, target_inflight|nil,
---  min_replicas|nil, max_replicas|nil, series, summary}
function History:answer(key, name, hours, scaling, settings)
  local t = self.now()
  local to = self:minute(t) + M.STEP
  local from = to - hours * 3600
  local pts = self:points(key, from)
  local observed = math.max(from, self:minute(self.started_at))
  local peak_in, peak_q, fin, max_fin, lo_cur, hi_cur, lo_des, hi_des = 0, 0, 0, 0, nil, nil, nil, nil
  for _, p in ipairs(pts) do
    peak_in, peak_q = math.max(peak_in, p.inflight), math.max(peak_q, p.queued)
    fin, max_fin = fin + p.finished, math.max(max_fin, p.finished)
    if p.current then
      lo_cur, hi_cur = math.min(lo_cur or p.current, p.current), math.max(hi_cur or p.current, p.current)
    end
    if p.desired then
      lo_des, hi_des = math.min(lo_des or p.desired, p.desired), math.max(hi_des or p.desired, p.desired)
    end
    if settings and settings.target_inflight and p.current then p.capacity = p.current * settings.target_inflight end
  end
  local span = (to - observed) >= 3600 and ("%d h"):format(math.floor((to - observed) / 3600 + 0.5))
    or ("%d min"):format(math.max(1, (to - observed) // 60))
  local words = {}
  if peak_in + peak_q + fin == 0 then
    words[#words + 1] = ("No request in the last %s."):format(span)
  else
    words[#words + 1] = ("In the last %s: at most %s in flight and %d queued at once, %d finished (at most %d "
      .. "in a minute)."):format(span, _n(peak_in, "request"), peak_q, fin, max_fin)
  end
  local function range(lo, hi) return lo == hi and ("%d"):format(lo) or ("%d to %d"):format(lo, hi) end
  if lo_cur then
    words[#words + 1] = ("Replicas in this span: %s running or on their way, %s wanted."):format(range(lo_cur, hi_cur),
      range(lo_des, hi_des))
  end
  if settings and settings.target_inflight then
    words[#words + 1] = ("A replica is added when the requests in flight and queued pass %s per replica (capacity)."):format(
      _n(settings.target_inflight, "request"))
  end
  -- what the page draws, in its order, with the words of its legend and table
  local series = json.array()
  series[#series + 1] = { key = "inflight", label = "In flight", unit = "requests", chart = "requests" }
  series[#series + 1] = { key = "queued", label = "Queued", unit = "requests", chart = "requests" }
  series[#series + 1] = { key = "finished", label = "Finished per minute", unit = "requests", chart = "requests" }
  if settings and settings.target_inflight then
    series[#series + 1] = { key = "capacity", label = "Capacity (replicas now × target in flight)", unit = "requests",
      chart = "requests" }
  end
  if scaling then
    series[#series + 1] = { key = "current", label = "Replicas now", unit = "replicas", chart = "replicas" }
    series[#series + 1] = { key = "desired", label = "Replicas wanted", unit = "replicas", chart = "replicas" }
  end
  return {
    model = name, step = M.STEP, hours = hours, hours_max = M.HOURS, from = from, to = to,
    observed_since = observed, points = pts,
    target_inflight = settings and settings.target_inflight or nil,
    min_replicas = settings and settings.min_replicas or nil,
    max_replicas = settings and settings.max_replicas or nil,
    series = series,
    summary = table.concat(words, " "),
  }
end

return M
