--- The provisioner's decisions for one pass, as pure functions of data.
--
-- reconcile(input)  the Slurm side, a short driver over three named steps:
--   jobs  (obleth.provisioner.plan.jobs)    what Slurm's one listing says about each replica's job;
--                                           tagged jobs nobody recorded are adopted
--   slots (obleth.provisioner.plan.slots)   how many replicas (the spec's count, or the scale
--                                           policy's desired count), which slots stay, and what each
--                                           slot needs: a submit, a successor before the walltime
--                                           ends, a cancel, or a wait (lost, backoff, refused)
--   and the sweep of replicas on their way out whose jobs still run
-- health(state, results, now)  the third step (obleth.provisioner.plan.health): what the health
--                   checks mean: states, endpoints, restarts of replicas unhealthy past grace.
-- baseline / changed / changed_endpoints  what a pass reports: only what differs from the snapshot.
--
-- Nothing here does I/O: the daemon (obleth.provisioner) reads the snapshot and the job listing,
-- runs the submits, cancels and checks these functions ask for, and reports the rows they return.
-- Times are epoch seconds; time limits are minutes (docs/managed-spec.md).
local WHY = require "obleth.job.cancel_why"
local jobs = require "obleth.provisioner.plan.jobs"
local slots = require "obleth.provisioner.plan.slots"
local health = require "obleth.provisioner.plan.health"
local tables = require "obleth.util.tables"

local M = {}

M.LIVE, M.STARTED, M.slurm_view = jobs.LIVE, jobs.STARTED, jobs.slurm_view
M.health, M.due_checks = health.apply, health.due

--- The built-in rules (policy modules "lost", "rollover" and "scale"); the daemon
--- passes the operator's current versions instead.
M.default_lost = require("obleth.policy.lost").check
M.default_rollover = require("obleth.policy.rollover").plan
M.default_scale = require("obleth.policy.scale").decide

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

-- what a slot's rule decided, as the model's flags (the dry run and the report read them)
local function note(mm, decided)
  mm.decisions[#mm.decisions + 1] = decided
  local a = decided.action
  if a == "wait for Try once more" then mm.waiting_lost = true
  elseif a == "wait (backoff)" then mm.backoff_until = math.max(mm.backoff_until or 0, decided.decision.backoff_until)
  elseif a == "wait (provision error)" then mm.blocked = true
  elseif a == "wait (no free port)" then mm.no_port = true end
end

-- a refused submit of this spec's generation holds new submits until the spec changes
local function blocked(spec)
  local perr = spec.provision_error
  return perr ~= nil and perr ~= false and (perr.generation == nil or spec.generation == nil
    or perr.generation >= spec.generation)
end

local function append(list, items)
  for _, x in ipairs(items) do list[#list + 1] = x end
end

-- What the slots step may ask for (obleth.provisioner.plan.slots' `act`), written into the pass's
-- output: cancels, new rows on free ports, submits. `act.model` is the model being settled.
local function actions(out, input)
  local now = input.now
  local range = ((input.snapshot.settings or {}).defaults or {}).port_range or { 20000, 20999 }
  local used = {} -- ports of live replicas of every model: two replicas on one node never clash
  for _, mm in ipairs(out.models) do
    for _, r in ipairs(mm.rows) do
      if r.port and r.state ~= "ended" then used[r.port] = true end
    end
  end
  local act = {}
  function act.touch(row) row._touched = true end
  function act.cancel(row, why, drain_until)
    if row.state == "ended" or row.state == "lost" then return end
    if row.job_id then
      row.state, row.cancel_why = "ending", why
      if drain_until and drain_until > now then
        row.cancel_at = row.cancel_at or drain_until
      else
        out.cancels[#out.cancels + 1] = { row = row, job_id = row.job_id, why = why }
        row.cancel_queued = true
      end
    else
      row.state, row.ended_at = "ended", now
      row["end"] = { state = "NOT_SUBMITTED", reason = why }
    end
    row._touched = true
  end
  function act.new_row(slot, successor_of)
    local port = M.pick_port(range, used, input.rand)
    if not port then return nil end
    used[port] = true
    local mm = act.model
    local row = { nonce = input.nonce(), model_id = mm.id, slot = slot, state = "pending", port = port,
      generation = mm.spec.generation, successor_of = successor_of, launch_id = mm.spec.launch_id, _touched = true }
    mm.rows[#mm.rows + 1] = row
    return row
  end
  function act.submit(row, rollover)
    local mm = act.model
    out.submits[#out.submits + 1] = { row = row, model = mm, spec = mm.spec, rollover = rollover }
  end
  return act
end

-- The slots step for one model whose spec runs: the count, the slots that stay, each slot settled.
local function settle_model(mm, live, input, act)
  local spec, now = mm.spec, input.now
  local n, why, drain_until, scaling = slots.count(spec, live,
    { now = now, scale = input.scale or M.default_scale, load = mm.load, drain_seconds = input.drain_seconds })
  if scaling then
    mm.scaling = scaling
    mm.decisions[#mm.decisions + 1] = { rule = "scale", decision = scaling, action = scaling.change }
  end
  local keep, per_slot, remove = slots.choose(live, n)
  for _, row in ipairs(remove) do act.cancel(row, why, row.state == "healthy" and drain_until or nil) end
  local f = { now = now, spec = spec, blocked = blocked(spec), lost = input.lost or M.default_lost,
    rollover = input.rollover or M.default_rollover, ended_now = mm.ended_now,
    recent_ends = not mm.cleared and mm.recent_ends or nil, drain_seconds = input.drain_seconds }
  for _, slot in ipairs(keep) do
    local decided = slots.settle(slot, per_slot[slot], f, act)
    if decided then note(mm, decided) end
  end
end

--- Reconcile the store's replicas with Slurm.
---@param input {now: number, snapshot: table, jobs: table[], job_by_id: table|nil, nonce: fun(): string,
---  rand: fun(lo: integer, hi: integer): integer, lost: function|nil, rollover: function|nil,
---  scale: function|nil, drain_seconds: number|nil}
---  scale: the scale policy's decide (a spec with `autoscale`: its desired count replaces `replicas`;
---  the replicas that go leave the endpoints and are cancelled after the drain)
---@return table state {rows = array of replica rows (every row touched or live),
---  submits = array of {row, model, spec}, cancels = array of {row, job_id, why},
---  outcomes = array, ack = {restart = {}, clear_lost = {}}, adopted = array of rows,
---  models = array of {id, name, spec, rows, scaling|nil,
---  decisions = array of {slot, rule = "lost"|"rollover"|"scale", decision, action, row|nil}, flags}}
function M.reconcile(input)
  local now, snap = input.now, input.snapshot
  local settings = snap.settings or {}
  local out = { rows = {}, submits = {}, cancels = {}, outcomes = {}, ack = { restart = {}, clear_lost = {} },
    models = {}, adopted = {} }
  for _, m in ipairs(snap.models or {}) do -- the plan's own copies of the rows
    local mm = { id = m.id, name = m.name, spec = m.spec, recent_ends = m.recent_ends or {}, rows = {},
      load = m.load, ended_now = {}, decisions = {} }
    for i, r in ipairs(m.replicas or {}) do mm.rows[i] = tables.copy(r) end
    out.models[#out.models + 1] = mm
  end

  -- 1. jobs: each replica after what Slurm's listing says of its job
  local cancels, adopted, outcomes = jobs.step(out.models,
    { now = now, jobs = input.jobs, instance = snap.instance, job_by_id = input.job_by_id })
  append(out.cancels, cancels)
  append(out.adopted, adopted)
  append(out.outcomes, outcomes)
  local act = actions(out, input)

  -- restarts asked through the API
  local restart = {}
  for _, id in ipairs(snap.restart or {}) do restart[id] = true end
  for _, mm in ipairs(out.models) do
    for _, row in ipairs(mm.rows) do
      if row.id and restart[row.id] then
        out.ack.restart[#out.ack.restart + 1] = row.id
        act.cancel(row, WHY.RESTART)
      end
    end
  end

  -- 2. slots, per model; then the replicas on their way out
  local clear_lost = {}
  for _, id in ipairs(snap.clear_lost or {}) do clear_lost[id] = true end
  for _, mm in ipairs(out.models) do
    act.model = mm
    if clear_lost[mm.id] then -- "Try once more": the lost rows end, their ends no longer count
      out.ack.clear_lost[#out.ack.clear_lost + 1] = mm.id
      for _, row in ipairs(mm.rows) do
        if row.state == "lost" then row.state, row.cleared, row._touched = "ended", true, true end
      end
      mm.cleared = true
    end
    local live = {}
    for _, row in ipairs(mm.rows) do
      if row.state ~= "ended" then live[#live + 1] = row end
    end
    local spec = mm.spec
    if not spec or spec.enabled == false or settings.enabled == false then
      local why = not spec and WHY.DELETED or (settings.enabled == false and WHY.SLURM_OFF or WHY.PAUSED)
      for _, row in ipairs(live) do act.cancel(row, why) end
    else
      settle_model(mm, live, input, act)
    end
    append(out.cancels, slots.sweep(mm.rows, now))
  end

  for _, mm in ipairs(out.models) do
    for _, row in ipairs(mm.rows) do
      if row._touched or row.state ~= "ended" then out.rows[#out.rows + 1] = row end
    end
  end
  return out
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

return M
