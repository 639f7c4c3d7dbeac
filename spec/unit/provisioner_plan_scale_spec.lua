-- The pass with autoscaled specs (obleth.provisioner.plan.reconcile + obleth.policy.scale): the count
-- comes from the load, scaling down drains, scale to zero and wake. Settings: target_inflight 4,
-- scale_down_after 300 s, idle_to_zero_after 1200 s, min 0, max 3.
local plan = require "obleth.provisioner.plan"
local tag = require "obleth.job.tag"

local NOW = 1764500000
local INSTANCE = "0badcafe"
local AS = { min_replicas = 0, max_replicas = 3, target_inflight = 4, scale_down_after = 300,
  idle_to_zero_after = 1200 }

local counter = 0
local function nonce()
  counter = counter + 1
  return ("%016x"):format(counter)
end

local function spec()
  return { enabled = true, partition = "gpu", time_limit = 600, generation = 1, launch_command = "x",
    autoscale = AS, health = { path = "/health" } }
end

local function healthy(slot, job_id)
  local n = ("%016x"):format(9000 + slot)
  return { nonce = n, model_id = 1, slot = slot, state = "healthy", job_id = job_id, port = 20000 + slot,
    endpoint = "http://n1:" .. (20000 + slot), started_at = NOW - 3000, healthy_at = NOW - 2900 },
    { id = job_id, name = tag.name(INSTANCE, 1, slot, n), comment = tag.comment(INSTANCE, 1, slot, n, 1, 20000 + slot),
      state = { base = "RUNNING", flags = {} }, node_list = { "n1" }, start_time = NOW - 3000 }
end

local function run(replicas, jobs, load, extra)
  local input = { now = NOW, nonce = nonce, rand = function(lo) return lo end, jobs = jobs,
    snapshot = { instance = INSTANCE, settings = { enabled = true, defaults = { port_range = { 20000, 20009 } } },
      models = { { id = 1, name = "m", spec = spec(), replicas = replicas, load = load } } } }
  for k, v in pairs(extra or {}) do input[k] = v end
  return plan.reconcile(input)
end

describe("provisioner plan: autoscaled spec", function()
  it("submits up to the scale policy's desired count (9 requests / 4 → 3)", function()
    local r1, j1 = healthy(1, 501)
    local st = run({ r1 }, { j1 }, { inflight = 9, last_request_at = NOW, observed_since = NOW - 3600 })
    assert.equal(2, #st.submits)
    assert.same({ 2, 3 }, { st.submits[1].row.slot, st.submits[2].row.slot })
    assert.equal(3, st.models[1].scaling.desired)
    assert.equal("up", st.models[1].scaling.change)
  end)

  it("scaling down drains: the slot above the count leaves the endpoints, its job goes after the drain", function()
    local r1, j1 = healthy(1, 501)
    local r2, j2 = healthy(2, 502)
    -- 1 request now, none else in the last 300 s: ceil(1 / 3.2) = 1
    local load = { inflight = 1, last_request_at = NOW, observed_since = NOW - 3600 }
    local st = run({ r1, r2 }, { j1, j2 }, load, { drain_seconds = 30 })
    assert.equal(1, st.models[1].scaling.desired)
    local gone
    for _, r in ipairs(st.rows) do if r.slot == 2 then gone = r end end
    assert.equal("ending", gone.state)
    assert.equal("scaled down", gone.cancel_why)
    assert.equal(NOW + 30, gone.cancel_at)
    assert.equal(0, #st.cancels, "nothing is cancelled before the drain is over")
    local eps = plan.health(st, {}, NOW)
    assert.same({ "http://n1:20001" }, eps["1"], "only slot 1 takes requests")
    -- the next pass after the drain deadline cancels the job
    gone.cancel_at = NOW - 1
    st = run({ r1, gone }, { j1, j2 }, load)
    assert.equal(1, #st.cancels)
    assert.equal(502, st.cancels[1].job_id)
    assert.equal("scaled down", st.cancels[1].why)
  end)

  it("scales to zero after idle_to_zero_after without a request", function()
    local r1, j1 = healthy(1, 501)
    local st = run({ r1 }, { j1 }, { inflight = 0, last_request_at = NOW - 1300, observed_since = NOW - 3600 })
    assert.equal(0, st.models[1].scaling.desired)
    assert.equal("to_zero", st.models[1].scaling.change)
    assert.equal("ending", st.rows[1].state)
    assert.equal(0, #st.submits)
  end)

  it("a request waiting at zero wakes slot 1 at once; earlier scale-down ends are no failures", function()
    local recent = { { slot = 1, state = "CANCELLED", healthy = true, at = NOW - 2000, cancel_why = "scaled down" },
      { slot = 1, state = "CANCELLED", healthy = false, at = NOW - 5000, cancel_why = "scaled down" } }
    local st = run({}, {}, { inflight = 0, queued = 1, last_request_at = NOW, observed_since = NOW - 3600 })
    assert.equal("wake", st.models[1].scaling.change)
    assert.equal(1, #st.submits)
    assert.equal(1, st.submits[1].row.slot)
    -- with the model's recent ends (obleth cancelled them: no backoff)
    st = plan.reconcile { now = NOW, nonce = nonce, rand = function(lo) return lo end, jobs = {},
      snapshot = { instance = INSTANCE, settings = { enabled = true, defaults = { port_range = { 20000, 20009 } } },
        models = { { id = 1, name = "m", spec = spec(), replicas = {}, recent_ends = recent,
          load = { queued = 1, last_request_at = NOW, observed_since = NOW - 3600 } } } } }
    assert.equal(1, #st.submits)
  end)

  it("stays at zero without demand", function()
    local st = run({}, {}, { inflight = 0, observed_since = NOW - 10 })
    assert.equal(0, #st.submits)
    assert.equal("none", st.models[1].scaling.change)
  end)

  it("applies the scale rule it is given (a policy.d override)", function()
    local r1, j1 = healthy(1, 501)
    local st = run({ r1 }, { j1 }, { inflight = 1, last_request_at = NOW, observed_since = NOW - 3600 },
      { scale = function(f) return { desired = 2, current = #f.replicas, change = "up", reason = "operator" } end })
    assert.equal(1, #st.submits)
    assert.equal(2, st.submits[1].row.slot)
  end)
end)

describe("provisioner plan: which replicas a scale-down removes", function()
  local function desired(n)
    return function(f) return { desired = n, current = #f.replicas, change = "down", reason = "spec" } end
  end
  local function queued(slot, job_id)
    local n = ("%016x"):format(9000 + slot)
    return { nonce = n, model_id = 1, slot = slot, state = "submitted", job_id = job_id, port = 20000 + slot },
      { id = job_id, name = tag.name(INSTANCE, 1, slot, n), comment = tag.comment(INSTANCE, 1, slot, n, 1, 20000 + slot),
        state = { base = "PENDING", flags = {} }, reason = "Resources" }
  end
  local function by_slot(st)
    local s = {}
    for _, r in ipairs(st.rows) do s[r.slot] = r end
    return s
  end

  it("first a replica still pending in Slurm, though its slot number is the lowest", function()
    local r1, j1 = queued(1, 501)
    local r2, j2 = healthy(2, 502)
    local r3, j3 = healthy(3, 503)
    local st = run({ r1, r2, r3 }, { j1, j2, j3 }, {}, { scale = desired(2) })
    local s = by_slot(st)
    assert.equal("ending", s[1].state)
    assert.equal("scaled down", s[1].cancel_why)
    assert.same({ 501 }, { st.cancels[1].job_id }, "a queued job holds nothing to drain: cancelled at once")
    assert.equal(1, #st.cancels)
    assert.same({ "healthy", "healthy" }, { s[2].state, s[3].state })
    assert.equal(0, #st.submits)
  end)

  it("then the highest slot numbers, among started replicas too", function()
    local r1, j1 = queued(1, 501)
    local r2, j2 = healthy(2, 502)
    local r3, j3 = healthy(3, 503)
    local st = run({ r1, r2, r3 }, { j1, j2, j3 }, {}, { scale = desired(1), drain_seconds = 30 })
    local s = by_slot(st)
    assert.same({ "ending", "healthy", "ending" }, { s[1].state, s[2].state, s[3].state })
    assert.equal(NOW + 30, s[3].cancel_at, "a serving replica drains first")
    local q1, k1 = queued(1, 504)
    local q2, k2 = queued(2, 505)
    st = run({ q1, q2 }, { k1, k2 }, {}, { scale = desired(1) })
    s = by_slot(st)
    assert.same({ "submitted", "ending" }, { s[1].state, s[2].state })
  end)

  it("the slots that stay are kept next pass, and a scale-up fills the lowest free slot", function()
    local r2, j2 = healthy(2, 502)
    local r3, j3 = healthy(3, 503)
    local st = run({ r2, r3 }, { j2, j3 }, {}, { scale = desired(2) })
    assert.equal(0, #st.cancels)
    assert.equal(0, #st.submits)
    st = run({ r2, r3 }, { j2, j3 }, {}, { scale = desired(3) })
    assert.equal(1, #st.submits)
    assert.equal(1, st.submits[1].row.slot)
  end)

  it("a draining replica keeps its job until the drain is over, also in the passes after the one that decided", function()
    local r1, j1 = healthy(1, 501)
    local r2, j2 = healthy(2, 502)
    r2.state, r2.cancel_why, r2.cancel_at = "ending", "scaled down", NOW + 20
    local st = run({ r1, r2 }, { j1, j2 }, {}, { scale = desired(1) })
    assert.equal(0, #st.cancels)
    r2.cancel_at = NOW - 1
    st = run({ r1, r2 }, { j1, j2 }, {}, { scale = desired(1) })
    assert.same({ 502 }, { st.cancels[1].job_id })
    assert.equal("scaled down", st.cancels[1].why)
  end)
end)
