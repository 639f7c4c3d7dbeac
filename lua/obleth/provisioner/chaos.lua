--- The pass's test-only hooks, in one place: the crash points of `make chaos` (spec/chaos/run.lua) and
--- the faults of the integration specs. Inert unless asked for: `obleth.provisioner`'s pass calls
--- `M.at(point, facts)` where a pass may be hurt, and nothing happens unless configured.
--
-- OBLETH_CHAOS="POINT:N" makes the provisioner kill itself with SIGKILL (no cleanup, no lease
-- release, no report: a crash) the Nth time one pass reaches POINT; N defaults to 1. The chaos
-- driver picks the points and counts at random (from its printed seed), so a run is repeatable; it
-- also SIGKILLs the provisioner from outside at random moments, which covers the places between
-- these points.
--
-- The crash points, in the order a pass reaches them (obleth.provisioner):
--   pass_start      before the lease is acquired or renewed
--   after_lease     the lease is held; nothing read yet
--   after_snapshot  the snapshot and the job listing are read; nothing decided
--   before_record   replicas to submit are decided, not yet recorded (POST /provisioner/submits)
--   after_record    recorded under the lease, nothing submitted
--   before_cancel   before each cancel (surplus, paused, deleted, unhealthy)
--   after_cancel    Slurm took the cancel; the report saying so is not sent
--   before_submit   before each sbatch through slurmrestd
--   after_submit    Slurm accepted the job; its id is known only to this process
--   before_report   the pass is decided and done, not reported
--   after_report    reported; before the wait for the next pass
--
-- OBLETH_FAULT=NAME (the integration specs, spec/integration/provisioner_spec.lua and
-- provisioner_lease_spec.lua) does one thing to the process at a point:
--   stop_before_submit  at before_submits (the submits are decided, cancels sent, none submitted):
--                       SIGSTOP itself, as a paused provisioner would be
--   exit_after_submit   at after_submit: exit 137 at once (Slurm has the job, nobody else knows it)
--   pause_after_submit  at after_submit: sleep 3 s (a slow pass, long enough for a SIGTERM)
-- Both variables are read once, when the daemon starts (obleth.cli.provisioner).
local log = require "obleth.log"
local sys = require "obleth.sys"
local loop = require "obleth.loop"

local M = {}

M.POINTS = { "pass_start", "after_lease", "after_snapshot", "before_record", "after_record", "before_submit",
  "after_submit", "before_cancel", "after_cancel", "before_report", "after_report" }
local known = {}
for _, p in ipairs(M.POINTS) do known[p] = true end

--- The faults by name: the point each acts at and what it does there (facts: what the pass passed).
M.FAULTS = {
  stop_before_submit = { at = "before_submits", act = function(facts)
    log.warn("fault_injection", { point = "stop_before_submit", generation = facts.generation })
    sys.kill(sys.getpid(), "STOP")
  end },
  exit_after_submit = { at = "after_submit", act = function(facts)
    log.warn("fault_injection", { point = "exit_after_submit", job_id = facts.job_id })
    sys.exit_now(137)
  end },
  pause_after_submit = { at = "after_submit", act = function(facts)
    log.warn("fault_injection", { point = "pause_after_submit", job_id = facts.job_id })
    loop.sleep(3)
  end },
}

local target, nth, reached, fault = nil, nil, 0, nil

local function names(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out)
  return table.concat(out, ", ")
end

--- Arm the crash point named by `value` ("POINT" or "POINT:N") and the fault named by `fault_name`;
--- nil or "" leaves each off.
---@param value string|nil OBLETH_CHAOS
---@param fault_name string|nil OBLETH_FAULT
---@return true|nil ok, table|nil err {code = "invalid", message, field = "OBLETH_CHAOS"|"OBLETH_FAULT"}
function M.configure(value, fault_name)
  target, nth, reached, fault = nil, nil, 0, nil
  if fault_name ~= nil and fault_name ~= "" then
    if not M.FAULTS[fault_name] then
      return nil, { code = "invalid", field = "OBLETH_FAULT", message = ("OBLETH_FAULT=%s: expected one of %s")
        :format(fault_name, names(M.FAULTS)) }
    end
    -- not logged here: the specs wait for the fault's own line (its point), which says it acted
    fault = M.FAULTS[fault_name]
  end
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

--- A point of the pass: SIGKILL this process when it is the armed crash point's Nth visit; run the
--- armed fault when it acts here; otherwise nothing.
---@param name string one of M.POINTS, or a fault's point ("before_submits")
---@param facts table|nil what the fault logs {job_id, generation}
function M.at(name, facts)
  if fault and fault.at == name then fault.act(facts or {}) end
  if name ~= target then return end
  reached = reached + 1
  if reached < nth then return end
  log.warn("chaos_kill", { point = name, n = reached })
  sys.kill(sys.getpid(), "KILL")
end

return M
