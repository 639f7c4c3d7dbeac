--- Why obleth cancelled a replica's job: the words it stores in `cancel_why` (docs/replicas-and-failures.md),
-- written here once. The provisioner's pass writes them; `obleth.policy.lost` counts the health checks'
-- two toward a lost slot, and `obleth.policy.failures` treats every other one as an end on purpose,
-- not a failure.
local M = {}

M.STARTUP_GRACE = "startup grace exceeded" -- never healthy within health.startup_grace
M.UNHEALTHY = "unhealthy past grace"       -- failing checks past the grace
M.SURPLUS = "surplus replica"              -- the spec asks for fewer replicas
M.SCALED_DOWN = "scaled down"              -- the scale policy asks for fewer replicas
M.DELETED = "spec deleted"
M.PAUSED = "spec paused"
M.SLURM_OFF = "Slurm turned off"
M.NO_SUCH_MODEL = "no such model"          -- the job's tag names a model the Management API does not know
M.DUPLICATE = "duplicate replica"          -- another job already serves the slot
M.RESTART = "restart asked"                -- POST /api/v1/replicas/{id}/restart
M.SLOT_LOST = "slot lost"                  -- the lost policy gave up on the slot
M.ROLLOVER = "walltime rollover"           -- the successor is healthy; the old job drains

--- The cancels that end a failing start (the health checks'): a set, reason -> true. Policies take a
--- copy as their default (an override may pass its own).
---@return table<string, boolean>
function M.failed_start()
  return { [M.STARTUP_GRACE] = true, [M.UNHEALTHY] = true }
end

return M
