local plan = require "obleth.provisioner.plan"
local tag = require "obleth.job.tag"

local NOW = 1764500000

local function spec(over)
  local s = { enabled = true, replicas = 2, partition = "gpu", time_limit = 60, generation = 1,
    launch_command = "obleth smoke-engine", health = { path = "/health", interval = 5, timeout = 2,
      startup_grace = 60, failure_threshold = 3 } }
  for k, v in pairs(over or {}) do s[k] = v end
  return s
end

local counter = 0
local function nonce()
  counter = counter + 1
  return ("%016x"):format(counter)
end

local INSTANCE = "0badcafe"

local function job(model_id, slot, n, base, extra)
  local j = { id = extra and extra.id or (1000 + counter), name = tag.name(INSTANCE, model_id, slot, n),
    comment = tag.comment(INSTANCE, model_id, slot, n, 1, 20500), state = { base = base, flags = {} } }
  for k, v in pairs(extra or {}) do j[k] = v end
  return j
end

local function run(snapshot, jobs, extra)
  local input = { now = NOW, snapshot = snapshot, jobs = jobs or {}, nonce = nonce,
    rand = function(lo) return lo end }
  for k, v in pairs(extra or {}) do input[k] = v end
  return plan.reconcile(input)
end

local function snap(models, over)
  local s = { instance = INSTANCE, settings = { enabled = true, defaults = { port_range = { 20000, 20009 } } },
    models = models }
  for k, v in pairs(over or {}) do s[k] = v end
  return s
end

local function rows_in(state, st)
  local n = 0
  for _, r in ipairs(state.rows) do if r.state == st then n = n + 1 end end
  return n
end

describe("provisioner plan: reconcile", function()
  it("submits every missing replica of a new spec, each on its own port", function()
    local st = run(snap({ { id = 1, name = "m", spec = spec(), replicas = {} } }))
    assert.equal(2, #st.submits)
    assert.equal(1, st.submits[1].row.slot)
    assert.equal(2, st.submits[2].row.slot)
    assert.equal(20000, st.submits[1].row.port)
    assert.equal(20001, st.submits[2].row.port)
    assert.equal(0, #st.cancels)
  end)

  it("records each replica's job as Slurm shows it: a pending job's reason and estimated start", function()
    local r = { nonce = "0000000000000003", model_id = 1, slot = 1, state = "submitted", job_id = 43, port = 20000 }
    local st = run(snap({ { id = 1, name = "m", spec = spec({ replicas = 1 }), replicas = { r } } }),
      { job(1, 1, r.nonce, "PENDING", { id = 43, reason = "Resources", start_time = NOW + 600,
        end_time = NOW + 4200, time_limit = 60, estimated = true }) })
    assert.same({ state = "PENDING", reason = "Resources", start_time = NOW + 600, end_time = NOW + 4200,
      time_limit = 60, estimated = true }, st.rows[1].slurm)
    assert.equal("submitted", st.rows[1].state)
    -- running: Slurm's start and end (the time limit's); UNLIMITED leaves time_limit out
    st = run(snap({ { id = 1, name = "m", spec = spec({ replicas = 1 }), replicas = { r } } }),
      { job(1, 1, r.nonce, "RUNNING", { id = 43, node_list = { "n1" }, start_time = NOW - 60,
        end_time = NOW + 3540, time_limit = math.huge }) })
    assert.same({ state = "RUNNING", start_time = NOW - 60, end_time = NOW + 3540, estimated = false },
      st.rows[1].slurm)
    -- where the job's output goes, as Slurm names it (an empty path is no path)
    st = run(snap({ { id = 1, name = "m", spec = spec({ replicas = 1 }), replicas = { r } } }),
      { job(1, 1, r.nonce, "RUNNING", { id = 43, node_list = { "n1" }, start_time = NOW - 60, time_limit = 60,
        stdout = "/logs/obleth-m-43.out", stderr = "" }) })
    assert.equal("/logs/obleth-m-43.out", st.rows[1].slurm.stdout)
    assert.is_nil(st.rows[1].slurm.stderr)
  end)

  it("never reuses a port another model's live replica holds", function()
    local other = { nonce = "00000000000000aa", model_id = 2, slot = 1, state = "healthy", port = 20000, job_id = 7 }
    local st = run(snap({
      { id = 1, name = "m", spec = spec({ replicas = 1 }), replicas = {} },
      { id = 2, name = "o", spec = spec({ replicas = 1 }), replicas = { other } },
    }), { job(2, 1, other.nonce, "RUNNING", { id = 7, node_list = { "n0" } }) })
    assert.equal(1, #st.submits)
    assert.equal(20001, st.submits[1].row.port)
  end)

  it("follows a job from pending to running and records the node", function()
    local r = { nonce = "0000000000000001", model_id = 1, slot = 1, state = "submitted", job_id = 42, port = 20000 }
    local st = run(snap({ { id = 1, name = "m", spec = spec({ replicas = 1 }), replicas = { r } } }),
      { job(1, 1, r.nonce, "RUNNING", { id = 42, node_list = { "n2" }, start_time = NOW - 5 }) })
    assert.equal(0, #st.submits)
    local row = st.rows[1]
    assert.equal("starting", row.state)
    assert.equal("n2", row.node)
    assert.equal(NOW - 5, row.started_at)
  end)

  it("shows a pending reason that means the job will never start as a problem", function()
    local r = { nonce = "0000000000000002", model_id = 1, slot = 1, state = "submitted", job_id = 43, port = 20000 }
    local st = run(snap({ { id = 1, name = "m", spec = spec({ replicas = 1 }), replicas = { r } } }),
      { job(1, 1, r.nonce, "PENDING", { id = 43, reason = "AccountNotAllowed" }) })
    assert.equal("submitted", st.rows[1].state)
    assert.matches("never start", st.rows[1].problem)
    assert.matches("AccountNotAllowed", st.rows[1].problem)
  end)

  it("follows a requeued job: out of the endpoints, the interruption recorded with the node it left", function()
    local r = { nonce = "0000000000000041", model_id = 1, slot = 1, state = "healthy", job_id = 95, port = 20000,
      node = "n1", endpoint = "http://127.0.0.1:20000", started_at = NOW - 100, healthy_at = NOW - 90 }
    local st = run(snap({ { id = 1, name = "m", spec = spec({ replicas = 1 }), replicas = { r } } }),
      { job(1, 1, r.nonce, "PENDING", { id = 95, reason = "BeginTime" }) })
    local row = st.rows[1]
    assert.equal("submitted", row.state)
    assert.is_nil(row.endpoint)
    assert.is_nil(row.node)
    assert.equal(0, #st.submits) -- never a second job for the replica
    assert.equal(1, #st.outcomes)
    assert.same({ "REQUEUED", "n1", 95, "BeginTime" },
      { st.outcomes[1].state, st.outcomes[1].node, st.outcomes[1].job_id, st.outcomes[1].reason })
    local eps = plan.health(st, {}, NOW)
    assert.same({}, eps["1"])
  end)

  it("a pending reason that can clear is not a problem", function()
    local r = { nonce = "0000000000000003", model_id = 1, slot = 1, state = "submitted", job_id = 44, port = 20000 }
    local st = run(snap({ { id = 1, name = "m", spec = spec({ replicas = 1 }), replicas = { r } } }),
      { job(1, 1, r.nonce, "PENDING", { id = 44, reason = "Resources" }) })
    assert.is_nil(st.rows[1].problem)
    assert.equal("Resources", st.rows[1].pending_reason)
  end)

  it("records a job end with Slurm's state, reason, exit code and node, then backs off before resubmitting", function()
    local r = { nonce = "0000000000000004", model_id = 1, slot = 1, state = "starting", job_id = 45, port = 20000,
      node = "n1", started_at = NOW - 30 }
    local st = run(snap({ { id = 1, name = "m", spec = spec({ replicas = 1 }), replicas = { r } } }),
      { job(1, 1, r.nonce, "NODE_FAIL", { id = 45, node_list = { "n1" }, end_time = NOW - 1,
        exit_code = { code = 0, signal = 9 }, reason = "NodeDown" }) })
    assert.equal(1, #st.outcomes)
    local o = st.outcomes[1]
    assert.same({ "NODE_FAIL", "NodeDown", 0, 9, "n1", 45 }, { o.state, o.reason, o.exit_code, o.signal, o.node, o.job_id })
    assert.equal("ended", st.rows[1].state)
    -- first end without health: wait 10 s after the end (until NOW + 9)
    assert.equal(0, #st.submits)
    assert.equal(NOW + 9, st.models[1].backoff_until)
  end)

  it("replaces an ended replica once its backoff has passed", function()
    local st = run(snap({ { id = 1, name = "m", spec = spec({ replicas = 1 }), replicas = {},
      recent_ends = { { slot = 1, healthy = false, at = NOW - 11 } } } }))
    assert.equal(1, #st.submits)
  end)

  it("a replica that ended healthy is replaced at once", function()
    local r = { nonce = "0000000000000005", model_id = 1, slot = 1, state = "healthy", job_id = 46, port = 20000,
      node = "n1", started_at = NOW - 300, healthy_at = NOW - 200, endpoint = "http://127.0.0.1:20000" }
    local st = run(snap({ { id = 1, name = "m", spec = spec({ replicas = 1 }), replicas = { r } } }),
      { job(1, 1, r.nonce, "CANCELLED", { id = 46, end_time = NOW - 1 }) })
    assert.equal(1, #st.submits)
    assert.equal(1, st.submits[1].row.slot)
  end)

  it("the third end in a row without health makes the slot lost, and it is not replaced", function()
    local r = { nonce = "0000000000000006", model_id = 1, slot = 1, state = "starting", job_id = 47, port = 20000 }
    local st = run(snap({ { id = 1, name = "m", spec = spec({ replicas = 1 }), replicas = { r },
      recent_ends = { { slot = 1, healthy = false, at = NOW - 100 }, { slot = 1, healthy = false, at = NOW - 200 } } } }),
      { job(1, 1, r.nonce, "FAILED", { id = 47, end_time = NOW - 1, exit_code = { code = 1 } }) })
    assert.equal("lost", st.rows[1].state)
    assert.equal(0, #st.submits)
    -- the next pass: the lost row is listed, nothing is submitted
    local st2 = run(snap({ { id = 1, name = "m", spec = spec({ replicas = 1 }), replicas = { st.rows[1] },
      recent_ends = { { slot = 1, healthy = false, at = NOW - 1 } } } }))
    assert.equal(0, #st2.submits)
  end)

  it("Try once more clears the lost slot and submits again", function()
    local lost = { id = 9, nonce = "0000000000000007", model_id = 1, slot = 1, state = "lost", job_id = 48 }
    local st = run(snap({ { id = 1, name = "m", spec = spec({ replicas = 1 }), replicas = { lost },
      recent_ends = { { slot = 1, healthy = false, at = NOW - 1 }, { slot = 1, healthy = false, at = NOW - 2 },
        { slot = 1, healthy = false, at = NOW - 3 } } } }, { clear_lost = { 1 } }))
    assert.same({ 1 }, st.ack.clear_lost)
    assert.equal(1, #st.submits)
  end)

  it("a port clash (exit 98) does not count toward lost", function()
    local r = { nonce = "0000000000000008", model_id = 1, slot = 1, state = "starting", job_id = 49, port = 20000 }
    local st = run(snap({ { id = 1, name = "m", spec = spec({ replicas = 1 }), replicas = { r },
      recent_ends = { { slot = 1, healthy = false, at = NOW - 100 }, { slot = 1, healthy = false, at = NOW - 200 } } } }),
      { job(1, 1, r.nonce, "FAILED", { id = 49, end_time = NOW - 1, exit_code = { code = 98 } }) })
    assert.equal("ended", st.rows[1].state)
    assert.equal(1, #st.submits)
  end)

  it("an exit 98 never counts, also in a later pass, from the snapshot's recent ends", function()
    -- the port clash ended in an earlier pass: the snapshot carries its exit code
    local r = { nonce = "0000000000000018", model_id = 1, slot = 1, state = "starting", job_id = 59, port = 20000 }
    local st = run(snap({ { id = 1, name = "m", spec = spec({ replicas = 1 }), replicas = { r },
      recent_ends = { { slot = 1, healthy = false, at = NOW - 100, state = "FAILED", exit_code = 98 },
        { slot = 1, healthy = false, at = NOW - 200, state = "FAILED", exit_code = 1 } } } }),
      { job(1, 1, r.nonce, "FAILED", { id = 59, end_time = NOW - 1, exit_code = { code = 1 } }) })
    assert.equal("ended", st.rows[1].state)
    assert.equal(2, st.models[1].decisions[1].decision.failures)
    assert.equal(1, #st.models[1].decisions[1].decision.skipped)
  end)

  it("ends obleth caused for reasons of its own (a restart, a pause, a scale-down) do not count toward lost", function()
    -- found by make chaos: three scale-downs of a starting replica made its slot lost
    local r = { nonce = "000000000000000c", model_id = 1, slot = 1, state = "ending", job_id = 52, port = 20000,
      cancel_why = "restart asked" }
    local st = run(snap({ { id = 1, name = "m", spec = spec({ replicas = 1 }), replicas = { r },
      recent_ends = { { slot = 1, healthy = false, at = NOW - 100, cancel_why = "surplus replica" },
        { slot = 1, healthy = false, at = NOW - 200, cancel_why = "spec paused" } } } }),
      { job(1, 1, r.nonce, "CANCELLED", { id = 52, end_time = NOW - 1 }) })
    assert.equal("ended", st.rows[1].state)
    assert.equal(1, #st.submits)
    assert.equal("restart asked", st.outcomes[1].cancel_why) -- recorded with the outcome
    -- the health checks' own cancels do count
    local h = { nonce = "000000000000000d", model_id = 1, slot = 1, state = "ending", job_id = 53, port = 20000,
      cancel_why = "startup grace exceeded" }
    st = run(snap({ { id = 1, name = "m", spec = spec({ replicas = 1 }), replicas = { h },
      recent_ends = { { slot = 1, healthy = false, at = NOW - 100, cancel_why = "startup grace exceeded" },
        { slot = 1, healthy = false, at = NOW - 200 } } } }),
      { job(1, 1, h.nonce, "CANCELLED", { id = 53, end_time = NOW - 1 }) })
    assert.equal("lost", st.rows[1].state)
  end)

  it("replicas 2 -> 1 cancels exactly the surplus slot's job", function()
    local a = { nonce = "000000000000000a", model_id = 1, slot = 1, state = "healthy", job_id = 50, port = 20000 }
    local b = { nonce = "000000000000000b", model_id = 1, slot = 2, state = "healthy", job_id = 51, port = 20001 }
    local st = run(snap({ { id = 1, name = "m", spec = spec({ replicas = 1 }), replicas = { a, b } } }),
      { job(1, 1, a.nonce, "RUNNING", { id = 50 }), job(1, 2, b.nonce, "RUNNING", { id = 51 }) })
    assert.equal(1, #st.cancels)
    assert.equal(51, st.cancels[1].job_id)
    assert.equal(0, #st.submits)
  end)

  it("enabled: false cancels all and submits nothing", function()
    local a = { nonce = "000000000000000c", model_id = 1, slot = 1, state = "healthy", job_id = 52, port = 20000 }
    local b = { nonce = "000000000000000d", model_id = 1, slot = 2, state = "submitted", job_id = 53, port = 20001 }
    local st = run(snap({ { id = 1, name = "m", spec = spec({ enabled = false }), replicas = { a, b } } }),
      { job(1, 1, a.nonce, "RUNNING", { id = 52 }), job(1, 2, b.nonce, "PENDING", { id = 53 }) })
    assert.equal(2, #st.cancels)
    assert.equal(0, #st.submits)
    assert.equal(2, rows_in(st, "ending"))
  end)

  it("a deleted spec cancels every job it had; turning Slurm off cancels everything", function()
    local a = { nonce = "000000000000000e", model_id = 1, slot = 1, state = "healthy", job_id = 54, port = 20000 }
    local st = run(snap({ { id = 1, name = "m", spec = nil, replicas = { a } } }),
      { job(1, 1, a.nonce, "RUNNING", { id = 54 }) })
    assert.equal(1, #st.cancels)
    local st2 = run(snap({ { id = 1, name = "m", spec = spec({ replicas = 1 }), replicas = { a } } },
      { settings = { enabled = false, defaults = {} } }), { job(1, 1, a.nonce, "RUNNING", { id = 54 }) })
    assert.equal(1, #st2.cancels)
    assert.equal(0, #st2.submits)
  end)

  it("adopts a tagged job no row knows instead of submitting a second one", function()
    local n = "00000000000000f1"
    local st = run(snap({ { id = 1, name = "m", spec = spec({ replicas = 1 }), replicas = {} } }),
      { job(1, 1, n, "PENDING", { id = 60, reason = "Priority" }) })
    assert.equal(0, #st.submits)
    assert.equal(1, #st.adopted)
    assert.equal(60, st.adopted[1].job_id)
    assert.equal(n, st.adopted[1].nonce)
    assert.equal(20500, st.adopted[1].port) -- from the comment: the endpoint can be rebuilt
  end)

  it("never touches jobs without a well-formed tag", function()
    local st = run(snap({ { id = 1, name = "m", spec = spec({ replicas = 0 }), replicas = {} } }),
      { { id = 70, name = "someone-elses-job", state = { base = "RUNNING" } },
        { id = 71, name = "obleth-0badcafe-m1-s1-xyz", state = { base = "RUNNING" } },
        { id = 72, name = "obleth-0badcafe-m1-s1-00000000000000aa",
          comment = "obleth instance=0badcafe model=2 slot=1 nonce=00000000000000aa gen=1", state = { base = "RUNNING" } },
        -- another installation's job on the same cluster, for the same model id
        { id = 73, name = "obleth-feedf00d-m1-s1-00000000000000ab",
          comment = "obleth instance=feedf00d model=1 slot=1 nonce=00000000000000ab gen=1", state = { base = "RUNNING" } } })
    assert.equal(0, #st.cancels)
    assert.equal(0, #st.adopted)
  end)

  it("keeps one job per replica slot: a duplicate is cancelled", function()
    local a = { nonce = "0000000000000021", model_id = 1, slot = 1, state = "healthy", job_id = 80, port = 20000 }
    local b = { nonce = "0000000000000022", model_id = 1, slot = 1, state = "submitted", job_id = 81, port = 20001 }
    local st = run(snap({ { id = 1, name = "m", spec = spec({ replicas = 1 }), replicas = { a, b } } }),
      { job(1, 1, a.nonce, "RUNNING", { id = 80 }), job(1, 1, b.nonce, "PENDING", { id = 81 }) })
    assert.equal(1, #st.cancels)
    assert.equal(81, st.cancels[1].job_id)
  end)

  it("a refused spec is not resubmitted until it changes", function()
    local refused = { message = "Invalid account", field = "account", generation = 3 }
    local st = run(snap({ { id = 1, name = "m", spec = spec({ replicas = 1, generation = 3, provision_error = refused }),
      replicas = {} } }))
    assert.equal(0, #st.submits)
    local st2 = run(snap({ { id = 1, name = "m", spec = spec({ replicas = 1, generation = 4, provision_error = refused }),
      replicas = {} } }))
    assert.equal(1, #st2.submits)
  end)

  it("starts a successor before the walltime ends, then drains the old replica once the successor is healthy", function()
    -- 60 min limit, started 55 min ago, healthy 2 min after start: 5 min left < 2 min startup + 5 min margin
    local old = { nonce = "0000000000000031", model_id = 1, slot = 1, state = "healthy", job_id = 90, port = 20000,
      started_at = NOW - 55 * 60, healthy_at = NOW - 53 * 60, endpoint = "http://n0:20000" }
    local st = run(snap({ { id = 1, name = "m", spec = spec({ replicas = 1 }), replicas = { old } } }),
      { job(1, 1, old.nonce, "RUNNING", { id = 90 }) })
    assert.equal(1, #st.submits)
    assert.equal(old.nonce, st.submits[1].row.successor_of)
    assert.equal(0, #st.cancels)
    -- 50 min in, 10 min left > 7 min: nothing yet
    local young = { nonce = "0000000000000032", model_id = 1, slot = 1, state = "healthy", job_id = 91, port = 20000,
      started_at = NOW - 50 * 60, healthy_at = NOW - 48 * 60 }
    assert.equal(0, #run(snap({ { id = 1, name = "m", spec = spec({ replicas = 1 }), replicas = { young } } }),
      { job(1, 1, young.nonce, "RUNNING", { id = 91 }) }).submits)
    -- the successor became healthy: the old one leaves the endpoints and is cancelled after the drain
    local succ = { nonce = "0000000000000033", model_id = 1, slot = 1, state = "healthy", job_id = 92, port = 20001,
      successor_of = old.nonce, started_at = NOW - 60, healthy_at = NOW - 10 }
    local st3 = run(snap({ { id = 1, name = "m", spec = spec({ replicas = 1 }), replicas = { old, succ } } }),
      { job(1, 1, old.nonce, "RUNNING", { id = 90 }), job(1, 1, succ.nonce, "RUNNING", { id = 92 }) },
      { drain_seconds = 0 })
    assert.equal(1, #st3.cancels)
    assert.equal(90, st3.cancels[1].job_id)
    for _, r in ipairs(st3.rows) do
      if r.nonce == succ.nonce then assert.is_nil(r.successor_of) end
      if r.nonce == old.nonce then assert.equal("ending", r.state) end
    end
  end)
end)

describe("provisioner plan: a replica on its way out whose job still runs (make chaos)", function()
  -- after a successor took over, the old replica is "ending" and its job is cancelled once the drain
  -- is over; the drain deadline and "cancel sent" live only in the provisioner's memory
  local old = { nonce = "0000000000000041", model_id = 1, slot = 1, state = "ending", job_id = 95, port = 20000,
    started_at = NOW - 58 * 60, healthy_at = NOW - 56 * 60 }
  local succ = { nonce = "0000000000000042", model_id = 1, slot = 1, state = "healthy", job_id = 96, port = 20001,
    started_at = NOW - 60, healthy_at = NOW - 10, endpoint = "http://n1:20001" }
  local function with(over)
    local r = {}
    for k, v in pairs(old) do r[k] = v end
    for k, v in pairs(over or {}) do r[k] = v end
    return r
  end
  local function pass(row, base)
    return run(snap({ { id = 1, name = "m", spec = spec({ replicas = 1 }), replicas = { row, succ } } }),
      { job(1, 1, old.nonce, base or "RUNNING", { id = 95 }), job(1, 1, succ.nonce, "RUNNING", { id = 96 }) })
  end
  local function cancelled(st)
    local ids = {}
    for _, c in ipairs(st.cancels) do ids[#ids + 1] = c.job_id end
    return ids
  end

  it("a restarted provisioner (the deadline died with the old process) cancels the job", function()
    local st = pass(with())
    assert.same({ 95 }, cancelled(st))
    assert.equal(0, #st.submits)
  end)

  it("a cancel that did not take (sent, the job still runs on the next pass) is sent again", function()
    assert.same({ 95 }, cancelled(pass(with { cancel_at = NOW - 5, cancel_sent = true })))
  end)

  it("waits while the drain lasts, and not once the job is completing", function()
    assert.same({}, cancelled(pass(with { cancel_at = NOW + 20 })))
    assert.same({}, cancelled(pass(with(), "COMPLETING")))
  end)

  it("cancels a surplus replica once, in the pass that decides it", function()
    local a = { nonce = "0000000000000043", model_id = 1, slot = 2, state = "healthy", job_id = 97, port = 20002,
      started_at = NOW - 60, healthy_at = NOW - 10 }
    local st = run(snap({ { id = 1, name = "m", spec = spec({ replicas = 1 }), replicas = { succ, a } } }),
      { job(1, 1, succ.nonce, "RUNNING", { id = 96 }), job(1, 2, a.nonce, "RUNNING", { id = 97 }) })
    assert.same({ 97 }, cancelled(st))
  end)
end)

describe("provisioner plan: health", function()
  local function state_with(row, sp)
    return { models = { { id = 1, spec = sp or spec(), rows = { row } } } }
  end

  it("a starting replica whose health path answers 2xx becomes healthy and joins the endpoints", function()
    local row = { nonce = "n1", state = "starting", started_at = NOW - 5, endpoint = "http://h:1", job_id = 1 }
    local eps = plan.health(state_with(row), { n1 = { ok = true, status = 200 } }, NOW)
    assert.equal("healthy", row.state)
    assert.same({ "http://h:1" }, eps["1"])
  end)

  it("a starting replica not healthy after its startup grace is restarted", function()
    local row = { nonce = "n1", state = "starting", started_at = NOW - 61, endpoint = "http://h:1", job_id = 5 }
    local eps, cancels = plan.health(state_with(row), { n1 = { ok = false, status = 503 } }, NOW)
    assert.same({}, eps["1"])
    assert.equal(1, #cancels)
    assert.equal(5, cancels[1].job_id)
    assert.equal("startup grace exceeded", row.cancel_why) -- reported, so the page can say why
  end)

  it("a healthy replica leaves the endpoints after failure_threshold failed checks in a row", function()
    local row = { nonce = "n1", state = "healthy", endpoint = "http://h:1", check_failures = 1 }
    local eps = plan.health(state_with(row), { n1 = { ok = false, error = "timeout" } }, NOW)
    assert.equal("healthy", row.state)
    assert.same({ "http://h:1" }, eps["1"])
    eps = plan.health(state_with(row), { n1 = { ok = false, error = "timeout" } }, NOW)
    assert.equal("unhealthy", row.state)
    assert.same({}, eps["1"])
  end)

  it("checks are due only once their interval has passed", function()
    local row = { nonce = "n1", state = "healthy", endpoint = "http://h:1" }
    local st = state_with(row)
    assert.equal(1, #plan.due_checks(st, {}, NOW))
    assert.equal(0, #plan.due_checks(st, { n1 = NOW - 2 }, NOW))
    assert.equal("http://h:1/health", plan.due_checks(st, { n1 = NOW - 6 }, NOW)[1].url)
  end)
end)
