--- A dry run of the provisioner's next pass, for people: the decisions come
-- from obleth.provisioner.plan.reconcile (the one owner of every rule), on
-- the facts a pass would read; this module only turns its answer into rows
-- that say what would be sent and why. Pure: no I/O, nothing is sent.
--
-- What a dry run cannot know: the drain deadlines the running provisioner
-- keeps in memory, and the health checks (it runs none).
local WHY = require "obleth.job.cancel_why"
local plan = require "obleth.provisioner.plan"
local fmt = require "obleth.util.format"

local M = {}

local function _date(t)
  return t and os.date("!%H:%M:%SZ", math.floor(t)) or "-"
end

local function _k(lost_module)
  return type(lost_module) == "table" and type(lost_module.DEFAULTS) == "table" and lost_module.DEFAULTS.k or nil
end

-- The facts behind a cancel, in words.
local function _cancel_facts(why, row, mm)
  local spec = mm and mm.spec
  -- a count goes down by the slots not started in Slurm first, then the highest (provisioner.plan.slots)
  local slot = row and tonumber(row.slot)
  if why == WHY.SURPLUS then
    local n = spec and spec.replicas
    if slot and type(n) == "number" and slot <= n then
      return ("slot %s has no job running in Slurm: it goes first, the spec's replicas = %s keeps the running ones")
        :format(slot, n)
    end
    return ("slot %s is above the spec's replicas = %s"):format(tostring(row and row.slot), tostring(n))
  elseif why == WHY.PAUSED then return "the spec has enabled = false"
  elseif why == WHY.DELETED then return "the model has no managed spec any more"
  elseif why == WHY.SLURM_OFF then return "the Slurm settings have enabled = false"
  elseif why == WHY.NO_SUCH_MODEL then return "the job's tag names a model the Management API does not know"
  elseif why == WHY.DUPLICATE then return "another job already serves this slot"
  elseif why == WHY.RESTART then return "a restart was asked through the API"
  elseif why == WHY.SLOT_LOST then return "the slot is lost (waits for Try once more)"
  elseif why == WHY.ROLLOVER then return "the successor is healthy; the old job is drained first"
  elseif why == WHY.SCALED_DOWN then
    local n = mm and mm.scaling and mm.scaling.desired
    if slot and type(n) == "number" and slot <= n then
      return ("slot %s has no job running in Slurm: it goes first, the scale policy's desired %s keeps the running "
        .. "ones"):format(slot, n)
    end
    return ("slot %s is above the scale policy's desired %s; it leaves the endpoints and its job goes after the "
      .. "drain"):format(tostring(row and row.slot), tostring(n))
  end
  return why
end

local function _lost_facts(d, k)
  local ev = {}
  for _, e in ipairs(d.evidence or {}) do
    local r = e.row
    if r then
      local en = r["end"] or {}
      ev[#ev + 1] = ("job %s %s%s"):format(tostring(r.job_id), tostring(en.state),
        en.reason and en.reason ~= "None" and (" (" .. en.reason .. ")") or "")
    else
      ev[#ev + 1] = ("an end at %s"):format(_date(e.at))
    end
  end
  return ("%d end(s) in a row without becoming healthy %s k = %s%s"):format(d.failures or 0,
    d.lost and ">=" or "<", tostring(k or "?"), #ev > 0 and ("; " .. table.concat(ev, ", ")) or "")
end

--- Run the decision step of a pass on live facts.
---@param facts {now: number, snapshot: table, jobs: table[], job_by_id: table|nil,
---  lost: table|nil, rollover: table|nil, scale: table|nil, drain_seconds: number|nil}
---  snapshot: GET /api/v1/provisioner/snapshot; jobs: the cluster's job listing; job_by_id: accounting
---  lookups of recorded jobs the listing no longer shows; lost / rollover / scale: the policy modules
---  (their `check` / `plan` / `decide` are the rules applied; nil = built-in). scale decides for
---  each model whose spec has `autoscale`, on the snapshot's `load` of that model
---@return table run {now, replicas = row[], actions = action[], submits, cancels, state}
---  row {model, slot, job_id, node, now (state in the store, or "untracked"), next (state after the pass),
---  port}; action {model, slot, job_id, action = "submit"|"cancel"|"start successor"|"mark lost"|
---  "wait ...", rule, facts}; submits / cancels: how many would be sent; scaling {model, desired,
---  current, change, reason} per autoscaled model
function M.run(facts)
  local n = 0
  local lost, rollover = facts.lost, facts.rollover
  local state = plan.reconcile {
    now = facts.now, snapshot = facts.snapshot, jobs = facts.jobs, job_by_id = facts.job_by_id,
    nonce = function() n = n + 1; return ("(new %d)"):format(n) end,
    rand = function(lo) return lo end,
    lost = lost and lost.check or nil, rollover = rollover and rollover.plan or nil,
    scale = facts.scale and facts.scale.decide or nil, drain_seconds = facts.drain_seconds,
  }
  local k = _k(lost or require("obleth.policy.lost"))
  local before = {}
  for _, m in ipairs(facts.snapshot.models or {}) do
    for _, r in ipairs(m.replicas or {}) do before[r.nonce] = r.state end
  end
  local run = { now = facts.now, replicas = {}, actions = {}, submits = #state.submits, cancels = #state.cancels,
    state = state }
  local function act(mm, row, action, rule, why)
    run.actions[#run.actions + 1] = { model = mm and mm.name or "?", slot = row and row.slot, job_id = row and row.job_id,
      action = action, rule = rule, facts = why }
  end
  for _, mm in ipairs(state.models) do
    for _, row in ipairs(mm.rows) do
      local was = before[row.nonce]
      if row.adopted then was = "untracked" end
      if row.state ~= "ended" or (was and was ~= "ended") then
        run.replicas[#run.replicas + 1] = { model = mm.name, slot = row.slot, job_id = row.job_id, node = row.node,
          now = was or "-", next = row.state, port = row.port }
      end
    end
  end
  for _, c in ipairs(state.cancels) do
    local mm
    for _, m in ipairs(state.models) do
      for _, r in ipairs(m.rows) do if r == c.row then mm = m end end
    end
    act(mm or { name = "(unknown model)" }, c.row or { job_id = c.job_id }, ("cancel job %s"):format(tostring(c.job_id)),
      c.why, _cancel_facts(c.why, c.row, mm))
  end
  -- the scale policy's decisions, as the pass made them (obleth.provisioner.plan, one owner)
  run.scaling = {}
  for _, mm in ipairs(state.models) do
    local d = mm.scaling
    if d then
      run.scaling[#run.scaling + 1] = { model = mm.name, desired = d.desired, current = d.current,
        change = d.change, reason = d.reason, decision = d }
      if d.change ~= "none" and d.change ~= "hold" then
        act(mm, nil, ("scale %s %d → %d"):format(d.change, d.current, d.desired), "scale", d.reason)
      end
    end
  end
  for _, mm in ipairs(state.models) do
    for _, d in ipairs(mm.decisions or {}) do
      if d.rule == "lost" then
        if d.action == "submit" then
          act(mm, d.row, "submit", "missing replica",
            ("slot %d has no live job (replicas = %s); lost rule: %s"):format(d.slot, tostring(mm.spec.replicas),
              _lost_facts(d.decision, k)))
        elseif d.action == "mark lost" then
          act(mm, d.row, "mark lost", "lost", _lost_facts(d.decision, k))
        elseif d.action == "wait (backoff)" then
          act(mm, { slot = d.slot }, "wait (backoff)", "lost/backoff", ("%s; resubmit after %s"):format(
            _lost_facts(d.decision, k), _date(d.decision.backoff_until)))
        elseif d.action == "wait for Try once more" then
          act(mm, { slot = d.slot }, "wait for Try once more", "lost", _lost_facts(d.decision, k))
        else
          act(mm, { slot = d.slot }, d.action or "wait", "lost", _lost_facts(d.decision, k))
        end
      elseif d.rule == "rollover" and d.action == "start successor" then
        local dd = d.decision
        local ev = dd.evidence or {}
        act(mm, d.row, "start successor", "rollover", ("walltime ends %s; margin %d s = start-up %d s + %s margin %d s; "
          .. "start at %s"):format(_date(dd.ends_at), math.floor(dd.margin or 0), math.floor(ev.startup_seconds or 0),
          tostring(ev.margin_source), math.floor(ev.policy_margin or 0), _date(dd.at)))
      end
    end
  end
  return run
end

--- The actions as comparable keys: "model slot N: action", for old/new side by side.
---@param run table M.run's result
---@return table<string, string> key "model slot" → action
function M.by_slot(run)
  local out = {}
  for _, a in ipairs(run.actions) do
    local key = ("%s slot %s"):format(a.model, tostring(a.slot or "-"))
    out[key] = out[key] and (out[key] .. "; " .. a.action) or a.action
  end
  return out
end

--- Text for people: the replicas (state now → after the pass), then what
--- would be sent and why.
---@param run table M.run's result
---@return string
function M.render(run)
  local rows = {}
  for _, r in ipairs(run.replicas) do
    rows[#rows + 1] = { r.model, r.slot, r.job_id or "-", r.node or "-", r.now, r.next }
  end
  local out = { ("dry run of the next pass at %s (nothing is sent; health checks are not run)"):format(
    os.date("!%Y-%m-%d %H:%M:%SZ", math.floor(run.now))) }
  out[#out + 1] = #rows > 0 and fmt.table({ "MODEL", "SLOT", "JOB", "NODE", "NOW", "AFTER" }, rows)
    or "(no replicas)"
  out[#out + 1] = ""
  local arows = {}
  for _, a in ipairs(run.actions) do
    arows[#arows + 1] = { a.action, a.model, a.slot or "-", a.rule or "", a.facts or "" }
  end
  out[#out + 1] = #arows > 0 and fmt.table({ "WOULD", "MODEL", "SLOT", "RULE", "FACTS" }, arows)
    or "nothing to do"
  out[#out + 1] = ("%d submit(s), %d cancel(s) would be sent"):format(run.submits, run.cancels)
  if run.scaling and #run.scaling > 0 then
    local srows = {}
    for _, x in ipairs(run.scaling) do
      srows[#srows + 1] = { x.model, x.current, x.desired, x.change, x.reason }
    end
    out[#out + 1] = ""
    out[#out + 1] = fmt.table({ "AUTOSCALED", "CURRENT", "DESIRED", "CHANGE", "WHY" }, srows)
  end
  return table.concat(out, "\n")
end

return M
