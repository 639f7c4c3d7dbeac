-- The pass's jobs step (obleth.provisioner.plan.jobs): what Slurm's one job listing says about each
-- replica's job, as pure functions of the listing and the rows.
local jobs = require "obleth.provisioner.plan.jobs"
local tag = require "obleth.job.tag"

local NOW = 1764500000
local INSTANCE = "0badcafe"

local function job(id, slot, nonce, base, extra)
  local j = { id = id, name = tag.name(INSTANCE, 1, slot, nonce), comment = tag.comment(INSTANCE, 1, slot, nonce, 2, 20007),
    state = { base = base, flags = {} } }
  for k, v in pairs(extra or {}) do j[k] = v end
  return j
end

local F = { now = NOW, model_id = 1, listed = true }

describe("provisioner plan, jobs step: index", function()
  it("keys this installation's jobs by nonce, skips the rest, and cancels the older live job of a nonce", function()
    local n = "00000000000000a1"
    local by, cancels = jobs.index({ job(11, 1, n, "RUNNING"), job(12, 1, n, "PENDING"),
      { id = 13, name = "someone-elses", state = { base = "RUNNING" } },
      { id = 14, name = "obleth-feedf00d-m1-s1-00000000000000a2",
        comment = "obleth instance=feedf00d model=1 slot=1 nonce=00000000000000a2 gen=1", state = { base = "RUNNING" } } },
      INSTANCE)
    assert.equal(12, by[n].job.id)
    assert.equal(1, by[n].tag.slot)
    assert.is_nil(by["00000000000000a2"])
    assert.same({ { job_id = 11, why = "second job for one replica" } }, cancels)
    -- an older job that ended is no cancel
    local _, none = jobs.index({ job(11, 1, n, "COMPLETED"), job(12, 1, n, "RUNNING") }, INSTANCE)
    assert.same({}, none)
  end)
end)

describe("provisioner plan, jobs step: adopt", function()
  it("adopts a live tagged job no row records, with the tag's slot, generation and port", function()
    local n = "00000000000000b1"
    local by = jobs.index({ job(21, 2, n, "PENDING", { submit_time = NOW - 3 }) }, INSTANCE)
    local models = { { id = 1, rows = {} } }
    local adopted, cancels = jobs.adopt(models, by, NOW)
    assert.equal(1, #adopted)
    assert.same({ nonce = n, model_id = 1, slot = 2, state = "submitted", job_id = 21, submitted_at = NOW - 3,
      adopted = true, generation = 2, port = 20007 }, adopted[1])
    assert.equal(adopted[1], models[1].rows[1])
    assert.same({}, cancels)
  end)

  it("leaves recorded and ended jobs alone, and cancels the job of a model the store no longer has", function()
    local by = jobs.index({ job(31, 1, "00000000000000c1", "RUNNING"), job(32, 1, "00000000000000c2", "FAILED") },
      INSTANCE)
    local adopted, cancels = jobs.adopt({ { id = 1, rows = { { nonce = "00000000000000c1" } } } }, by, NOW)
    assert.same({}, adopted)
    assert.same({}, cancels)
    adopted, cancels = jobs.adopt({ { id = 7, rows = {} } }, by, NOW)
    assert.same({}, adopted)
    assert.same({ { job_id = 31, why = "no such model" } }, cancels)
  end)
end)

describe("provisioner plan, jobs step: follow", function()
  local function row(over)
    local r = { nonce = "00000000000000d1", model_id = 1, slot = 1, state = "submitted", job_id = 41, port = 20001 }
    for k, v in pairs(over or {}) do r[k] = v end
    return r
  end

  it("a job that starts: the replica is starting on the job's first node", function()
    local r = row()
    local running = job(41, 1, r.nonce, "RUNNING", { node_list = { "n2", "n3" }, start_time = NOW - 5 })
    local o, ended = jobs.follow(r, { job = running }, F)
    assert.is_nil(o)
    assert.is_false(ended)
    assert.same({ "starting", "n2", NOW - 5, true }, { r.state, r.node, r.started_at, r.job_live })
  end)

  it("a job that ended: Slurm's end state, exit code and node, reported once as an outcome", function()
    local r = row({ state = "healthy", node = "n1", healthy_at = NOW - 50, cancel_why = nil })
    local o, ended = jobs.follow(r, { job = job(41, 1, r.nonce, "OUT_OF_MEMORY", { end_time = NOW - 1,
      exit_code = { code = 0, signal = 9 }, node_list = { "n1" } }) }, F)
    assert.is_true(ended)
    assert.equal("ended", r.state)
    assert.same({ state = "OUT_OF_MEMORY", exit_code = 0, signal = 9, node = "n1" }, r["end"])
    assert.same({ "OUT_OF_MEMORY", 41, true, NOW - 1 }, { o.state, o.job_id, o.healthy, o.ended_at })
  end)

  it("a running job requeued: out of the endpoints, the interruption is an outcome, never an end", function()
    local r = row({ state = "healthy", node = "n1", endpoint = "http://n1:20001", started_at = NOW - 100,
      healthy_at = NOW - 90 })
    local o, ended = jobs.follow(r, { job = job(41, 1, r.nonce, "PENDING", { reason = "BeginTime" }) }, F)
    assert.is_false(ended)
    assert.same({ "REQUEUED", "n1", NOW - 100, true }, { o.state, o.node, o.started_at, o.healthy })
    assert.same({ "submitted", nil, nil, nil }, { r.state, r.node, r.endpoint, r.started_at })
  end)

  it("a job missing from the listing and from accounting ends its replica; without a listing nothing is concluded", function()
    local r = row()
    jobs.follow(r, nil, F)
    assert.equal("ended", r.state)
    assert.equal("UNKNOWN", r["end"].state)
    r = row()
    jobs.follow(r, nil, { now = NOW, model_id = 1, listed = false })
    assert.equal("submitted", r.state)
    -- the accounting lookup stands in for the listing
    r = row()
    jobs.follow(r, nil, { now = NOW, model_id = 1, listed = true,
      job_by_id = { [41] = job(41, 1, r.nonce, "TIMEOUT", { end_time = NOW - 2 }) } })
    assert.same({ "ended", "TIMEOUT" }, { r.state, r["end"].state })
  end)

  it("a row recorded before its submit follows the job the listing shows for its nonce", function()
    local r = row({ state = "pending" })
    r.job_id = nil
    local _, _, adopted = jobs.follow(r, { job = job(51, 1, r.nonce, "PENDING", { submit_time = NOW - 4 }) }, F)
    assert.is_true(adopted)
    assert.same({ 51, "submitted", NOW - 4 }, { r.job_id, r.state, r.submitted_at })
  end)

  it("lost and ended rows are left as they are", function()
    local r = row({ state = "lost" })
    assert.is_nil((jobs.follow(r, { job = job(41, 1, r.nonce, "RUNNING") }, F)))
    assert.is_nil(r._touched)
  end)
end)

describe("provisioner plan, jobs step: step", function()
  it("runs index, adopt and follow over every model: cancels, adopted rows, outcomes, ended_now", function()
    local known = { nonce = "00000000000000e1", model_id = 1, slot = 1, state = "starting", job_id = 61, port = 20001 }
    local models = { { id = 1, rows = { known }, ended_now = {} } }
    local listing = { job(61, 1, known.nonce, "FAILED", { end_time = NOW - 1, exit_code = { code = 1 } }),
      job(62, 2, "00000000000000e2", "RUNNING"),
      { id = 63, name = tag.name(INSTANCE, 9, 1, "00000000000000e3"),
        comment = tag.comment(INSTANCE, 9, 1, "00000000000000e3", 1, 20009), state = { base = "RUNNING" } } }
    local cancels, adopted, outcomes = jobs.step(models, { now = NOW, jobs = listing, instance = INSTANCE })
    assert.same({ { job_id = 63, why = "no such model" } }, cancels)
    assert.same({ 62 }, { adopted[1].job_id })
    assert.equal(1, #adopted)
    assert.same({ "FAILED", 61 }, { outcomes[1].state, outcomes[1].job_id })
    assert.same({ known }, models[1].ended_now)
    assert.equal("starting", adopted[1].state, "an adopted job is followed in the same pass")
  end)
end)
