-- The pass's slots step (obleth.provisioner.plan.slots): how many replicas, which slots stay, and what
-- each slot needs, as pure functions of the rows; what a slot asks for is recorded by a test `act`.
local slots = require "obleth.provisioner.plan.slots"

local NOW = 1764500000

local function row(slot, state, extra)
  local r = { nonce = ("%016x"):format(slot * 100 + (extra and extra.k or 0)), slot = slot, state = state,
    job_id = state ~= "pending" and 1000 + slot or nil }
  for k, v in pairs(extra or {}) do if k ~= "k" then r[k] = v end end
  return r
end

local function slots_of(list)
  local out = {}
  for i, r in ipairs(list) do out[i] = r.slot end
  return out
end

-- an act that records what the step asks for
local function recorder()
  local rec = { cancels = {}, submits = {}, new = {} }
  rec.act = {
    touch = function(r) r._touched = true end,
    cancel = function(r, why, drain_until) rec.cancels[#rec.cancels + 1] = { row = r, why = why, drain_until = drain_until } end,
    new_row = function(slot, successor_of)
      local r = { nonce = "new" .. slot, slot = slot, state = "pending", successor_of = successor_of }
      rec.new[#rec.new + 1] = r
      return r
    end,
    submit = function(r, rollover) rec.submits[#rec.submits + 1] = { row = r, rollover = rollover } end,
  }
  return rec
end

local function f(over)
  local t = { now = NOW, spec = { time_limit = 60 }, blocked = false, ended_now = {}, recent_ends = {},
    lost = function() return { lost = false } end,
    rollover = function() return { start_successor = false } end }
  for k, v in pairs(over or {}) do t[k] = v end
  return t
end

describe("provisioner plan, slots step: count", function()
  it("a fixed spec wants its replicas; the rest go at once as surplus", function()
    local n, why, drain = slots.count({ replicas = 3 }, {}, { now = NOW })
    assert.same({ 3, "surplus replica" }, { n, why })
    assert.is_nil(drain)
  end)

  it("an autoscaled spec wants the scale policy's count of the replicas that hold a job; the rest drain", function()
    local seen
    local scale = function(x) seen = x return { desired = 1, change = "down" } end
    local live = { row(1, "healthy"), row(1, "pending", { k = 1, successor_of = "x" }), row(2, "ending"), row(3, "submitted") }
    local n, why, drain, d = slots.count({ autoscale = { max_replicas = 3 } }, live,
      { now = NOW, scale = scale, load = { inflight = 1 }, drain_seconds = 20 })
    assert.same({ 1, "scaled down", NOW + 20, "down" }, { n, why, drain, d.change })
    assert.same({ 1, 3 }, slots_of(seen.replicas), "successors and replicas on their way out are not counted")
    assert.same({ inflight = 1 }, seen.load)
  end)
end)

describe("provisioner plan, slots step: choose", function()
  it("fills the lowest free slots up to the count", function()
    local keep, per_slot, remove = slots.choose({ row(2, "healthy") }, 3)
    assert.same({ 1, 2, 3 }, keep)
    assert.same({}, per_slot[1])
    assert.same({}, remove)
  end)

  it("frees first the slots whose replicas have not started in Slurm, then the highest numbers", function()
    local live = { row(1, "submitted"), row(2, "healthy"), row(3, "starting"), row(4, "pending"), row(5, "unhealthy") }
    local keep, _, remove = slots.choose(live, 3)
    assert.same({ 2, 3, 5 }, keep)
    assert.same({ 4, 1 }, slots_of(remove))
    keep, _, remove = slots.choose(live, 1)
    assert.same({ 2 }, keep)
    assert.same({ 4, 1, 5, 3 }, slots_of(remove))
  end)

  it("a lost slot has no job: it is freed before a running one", function()
    local keep, _, remove = slots.choose({ row(1, "lost"), row(2, "healthy") }, 1)
    assert.same({ 2 }, keep)
    assert.same({ 1 }, slots_of(remove))
  end)

  it("a slot with only a replica on its way out is free; that replica is never cancelled again", function()
    local live = { row(1, "healthy"), row(2, "ending", { cancel_at = NOW + 20 }) }
    local keep, _, remove = slots.choose(live, 1)
    assert.same({ 1 }, keep)
    assert.same({}, remove)
    local per_slot
    keep, per_slot = slots.choose(live, 2)
    assert.same({ 1, 2 }, keep)
    assert.equal(1, #per_slot[2], "the new replica of slot 2 is decided next to the ending one")
  end)

  it("a slot's successor goes with it, and a row without a slot number always goes", function()
    local live = { row(1, "healthy"), row(2, "healthy"), row(2, "pending", { k = 1, successor_of = "x" }), row(0, "submitted") }
    local keep, _, remove = slots.choose(live, 1)
    assert.same({ 1 }, keep)
    assert.same({ 0, 2, 2 }, slots_of(remove))
  end)
end)

describe("provisioner plan, slots step: ends", function()
  it("this pass's ends first (newest first), then the snapshot's; other slots' are left out", function()
    local a = { slot = 1, ended_at = NOW - 5, ["end"] = { state = "FAILED", exit_code = 1 }, job_id = 7 }
    local b = { slot = 1, ended_at = NOW - 1, healthy_at = NOW - 3, ["end"] = { state = "TIMEOUT" } }
    local ends = slots.ends(1, { a, b, { slot = 2, ended_at = NOW } },
      { { slot = 1, at = NOW - 100, healthy = false, exit_code = 98 }, { slot = 2, at = NOW - 50 } })
    assert.equal(3, #ends)
    assert.same({ true, "TIMEOUT", b }, { ends[1].healthy, ends[1].state, ends[1].row })
    assert.same({ false, 1, 7 }, { ends[2].healthy, ends[2].exit_code, ends[2].job_id })
    assert.same({ NOW - 100, 98 }, { ends[3].at, ends[3].exit_code })
    assert.equal(0, #slots.ends(1, {}, nil), "after Try once more the snapshot's ends no longer count")
  end)
end)

describe("provisioner plan, slots step: settle", function()
  it("an empty slot gets a new replica unless the lost rule, a backoff or a refused submit says wait", function()
    local rec = recorder()
    local d = slots.settle(1, {}, f(), rec.act)
    assert.same({ "lost", "submit" }, { d.rule, d.action })
    assert.equal(rec.new[1], rec.submits[1].row)
    d = slots.settle(1, {}, f({ lost = function() return { lost = false, backoff_until = NOW + 9 } end }), recorder().act)
    assert.equal("wait (backoff)", d.action)
    d = slots.settle(1, {}, f({ blocked = true }), recorder().act)
    assert.equal("wait (provision error)", d.action)
    d = slots.settle(1, {}, f({ lost = function() return { lost = true } end }), recorder().act)
    assert.equal("wait for Try once more", d.action)
    local none = recorder()
    none.act.new_row = function() return nil end
    assert.equal("wait (no free port)", slots.settle(1, {}, f(), none.act).action)
  end)

  it("the end that made the slot lost marks its row lost", function()
    local ended = row(1, "ended", { ended_at = NOW - 1 })
    local rule = function(ends) return { lost = true, failures = 3, evidence = { ends[1] } } end
    local d = slots.settle(1, {}, f({ lost = rule, ended_now = { ended } }), recorder().act)
    assert.same({ "mark lost", ended, "lost" }, { d.action, d.row, ended.state })
    assert.matches("ended 3 times in a row", ended.problem)
  end)

  it("a lost slot is not replaced, and a replica next to it is cancelled", function()
    local rec = recorder()
    local other = row(1, "submitted", { k = 1 })
    assert.is_nil(slots.settle(1, { row(1, "lost"), other }, f(), rec.act))
    assert.same({ { row = other, why = "slot lost" } }, rec.cancels)
    assert.same({}, rec.submits)
  end)

  it("keeps one primary per slot, the furthest along, and cancels a duplicate", function()
    local a, b = row(1, "healthy"), row(1, "submitted", { k = 1, job_id = 2000 })
    local rec = recorder()
    slots.settle(1, { b, a }, f(), rec.act)
    assert.same({ { row = b, why = "duplicate replica" } }, rec.cancels)
    local primary, successor, dups = slots.primary({ b, a })
    assert.same({ a, nil, 1 }, { primary, successor, #dups })
  end)

  it("a recorded pending replica (its submit never reached Slurm) is submitted under its own nonce", function()
    local p = row(1, "pending")
    local rec = recorder()
    slots.settle(1, { p }, f(), rec.act)
    assert.equal(p, rec.submits[1].row)
    assert.same({}, rec.new)
  end)

  it("rollover: a successor before the walltime ends; the old one drains once the successor serves", function()
    local old = row(1, "healthy", { started_at = NOW - 3300 })
    local rec = recorder()
    local d = slots.settle(1, { old }, f({ rollover = function() return { start_successor = true } end }), rec.act)
    assert.same({ "rollover", "start successor" }, { d.rule, d.action })
    assert.equal(old.nonce, rec.submits[1].row.successor_of)
    assert.is_true(rec.submits[1].rollover.start_successor)
    local succ = row(1, "healthy", { k = 1, successor_of = old.nonce })
    rec = recorder()
    slots.settle(1, { old, succ }, f({ drain_seconds = 30 }), rec.act)
    assert.is_nil(succ.successor_of)
    assert.same({ { row = old, why = "walltime rollover", drain_until = NOW + 30 } }, rec.cancels)
  end)

  it("a successor whose old replica is gone takes its place", function()
    local succ = row(1, "starting", { successor_of = "gone" })
    local rec = recorder()
    slots.settle(1, { succ }, f(), rec.act)
    assert.is_nil(succ.successor_of)
    assert.is_true(succ._touched)
    assert.same({}, rec.cancels)
  end)
end)

describe("provisioner plan, slots step: sweep", function()
  local function ending(over)
    local r = row(1, "ending", { job_live = true, cancel_why = "scaled down" })
    for k, v in pairs(over or {}) do r[k] = v end
    return r
  end

  it("cancels a replica on its way out whose job still runs, once its drain is over", function()
    local r = ending({ cancel_at = NOW - 1 })
    assert.same({ { row = r, job_id = r.job_id, why = "scaled down" } }, slots.sweep({ r }, NOW))
    assert.is_true(r.cancel_queued)
    assert.same({}, slots.sweep({ r }, NOW), "a cancel queued this pass is not repeated")
  end)

  it("waits while the drain lasts; leaves a job that no longer runs and rows that are not ending", function()
    assert.same({}, slots.sweep({ ending({ cancel_at = NOW + 20 }), ending({ job_live = false }),
      row(2, "healthy", { job_live = true }) }, NOW))
  end)

  it("a drain this process never knew (a restart) or a cancel that did not take is sent again", function()
    local r = ending()
    r.cancel_why = nil
    assert.equal("ending, its job still runs", slots.sweep({ r }, NOW)[1].why)
    r = ending({ cancel_at = NOW - 5, cancel_sent = true })
    r.cancel_why = nil
    assert.equal("drained", slots.sweep({ r }, NOW)[1].why)
  end)
end)
