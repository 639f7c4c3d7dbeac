-- Replicas recorded before their submit (POST /api/v1/provisioner/submits, the lease's fencing):
-- the next pass follows the job when it exists, submits the recorded row when it does not, and
-- cancels a second job carrying one replica's nonce.
local plan = require "obleth.provisioner.plan"
local tag = require "obleth.job.tag"

local NOW = 1764500000
local INSTANCE = "0badcafe"

local function spec(over)
  local s = { enabled = true, replicas = 1, partition = "gpu", time_limit = 60, generation = 1,
    launch_command = "obleth smoke-engine", health = { path = "/health", interval = 5, timeout = 2,
      startup_grace = 60, failure_threshold = 3 } }
  for k, v in pairs(over or {}) do s[k] = v end
  return s
end

local function job(slot, nonce, id, base)
  return { id = id, name = tag.name(INSTANCE, 1, slot, nonce), comment = tag.comment(INSTANCE, 1, slot, nonce, 1, 20003),
    state = { base = base, flags = {} }, submit_time = NOW - 5 }
end

local function run(rows, jobs, sp)
  local fresh = 0
  return plan.reconcile { now = NOW, jobs = jobs, rand = function(lo) return lo end,
    nonce = function() fresh = fresh + 1; return ("%016x"):format(0xf000 + fresh) end,
    snapshot = { instance = INSTANCE, settings = { enabled = true, defaults = { port_range = { 20000, 20009 } } },
      models = { { id = 1, name = "m", spec = sp or spec(), replicas = rows } } } }
end

local RECORDED = "00000000000000c1"
local function recorded() -- as the store holds a recorded replica: pending, no job yet
  return { id = 9, nonce = RECORDED, model_id = 1, slot = 1, state = "pending", port = 20003, generation = 1 }
end

describe("provisioner plan: replicas recorded before their submit", function()
  it("a recorded replica whose job exists follows it (adopted), and nothing is submitted", function()
    local st = run({ recorded() }, { job(1, RECORDED, 41, "RUNNING") })
    assert.equal(0, #st.submits)
    assert.equal(0, #st.cancels)
    assert.equal(1, #st.adopted)
    local row = st.adopted[1]
    assert.equal(41, row.job_id)
    assert.equal("starting", row.state)
    assert.equal(9, row.id)
  end)

  it("a recorded replica whose job never reached Slurm is submitted under its nonce and port", function()
    local st = run({ recorded() }, {})
    assert.equal(1, #st.submits)
    assert.equal(RECORDED, st.submits[1].row.nonce)
    assert.equal(20003, st.submits[1].row.port)
    assert.equal(9, st.submits[1].row.id)
  end)

  it("a recorded replica of a paused spec ends without a submit", function()
    local st = run({ recorded() }, {}, spec({ enabled = false }))
    assert.equal(0, #st.submits)
    local row = st.rows[1]
    assert.equal("ended", row.state)
    assert.equal("NOT_SUBMITTED", row["end"].state)
  end)

  it("two live jobs with one replica's nonce: the newer is followed, the older cancelled", function()
    local row = recorded()
    row.state, row.job_id = "submitted", 41
    local st = run({ row }, { job(1, RECORDED, 41, "PENDING"), job(1, RECORDED, 42, "RUNNING") })
    assert.equal(1, #st.cancels)
    assert.equal(41, st.cancels[1].job_id)
    assert.equal(0, #st.submits)
    -- the replica now names the job it follows, so a later cancel reaches the right one
    assert.equal(42, st.rows[1].job_id)
    assert.equal("starting", st.rows[1].state)
  end)
end)
