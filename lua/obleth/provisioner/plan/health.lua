--- The pass's third step, health: which replicas are due a check, and what the results mean.
--
-- due(state, last_checked, now)   the replicas whose check interval has passed
-- judge(row, result, h, now)      one replica after one check: healthy, still starting, unhealthy,
--                                 or restarted (past its startup grace, or unhealthy past its grace)
-- apply(state, results, now)      judge every checked replica; the endpoints (healthy replicas only)
--                                 and the cancels the results ask for
--
-- Pure: no I/O (obleth.provisioner runs the checks). Times are epoch seconds; `h` is the spec's
-- `health` (docs/managed-spec.md): startup_grace s (600), failure_threshold checks (3), interval s
-- (10), path ("/health"), timeout s (5).
local WHY = require "obleth.job.cancel_why"

local M = {}

-- replica states whose job runs: they have an endpoint to check
local RUNS = { starting = true, healthy = true, unhealthy = true }

local function said(res) return res.error or ("HTTP " .. tostring(res.status)) end

--- One replica after one check (the row is changed in place).
---@param row table a replica row of the plan
---@param res {ok: boolean, status: integer|nil, error: string|nil}
---@param h table the spec's health settings
---@param now number
---@return string|nil why the replica is to be cancelled (obleth.job.cancel_why), or nil
function M.judge(row, res, h, now)
  local grace = h.startup_grace or 600
  row.last_check = { ok = res.ok, status = res.status, error = res.error, at = now }
  row._touched = true
  if row.state == "starting" then
    if res.ok then
      row.state, row.healthy_at, row.check_failures, row.problem = "healthy", now, 0, nil
    elseif now - (row.started_at or now) > grace then
      row.problem = ("not healthy %d s after start (startup grace %d s): %s"):format(
        math.floor(now - (row.started_at or now)), grace, said(res))
      row.state, row.cancel_why = "ending", WHY.STARTUP_GRACE
      return row.cancel_why
    end
  elseif row.state == "healthy" then
    if res.ok then
      row.check_failures = 0
    else
      row.check_failures = (row.check_failures or 0) + 1
      if row.check_failures >= (h.failure_threshold or 3) then
        row.state, row.unhealthy_since = "unhealthy", now
        row.problem = "health check failing: " .. said(res)
      end
    end
  elseif row.state == "unhealthy" then
    if res.ok then
      row.state, row.check_failures, row.problem, row.unhealthy_since = "healthy", 0, nil, nil
    elseif now - (row.unhealthy_since or now) > grace then
      row.state, row.problem = "ending", "unhealthy for longer than the grace period"
      row.cancel_why = WHY.UNHEALTHY
      return row.cancel_why
    end
  end
  return nil
end

--- Apply health-check results.
---@param state table the result of reconcile (rows are updated in place)
---@param results table<string, {ok: boolean, status: integer|nil, error: string|nil}> by nonce
---@param now number
---@return table endpoints model_id → array of endpoint URLs (healthy replicas only)
---@return table cancels array of {row, job_id, why} for replicas unhealthy past their grace
function M.apply(state, results, now)
  local endpoints, cancels = {}, {}
  for _, mm in ipairs(state.models) do
    local h = (mm.spec or {}).health or {}
    local eps = {}
    for _, row in ipairs(mm.rows) do
      local res = results[row.nonce]
      local why = res and M.judge(row, res, h, now)
      if why then cancels[#cancels + 1] = { row = row, job_id = row.job_id, why = why } end
      if row.state == "healthy" and row.endpoint then eps[#eps + 1] = row.endpoint end
    end
    table.sort(eps)
    endpoints[tostring(mm.id)] = eps
  end
  return endpoints, cancels
end

--- The replicas due for a health check: running, with an endpoint, and
--- whose interval has passed since their last check.
---@param state table
---@param last_checked table<string, number> nonce → epoch of the last check
---@param now number
---@return table[] {row, url, timeout}
function M.due(state, last_checked, now)
  local due = {}
  for _, mm in ipairs(state.models) do
    local h = (mm.spec or {}).health or {}
    local interval = h.interval or 10
    for _, row in ipairs(mm.rows) do
      if RUNS[row.state] and row.endpoint then
        local last = last_checked[row.nonce]
        if not last or now - last >= interval - 0.05 then
          due[#due + 1] = { row = row, url = row.endpoint .. (h.path or "/health"), timeout = h.timeout or 5 }
        end
      end
    end
  end
  return due
end

return M
