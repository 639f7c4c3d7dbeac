--- obleth.router.load — a short window of each model's load, kept by `obleth serve`'s router and
-- handed to the provisioner in the snapshot (the `load` the scale policy reads, docs/autoscaling.md).
--
-- Per model: requests in flight and queued now, the time of the last request, and buckets of
-- `bucket` seconds (default 10) over the last `span` seconds (default SPAN), each with the most
-- requests in flight + queued seen during it, the requests that arrived and those that finished
-- (with their seconds, for the mean latency). Buckets without any request are not kept: a missing
-- bucket means no load, and `observed_since` says how far back the window reaches.
--
--   local w = load.new{now = loop.now}
--   w:begin("m")            -- a request to model m arrived and goes to a replica
--   w:finish("m", 2.5)      -- it finished after 2.5 s
--   w:hold("m") / w:release("m")   -- a request waiting in the router (no replica yet);
--                           -- w:begin("m", true) when it then goes to a replica
--   w:view("m", since)      -- {inflight, queued, finished, rate, latency, last_request_at,
--                           --  observed_since, started_at,
--                           --  samples = {{at, span, inflight, queued, arrivals, finished}}}
-- No I/O; the clock is given.
--
-- How far back: REACH (3600 s) is the longest `scale_down_after` a spec may ask for (the schema's
-- bound, obleth.schema.managed.SCALE_DOWN_MAX), and the window keeps SPAN = REACH + one minute, so
-- the pass that reads a snapshot a few seconds after it was made (or on a clock a little behind obleth
-- serve's) still sees the window reach back a whole REACH. At most SPAN / BUCKET = 366 buckets per
-- model (buckets only where there was load). Idleness needs no window: the time of the last request is
-- kept for good, and `started_at` says since when the window has seen every request.
local json = require "obleth.util.json"

local M = {}

M.BUCKET = 10
--- The longest scale_down_after the window answers for (seconds): obleth.schema.managed's bound.
M.REACH = require("obleth.schema.managed").SCALE_DOWN_MAX
--- Seconds of buckets kept: REACH and a minute's margin.
M.SPAN = M.REACH + 60
--- Seconds the rate and the mean latency are taken over.
M.RATE_WINDOW = 60

local Load = {}
Load.__index = Load

--- A new window.
---@param opts {now: fun(): number, bucket: number|nil, span: number|nil}|nil now: epoch seconds
---@return table
function M.new(opts)
  opts = opts or {}
  local now = opts.now or os.time
  return setmetatable({ now = now, bucket = opts.bucket or M.BUCKET, span = opts.span or M.SPAN,
    since = now(), models = {} }, Load)
end

function Load:_model(name)
  local m = self.models[name]
  if not m then
    m = { inflight = 0, queued = 0, finished = 0, buckets = {} }
    self.models[name] = m
  end
  return m
end

-- the current bucket of a model (made when the time has moved past the newest), old ones dropped
function Load:_bucket(m, t)
  local at = t - t % self.bucket
  local b = m.buckets[#m.buckets]
  if not b or b.at ~= at then
    b = { at = at, span = self.bucket, inflight = m.inflight, queued = m.queued, arrivals = 0, finished = 0,
      seconds = 0 }
    m.buckets[#m.buckets + 1] = b
    local keep_from = t - self.span
    local drop = 0
    while m.buckets[drop + 1] and m.buckets[drop + 1].at + self.bucket <= keep_from do drop = drop + 1 end
    if drop > 0 then table.move(m.buckets, drop + 1, #m.buckets + drop, 1) end
  end
  return b
end

local function _peak(m, b)
  local d = m.inflight + m.queued
  if d > b.inflight + b.queued then b.inflight, b.queued = m.inflight, m.queued end
  b.level_inflight, b.level_queued = m.inflight, m.queued
end

--- A request to the model arrived and goes to a replica.
---@param name string the model's name
---@param held boolean|nil it was held (counted as it arrived, by `hold`)
function Load:begin(name, held)
  local t = self.now()
  local m = self:_model(name)
  m.inflight = m.inflight + 1
  local b = self:_bucket(m, t)
  if not held then
    m.last_request_at = t
    b.arrivals = b.arrivals + 1
  end
  _peak(m, b)
end

--- A request the router holds because no replica serves the model yet (wake on demand).
---@param name string
function Load:hold(name)
  local t = self.now()
  local m = self:_model(name)
  m.queued = m.queued + 1
  m.last_request_at = t
  local b = self:_bucket(m, t)
  b.arrivals = b.arrivals + 1
  _peak(m, b)
end

--- A held request stops waiting: it goes to a replica (then `begin(name, true)`, which does not
--- count it as a new arrival) or it is answered 503.
---@param name string
function Load:release(name)
  local m = self:_model(name)
  m.queued = math.max(0, m.queued - 1)
  -- the level after the newest bucket's last event: what lasts until the next one
  local b = m.buckets[#m.buckets]
  if b then b.level_queued = m.queued end
end

--- A request to the model finished (answered, failed or abandoned).
---@param name string
---@param seconds number|nil how long it took
---@param tokens integer|nil the completion tokens of its answer, when the engine reported them
function Load:finish(name, seconds, tokens)
  local m = self:_model(name)
  m.inflight = math.max(0, m.inflight - 1)
  m.finished = m.finished + 1
  local b = self:_bucket(m, self.now())
  b.finished = b.finished + 1
  b.seconds = b.seconds + (seconds or 0)
  if math.type(tokens) == "integer" or (type(tokens) == "number" and tokens >= 0) then
    b.tokens = (b.tokens or 0) + tokens
  end
  _peak(m, b)
end

--- The model's load as the scale policy reads it (obleth.policy.scale's `load`).
---@param name string
---@param since number|nil epoch seconds: only buckets ending after it (default: the whole window)
---@param no_samples boolean|nil leave the buckets out (a model that is not autoscaled: the counts only)
---@return {inflight: integer, queued: integer, finished: integer, rate: number, latency: number|nil,
---  tokens_per_s: number|nil,
---  last_request_at: number|nil, observed_since: number, started_at: number, samples: table[]}
---  rate: arrivals per second over the last RATE_WINDOW s; latency: mean seconds of the requests
---  finished in it (nil when none); tokens_per_s: completion tokens per second over it (nil when no
---  engine reported any); observed_since: how far back the samples reach (serve's start, or
---  `span` ago); started_at: serve's start (no request since it when last_request_at is nil, however
---  long ago: idleness is not bounded by the span); finished: since serve started
function Load:view(name, since, no_samples)
  local t = self.now()
  local m = self.models[name]
  local observed = math.max(self.since, t - self.span)
  if not m then
    return { inflight = 0, queued = 0, finished = 0, rate = 0, observed_since = observed, started_at = self.since,
      samples = json.array() }
  end
  local samples, arrivals, fin, secs, tokens = json.array(), 0, 0, 0, nil
  local from = math.max(since or -math.huge, t - self.span)
  local carry
  for _, b in ipairs(m.buckets) do
    if b.at + b.span <= from then
      -- a bucket before the window: what was in flight at its end lasts until the next event
      carry = b
    elseif not no_samples then
      samples[#samples + 1] = { at = b.at, span = b.span, inflight = b.inflight, queued = b.queued,
        arrivals = b.arrivals, finished = b.finished }
    end
    if b.at + b.span > t - M.RATE_WINDOW then
      arrivals, fin, secs = arrivals + b.arrivals, fin + b.finished, secs + b.seconds
      if b.tokens then tokens = (tokens or 0) + b.tokens end
    end
  end
  if carry and not no_samples and (carry.level_inflight or 0) + (carry.level_queued or 0) > 0 then
    table.insert(samples, 1, { at = from, span = 0, inflight = carry.level_inflight, queued = carry.level_queued,
      arrivals = 0, finished = 0 })
  end
  return { inflight = m.inflight, queued = m.queued, finished = m.finished,
    rate = arrivals / M.RATE_WINDOW, latency = fin > 0 and secs / fin or nil,
    tokens_per_s = tokens and tokens / M.RATE_WINDOW or nil,
    last_request_at = m.last_request_at, observed_since = observed, started_at = self.since, samples = samples }
end

--- This window's state as plain data, for another `obleth serve` to add to its own (obleth.serve.load_share
--- publishes it; `M.import` reads it back): the counts of every model seen, and the buckets still inside
--- the span, each `{at, inflight, queued, arrivals, finished, seconds, tokens|null, level_inflight,
--- level_queued}` (seconds: the finished requests' summed seconds, to the millisecond).
---@return {since: number, bucket: number, models: table<string, {inflight: integer, queued: integer,
---  finished: integer, last_request_at: number|nil, buckets: table[]}>}
function Load:export()
  local keep_from = self.now() - self.span
  local models = {}
  for name, m in pairs(self.models) do
    local bs = json.array()
    for _, b in ipairs(m.buckets) do
      if b.at + b.span > keep_from then
        bs[#bs + 1] = { b.at, b.inflight, b.queued, b.arrivals, b.finished, math.floor(b.seconds * 1000 + 0.5) / 1000,
          b.tokens or json.null, b.level_inflight or b.inflight, b.level_queued or b.queued }
      end
    end
    models[name] = { inflight = m.inflight, queued = m.queued, finished = m.finished,
      last_request_at = m.last_request_at, buckets = bs }
  end
  return { since = self.since, bucket = self.bucket, models = models }
end

local function _count(v) return math.type(v) == "integer" and v >= 0 end
local function _time(v) return type(v) == "number" and v == v and v > -math.huge and v < math.huge end
local function _invalid(message) return { code = "invalid", message = message } end

--- Read back what `export` made (decoded from JSON by another process: checked, not trusted).
---@param doc table
---@return {since: number, bucket: number, models: table}|nil part
---@return {code: "invalid", message: string}|nil err what is wrong
function M.import(doc)
  if type(doc) ~= "table" or not _time(doc.since) or type(doc.models) ~= "table" then
    return nil, _invalid("not a load window: since and models are expected")
  end
  local models = {}
  for name, m in pairs(doc.models) do
    if type(name) ~= "string" or type(m) ~= "table" or type(m.buckets) ~= "table" then
      return nil, _invalid("model " .. tostring(name) .. ": counts and buckets are expected")
    end
    local r = { inflight = math.tointeger(m.inflight), queued = math.tointeger(m.queued),
      finished = math.tointeger(m.finished), last_request_at = _time(m.last_request_at) and m.last_request_at or nil,
      buckets = {} }
    if not (_count(r.inflight) and _count(r.queued) and _count(r.finished)) then
      return nil, _invalid("model " .. name .. ": inflight, queued and finished must be counts")
    end
    local last = -math.huge
    for i, x in ipairs(m.buckets) do
      local at = type(x) == "table" and x[1]
      if not _time(at) or at <= last then return nil, _invalid(("model %s: bucket %d is out of order"):format(name, i)) end
      last = at
      local b = { at = at, span = doc.bucket, inflight = math.tointeger(x[2]), queued = math.tointeger(x[3]),
        arrivals = math.tointeger(x[4]), finished = math.tointeger(x[5]), seconds = tonumber(x[6]) or 0,
        tokens = type(x[7]) == "number" and x[7] or nil, level_inflight = math.tointeger(x[8]),
        level_queued = math.tointeger(x[9]) }
      for _, k in ipairs({ "inflight", "queued", "arrivals", "finished", "level_inflight", "level_queued" }) do
        if not _count(b[k]) then
          return nil, _invalid(("model %s: bucket %d: %s must be a count"):format(name, i, k))
        end
      end
      r.buckets[i] = b
    end
    models[name] = r
  end
  return { since = doc.since, bucket = doc.bucket, models = models }
end

-- One model's records of several windows as one: counts summed, the buckets merged by time. In a bucket
-- where a window has none, its level after its previous bucket (what it had in flight and queued,
-- unchanged since) is added to the peak; the peaks of several windows add up, an upper bound of the peak
-- of their sum.
local function _merge(recs, bucket)
  local out = { inflight = 0, queued = 0, finished = 0, buckets = {} }
  local ats, seen = {}, {}
  for _, r in ipairs(recs) do
    out.inflight, out.queued, out.finished = out.inflight + r.inflight, out.queued + r.queued, out.finished + r.finished
    if r.last_request_at and (out.last_request_at or -math.huge) < r.last_request_at then
      out.last_request_at = r.last_request_at
    end
    for _, b in ipairs(r.buckets) do
      if not seen[b.at] then seen[b.at] = true; ats[#ats + 1] = b.at end
    end
  end
  table.sort(ats)
  local idx, lin, lq = {}, {}, {}
  for i = 1, #recs do idx[i], lin[i], lq[i] = 1, 0, 0 end
  for k, at in ipairs(ats) do
    local mb = { at = at, span = bucket, inflight = 0, queued = 0, arrivals = 0, finished = 0, seconds = 0,
      level_inflight = 0, level_queued = 0 }
    for i, r in ipairs(recs) do
      local b = r.buckets[idx[i]]
      if b and b.at == at then
        idx[i] = idx[i] + 1
        mb.inflight, mb.queued = mb.inflight + b.inflight, mb.queued + b.queued
        mb.arrivals, mb.finished, mb.seconds = mb.arrivals + b.arrivals, mb.finished + b.finished, mb.seconds + b.seconds
        if b.tokens then mb.tokens = (mb.tokens or 0) + b.tokens end
        lin[i], lq[i] = b.level_inflight or b.inflight, b.level_queued or b.queued
      else
        mb.inflight, mb.queued = mb.inflight + lin[i], mb.queued + lq[i]
      end
      mb.level_inflight, mb.level_queued = mb.level_inflight + lin[i], mb.level_queued + lq[i]
    end
    out.buckets[k] = mb
  end
  return out
end

--- Several windows as one, to read a model's load summed over them (obleth.serve.load_share: this
--- process's window and those other `obleth serve` on the same database published). The result answers
--- `view` and `names` like a window (it counts nothing). It reaches back as far as the youngest window
--- (`since`: the latest start), as one window does after a restart; the idle clock likewise: when a
--- window started after every request any of them saw, the last request is not known
--- (`last_request_at` nil, idle since that start).
---@param parts table[] windows (obleth.router.load) or imported parts ({since, models}); the first
---  gives the clock, the bucket and the span
---@param name string|nil only this model (nil: all)
---@return table a window (read only)
function M.combine(parts, name)
  local first = parts[1]
  local since = -math.huge
  for _, p in ipairs(parts) do since = math.max(since, p.since) end
  local names = {}
  if name then names[1] = name else
    local seen = {}
    for _, p in ipairs(parts) do
      for n in pairs(p.models) do if not seen[n] then seen[n] = true; names[#names + 1] = n end end
    end
  end
  local models = {}
  for _, n in ipairs(names) do
    local recs = {}
    for _, p in ipairs(parts) do recs[#recs + 1] = p.models[n] end
    if #recs > 0 then
      local m = _merge(recs, first.bucket)
      if m.last_request_at and m.last_request_at < since then m.last_request_at = nil end
      models[n] = m
    end
  end
  return setmetatable({ now = first.now, bucket = first.bucket, span = first.span, since = since, models = models },
    Load)
end

--- Forget what the window saw of a name (its model was deleted or renamed: a new model of that name
--- starts with no load). Requests still in flight or held under the name stay counted until they end.
---@param name string
function Load:forget(name)
  local m = self.models[name]
  if not m then return end
  if m.inflight == 0 and m.queued == 0 then self.models[name] = nil
  else m.buckets, m.finished = {}, 0 end
end

--- The names of the models with load seen in the window.
---@return string[]
function Load:names()
  local out = {}
  for k in pairs(self.models) do out[#out + 1] = k end
  table.sort(out)
  return out
end

return M
