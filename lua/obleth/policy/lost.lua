--- Lost replicas and resubmit backoff.
-- A slot whose last K ends (default 3) all ended without becoming healthy is
-- `lost`: not replaced until the operator clears it ("Try once more").
-- Before that, each resubmit waits base * 2^(n-1) seconds after the last end
-- (n = ends in a row without becoming healthy), capped.
local factory = require "obleth.policy.factory"
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

  --- Decide whether a slot is lost and when it may be resubmitted.
  ---@param ends {healthy: boolean, at: number, state: string|nil, job_id: any}[] the slot's recent ends, newest first
  ---@param opts {k: integer|nil, backoff_base: number|nil, backoff_max: number|nil}|nil
  ---@return {lost: boolean, failures: integer, backoff_until: number|nil, evidence: table[]}
  ---  failures = ends in a row (from the newest) that never became healthy; backoff_until is epoch
  ---  seconds (nil when the newest end was healthy or there is none); evidence = those ends
  function M.check(ends, opts)
    local k = opt(opts, "k")
    local failures, evidence = 0, {}
    for _, e in ipairs(ends or {}) do
      if e.healthy then break end
      failures = failures + 1
      evidence[#evidence + 1] = e
    end
    local until_
    if failures > 0 and ends[1].at then until_ = ends[1].at + M.backoff(failures, opts) end
    return { lost = failures >= k, failures = failures, backoff_until = until_, evidence = evidence }
  end

  return M
end

return new({ k = 3, backoff_base = 10, backoff_max = 600 })
