-- The report carries changes, not state: a pass reports only the replicas (and endpoint lists) that
-- differ from the snapshot it read (obleth.provisioner.plan baseline / changed / changed_endpoints).
local cjson = require "cjson"
local plan = require "obleth.provisioner.plan"
local tag = require "obleth.job.tag"

local NOW = 1764500000
local INSTANCE = "0badcafe"

local function spec()
  return { enabled = true, replicas = 2, partition = "gpu", time_limit = 60, generation = 1,
    launch_command = "obleth smoke-engine", health = { path = "/health", interval = 5, timeout = 2,
      startup_grace = 60, failure_threshold = 3 } }
end

local function job(slot, nonce, id, base)
  return { id = id, name = tag.name(INSTANCE, 1, slot, nonce), comment = tag.comment(INSTANCE, 1, slot, nonce, 1, 20000 + slot),
    state = { base = base, flags = {} }, node_list = { "n1" }, start_time = NOW - 600, end_time = NOW + 3000,
    time_limit = 60 }
end

local function pass(snapshot, jobs)
  local st = plan.reconcile { now = NOW, snapshot = snapshot, jobs = jobs, nonce = function() return "ffffffffffffffff" end,
    rand = function(lo) return lo end }
  local results = {}
  for _, r in ipairs(st.rows) do if r.endpoint then results[r.nonce] = { ok = true, status = 200 } end end
  local endpoints = plan.health(st, results, NOW)
  return st, endpoints
end

-- what the store would answer next: the reported rows, through JSON (nulls and all)
local function next_snapshot(st, endpoints)
  local reps = {}
  for _, r in ipairs(st.rows) do
    local o = {}
    for _, k in ipairs(plan.REPORT_FIELDS) do
      local v = r[k]
      if v == nil then v = cjson.null end
      o[k] = v
    end
    reps[#reps + 1] = o
  end
  return require("obleth.util.json").plain(cjson.decode(cjson.encode { instance = INSTANCE, settings = { enabled = true,
    defaults = { port_range = { 20000, 20009 } } },
    models = { { id = 1, name = "m", status = "active", spec = spec(), replicas = reps, recent_ends = {},
      endpoints = endpoints["1"] } } }))
end

local function changed_nonces(snapshot, st)
  local base, out = plan.baseline(snapshot), {}
  for _, r in ipairs(st.rows) do if plan.changed(base[r.nonce], r) then out[#out + 1] = r.nonce end end
  table.sort(out)
  return out
end

describe("provisioner report: changes, not state", function()
  local a, b = "000000000000000a", "000000000000000b"
  local function first()
    local snapshot = { instance = INSTANCE, settings = { enabled = true, defaults = { port_range = { 20000, 20009 } } },
      models = { { id = 1, name = "m", status = "active", spec = spec(), recent_ends = {}, endpoints = {},
        replicas = {
          { nonce = a, model_id = 1, slot = 1, state = "starting", job_id = 41, port = 20001, node = "n1",
            endpoint = "http://n1:20001", started_at = NOW - 600 },
          { nonce = b, model_id = 1, slot = 2, state = "starting", job_id = 42, port = 20002, node = "n1",
            endpoint = "http://n1:20002", started_at = NOW - 600 } } } } }
    local jobs = { job(1, a, 41, "RUNNING"), job(2, b, 42, "RUNNING") }
    return snapshot, jobs
  end

  it("a pass that changes replicas reports them, and the next pass over the stored result reports none", function()
    local snapshot, jobs = first()
    local st, endpoints = pass(snapshot, jobs)
    -- both became healthy (and got Slurm's view of their job): both are reported, with the endpoint list
    assert.same({ a, b }, changed_nonces(snapshot, st))
    assert.same({ ["1"] = { "http://n1:20001", "http://n1:20002" } }, plan.changed_endpoints(snapshot, endpoints))
    -- steady state: the same facts again against what the store now holds
    local snap2 = next_snapshot(st, endpoints)
    local st2, endpoints2 = pass(snap2, jobs)
    assert.same({}, changed_nonces(snap2, st2))
    assert.same({}, plan.changed_endpoints(snap2, endpoints2))
  end)

  it("only the replica whose job ended is reported, and its model's shorter endpoint list", function()
    local snapshot, jobs = first()
    local st, endpoints = pass(snapshot, jobs)
    local snap2 = next_snapshot(st, endpoints)
    local ended = job(2, b, 42, "FAILED")
    ended.exit_code = { status = "FAILED", return_code = 1 }
    local st2, endpoints2 = pass(snap2, { jobs[1], ended })
    local reported = changed_nonces(snap2, st2)
    assert.is_true(#reported >= 1)
    assert.equal(b, reported[1])
    for _, n in ipairs(reported) do assert.is_not.equal(a, n) end
    assert.same({ ["1"] = { "http://n1:20001" } }, plan.changed_endpoints(snap2, endpoints2))
  end)

  it("the baseline is a copy: the plan's edits of a row's nested tables still count as changes", function()
    local snapshot, jobs = first()
    local st, endpoints = pass(snapshot, jobs)
    local snap2 = next_snapshot(st, endpoints)
    local base = plan.baseline(snap2)
    local row = snap2.models[1].replicas[1]
    assert.is_false(plan.changed(base[row.nonce], row))
    row.slurm.state = "COMPLETING" -- in place, as a plan edit would
    assert.is_true(plan.changed(base[row.nonce], row))
  end)

  it("a JSON null and an absent field are the same; a new row is always reported", function()
    local base = { nonce = "x", state = "healthy", problem = cjson.null, ["end"] = cjson.null }
    assert.is_false(plan.changed(base, { nonce = "x", state = "healthy" }))
    assert.is_true(plan.changed(base, { nonce = "x", state = "healthy", problem = "slow" }))
    assert.is_true(plan.changed(nil, { nonce = "y", state = "pending" }))
  end)
end)
