--- The pass's second step, slots: which replica slots a model wants, and what each slot needs.
--
-- count(spec, live, f)     how many replicas: the spec's `replicas`, or for a spec with `autoscale`
--                          the scale policy's desired count (obleth.policy.scale), with the way the
--                          others go (surplus at once; scaled down after the drain)
-- choose(live, n)          which slots stay and which replicas go: with more slots than wanted, first
--                          the slots whose replicas have not started in Slurm (pending, queued, lost),
--                          then the highest slot numbers; with fewer, the lowest free numbers are added
-- ends(slot, ended_now, recent_ends)  a slot's recent ends, newest first: the lost rule's facts
-- settle(slot, rows, f, act)          one slot: keep one primary (+ its rollover successor), cancel
--                          duplicates, follow a lost slot, submit a missing replica unless the lost
--                          rule or a refused submit says wait, start a successor before the walltime
--                          ends, drain the old replica once the successor serves
-- sweep(rows, now)         replicas on their way out whose job still runs: cancelled once their drain
--                          is over
--
-- Pure: no I/O. The rows are the plan's own copies; what must happen to them is asked of `act`
-- (obleth.provisioner.plan.reconcile gives it: cancel, a new row with a free port, a submit).
-- Times are epoch seconds.
local WHY = require "obleth.job.cancel_why"

local M = {}

-- replica states that hold or wait for a job (what the scale policy counts as current)
local SCALE_LIVE = { pending = true, submitted = true, starting = true, healthy = true, unhealthy = true }
-- replica states whose job runs in Slurm (a scale-down keeps them longest)
local STARTED = { starting = true, healthy = true, unhealthy = true }
-- a slot's primary: the replica furthest along, then the newest job
local RANK = { healthy = 5, unhealthy = 4, starting = 3, submitted = 2, pending = 1 }

local function active(row) return row.state ~= "ending" and row.state ~= "ended" end

--- How many replicas the model wants, and how the ones above that go.
---@param spec table the managed spec (`replicas`, or `autoscale`)
---@param live table[] the model's rows that have not ended
---@param f {now: number, scale: function, load: table|nil, drain_seconds: number|nil}
---  scale: the scale policy's decide; drain_seconds: how long a scaled-down replica keeps its job
---  after leaving the endpoints (default 30)
---@return integer n
---@return string why the cancel reason of a replica above n (obleth.job.cancel_why)
---@return number|nil drain_until when a healthy replica above n is cancelled (nil: at once)
---@return table|nil decision the scale policy's decision (autoscaled specs only)
function M.count(spec, live, f)
  if type(spec.autoscale) ~= "table" then return spec.replicas or 1, WHY.SURPLUS, nil, nil end
  -- the scale policy sets the count from the load; the replicas above it drain (they leave the
  -- endpoints at once, their jobs go after drain_seconds), as a walltime rollover does
  local current = {}
  for _, row in ipairs(live) do
    local succ = row.successor_of -- JSON null (light userdata) is none
    if SCALE_LIVE[row.state] and (succ == nil or type(succ) == "userdata") then current[#current + 1] = row end
  end
  local d = f.scale({ now = f.now, autoscale = spec.autoscale, replicas = current, load = f.load or {} })
  return d.desired, WHY.SCALED_DOWN, f.now + (f.drain_seconds or 30), d
end

--- Which slots stay, and which replicas go. A slot is taken while one of its rows is neither ending
--- nor ended (a lost row takes its slot). With more taken slots than `n`, the ones to free are, first,
--- those where no replica has started in Slurm (pending, queued, lost), then the highest numbers;
--- with fewer, the lowest free numbers from 1 are added. A row with no slot number (< 1) always goes.
---@param live table[] the model's rows that have not ended
---@param n integer the count M.count gave
---@return integer[] keep the slots that stay, ascending (n of them)
---@return table<integer, table[]> per_slot the rows of each kept slot
---@return table[] remove the rows to cancel (active rows of the slots that go; rows without a slot)
function M.choose(live, n)
  local by_slot, taken, remove = {}, {}, {}
  for _, row in ipairs(live) do
    local s = row.slot or 0
    if s < 1 then
      remove[#remove + 1] = row
    else
      if not by_slot[s] then by_slot[s] = { rows = {}, started = false } end
      local b = by_slot[s]
      b.rows[#b.rows + 1] = row
      if active(row) and not b.taken then b.taken = true; taken[#taken + 1] = s end
      if STARTED[row.state] then b.started = true end
    end
  end
  local keep = {}
  if #taken > n then
    -- the slots that go come first: not started, then the highest number
    table.sort(taken, function(a, b)
      local sa, sb = by_slot[a].started, by_slot[b].started
      if sa ~= sb then return not sa end
      return a > b
    end)
    for i, s in ipairs(taken) do
      if i <= #taken - n then
        for _, row in ipairs(by_slot[s].rows) do
          if active(row) then remove[#remove + 1] = row end
        end
      else
        keep[#keep + 1] = s
      end
    end
  else
    for _, s in ipairs(taken) do keep[#keep + 1] = s end
    local s = 1
    while #keep < n do
      if not (by_slot[s] and by_slot[s].taken) then keep[#keep + 1] = s end
      s = s + 1
    end
  end
  table.sort(keep)
  local per_slot = {}
  for _, s in ipairs(keep) do per_slot[s] = by_slot[s] and by_slot[s].rows or {} end
  return keep, per_slot, remove
end

--- A slot's recent ends, newest first: those of this pass (rows whose job ended now), then the
--- snapshot's. Which of them count is the lost rule's decision (obleth.policy.lost).
---@param slot integer
---@param ended_now table[] rows whose job ended in this pass
---@param recent_ends table[]|nil the snapshot's ends of the model {slot, healthy, at, state, exit_code,
---  cancel_why}; nil after "Try once more" (they no longer count)
---@return table[] {healthy, at, state, exit_code, cancel_why, row|nil, job_id|nil}
function M.ends(slot, ended_now, recent_ends)
  local ends = {}
  for _, r in ipairs(ended_now) do
    if r.slot == slot then
      local en = r["end"] or {}
      ends[#ends + 1] = { healthy = r.healthy_at ~= nil, at = r.ended_at, row = r, state = en.state,
        exit_code = en.exit_code, cancel_why = r.cancel_why, job_id = r.job_id }
    end
  end
  table.sort(ends, function(a, b) return (a.at or 0) > (b.at or 0) end)
  for _, e in ipairs(recent_ends or {}) do
    if e.slot == slot then
      ends[#ends + 1] = { healthy = e.healthy, at = e.at, state = e.state, exit_code = e.exit_code,
        cancel_why = e.cancel_why }
    end
  end
  return ends
end

--- A slot's primary (the replica furthest along, then the newest job; a successor is never one) and
--- its successor; a successor whose primary is gone takes its place; the rest are duplicates.
---@param rows table[] the slot's active rows
---@return table|nil primary, table|nil successor, table[] duplicates, table|nil promoted the successor
---  that took its old replica's place
function M.primary(rows)
  local primary, successor, promoted, dups = nil, nil, nil, {}
  for _, r in ipairs(rows) do
    if not r.successor_of then
      local a, b = RANK[r.state] or 0, primary and (RANK[primary.state] or 0)
      if not primary or a > b or (a == b and (r.job_id or 0) > (primary.job_id or 0)) then primary = r end
    end
  end
  for _, r in ipairs(rows) do
    if r ~= primary then
      if r.successor_of and primary and r.successor_of == primary.nonce and not successor then
        successor = r
      elseif r.successor_of and not primary then
        primary, promoted = r, r
      else
        dups[#dups + 1] = r
      end
    end
  end
  return primary, successor, dups, promoted
end

--- Settle one wanted slot.
---@param slot integer
---@param rows table[] the slot's rows that have not ended (M.choose's per_slot[slot])
---@param f {now: number, spec: table, blocked: boolean, lost: function, rollover: function,
---  ended_now: table[], recent_ends: table[]|nil, drain_seconds: number|nil}
---  blocked: a refused submit of this spec's generation (provision_error) holds new submits
---@param act {cancel: fun(row: table, why: string, drain_until: number|nil), touch: fun(row: table),
---  new_row: fun(slot: integer, successor_of: string|nil): table|nil, submit: fun(row: table, rollover: table|nil)}
---  new_row: a pending row with a free port (nil: no port is free)
---@return table|nil decided {slot, rule = "lost"|"rollover", decision, action, row|nil}: what a rule
---  decided, for the dry run and the pass's flags; action "mark lost", "wait for Try once more",
---  "wait (backoff)", "wait (provision error)", "submit", "wait (no free port)", "start successor", "keep"
function M.settle(slot, rows, f, act)
  local now = f.now
  local live, lost_row = {}, nil
  for _, r in ipairs(rows) do
    if r.state == "lost" then lost_row = r elseif active(r) then live[#live + 1] = r end
  end
  if lost_row then
    -- not replaced until "Try once more"
    for _, r in ipairs(live) do act.cancel(r, WHY.SLOT_LOST) end
    return nil
  end
  -- never two jobs for one replica: keep one primary (+ its successor)
  local primary, successor, dups, promoted = M.primary(live)
  if promoted then
    promoted.successor_of = nil
    act.touch(promoted)
  end
  for _, r in ipairs(dups) do act.cancel(r, WHY.DUPLICATE) end
  if not primary then
    local d = f.lost(M.ends(slot, f.ended_now, f.recent_ends))
    -- the newest end that counted, when it ended in this pass, is the row marked lost
    local just_ended = d.evidence and d.evidence[1] and d.evidence[1].row
    local decided = { slot = slot, rule = "lost", decision = d }
    if d.lost and just_ended then
      just_ended.state = "lost"
      just_ended.problem = ("ended %d times in a row without becoming healthy"):format(d.failures or 0)
      act.touch(just_ended)
      decided.action, decided.row = "mark lost", just_ended
    elseif d.lost then
      decided.action = "wait for Try once more" -- already lost before (e.g. after a restart)
    elseif d.backoff_until and d.backoff_until > now then
      decided.action = "wait (backoff)"
    elseif f.blocked then
      decided.action = "wait (provision error)"
    else
      local row = act.new_row(slot)
      if row then
        act.submit(row)
        decided.action, decided.row = "submit", row
      else
        decided.action = "wait (no free port)"
      end
    end
    return decided
  end
  if primary.state == "pending" and not primary.job_id then
    -- recorded for a submit that never reached Slurm (a crash, a lost lease): submit it under its
    -- recorded nonce and port
    if not f.blocked then act.submit(primary) end
  elseif successor and successor.state == "pending" and not successor.job_id then
    if not f.blocked then act.submit(successor) end
  elseif primary.state == "healthy" and not successor and not f.blocked then
    local spec = f.spec
    local d = f.rollover({ now = now, time_limit = spec.time_limit, started_at = primary.started_at,
      healthy_at = primary.healthy_at, rollover_margin = spec.rollover_margin })
    if d.start_successor then
      local row = act.new_row(slot, primary.nonce)
      if row then act.submit(row, d) end
    end
    return { slot = slot, rule = "rollover", decision = d, row = primary,
      action = d.start_successor and "start successor" or "keep" }
  elseif successor and successor.state == "healthy" and primary.state ~= "ending" then
    -- the successor serves: the old one leaves the endpoints, then its job goes
    successor.successor_of = nil
    act.touch(successor)
    act.cancel(primary, WHY.ROLLOVER, now + (f.drain_seconds or 30))
  end
  return nil
end

--- The replicas on their way out whose job still holds resources: cancelled once the drain is over.
--- Also when this process never knew the drain (the deadline died with a provisioner that crashed),
--- and again when a cancel sent in an earlier pass did not take: an "ending" row never keeps its job
--- alive next to the replica that took its slot. A cancel already queued this pass is not repeated.
---@param rows table[] a model's rows (`cancel_queued` is set on those returned)
---@param now number
---@return table[] cancels {row, job_id, why}
function M.sweep(rows, now)
  local cancels = {}
  for _, row in ipairs(rows) do
    if row.state == "ending" and row.job_live and not row.cancel_queued
      and not (row.cancel_at and row.cancel_at > now) then
      cancels[#cancels + 1] = { row = row, job_id = row.job_id,
        why = row.cancel_why or (row.cancel_at and "drained" or "ending, its job still runs") }
      row.cancel_queued = true
    end
  end
  return cancels
end

return M
