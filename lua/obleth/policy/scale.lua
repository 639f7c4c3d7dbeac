--- Autoscaling: how many replicas a model with `autoscale` in its spec wants, from its recent load.
--
--   demand  = in-flight + queued requests now; at least rate × mean latency when both are known
--             (requests shorter than a sampling step still count)
--   need    = ceil(demand / target_inflight); with `target_tokens_per_s` set and the engine
--             reporting tokens, at least ceil(tokens_per_s / target_tokens_per_s)
--   up      : need > current → desired = need at once (capped by max_replicas). Replicas starting or
--             pending in Slurm's queue count as current: capacity already on its way is not asked twice.
--   down    : the peak demand of every window sample younger than `scale_down_after` (and now) must
--             fit in fewer replicas at `down_utilization` (0.8) of target_inflight: desired =
--             ceil(peak / (target_inflight × down_utilization)). Up at once at target, down only after
--             a whole window below 80 % of it: this band is the hysteresis, so a load that hovers at a
--             boundary never adds and removes a replica by turns, and a burst holds its replicas for
--             scale_down_after after it ends. A window that does not reach back scale_down_after
--             (obleth serve just started) never scales down.
--   floor   : min_replicas, but never below 1 while the model had a request within
--             `idle_to_zero_after`; with min_replicas = 0, no request for idle_to_zero_after seconds
--             and nothing in flight or queued → 0 (scaled to zero).
--   wake    : at zero with a request waiting → at least 1 at once; `wake` names the soonest replica
--             on its way (job, Slurm's pending reason, estimated start) and the Retry-After for a
--             request that waited longer than the router holds it.
-- Times are epoch seconds; every setting is in seconds except target_inflight (requests) and
-- target_tokens_per_s. The spec's `autoscale` values win over DEFAULTS; DEFAULTS fill the ones a
-- spec leaves out and hold the knobs the spec does not have (down_utilization, target_tokens_per_s,
-- retry_after_unknown).
local factory = require "obleth.policy.factory"
local function new(defaults)
  local M = factory.instance(defaults, new)

  --- The autoscale settings in force: the spec's values over DEFAULTS (and opts over DEFAULTS).
  ---@param autoscale table|nil the spec's autoscale {min_replicas, max_replicas, target_inflight,
  ---  scale_down_after, idle_to_zero_after}
  ---@param opts table|nil settings that replace DEFAULTS for this call
  ---@return table settings every key of DEFAULTS, the spec's where it gives one
  function M.settings(autoscale, opts)
    local s = {}
    for k, v in pairs(M.DEFAULTS) do s[k] = v end
    for k, v in pairs(opts or {}) do s[k] = v end
    for k, v in pairs(autoscale or {}) do s[k] = v end
    return s
  end

  --- Demand now, in requests: in-flight + queued, at least rate × latency when both are known.
  ---@param load {inflight: integer|nil, queued: integer|nil, rate: number|nil, latency: number|nil}
  ---  rate in requests per second over the window, latency the mean seconds of a finished request
  ---@return number
  function M.demand(load)
    local d = (load.inflight or 0) + (load.queued or 0)
    if load.rate and load.latency then d = math.max(d, load.rate * load.latency) end
    return d
  end

  --- Replicas needed for a demand right now (no floor, no cap).
  ---@param demand number requests
  ---@param load table the load (tokens_per_s is read when settings.target_tokens_per_s is set)
  ---@param s table M.settings(...)
  ---@return integer
  function M.need(demand, load, s)
    local n = math.ceil(demand / s.target_inflight)
    if s.target_tokens_per_s and load.tokens_per_s then
      n = math.max(n, math.ceil(load.tokens_per_s / s.target_tokens_per_s))
    end
    return n
  end

  --- The peak demand over the samples younger than `since`, and whether the samples reach back that far.
  ---@param samples {at: number, inflight: integer|nil, queued: integer|nil}[]|nil window buckets, any
  ---  order; `at` is the bucket's start, inflight / queued its highest values
  ---@param since number epoch seconds
  ---@return number peak
  ---@return boolean covered a sample starts at or before `since`
  function M.peak(samples, since)
    local peak, covered = 0, false
    for _, x in ipairs(samples or {}) do
      if x.at <= since then covered = true end
      if x.at + (x.span or 0) > since or x.at >= since then
        peak = math.max(peak, (x.inflight or 0) + (x.queued or 0))
      end
    end
    return peak, covered
  end

  -- a value as data: JSON null (a light userdata in decoded rows) and nil are both nothing
  local function val(v) if type(v) == "userdata" then return nil end return v end

  -- replica states that hold or wait for a job (a replica on its way out does not count)
  local LIVE = { pending = true, submitted = true, starting = true, healthy = true, unhealthy = true }
  local SERVING = { healthy = true }

  --- Decide the replicas a model wants.
  ---@param f {now: number, autoscale: table|nil, replicas: table[]|nil, load: table|nil}
  ---  replicas: the model's replica rows {slot, state, job_id, pending_reason, slurm = {reason,
  ---  start_time, estimated}} (obleth.provisioner.plan's rows); load: {inflight, queued, rate (req/s),
  ---  latency (s), tokens_per_s, last_request_at, observed_since, started_at, samples}; observed_since
  ---  is how far back the window reaches (a time without a sample had no load: obleth.router.load keeps
  ---  buckets with load only); started_at is when it began counting, the last request when there has
  ---  been none (observed_since when not given)
  ---@param opts table|nil settings over DEFAULTS
  ---@return {desired: integer, current: integer, serving: integer, change: "up"|"down"|"wake"|"to_zero"|
  ---  "hold"|"none", reason: string, wake: table|nil, evidence: table}
  ---  wake {job_id, reason, estimated_start, retry_after (s)} when nothing serves and a request waits;
  ---  evidence {settings, demand, need, peak, window_covered, idle_seconds, inflight, queued, rate,
  ---  tokens_per_s, floor, starting = {{slot, job_id, state, reason, estimated_start}}}
  function M.decide(f, opts)
    local s = M.settings(f.autoscale, opts)
    local load = f.load or {}
    local now = f.now
    local current, serving, starting = 0, 0, {}
    for _, r in ipairs(f.replicas or {}) do
      if LIVE[r.state] then
        current = current + 1
        if SERVING[r.state] then
          serving = serving + 1
        else
          local sl = type(r.slurm) == "table" and r.slurm or {}
          local start = val(sl.start_time)
          starting[#starting + 1] = { slot = r.slot, job_id = val(r.job_id), state = r.state,
            reason = val(sl.reason) or val(r.pending_reason),
            estimated_start = type(start) == "number" and start or nil }
        end
      end
    end
    table.sort(starting, function(a, b)
      local x, y = a.estimated_start or math.huge, b.estimated_start or math.huge
      if x ~= y then return x < y end
      return (tonumber(a.slot) or 0) < (tonumber(b.slot) or 0)
    end)
    local demand = M.demand(load)
    local need = M.need(demand, load, s)
    local peak, covered = M.peak(load.samples, now - s.scale_down_after)
    -- a window with buckets only where there was load reaches back to where it was begun
    if load.observed_since and load.observed_since <= now - s.scale_down_after then covered = true end
    peak = math.max(peak, demand)
    local down_need = math.ceil(peak / (s.target_inflight * s.down_utilization))
    if s.target_tokens_per_s and load.tokens_per_s then
      down_need = math.max(down_need, math.ceil(load.tokens_per_s / (s.target_tokens_per_s * s.down_utilization)))
    end
    -- no request seen: idle since the window began counting (started_at), which the span does not cut
    local last = load.last_request_at or load.started_at or load.observed_since
    local idle = last and (now - last) or nil
    local floor = s.min_replicas
    local asleep = s.min_replicas == 0 and demand == 0 and idle ~= nil and idle >= s.idle_to_zero_after
    if floor == 0 and not asleep then floor = 1 end
    -- at zero, only a request wakes the model (a new window after a restart is no request)
    if s.min_replicas == 0 and current == 0 and demand == 0 then floor = 0 end

    local ev = { settings = s, demand = demand, need = need, peak = peak, down_need = down_need,
      window_covered = covered, idle_seconds = idle, inflight = load.inflight or 0, queued = load.queued or 0,
      rate = load.rate, tokens_per_s = load.tokens_per_s, floor = floor, starting = starting }
    local desired, change, reason
    local function clamp(n) return math.max(floor, math.min(s.max_replicas, n)) end

    if current == 0 and demand > 0 then
      desired, change = clamp(math.max(1, need)), "wake"
      reason = ("%g request(s) waiting with no replica: wake %d"):format(demand, desired)
    elseif need > current and current < s.max_replicas then
      desired = clamp(need)
      reason = ("demand %g > %d replica(s) × target_inflight %d"):format(demand, current, s.target_inflight)
      if need > s.max_replicas then reason = reason .. ("; capped at max_replicas %d"):format(s.max_replicas) end
    elseif current < floor then
      desired = floor
      reason = ("below the floor %d (min_replicas %d)"):format(floor, s.min_replicas)
    elseif current > s.max_replicas then
      desired = s.max_replicas
      reason = ("above max_replicas %d"):format(s.max_replicas)
    elseif asleep and current > 0 then
      desired, change = 0, "to_zero"
      reason = ("no request for %d s (idle_to_zero_after %d s)"):format(math.floor(idle), s.idle_to_zero_after)
    elseif clamp(down_need) < current then
      if not covered then
        desired, change = current, "hold"
        reason = ("the load window does not reach back scale_down_after %d s yet"):format(s.scale_down_after)
      else
        desired = clamp(down_need)
        reason = ("peak demand %g over the last %d s fits %d replica(s) at %d%% of target_inflight %d"):format(
          peak, s.scale_down_after, down_need, math.floor(s.down_utilization * 100 + 0.5), s.target_inflight)
        if desired > down_need then reason = reason .. ("; floor %d"):format(floor) end
      end
    else
      desired = current
      if current == 0 then
        reason = idle and idle >= 60
          and ("scaled to zero after %s idle — wakes on the next request"):format(idle >= 120
            and (math.floor(idle / 60) .. " min") or (math.floor(idle) .. " s"))
          or "scaled to zero — wakes on the next request"
      elseif need >= current and current == s.max_replicas then
        reason = ("demand %g: at max_replicas %d"):format(demand, s.max_replicas)
      elseif down_need >= current then
        reason = ("peak demand %g over the last %d s needs %d replica(s) at %d%% of target_inflight %d"):format(
          peak, s.scale_down_after, down_need, math.floor(s.down_utilization * 100 + 0.5), s.target_inflight)
      else
        reason = ("at the floor %d%s"):format(floor,
          s.min_replicas == 0 and (" until idle_to_zero_after %d s"):format(s.idle_to_zero_after) or "")
      end
    end
    if not change then
      change = desired > current and "up" or (desired < current and "down" or "none")
    end

    local wake
    if serving == 0 and demand > 0 then
      local soonest = starting[1]
      wake = { job_id = soonest and soonest.job_id, reason = soonest and soonest.reason,
        estimated_start = soonest and soonest.estimated_start }
      local eta = soonest and soonest.estimated_start and (soonest.estimated_start - now)
      wake.retry_after = math.max(1, math.floor(eta and eta > 0 and eta or s.retry_after_unknown))
    end
    return { desired = desired, current = current, serving = serving, change = change, reason = reason,
      wake = wake, evidence = ev }
  end

  return M
end

return new({ min_replicas = 1, max_replicas = 1, target_inflight = 4, scale_down_after = 300,
  idle_to_zero_after = 1800, down_utilization = 0.8, retry_after_unknown = 30 })
