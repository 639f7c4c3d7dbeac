--- Lost replicas and resubmit backoff: the whole decision, from the facts of a slot's ends.
-- A slot whose last K ends that count (default 3) all ended without becoming healthy is `lost`:
-- not replaced until the operator clears it ("Try once more"). Before that, each resubmit waits
-- base * 2^(n-1) seconds after the last end (n = counted ends in a row without becoming healthy),
-- capped.
--
-- Which ends count is decided here (M.counts), and so is how many ends per slot the rule reads
-- (M.window: the provisioner asks the Management API's snapshot for that many). An end does not
-- count when it says nothing about the model: a failed bind on a port someone else held (exit
-- code `port_clash_exit`, 98 = EADDRINUSE), or a cancel obleth or the operator caused for a reason
-- of their own (a restart, a pause, a scale-down, a rollover: every cancel_why but the health
-- checks' own, `failed_start_cancels`). Such an end is skipped: it neither counts nor breaks the row.
local factory = require "obleth.policy.factory"
local WHY = require "obleth.job.cancel_why"
local function new(defaults)
  local M = factory.instance(defaults, new)

  local opt = factory.option(M)

  --- Backoff before the n-th resubmit in a row.
  ---@param n integer ends in a row without becoming healthy (0 = none)
  ---@param opts {backoff_base: number|nil, backoff_max: number|nil}|nil seconds
  ---@return number seconds (0 when n == 0)
  function M.backoff(n, opts)
    if n <= 0 then return 0 end
    local base, cap = opt(opts, "backoff_base"), opt(opts, "backoff_max")
    if n > 60 then return cap end
    return math.min(base * 2 ^ (n - 1), cap)
  end

  --- How many of a slot's most recent ends the rule reads (counted or not): k, plus `slack` more
  --- so that ends which do not count (a restart, a port clash) do not hide failures behind them.
  ---@param opts {k: integer|nil, slack: integer|nil}|nil
  ---@return integer ends per slot
  function M.window(opts)
    return math.tointeger(opt(opts, "k") + opt(opts, "slack")) or 10
  end

  --- Whether an end counts toward lost and backoff, and why not when it does not.
  ---@param e {healthy: boolean, exit_code: integer|nil, cancel_why: string|nil} one end
  ---@param opts {port_clash_exit: integer|nil, failed_start_cancels: table<string, boolean>|nil}|nil
  ---@return boolean counts
  ---@return string|nil why "port clash (exit 98)" or "cancelled: <cancel_why>" when it does not count
  function M.counts(e, opts)
    local clash = opt(opts, "port_clash_exit")
    if clash and e.exit_code == clash then return false, ("port clash (exit %d)"):format(clash) end
    local why = e.cancel_why
    if type(why) == "string" and not opt(opts, "failed_start_cancels")[why] then
      return false, "cancelled: " .. why
    end
    return true
  end

  --- Decide whether a slot is lost and when it may be resubmitted.
  ---@param ends {healthy: boolean, at: number, exit_code: integer|nil, cancel_why: string|nil, state: string|nil,
  ---  job_id: any}[] the slot's recent ends, newest first, counted or not (the first M.window(opts) are read)
  ---@param opts {k: integer|nil, slack: integer|nil, backoff_base: number|nil, backoff_max: number|nil}|nil
  ---@return {lost: boolean, failures: integer, backoff_until: number|nil, evidence: table[], skipped: table[]}
  ---  failures = counted ends in a row (from the newest) that never became healthy; backoff_until is
  ---  epoch seconds after the newest counted end (nil when it was healthy or there is none); evidence =
  ---  those failed ends; skipped = {end, why} for each end read that did not count
  function M.check(ends, opts)
    local k, n = opt(opts, "k"), M.window(opts)
    local failures, evidence, skipped, newest = 0, {}, {}, nil
    for i, e in ipairs(ends or {}) do
      if i > n then break end
      local counts, why = M.counts(e, opts)
      if not counts then
        skipped[#skipped + 1] = { ["end"] = e, why = why }
      else
        newest = newest or e
        if e.healthy then break end
        failures = failures + 1
        evidence[#evidence + 1] = e
      end
    end
    local until_
    if failures > 0 and newest.at then until_ = newest.at + M.backoff(failures, opts) end
    return { lost = failures >= k, failures = failures, backoff_until = until_, evidence = evidence,
      skipped = skipped }
  end

  return M
end

return new({ k = 3, slack = 7, backoff_base = 10, backoff_max = 600, port_clash_exit = 98,
  failed_start_cancels = WHY.failed_start() })
