--- The pass's first step, jobs: what Slurm's one job listing says about each replica.
--
-- index(jobs, instance)         the listing's jobs by the nonce of their tag (this installation's only),
--                               and the older job of a nonce that shows twice, to cancel
-- adopt(models, by_nonce, now)  rows for tagged live jobs no replica records (a submit whose report
--                               never came), and the jobs of models the store no longer has, to cancel
-- follow(row, found, f)         one replica's row after its job: submitted, starting, requeued,
--                               ending, ended (with Slurm's end state), and what the pass reports of it
-- step(models, f)               the three above over every model: the step as the driver runs it
--
-- Pure: no I/O; the rows given are the plan's own copies and are changed in place. Times are epoch
-- seconds. Used by obleth.provisioner.plan.reconcile.
local WHY = require "obleth.job.cancel_why"
local tag = require "obleth.job.tag"
local never_starts = require("obleth.slurm.submit").never_starts

local M = {}

--- Slurm job states in which the job still holds (or waits for) resources.
M.LIVE = { PENDING = true, RUNNING = true, CONFIGURING = true, SUSPENDED = true, REQUEUED = true,
  RESIZING = true, SIGNALING = true, STAGE_OUT = true, REQUEUE_HOLD = true, REQUEUE_FED = true }
--- Slurm job states of a job that runs (has its node).
M.STARTED = { RUNNING = true, CONFIGURING = true, SIGNALING = true, STAGE_OUT = true }
-- states of a job waiting in the queue again, or still: the replica is out of the endpoints
local WAITING = { PENDING = true, REQUEUED = true, SUSPENDED = true, REQUEUE_HOLD = true }
-- replica states that were running their job
local RAN = { starting = true, healthy = true, unhealthy = true }

--- The first node of a job (its node list's first, else the first name of its `nodes` string).
---@param job table a normalized job record (obleth.slurm)
---@return string|nil
function M.first_node(job)
  if job.node_list and job.node_list[1] then return job.node_list[1] end
  if type(job.nodes) == "string" then return job.nodes:match("^[^,%[]+") end
  return nil
end

--- A replica's job as Slurm shows it now, for the deployment page (the replica's `slurm`,
--- docs/managed-spec.md): base state, reason, start and end times (for a pending job Slurm's
--- estimates: `estimated` is true, and the start may be unknown), time limit in minutes
--- (absent for UNLIMITED), and the paths of the job's stdout and stderr files when Slurm names them
--- (where the full logs are; obleth serve reads their last lines when the log dir is mounted).
---@param job table a normalized job record (obleth.slurm)
---@return table
function M.slurm_view(job)
  local tl = job.time_limit
  if tl == math.huge then tl = nil end
  local function path(p) if type(p) == "string" and p ~= "" then return p end return nil end
  return { state = job.state and job.state.base or nil, reason = job.reason, start_time = job.start_time,
    end_time = job.end_time, time_limit = tl, estimated = job.estimated == true,
    stdout = path(job.stdout), stderr = path(job.stderr) }
end

--- The listing's jobs of this installation by the nonce of their tag (obleth.job.tag). A nonce on two
--- jobs (two submits of one recorded replica; a requeue shows one job) keeps the newest; the older,
--- when still live, is to be cancelled. Jobs without this installation's well-formed tag are left out.
---@param jobs table[]|nil the listing (normalized jobs)
---@param instance string the installation id (snapshot.instance)
---@return table<string, {job: table, tag: table}> by_nonce
---@return table[] cancels {job_id, why = "second job for one replica"}
function M.index(jobs, instance)
  local by_nonce, cancels = {}, {}
  for _, j in ipairs(jobs or {}) do
    local t = tag.parse(j)
    if t and t.instance == instance then
      local prev = by_nonce[t.nonce]
      local older = prev and ((j.id or 0) > (prev.job.id or 0) and prev.job or j)
      if not prev or older == prev.job then by_nonce[t.nonce] = { job = j, tag = t } end
      if older and M.LIVE[older.state and older.state.base] then
        cancels[#cancels + 1] = { job_id = older.id, why = "second job for one replica" }
      end
    end
  end
  return by_nonce, cancels
end

--- Adopt the tagged live jobs no row records: each becomes a `submitted` row of its model (appended to
--- the model's rows, `adopted = true`, slot, generation and port from the tag), so a job submitted just
--- before a crash is followed, never submitted twice. A job of a model the store does not know
--- (deleted for good) is to be cancelled.
---@param models table[] the plan's models {id, rows}
---@param by_nonce table M.index's first result
---@param now number
---@return table[] adopted the new rows
---@return table[] cancels {job_id, why = WHY.NO_SUCH_MODEL}
function M.adopt(models, by_nonce, now)
  local by_id, known = {}, {}
  for _, mm in ipairs(models) do
    by_id[mm.id] = mm
    for _, r in ipairs(mm.rows) do known[r.nonce] = true end
  end
  local adopted, cancels = {}, {}
  for nonce, jt in pairs(by_nonce) do
    if not known[nonce] and M.LIVE[jt.job.state and jt.job.state.base] then
      local mm = by_id[jt.tag.model_id]
      if not mm then
        cancels[#cancels + 1] = { job_id = jt.job.id, why = WHY.NO_SUCH_MODEL }
      else
        local row = { nonce = nonce, model_id = mm.id, slot = jt.tag.slot, state = "submitted",
          job_id = jt.job.id, submitted_at = jt.job.submit_time or now, adopted = true,
          generation = jt.tag.generation, port = jt.tag.port }
        mm.rows[#mm.rows + 1] = row
        adopted[#adopted + 1] = row
      end
    end
  end
  return adopted, cancels
end

-- the outcome a pass reports of a replica's job (POST /provisioner/report `outcomes`)
local function outcome(row, model_id, fields)
  local o = { nonce = row.nonce, model_id = model_id, replica_id = row.id, launch_id = row.launch_id,
    job_id = row.job_id, node = row.node, started_at = row.started_at, healthy = row.healthy_at ~= nil }
  for k, v in pairs(fields) do o[k] = v end
  return o
end

--- Follow one replica's job. `found` is the listing's entry for the row's nonce (or nil); without it
--- the accounting lookup's job by id (f.job_by_id) stands in. A row recorded before its submit whose
--- job exists is adopted (the report after the submit never came); a row whose nonce is on a newer
--- job follows that one. Lost and ended rows, and rows with no job, are left alone.
---@param row table the plan's copy of the replica (changed in place; `_touched` when it was looked at)
---@param found {job: table}|nil by_nonce[row.nonce]
---@param f {now: number, model_id: integer, job_by_id: table|nil, listed: boolean}
---  listed: the pass has a listing (without one, a job not found is no evidence the job ended)
---@return table|nil outcome the job's end or requeue, to report
---@return boolean ended the job ended in this pass (the lost rule reads the row)
---@return boolean adopted a pending row's job was found
function M.follow(row, found, f)
  local now, adopted = f.now, false
  if row.state == "pending" and not row.job_id and found then
    local job = found.job
    row.job_id, row.state, row.submitted_at = job.id, "submitted", row.submitted_at or job.submit_time or now
    row._touched, adopted = true, true
  end
  if row.state == "lost" or row.state == "ended" or not row.job_id then return nil, false, adopted end
  local job = found and found.job
  if job and job.id and job.id ~= row.job_id then row.job_id = job.id end -- the older one is cancelled
  if not job and f.job_by_id then job = f.job_by_id[row.job_id] end
  row._touched = true
  local base = job and job.state and job.state.base
  if job then row.slurm = M.slurm_view(job) end
  row.job_live = M.LIVE[base] == true
  if not job then
    if f.listed then -- listed nothing and the accounting lookup found nothing either
      row.state, row.ended_at = "ended", now
      row["end"] = { state = "UNKNOWN", reason = "job no longer known to Slurm" }
    end
    return nil, false, adopted
  end
  local o
  if WAITING[base] then
    if row.node and RAN[row.state] then
      -- Slurm requeued the running job (a node failure where JobRequeue=1, or an admin's requeue):
      -- the replica follows its job, out of the endpoints until it runs again; the interruption is
      -- recorded
      o = outcome(row, f.model_id, { state = "REQUEUED", reason = job.reason, ended_at = now })
      row.started_at, row.healthy_at, row.check_failures = nil, nil, 0
    end
    if row.state ~= "ending" then row.state = "submitted" end
    row.pending_reason = job.reason
    row.problem = never_starts(job.reason) and ("Slurm will never start this job as it is: %s"):format(job.reason)
      or nil
    row.node, row.endpoint = nil, nil
    return o, false, adopted
  elseif M.STARTED[base] then
    if row.state == "pending" or row.state == "submitted" then
      row.state, row.started_at = "starting", job.start_time or now
      row.node = M.first_node(job)
      row.pending_reason, row.problem = nil, nil
    end
    row.node = row.node or M.first_node(job)
    return nil, false, adopted
  elseif base == "COMPLETING" then
    row.state = "ending"
    return nil, false, adopted
  end
  row.state, row.ended_at = "ended", job.end_time or now
  local ec = job.exit_code or {}
  local node = M.first_node(job) or row.node
  row["end"] = { state = base or "UNKNOWN", reason = job.reason, exit_code = ec.code, signal = ec.signal, node = node }
  o = outcome(row, f.model_id, { state = base, reason = job.reason, exit_code = ec.code, signal = ec.signal,
    node = node, started_at = job.start_time or row.started_at, ended_at = row.ended_at, cancel_why = row.cancel_why })
  return o, true, adopted
end

--- The jobs step over every model: index the listing, adopt, follow each row. Each model's rows whose
--- job ended in this pass are listed in its `ended_now` (the lost rule reads them).
---@param models table[] the plan's models {id, rows, ended_now}
---@param f {now: number, jobs: table[]|nil, instance: string, job_by_id: table|nil}
---  jobs: the listing (nil: none this pass, so a job not found is no evidence it ended)
---@return table[] cancels {job_id, why}: second jobs of one replica, jobs of models that are gone
---@return table[] adopted rows: tagged jobs nobody recorded, then recorded rows whose job was found
---@return table[] outcomes the ends and requeues to report
function M.step(models, f)
  local by_nonce, cancels = M.index(f.jobs, f.instance)
  local adopted, orphans = M.adopt(models, by_nonce, f.now)
  for _, c in ipairs(orphans) do cancels[#cancels + 1] = c end
  local outcomes = {}
  local ff = { now = f.now, job_by_id = f.job_by_id, listed = f.jobs ~= nil }
  for _, mm in ipairs(models) do
    ff.model_id = mm.id
    for _, row in ipairs(mm.rows) do
      local o, ended, found = M.follow(row, by_nonce[row.nonce], ff)
      if found then adopted[#adopted + 1] = row end
      if o then outcomes[#outcomes + 1] = o end
      if ended then mm.ended_now[#mm.ended_now + 1] = row end
    end
  end
  return cancels, adopted, outcomes
end

return M
