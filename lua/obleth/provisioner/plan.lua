--- The provisioner's decisions for one pass, as pure functions of data.
--
-- reconcile(input)  Slurm side: follow each replica's job, adopt tagged jobs
--                   nobody recorded, end/cancel what must go, create and
--                   submit what is missing, roll replicas over before their
--                   walltime ends.
-- health(state, results, now)  what the health checks change: states,
--                   endpoints, restarts of replicas unhealthy past grace.
--
-- Neither does I/O: the daemon (obleth.provisioner) reads the
-- snapshot and the job listing, runs the submits, cancels and checks these
-- functions ask for, and reports the rows they return. Times are epoch
-- seconds; time limits are minutes (docs/managed-spec.md).
local WHY = require "obleth.job.cancel_why"
local tag = require "obleth.job.tag"
local never_starts = require("obleth.slurm.submit").never_starts
local tables = require "obleth.util.tables"

local M = {}

--- Slurm job states in which the job still holds (or waits for) resources.
M.LIVE = { PENDING = true, RUNNING = true, CONFIGURING = true, SUSPENDED = true, REQUEUED = true,
  RESIZING = true, SIGNALING = true, STAGE_OUT = true, REQUEUE_HOLD = true, REQUEUE_FED = true }
M.STARTED = { RUNNING = true, CONFIGURING = true, SIGNALING = true, STAGE_OUT = true }

--- The built-in rules (policy modules "lost" and "rollover"); the daemon
--- passes the operator's current versions instead.
M.default_lost = require("obleth.policy.lost").check
M.default_rollover = require("obleth.policy.rollover").plan
M.default_scale = require("obleth.policy.scale").decide

-- replica states that hold or wait for a job (what the scale policy counts as current)
local SCALE_LIVE = { pending = true, submitted = true, starting = true, healthy = true, unhealthy = true }

local copy = tables.copy

local function first_node(job)
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

--- Pick a port for a new replica: inside [lo, hi], not used by any live
--- replica (of any model), so two replicas placed on one node never clash.
---@param range integer[] {lo, hi}
---@param used table<integer, boolean>
---@param rand fun(lo: integer, hi: integer): integer
---@return integer|nil
function M.pick_port(range, used, rand)
  local lo, hi = range[1], range[2]
  local span = hi - lo + 1
  local start = rand(lo, hi)
  for i = 0, span - 1 do
    local p = lo + (start - lo + i) % span
    if not used[p] then return p end
  end
  return nil
end

--- Reconcile the store's replicas with Slurm.
---@param input {now: number, snapshot: table, jobs: table[], nonce: fun(): string,
---  rand: fun(lo: integer, hi: integer): integer, lost: function|nil, rollover: function|nil, scale: function|nil}
---  scale: the scale policy's decide (a spec with `autoscale`: its desired count replaces `replicas`;
---  the replicas above it leave the endpoints and are cancelled after the drain)
---@return table state {rows = array of replica rows (every row touched or live),
---  submits = array of {row, model, spec}, cancels = array of {row, job_id, why},
---  outcomes = array, ack = {restart = {}, clear_lost = {}}, models = array of {id, name, spec, rows,
---  decisions = array of {slot, rule = "lost"|"rollover", decision, action, row|nil}, flags}}
function M.reconcile(input)
  local now, snap = input.now, input.snapshot
  local lost_rule = input.lost or M.default_lost
  local rollover_rule = input.rollover or M.default_rollover
  local scale_rule = input.scale or M.default_scale
  local settings = snap.settings or {}
  local defaults = settings.defaults or {}
  local enabled = settings.enabled ~= false
  local out = { rows = {}, submits = {}, cancels = {}, outcomes = {}, ack = { restart = {}, clear_lost = {} },
    models = {}, adopted = {} }

  -- index jobs by nonce (tagged by this installation only)
  local instance = snap.instance
  local by_nonce = {}
  for _, j in ipairs(input.jobs or {}) do
    local t = tag.parse(j)
    if t and t.instance == instance then
      local prev = by_nonce[t.nonce]
      -- the same nonce twice (a requeue shows one job): keep the newest; an older one still
      -- live (two submits of one recorded replica) is cancelled
      local older = prev and ((j.id or 0) > (prev.job.id or 0) and prev.job or j)
      if not prev or older == prev.job then by_nonce[t.nonce] = { job = j, tag = t } end
      if older and M.LIVE[older.state and older.state.base] then
        out.cancels[#out.cancels + 1] = { job_id = older.id, why = "second job for one replica" }
      end
    end
  end

  local restart = {}
  for _, id in ipairs(snap.restart or {}) do restart[id] = true end
  local clear_lost = {}
  for _, id in ipairs(snap.clear_lost or {}) do clear_lost[id] = true end

  -- models by id; adopt tagged live jobs that no row knows
  local models, known = {}, {}
  for _, m in ipairs(snap.models or {}) do
    local mm = { id = m.id, name = m.name, spec = m.spec, recent_ends = m.recent_ends or {}, rows = {},
      load = m.load }
    for _, r in ipairs(m.replicas or {}) do
      local row = copy(r)
      mm.rows[#mm.rows + 1] = row
      known[row.nonce] = true
    end
    models[m.id] = mm
    out.models[#out.models + 1] = mm
  end
  for nonce, jt in pairs(by_nonce) do
    local base = jt.job.state and jt.job.state.base
    if not known[nonce] and M.LIVE[base] then
      local mm = models[jt.tag.model_id]
      if not mm then
        -- a model the store does not know (deleted for good): cancel the job
        out.cancels[#out.cancels + 1] = { job_id = jt.job.id, why = WHY.NO_SUCH_MODEL, row = nil }
      else
        local row = { nonce = nonce, model_id = mm.id, slot = jt.tag.slot, state = "submitted",
          job_id = jt.job.id, submitted_at = jt.job.submit_time or now, adopted = true,
          generation = jt.tag.generation, port = jt.tag.port }
        mm.rows[#mm.rows + 1] = row
        out.adopted[#out.adopted + 1] = row
      end
    end
  end

  local used_ports = {}
  for _, mm in ipairs(out.models) do
    for _, r in ipairs(mm.rows) do
      if r.port and r.state ~= "ended" then used_ports[r.port] = true end
    end
  end

  local function touch(row) row._touched = true end

  local function cancel(row, why, drain_until)
    if row.state == "ended" or row.state == "lost" then return end
    if row.job_id then
      row.state = "ending"
      row.cancel_why = why
      if drain_until and drain_until > now then
        row.cancel_at = row.cancel_at or drain_until
      else
        out.cancels[#out.cancels + 1] = { row = row, job_id = row.job_id, why = why }
        row.cancel_queued = true
      end
    else
      row.state = "ended"
      row.ended_at = now
      row["end"] = { state = "NOT_SUBMITTED", reason = why }
    end
    touch(row)
  end

  -- 1. follow each row's job
  for _, mm in ipairs(out.models) do
    mm.ended_now = {}
    -- what each slot's rule decided (lost/backoff, rollover), for a dry run to show
    mm.decisions = {}
    for _, row in ipairs(mm.rows) do
      if row.state == "pending" and not row.job_id and by_nonce[row.nonce] then
        -- recorded before its submit (POST /provisioner/submits), and the job exists: the
        -- report after the submit never came (a crash); follow the job
        local job = by_nonce[row.nonce].job
        row.job_id, row.state, row.submitted_at = job.id, "submitted", row.submitted_at or job.submit_time or now
        touch(row)
        out.adopted[#out.adopted + 1] = row
      end
      if row.state ~= "lost" and row.state ~= "ended" and row.job_id then
        local jt = by_nonce[row.nonce]
        local job = jt and jt.job
        if job and job.id and job.id ~= row.job_id then
          -- the replica's nonce is on a newer job (two submits of one recorded replica): follow
          -- that one; the older is cancelled above
          row.job_id = job.id
          touch(row)
        end
        if not job and input.job_by_id then job = input.job_by_id[row.job_id] end
        local base = job and job.state and job.state.base
        if job then row.slurm = M.slurm_view(job) end
        row.job_live = M.LIVE[base] == true
        if not job then
          if input.jobs then
            -- listed nothing and the accounting lookup found nothing either
            row.state = "ended"
            row.ended_at = now
            row["end"] = { state = "UNKNOWN", reason = "job no longer known to Slurm" }
          end
        elseif base == "PENDING" or base == "REQUEUED" or base == "SUSPENDED" or base == "REQUEUE_HOLD" then
          if row.node and (row.state == "starting" or row.state == "healthy" or row.state == "unhealthy") then
            -- Slurm requeued the running job (a node failure where JobRequeue=1,
            -- or an admin's requeue): the replica follows its job, out of the
            -- endpoints until it runs again, and the interruption is recorded
            out.outcomes[#out.outcomes + 1] = { nonce = row.nonce, model_id = mm.id, replica_id = row.id,
              launch_id = row.launch_id, job_id = row.job_id, state = "REQUEUED", reason = job.reason,
              node = row.node, started_at = row.started_at, ended_at = now, healthy = row.healthy_at ~= nil }
            row.started_at, row.healthy_at, row.check_failures = nil, nil, 0
          end
          if row.state ~= "ending" then row.state = "submitted" end
          row.pending_reason = job.reason
          if never_starts(job.reason) then
            row.problem = ("Slurm will never start this job as it is: %s"):format(job.reason)
          else
            row.problem = nil
          end
          row.node, row.endpoint = nil, nil
        elseif M.STARTED[base] then
          if row.state == "pending" or row.state == "submitted" then
            row.state = "starting"
            row.started_at = job.start_time or now
            row.node = first_node(job)
            row.pending_reason, row.problem = nil, nil
          end
          row.node = row.node or first_node(job)
        elseif base == "COMPLETING" then
          if row.state ~= "ending" then row.state = "ending" end
        else
          row.state = "ended"
          row.ended_at = job.end_time or now
          local ec = job.exit_code or {}
          row["end"] = { state = base or "UNKNOWN", reason = job.reason, exit_code = ec.code, signal = ec.signal,
            node = first_node(job) or row.node }
          out.outcomes[#out.outcomes + 1] = { nonce = row.nonce, model_id = mm.id, replica_id = row.id,
            launch_id = row.launch_id, job_id = row.job_id, state = base, reason = job.reason,
            exit_code = ec.code, signal = ec.signal, node = first_node(job) or row.node,
            started_at = job.start_time or row.started_at, ended_at = row.ended_at,
            healthy = row.healthy_at ~= nil, cancel_why = row.cancel_why }
          mm.ended_now[#mm.ended_now + 1] = row
        end
        touch(row)
      end
    end
  end

  -- 2. restarts asked through the API
  for _, mm in ipairs(out.models) do
    for _, row in ipairs(mm.rows) do
      if row.id and restart[row.id] then
        out.ack.restart[#out.ack.restart + 1] = row.id
        cancel(row, WHY.RESTART)
      end
    end
  end

  -- 3. desired state per model
  for _, mm in ipairs(out.models) do
    local spec = mm.spec
    local live = {}
    for _, row in ipairs(mm.rows) do
      if row.state ~= "ended" then live[#live + 1] = row end
    end
    if clear_lost[mm.id] then
      out.ack.clear_lost[#out.ack.clear_lost + 1] = mm.id
      for _, row in ipairs(live) do
        if row.state == "lost" then
          row.state = "ended"
          row.cleared = true
          touch(row)
        end
      end
      mm.cleared = true
    end
    if not spec or spec.enabled == false or not enabled then
      local why = not spec and WHY.DELETED or (not enabled and WHY.SLURM_OFF or WHY.PAUSED)
      for _, row in ipairs(live) do cancel(row, why) end
    else
      local n = spec.replicas or 1
      local surplus, drain_until = WHY.SURPLUS, nil
      if type(spec.autoscale) == "table" then
        -- the scale policy sets the count from the load; the slots above it drain (they leave the
        -- endpoints at once, their jobs go after drain_seconds), as a walltime rollover does
        local current = {}
        for _, row in ipairs(live) do
          local succ = row.successor_of -- JSON null (light userdata) is none
          if SCALE_LIVE[row.state] and (succ == nil or type(succ) == "userdata") then current[#current + 1] = row end
        end
        local d = scale_rule({ now = now, autoscale = spec.autoscale, replicas = current, load = mm.load or {} })
        mm.scaling = d
        mm.decisions[#mm.decisions + 1] = { rule = "scale", decision = d, action = d.change }
        n = d.desired
        surplus, drain_until = WHY.SCALED_DOWN, now + (input.drain_seconds or 30)
      end
      local per_slot = {}
      for _, row in ipairs(live) do
        if row.state ~= "ended" then
          if (row.slot or 0) > n or (row.slot or 0) < 1 then
            cancel(row, surplus, row.state == "healthy" and drain_until or nil)
          else
            per_slot[row.slot] = per_slot[row.slot] or {}
            table.insert(per_slot[row.slot], row)
          end
        end
      end
      local perr = spec.provision_error
      local blocked = perr ~= nil and perr ~= false and (perr.generation == nil or spec.generation == nil
        or perr.generation >= spec.generation)
      for slot = 1, n do
        local rows = per_slot[slot] or {}
        local active, lost_row = {}, nil
        for _, r in ipairs(rows) do
          if r.state == "lost" then lost_row = r
          elseif r.state ~= "ending" and r.state ~= "ended" then active[#active + 1] = r end
        end
        if lost_row then
          -- not replaced until "Try once more"
          for _, r in ipairs(active) do cancel(r, WHY.SLOT_LOST) end
        else
          -- never two jobs for one replica: keep one primary (+ its successor)
          local primary, successor = nil, nil
          local rank = { healthy = 5, unhealthy = 4, starting = 3, submitted = 2, pending = 1 }
          for _, r in ipairs(active) do
            if not r.successor_of then
              if not primary or (rank[r.state] or 0) > (rank[primary.state] or 0)
                or ((rank[r.state] or 0) == (rank[primary.state] or 0) and (r.job_id or 0) > (primary.job_id or 0)) then
                primary = r
              end
            end
          end
          for _, r in ipairs(active) do
            if r ~= primary then
              if r.successor_of and primary and r.successor_of == primary.nonce and not successor then
                successor = r
              elseif r.successor_of and not primary then
                -- the old one is gone: the successor takes its place
                r.successor_of = nil
                primary = r
                touch(r)
              else
                cancel(r, WHY.DUPLICATE)
              end
            end
          end
          if not primary then
            -- the lost / backoff rule looks at this slot's recent ends, newest first: this pass's, then
            -- the snapshot's; which of them count is the rule's decision (obleth.policy.lost)
            local ends = {}
            for _, r in ipairs(mm.ended_now) do
              if r.slot == slot then
                local en = r["end"] or {}
                ends[#ends + 1] = { healthy = r.healthy_at ~= nil, at = r.ended_at, row = r, state = en.state,
                  exit_code = en.exit_code, cancel_why = r.cancel_why, job_id = r.job_id }
              end
            end
            table.sort(ends, function(a, b) return (a.at or 0) > (b.at or 0) end)
            if not mm.cleared then
              for _, e in ipairs(mm.recent_ends) do
                if e.slot == slot then
                  ends[#ends + 1] = { healthy = e.healthy, at = e.at, state = e.state, exit_code = e.exit_code,
                    cancel_why = e.cancel_why }
                end
              end
            end
            local d = lost_rule(ends)
            -- the newest end that counted, when it ended in this pass, is the row marked lost
            local just_ended = d.evidence and d.evidence[1] and d.evidence[1].row
            local decided = { slot = slot, rule = "lost", decision = d }
            mm.decisions[#mm.decisions + 1] = decided
            if d.lost and just_ended then
              just_ended.state = "lost"
              just_ended.problem = ("ended %d times in a row without becoming healthy"):format(d.failures or 0)
              touch(just_ended)
              decided.action, decided.row = "mark lost", just_ended
            elseif d.lost then
              -- already counted as lost before (e.g. after a restart): wait for "Try once more"
              mm.waiting_lost = true
              decided.action = "wait for Try once more"
            elseif d.backoff_until and d.backoff_until > now then
              mm.backoff_until = math.max(mm.backoff_until or 0, d.backoff_until)
              decided.action = "wait (backoff)"
            elseif blocked then
              mm.blocked = true
              decided.action = "wait (provision error)"
            else
              local port = M.pick_port(defaults.port_range or { 20000, 20999 }, used_ports, input.rand)
              if port then
                used_ports[port] = true
                local row = { nonce = input.nonce(), model_id = mm.id, slot = slot, state = "pending",
                  port = port, generation = spec.generation, launch_id = spec.launch_id }
                mm.rows[#mm.rows + 1] = row
                touch(row)
                out.submits[#out.submits + 1] = { row = row, model = mm, spec = spec }
                decided.action, decided.row = "submit", row
              else
                mm.no_port = true
                decided.action = "wait (no free port)"
              end
            end
          elseif primary.state == "pending" and not primary.job_id then
            -- recorded for a submit that never reached Slurm (a crash, a lost lease): submit it
            -- under its recorded nonce and port
            if not blocked then out.submits[#out.submits + 1] = { row = primary, model = mm, spec = spec } end
          elseif successor and successor.state == "pending" and not successor.job_id then
            if not blocked then out.submits[#out.submits + 1] = { row = successor, model = mm, spec = spec } end
          elseif primary.state == "healthy" and not successor and not blocked then
            local d = rollover_rule({ now = now, time_limit = spec.time_limit, started_at = primary.started_at,
              healthy_at = primary.healthy_at, rollover_margin = spec.rollover_margin })
            mm.decisions[#mm.decisions + 1] = { slot = slot, rule = "rollover", decision = d, row = primary,
              action = d.start_successor and "start successor" or "keep" }
            if d.start_successor then
              local port = M.pick_port(defaults.port_range or { 20000, 20999 }, used_ports, input.rand)
              if port then
                used_ports[port] = true
                local row = { nonce = input.nonce(), model_id = mm.id, slot = slot, state = "pending", port = port,
                  generation = spec.generation, successor_of = primary.nonce, launch_id = spec.launch_id }
                mm.rows[#mm.rows + 1] = row
                touch(row)
                out.submits[#out.submits + 1] = { row = row, model = mm, spec = spec, rollover = d }
              end
            end
          elseif successor and successor.state == "healthy" and primary.state ~= "ending" then
            -- the successor serves: the old one leaves the endpoints, then its job goes
            successor.successor_of = nil
            touch(successor)
            cancel(primary, WHY.ROLLOVER, now + (input.drain_seconds or 30))
          end
        end
      end
    end
    -- rows on their way out whose job still holds resources: cancel once the drain is over. Also
    -- when this process never knew the drain (the deadline died with a provisioner that crashed),
    -- and again when a cancel sent in an earlier pass did not take: an "ending" row never keeps its
    -- job alive next to the replica that took its slot
    for _, row in ipairs(mm.rows) do
      if row.state == "ending" and row.job_live and not row.cancel_queued
        and not (row.cancel_at and row.cancel_at > now) then
        out.cancels[#out.cancels + 1] = { row = row, job_id = row.job_id,
          why = row.cancel_why or (row.cancel_at and "drained" or "ending, its job still runs") }
        row.cancel_queued = true
      end
    end
  end

  for _, mm in ipairs(out.models) do
    for _, row in ipairs(mm.rows) do
      if row._touched or row.state ~= "ended" then out.rows[#out.rows + 1] = row end
    end
  end
  return out
end

--- Apply health-check results.
---@param state table the result of reconcile (rows are updated in place)
---@param results table<string, {ok: boolean, status: integer|nil, error: string|nil}> by nonce
---@param now number
---@return table endpoints model_id → array of endpoint URLs (healthy replicas only)
---@return table cancels array of {row, job_id, why} for replicas unhealthy past their grace
function M.health(state, results, now)
  local endpoints, cancels = {}, {}
  for _, mm in ipairs(state.models) do
    local spec = mm.spec or {}
    local h = spec.health or {}
    local grace = h.startup_grace or 600
    local threshold = h.failure_threshold or 3
    local eps = {}
    for _, row in ipairs(mm.rows) do
      local res = results[row.nonce]
      if res then
        row.last_check = { ok = res.ok, status = res.status, error = res.error, at = now }
        if row.state == "starting" then
          if res.ok then
            row.state = "healthy"
            row.healthy_at = now
            row.check_failures = 0
            row.problem = nil
          elseif now - (row.started_at or now) > grace then
            row.problem = ("not healthy %d s after start (startup grace %d s): %s"):format(
              math.floor(now - (row.started_at or now)), grace, res.error or ("HTTP " .. tostring(res.status)))
            row.state = "ending"
            row.cancel_why = WHY.STARTUP_GRACE
            cancels[#cancels + 1] = { row = row, job_id = row.job_id, why = row.cancel_why }
          end
        elseif row.state == "healthy" then
          if res.ok then
            row.check_failures = 0
          else
            row.check_failures = (row.check_failures or 0) + 1
            if row.check_failures >= threshold then
              row.state = "unhealthy"
              row.unhealthy_since = now
              row.problem = "health check failing: " .. (res.error or ("HTTP " .. tostring(res.status)))
            end
          end
        elseif row.state == "unhealthy" then
          if res.ok then
            row.state = "healthy"
            row.check_failures = 0
            row.problem = nil
            row.unhealthy_since = nil
          elseif now - (row.unhealthy_since or now) > grace then
            row.state = "ending"
            row.problem = "unhealthy for longer than the grace period"
            row.cancel_why = WHY.UNHEALTHY
            cancels[#cancels + 1] = { row = row, job_id = row.job_id, why = row.cancel_why }
          end
        end
        row._touched = true
      end
      if row.state == "healthy" and row.endpoint then eps[#eps + 1] = row.endpoint end
    end
    table.sort(eps)
    endpoints[tostring(mm.id)] = eps
  end
  return endpoints, cancels
end

--- The replica fields a pass reports (POST /api/v1/provisioner/report, docs/managed-spec.md).
M.REPORT_FIELDS = { "model_id", "slot", "nonce", "state", "job_id", "node", "port", "endpoint",
  "submitted_at", "started_at", "healthy_at", "ended_at", "check_failures", "problem", "pending_reason",
  "successor_of", "launch_id", "end", "generation", "slurm", "cancel_why" }

local NULL_SENTINEL -- cjson.null where cjson is loaded (the snapshot's JSON nulls); absent and null are alike
do
  local ok, cjson = pcall(require, "cjson")
  NULL_SENTINEL = ok and cjson.null or nil
end

local function _nn(v)
  if v == NULL_SENTINEL then return nil end
  return v
end

local function _same(a, b)
  if a == b then return true end -- most fields of a steady row: no call below
  if a == NULL_SENTINEL then a = nil end
  if b == NULL_SENTINEL then b = nil end
  if a == b then return true end
  if type(a) ~= "table" or type(b) ~= "table" then return false end
  for k, v in pairs(a) do if not _same(v, b[k]) then return false end end
  for k, v in pairs(b) do if a[k] == nil and _nn(v) ~= nil then return false end end
  return true
end

local _copy = tables.deep_copy

--- What the snapshot says of each live replica, in the fields a report carries, by nonce: the
--- baseline a pass's report is taken against. Copied (nested tables too), so the plan's edits of
--- the rows never reach it. Take it before the plan runs.
---@param snapshot table the Management API snapshot
---@return table<string, table> nonce → {field = value}
function M.baseline(snapshot)
  local base, fields = {}, M.REPORT_FIELDS
  for _, m in ipairs(snapshot.models or {}) do
    for _, r in ipairs(m.replicas or {}) do
      local b = {}
      for _, k in ipairs(fields) do
        local v = r[k]
        if type(v) == "table" then v = _copy(v) end
        b[k] = v
      end
      base[r.nonce] = b
    end
  end
  return base
end

--- Whether a row must be reported: it is new to the snapshot, or one of its reported fields
--- differs from the baseline (a JSON null and an absent field are the same; nested tables are
--- compared by their fields).
---@param base table|nil the row's baseline (M.baseline(snapshot)[row.nonce])
---@param row table
---@return boolean
function M.changed(base, row)
  if not base then return true end
  for _, k in ipairs(M.REPORT_FIELDS) do
    local a, b = base[k], row[k]
    if a ~= b and not _same(a, b) then return true end
  end
  return false
end

--- The endpoint lists of a pass that differ from the snapshot's (model id string → sorted URLs):
--- a report names only those models, the store keeps the others' lists as they are.
---@param snapshot table
---@param endpoints table<string, string[]> M.health's lists
---@return table<string, string[]>
function M.changed_endpoints(snapshot, endpoints)
  local before = {}
  for _, m in ipairs(snapshot.models or {}) do before[tostring(m.id)] = m.endpoints end
  local out = {}
  for id, eps in pairs(endpoints) do
    local b = before[id]
    if type(b) ~= "table" or not _same(b, eps) or #b ~= #eps then out[id] = eps end
  end
  return out
end

--- The replicas due for a health check: running, with an endpoint, and
--- whose interval has passed since their last check.
---@param state table
---@param last_checked table<string, number> nonce → epoch of the last check
---@param now number
---@return table[] {row, url, timeout}
function M.due_checks(state, last_checked, now)
  local due = {}
  for _, mm in ipairs(state.models) do
    local h = (mm.spec or {}).health or {}
    local interval = h.interval or 10
    for _, row in ipairs(mm.rows) do
      if (row.state == "starting" or row.state == "healthy" or row.state == "unhealthy") and row.endpoint then
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
