-- The lost rule end to end over the store: the policy says how many of a slot's ends it reads and
-- which count, the store's snapshot carries that many with their exit codes and cancel reasons, and
-- the plan marks the slot lost on the policy's word. Real SQLite (in memory), a real override file.
local store_mod = require "obleth.store"
local policy = require "obleth.policy"
local plan = require "obleth.provisioner.plan"
local tag = require "obleth.job.tag"

local NOW = 1764500000

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute("mkdir -p '" .. d .. "'"))
  finally(function() os.execute("rm -rf '" .. d .. "'") end)
  return d
end

local function write(path, text)
  local fh = assert(io.open(path, "w"))
  fh:write(text)
  fh:close()
end

-- a store with one model (one replica wanted) whose slot 1 ended `n` times, each as `outcome(i)` says
local function store_with_ends(n, outcome)
  local store = assert(store_mod.open(":memory:"))
  local m = assert(store:create_model { name = "m" })
  assert(store:put_spec(m.id, { replicas = 1, enabled = true, partition = "gpu", launch_command = "engine serve",
    time_limit = 60 }))
  local outcomes = {}
  for i = 1, n do
    local o = { model_id = m.id, slot = 1, job_id = 100 + i, state = "FAILED", exit_code = 1, healthy = false,
      ended_at = NOW - 1000 + i }
    for k, v in pairs(outcome and outcome(i) or {}) do o[k] = v end
    outcomes[i] = o
  end
  assert(store:apply_report({ pass = { started_at = NOW - 10, duration = 0.1 }, replicas = {}, outcomes = outcomes,
    endpoints = {}, provision_errors = {}, acknowledged = { restart = {}, clear_lost = {} } }, NOW - 5))
  return store, m
end

-- one pass of the plan: the slot's replica (starting, job 200) failed now with `exit`
local function pass(store, m, lost_mod, exit)
  -- as the provisioner reads it: JSON nulls are absent (obleth.provisioner.client)
  local snap = require("obleth.util.json").plain(store:snapshot(NOW, lost_mod.window()))
  local nonce = "00000000000000aa"
  local row = { nonce = nonce, model_id = m.id, slot = 1, state = "starting", job_id = 200, port = 20000 }
  snap.models[1].replicas = { row }
  local job = { id = 200, name = tag.name(snap.instance, m.id, 1, nonce),
    comment = tag.comment(snap.instance, m.id, 1, nonce, 1, 20000), state = { base = "FAILED", flags = {} },
    end_time = NOW - 1, exit_code = { code = exit } }
  local st = plan.reconcile { now = NOW, snapshot = snap, jobs = { job }, lost = lost_mod.check,
    nonce = function() return "00000000000000bb" end, rand = function(lo) return lo end }
  return st, snap
end

describe("the lost rule over the store", function()
  it("an override that asks for 12 ends marks the slot lost after 12 failed ends, not before", function()
    local dir = tmpdir()
    write(dir .. "/lost.lua", "return { DEFAULTS = { k = 12 } }\n")
    local set = policy.new { dir = dir }
    assert.is_true((set.reload()))
    local lost_mod = set.get("lost")
    -- 11 ends before, the 12th in this pass
    local store, m = store_with_ends(11)
    local st, snap = pass(store, m, lost_mod, 1)
    assert.equal(11, #snap.models[1].recent_ends)
    assert.equal("lost", st.rows[1].state)
    assert.equal(0, #st.submits)
    -- 10 before, the 11th now: not yet
    store, m = store_with_ends(10)
    st = pass(store, m, lost_mod, 1)
    assert.equal("ended", st.rows[1].state)
    assert.equal(11, st.models[1].decisions[1].decision.failures)
  end)

  it("an exit 98 recorded in an earlier pass never counts: the snapshot carries its exit code", function()
    local lost_mod = policy.new({ dir = tmpdir() }).get("lost")
    -- ends: FAILED (exit 1), then a port clash (exit 98); now FAILED again: 2 that count, k = 3
    local store, m = store_with_ends(2, function(i) return i == 2 and { exit_code = 98 } or nil end)
    local st, snap = pass(store, m, lost_mod, 1)
    assert.equal(98, snap.models[1].recent_ends[1].exit_code)
    assert.equal("ended", st.rows[1].state)
    assert.equal(2, st.models[1].decisions[1].decision.failures)
    assert.is_truthy(st.models[1].backoff_until) -- it waits out the backoff of 2 failures, then submits
  end)
end)
