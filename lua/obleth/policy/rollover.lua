--- Walltime rollover: when to start a healthy replica's successor so that it
-- is healthy before the old job's time limit ends.
--   ends_at = started_at + time_limit * 60
--   margin  = measured start-up (healthy_at - started_at) + policy margin
--             (DEFAULTS.margin seconds; a spec's rollover_margin, in minutes, overrides)
--   at      = ends_at - margin; start the successor once now >= at.
local factory = require "obleth.policy.factory"
local function new(defaults)
  local M = factory.instance(defaults, new)

  --- Plan the rollover of one replica.
  ---@param r {time_limit: number, started_at: number, healthy_at: number|nil, now: number,
  ---  rollover_margin: number|nil} time_limit and rollover_margin in minutes, times epoch seconds
  ---@param opts {margin: number|nil}|nil policy margin in seconds (default 300)
  ---@return {start_successor: boolean, at: number|nil, ends_at: number|nil, margin: number|nil,
  ---  evidence: table} evidence: {startup_seconds, policy_margin, margin_source, reason?}
  function M.plan(r, opts)
    local policy_margin = (opts and opts.margin) or M.DEFAULTS.margin
    local source = "policy"
    if r.rollover_margin ~= nil then
      policy_margin, source = r.rollover_margin * 60, "spec"
    end
    local ev = { policy_margin = policy_margin, margin_source = source }
    if r.time_limit == nil or r.time_limit == math.huge then
      ev.reason = "no time limit"
      return { start_successor = false, evidence = ev }
    end
    if r.started_at == nil or r.healthy_at == nil then
      ev.reason = "not healthy yet"
      return { start_successor = false, evidence = ev }
    end
    local startup = math.max(0, r.healthy_at - r.started_at)
    ev.startup_seconds = startup
    local ends_at = r.started_at + r.time_limit * 60
    local margin = startup + policy_margin
    local at = ends_at - margin
    if at <= r.healthy_at then ev.reason = "time limit shorter than start-up plus margin" end
    return { start_successor = r.now >= at, at = at, ends_at = ends_at, margin = margin, evidence = ev }
  end

  return M
end

return new({ margin = 300 })
