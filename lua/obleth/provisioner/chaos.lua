--- Crash points for `make chaos` (spec/chaos/run.lua): test-only, inert unless asked for.
--
-- OBLETH_CHAOS="POINT:N" makes the provisioner kill itself with SIGKILL (no cleanup, no lease
-- release, no report: a crash) the Nth time one pass reaches POINT; N defaults to 1. The variable
-- is read once, when the daemon starts (obleth.cli.provisioner); unset or empty, every `point` call
-- is a no-op. The chaos driver picks the points and counts at random (from its printed seed), so a
-- run is repeatable; it also SIGKILLs the provisioner from outside at random moments, which covers
-- the places between these points.
--
-- The points, in the order a pass reaches them (obleth.provisioner):
--   pass_start      before the lease is acquired or renewed
--   after_lease     the lease is held; nothing read yet
--   after_snapshot  the snapshot and the job listing are read; nothing decided
--   before_record   replicas to submit are decided, not yet recorded (POST /provisioner/submits)
--   after_record    recorded under the lease, nothing submitted
--   before_submit   before each sbatch through slurmrestd
--   after_submit    Slurm accepted the job; its id is known only to this process
--   before_cancel   before each cancel (surplus, paused, deleted, unhealthy)
--   after_cancel    Slurm took the cancel; the report saying so is not sent
--   before_report   the pass is decided and done, not reported
--   after_report    reported; before the wait for the next pass
local log = require "obleth.log"
local sys = require "obleth.sys"

local M = {}

M.POINTS = { "pass_start", "after_lease", "after_snapshot", "before_record", "after_record", "before_submit",
  "after_submit", "before_cancel", "after_cancel", "before_report", "after_report" }
local known = {}
for _, p in ipairs(M.POINTS) do known[p] = true end

local target, nth, reached = nil, nil, 0

--- Arm the crash point named by `value` ("POINT" or "POINT:N"); nil or "" disarms.
---@param value string|nil
---@return true|nil ok, table|nil err {code = "invalid", message, field = "OBLETH_CHAOS"}
function M.configure(value)
  target, nth, reached = nil, nil, 0
  if value == nil or value == "" then return true end
  local name, n = value:match("^([%w_]+):?(%d*)$")
  if not name or not known[name] or (n ~= "" and tonumber(n) < 1) then
    return nil, { code = "invalid", field = "OBLETH_CHAOS", message = ("OBLETH_CHAOS=%s: expected POINT or "
      .. "POINT:N (N >= 1), POINT one of %s"):format(value, table.concat(M.POINTS, ", ")) }
  end
  target, nth = name, n ~= "" and math.tointeger(tonumber(n)) or 1
  log.warn("chaos_armed", { point = target, n = nth, note = "test-only: this process will SIGKILL itself" })
  return true
end

--- A crash point: SIGKILL this process when it is the armed point's Nth visit; otherwise nothing.
---@param name string one of M.POINTS
function M.point(name)
  if name ~= target then return end
  reached = reached + 1
  if reached < nth then return end
  log.warn("chaos_kill", { point = name, n = reached })
  sys.kill(sys.getpid(), "KILL")
end

return M
