--- obleth.router.unavailable — why a model has no healthy replica, in words a
-- client can act on, and how long to wait before retrying (Retry-After).
--
-- Pure: facts in (the model, its managed spec, its live replicas, the
-- provisioner's check-in), a message and a delay out.
local M = {}

--- Seconds to suggest in Retry-After, by situation.
M.RETRY = { starting = 5, pending = 10, submitted = 15, unhealthy = 10, ending = 5, waiting = 10,
  stuck = 60, lost = 60, paused = 60, refused = 60, no_deployment = 60, slurm_off = 60, no_provisioner = 30 }

--- The provisioner counts as away when it has not checked in for this long (seconds; obleth.schema.thresholds).
M.PROVISIONER_STALE = require("obleth.schema.thresholds").provisioner_stale

local MAX_PARTS = 4

-- nil for nil and JSON null (cjson.null is a light userdata)
local _null = require("obleth.util.json").nonnull

local function _job(r)
  local j = _null(r.job_id)
  if not j then return "its job" end
  return "job " .. tostring(math.tointeger(j) or j)
end

local function _on(r)
  local node = _null(r.node)
  return node and (" on " .. node) or ""
end

-- One sentence and a retry delay for one live replica.
local function _replica(r, model_id)
  local st = r.state
  if st == "pending" then
    return "a replica is waiting to be submitted to Slurm", M.RETRY.pending
  elseif st == "submitted" then
    local problem, reason = _null(r.problem), _null(r.pending_reason)
    if problem then
      return ("%s is pending in Slurm and may never start: %s"):format(_job(r), problem), M.RETRY.stuck
    end
    if reason and reason ~= "None" then
      return ("%s is pending in Slurm (reason: %s)"):format(_job(r), reason), M.RETRY.submitted
    end
    return ("%s is queued in Slurm"):format(_job(r)), M.RETRY.submitted
  elseif st == "starting" then
    return ("%s is running%s and starting (health check not passing yet)"):format(_job(r), _on(r)), M.RETRY.starting
  elseif st == "unhealthy" then
    return ("%s%s is failing its health checks"):format(_job(r), _on(r)), M.RETRY.unhealthy
  elseif st == "ending" then
    return ("%s%s is ending"):format(_job(r), _on(r)), M.RETRY.ending
  elseif st == "lost" then
    return ("replica %s is lost (its jobs kept ending before becoming healthy; "
      .. "POST /api/v1/models/%s/replicas/clear-lost to try once more)"):format(tostring(r.slot or "?"),
        tostring(model_id)), M.RETRY.lost
  end
  return nil
end

local ORDER = { starting = 1, unhealthy = 2, ending = 3, submitted = 4, pending = 5, lost = 6 }

--- Explain why `model` has no endpoint to send to.
---@param f {model: {id: integer, name: string}, spec: table|nil, replicas: table[]|nil,
---  slurm_enabled: boolean|nil, checked_in_at: number|nil, now: number, wake: table|nil}
---  wake: the scale policy's `wake` for an autoscaled model ({job_id, reason, estimated_start,
---  retry_after}): the answer names the job on its way and Retry-After is the policy's
---@return string message, integer retry_after seconds (the shortest any part suggests),
---  string reason the short code of the first part
function M.explain(f)
  local model = f.model
  local head = ("model %q has no healthy replica yet"):format(model.name)
  local spec = f.spec
  if not spec then
    return head .. ": it has no deployment (no managed spec) and no endpoint; an operator must launch it",
      M.RETRY.no_deployment, "no_deployment"
  end
  local parts, retry, reason = {}, nil, nil
  local function add(text, secs, code)
    parts[#parts + 1] = text
    if not retry or secs < retry then retry = secs end
    reason = reason or code
  end
  if spec.enabled == false then add("its deployment is paused (enabled: false)", M.RETRY.paused, "paused") end
  if f.slurm_enabled == false then add("Slurm is turned off in the settings", M.RETRY.slurm_off, "slurm_off") end
  local perr = _null(spec.provision_error)
  if type(perr) == "table" and _null(perr.message) then
    add("Slurm refused the job: " .. tostring(perr.message), M.RETRY.refused, "refused")
  end
  local reps = {}
  for _, r in ipairs(f.replicas or {}) do
    if ORDER[r.state] then reps[#reps + 1] = r end
  end
  local wake = f.wake
  local seen_at = _null(f.checked_in_at)
  local provisioner_here = seen_at and not (f.now and f.now - seen_at > M.PROVISIONER_STALE)
  if type(spec.autoscale) == "table" and type(wake) == "table" and #parts == 0 and provisioner_here then
    -- an autoscaled model at zero (or still waking): what is on its way, and when Slurm expects it
    local text
    local job = _null(wake.job_id)
    local start = _null(wake.estimated_start)
    if job then
      local st
      for _, r in ipairs(reps) do if _null(r.job_id) == job then st = r.state end end
      text = ("job %s %s"):format(tostring(math.tointeger(job) or job), st == "starting" and "is loading the model"
        or ("pending" .. (_null(wake.reason) and _null(wake.reason) ~= "None" and (" (" .. wake.reason .. ")") or "")))
      if start and st ~= "starting" then
        text = text .. (", estimated start %s"):format(os.date("!%H:%M UTC", math.floor(start)))
      end
    else
      text = "the provisioner submits a job on its next pass"
    end
    return ("model %q is scaled to zero, waking: %s"):format(model.name, text),
      math.max(1, math.floor(_null(wake.retry_after) or M.RETRY.waiting)), "waking"
  end
  table.sort(reps, function(a, b)
    if ORDER[a.state] ~= ORDER[b.state] then return ORDER[a.state] < ORDER[b.state] end
    return (a.slot or 0) < (b.slot or 0)
  end)
  local shown = 0
  for _, r in ipairs(reps) do
    local text, secs = _replica(r, model.id)
    if text then
      if shown < MAX_PARTS then add(text, secs, r.state) end
      shown = shown + 1
    end
  end
  if shown > MAX_PARTS then parts[#parts + 1] = ("%d more replicas"):format(shown - MAX_PARTS) end
  if #reps == 0 and spec.enabled ~= false and not perr then
    add("it is staged and waiting for the provisioner to submit a job", M.RETRY.waiting, "waiting")
  end
  local seen = _null(f.checked_in_at)
  if not seen then
    add("the provisioner has never checked in (is obleth-provisioner running?)", M.RETRY.no_provisioner,
      "no_provisioner")
  elseif f.now and f.now - seen > M.PROVISIONER_STALE then
    add(("the provisioner last checked in %d s ago"):format(math.floor(f.now - seen)), M.RETRY.no_provisioner,
      "no_provisioner")
  end
  if #parts == 0 then
    add("waiting for a replica to pass its health check", M.RETRY.waiting, "waiting")
  end
  return head .. ": " .. table.concat(parts, "; "), retry, reason
end

return M
