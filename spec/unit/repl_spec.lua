-- The REPL's pure parts: the dry run's rows and words, help from the
-- annotations, secret masking, policy.load_file for policy.try.
local dryrun = require "obleth.repl.dryrun"
local help = require "obleth.repl.help"
local api = require "obleth.repl.api"
local policy = require "obleth.policy"
local tag = require "obleth.job.tag"

local NOW = 1764500000
local INSTANCE = "0badcafe"

local function spec(over)
  local s = { enabled = true, replicas = 1, partition = "gpu", time_limit = 60, generation = 1,
    launch_command = "obleth smoke-engine", health = { path = "/health" } }
  for k, v in pairs(over or {}) do s[k] = v end
  return s
end

local function job(id, model_id, slot, n, base, extra)
  local j = { id = id, name = tag.name(INSTANCE, model_id, slot, n),
    comment = tag.comment(INSTANCE, model_id, slot, n, 1, 20500), state = { base = base, flags = {} } }
  for k, v in pairs(extra or {}) do j[k] = v end
  return j
end

-- alpha: slot 2 above replicas = 1; beta: nothing yet; gamma: its job was cancelled before it was healthy
local function facts(lost)
  local snapshot = { instance = INSTANCE, settings = { enabled = true, defaults = { port_range = { 20000, 20009 } } },
    models = {
      { id = 1, name = "alpha", spec = spec(), replicas = {
        { id = 11, nonce = "aaaa000000000001", slot = 1, state = "healthy", job_id = 101, port = 20001, node = "n0" },
        { id = 12, nonce = "aaaa000000000002", slot = 2, state = "starting", job_id = 102, port = 20002, node = "n1" },
      } },
      { id = 2, name = "beta", spec = spec(), replicas = {} },
      { id = 3, name = "gamma", spec = spec(), replicas = {
        { id = 31, nonce = "cccc000000000001", slot = 1, state = "submitted", job_id = 301, port = 20003 },
      } },
    } }
  local jobs = {
    job(101, 1, 1, "aaaa000000000001", "RUNNING", { node_list = { "n0" } }),
    job(102, 1, 2, "aaaa000000000002", "RUNNING", { node_list = { "n1" } }),
    job(301, 3, 1, "cccc000000000001", "CANCELLED", { end_time = NOW - 5 }),
  }
  return { now = NOW, snapshot = snapshot, jobs = jobs, job_by_id = {}, lost = lost }
end

local function action(run, model, slot)
  for _, a in ipairs(run.actions) do
    if a.model == model and a.slot == slot then return a end
  end
  return nil
end

describe("repl dry run", function()
  it("names the missing replica it would submit and the surplus one it would cancel, with rule and facts", function()
    local run = dryrun.run(facts())
    assert.equal(1, run.submits)
    assert.equal(1, run.cancels)
    local sub = action(run, "beta", 1)
    assert.equal("submit", sub.action)
    assert.equal("missing replica", sub.rule)
    assert.matches("slot 1 has no live job %(replicas = 1%); lost rule: 0 end%(s%) in a row", sub.facts)
    local can = action(run, "alpha", 2)
    assert.equal("cancel job 102", can.action)
    assert.equal("surplus replica", can.rule)
    assert.equal("slot 2 is above the spec's replicas = 1", can.facts)
  end)

  it("a surplus slot that goes though its number is within the count: its job has not started", function()
    local f = facts()
    -- alpha's slot 1 waits in Slurm's queue, slot 2 runs: slot 1 goes
    f.snapshot.models[1].replicas[1].state = "submitted"
    f.jobs[1] = job(101, 1, 1, "aaaa000000000001", "PENDING", { reason = "Priority" })
    local can = action(dryrun.run(f), "alpha", 1)
    assert.equal("cancel job 101", can.action)
    assert.equal("slot 1 has no job running in Slurm: it goes first, the spec's replicas = 1 keeps the running ones",
      can.facts)
  end)

  it("shows each replica's state now and after the pass", function()
    local run = dryrun.run(facts())
    local seen = {}
    for _, r in ipairs(run.replicas) do seen[r.model .. r.slot] = r.now .. ">" .. r.next end
    assert.equal("healthy>healthy", seen.alpha1)
    assert.equal("starting>ending", seen.alpha2)
    assert.equal("->pending", seen.beta1)
    assert.equal("submitted>ended", seen.gamma1)
  end)

  it("a failed start waits out the backoff under k = 3 and is marked lost under k = 1", function()
    local builtin = require "obleth.policy.lost"
    local run = dryrun.run(facts(builtin))
    local g = action(run, "gamma", 1)
    assert.equal("wait (backoff)", g.action)
    assert.matches("1 end%(s%) in a row without becoming healthy < k = 3; job 301 CANCELLED", g.facts)
    local run1 = dryrun.run(facts(builtin.new { k = 1 }))
    g = action(run1, "gamma", 1)
    assert.equal("mark lost", g.action)
    assert.equal(301, g.job_id)
    assert.matches(">= k = 1", g.facts)
    local by_old, by_new = dryrun.by_slot(run), dryrun.by_slot(run1)
    assert.equal("wait (backoff)", by_old["gamma slot 1"])
    assert.equal("mark lost", by_new["gamma slot 1"])
  end)

  it("a healthy replica near its walltime gets a successor, with the rollover rule's numbers", function()
    local f = facts()
    -- alpha slot 1 started 56 min ago with a 60 min limit, healthy after 60 s: 300 s policy margin + 60 s
    local r = f.snapshot.models[1].replicas[1]
    r.started_at, r.healthy_at = NOW - 56 * 60, NOW - 56 * 60 + 60
    local run = dryrun.run(f)
    local a = action(run, "alpha", 1)
    assert.equal("start successor", a.action)
    assert.equal("rollover", a.rule)
    assert.matches("margin 360 s = start%-up 60 s %+ policy margin 300 s", a.facts)
    assert.equal(2, run.submits)
  end)

  it("shows the scale policy's decision for an autoscaled model, under the policy given", function()
    local f = facts()
    -- alpha: 1 healthy + 1 starting, 13 requests in flight at target_inflight 4 → ceil(13 / 4) = 4
    f.snapshot.models[1].spec.autoscale = { min_replicas = 0, max_replicas = 6, target_inflight = 4,
      scale_down_after = 300, idle_to_zero_after = 1200 }
    f.snapshot.models[1].load = { inflight = 13, last_request_at = NOW, samples = {} }
    local run = dryrun.run(f)
    assert.equal(1, #run.scaling)
    assert.same({ "alpha", 2, 4, "up" }, { run.scaling[1].model, run.scaling[1].current, run.scaling[1].desired,
      run.scaling[1].change })
    local a = action(run, "alpha", nil)
    assert.equal("scale up 2 → 4", a.action)
    assert.equal("scale", a.rule)
    assert.matches("demand 13 > 2 replica%(s%) × target_inflight 4", a.facts)
    assert.matches("AUTOSCALED%s+CURRENT%s+DESIRED", dryrun.render(run))
    -- under a policy whose target is 8 (what policy.try passes for an edited file): ceil(13 / 8) = 2
    f.scale = require("obleth.policy.scale").new({ target_inflight = 8 })
    f.snapshot.models[1].spec.autoscale.target_inflight = nil
    run = dryrun.run(f)
    assert.equal(2, run.scaling[1].desired)
    assert.equal("none", run.scaling[1].change)
  end)

  it("sends nothing: the snapshot it was given is unchanged", function()
    local f = facts()
    dryrun.run(f)
    assert.equal("starting", f.snapshot.models[1].replicas[2].state)
    assert.equal(0, #f.snapshot.models[2].replicas)
  end)

  it("renders the replicas and the actions as aligned tables", function()
    local text = dryrun.render(dryrun.run(facts()))
    assert.matches("MODEL%s+SLOT%s+JOB%s+NODE%s+NOW%s+AFTER", text)
    assert.matches("\ncancel job 102%s+alpha%s+2%s+surplus replica", text)
    assert.matches("1 submit%(s%), 1 cancel%(s%) would be sent", text)
  end)
end)

describe("repl help", function()
  it("reads one-line docs and arguments from the LuaCATS annotations", function()
    local fns = help.functions("obleth.repl.api", "api")
    assert.equal("(opts)", fns.replicas.args)
    assert.equal("Replicas: every one, or one model's; live = true leaves out ended ones.", fns.replicas.summary)
    local text = help.text()
    assert.matches("policy%.try%(path, name%)%s+Load an edited policy file without installing it", text)
    assert.matches("\n%s+plan%(%)%s+A dry run of the provisioner's next pass", text)
  end)

  it("every public function of every handle has a one-line doc (also where the doc goes on in plain -- lines)",
    function()
      local blank = {}
      for _, h in ipairs(help.HANDLES) do
        for name, f in pairs(help.functions(h.module, h.obj)) do
          if name:sub(1, 1) ~= "_" and f.summary == "" then blank[#blank + 1] = h.name .. "." .. name end
        end
      end
      table.sort(blank)
      assert.same({}, blank)
      assert.equal("Ping the controller.", help.functions("obleth.slurm", "Conn").ping.summary)
    end)

  it("help(name) shows one function's annotation with examples, and says when there is none", function()
    local t = help.text("policy.try")
    assert.matches("@param path string", t)
    assert.matches("examples:", t)
    assert.matches("^plan%(%)", help.text("plan"))
    assert.matches("no help for", help.text("nosuch"))
  end)
end)

describe("repl api masking", function()
  it("masks a secret wherever it appears, also inside a longer string", function()
    local secrets = { ["eyJhbGciOiJIUzI1NiJ9.abc.def"] = true }
    local v = api.mask({ token = "eyJhbGciOiJIUzI1NiJ9.abc.def", nested = { "Bearer eyJhbGciOiJIUzI1NiJ9.abc.def" },
      other = "fine" }, secrets)
    assert.equal("********", v.token)
    assert.equal("Bearer ********", v.nested[1])
    assert.equal("fine", v.other)
  end)
end)

describe("policy.load_file", function()
  local dir = os.tmpname()
  os.remove(dir)
  os.execute("mkdir -p " .. dir)
  teardown(function() os.execute("rm -rf " .. dir) end)

  it("makes the module a file would install, without installing it", function()
    local p = dir .. "/lost.lua"
    local f = assert(io.open(p, "w"))
    f:write("return { DEFAULTS = { k = 1 } }\n")
    f:close()
    local m = assert(policy.load_file("lost", p))
    assert.equal(1, m.DEFAULTS.k)
    assert.is_true(m.check({ { healthy = false, at = 1 } }).lost)
    assert.equal(3, require("obleth.policy.lost").DEFAULTS.k)
  end)

  it("a broken file gives its error with the line", function()
    local p = dir .. "/lost.lua"
    local f = assert(io.open(p, "w"))
    f:write("return {\n  DEFAULTS = { k = = 1 },\n}\n")
    f:close()
    local m, err = policy.load_file("lost", p)
    assert.is_nil(m)
    assert.equal("invalid_policy", err.code)
    assert.equal(p .. ":2: unexpected symbol near '='", err.message)
  end)

  it("an unknown policy name is refused by name", function()
    local m, err = policy.load_file("nosuch", dir .. "/nosuch.lua")
    assert.is_nil(m)
    assert.equal("unknown_policy", err.code)
    assert.matches('unknown policy "nosuch"', err.message)
  end)
end)

describe("slurm normalize.clusters (the banner's cluster name)", function()
  it("takes name, nodes and controller from GET /slurmdb/vX/clusters", function()
    local normalize = require "obleth.slurm.normalize"
    -- the shape slurmrestd 22.05 (v0.0.38) answered on the harness cluster
    local doc = { clusters = { { name = "obleth", nodes = "n[0-3]", controller = { host = "127.0.0.1", port = 6821 },
      flags = { "MULTIPLE_SLURMD" } } } }
    assert.same({ { name = "obleth", nodes = "n[0-3]", controller = { host = "127.0.0.1", port = 6821 } } },
      normalize.clusters(doc, "v0.0.38"))
    assert.same({}, normalize.clusters({ clusters = {} }, "v0.0.44"))
  end)
end)
