-- The launch flow over real HTTP against the harness cluster: preview (partition
-- fit, offered accounts, field errors, the exact slurmrestd body), "Edit as
-- YAML", launch (model + spec + launch record + saved recipe) and learned
-- defaults, and a smoke-test launch that ends with healthy replicas.
local loop = require "obleth.loop"
local util = require "spec.support.util"
local wait_until, sh = util.wait_until, util.sh
local server = require "spec.support.server"
local harness = require "spec.support.harness"
local provisioner = require "spec.support.provisioner"
local submit = require "obleth.slurm.submit"
local jobscript = require "obleth.job"

local FACTS_TTL = 3 -- obleth.api.deployments.FACTS_TTL: the preview reuses cluster facts this long

-- Slurm's clients against the harness cluster of whichever release the env file is from
-- (spec/cluster/slurm.sh runs them inside the 24.11 / 26.05 root)
local function slurm(cmd) return sh(util.shq(util.root() .. "/spec/cluster/slurm.sh") .. " " .. cmd) end



-- Idle A100 nodes of partition gpu as sinfo reports them (independent of obleth).
local function sinfo_idle(gres_type)
  local _, out = slurm("sinfo -h -N -p gpu -o '%N %T %G'")
  local set = {}
  for name, state, gres in out:gmatch("(%S+) (%S+) (%S+)") do
    if state == "idle" and gres:find("gpu:" .. gres_type .. ":", 1, true) then set[#set + 1] = name end
  end
  table.sort(set)
  return set
end

local read = require "spec.support.preview"
local by_partition, has, error_for = read.by_partition, read.has, read.error_for

describe("the launch flow on the harness cluster", function()
  if not harness.URL then
    it("needs the harness cluster", function() pending("harness cluster not running") end)
    return
  end

  local cluster, srv, logdir, prov
  local drained = false

  local function ok(method, path, body)
    local status, doc, raw = srv:request(method, path, body)
    assert(status and status < 300, ("%s %s -> %s %s"):format(method, path, tostring(status), tostring(raw)))
    return doc
  end

  local function preview(body)
    return ok("POST", "/api/v1/deployments/preview", body)
  end

  -- this installation's jobs of a model, also those still completing
  local function model_jobs(model_id) return cluster:live_jobs(model_id, { COMPLETING = true }) end

  setup(function()
    cluster = harness.start { port_range = { 22000, 22999 } }
    srv, logdir = cluster.srv, cluster.logdir
  end)

  teardown(function()
    if drained then slurm("scontrol update nodename=n2 state=resume") end
    if prov then prov:stop() end
    if cluster then cluster:stop() end
  end)

  it("partition fit for 4 A100 GPUs per node counts the idle A100 nodes of gpu: not the H100 node, not a drained one", function()
    local code, out = slurm("scontrol update nodename=n2 state=drain reason=spec")
    assert.equal(0, code, out)
    drained = true
    local ok_, err = pcall(function()
      -- other specs share the cluster: compare with sinfo taken just before and just after the preview
      local pv, want
      for _ = 1, 10 do
        loop.sleep(FACTS_TTL + 0.2) -- past the server's facts cache
        local before = sinfo_idle("a100") -- n2 is "drained" there, so it is not listed
        pv = preview({ recipe_id = "smoke-test", values = { gpus_per_node = 4, gpu_type = "a100" } })
        want = sinfo_idle("a100")
        if table.concat(before, ",") == table.concat(want, ",") then break end
      end
      assert.is_false(has(want, "n2"))
      local gpu = by_partition(pv, "gpu")
      table.sort(gpu.nodes.idle)
      assert.same(want, gpu.nodes.idle)
      assert.equal(#want, gpu.idle_fitting_nodes)
      assert.is_false(has(gpu.nodes.fitting, "n3")) -- the H100 node has no A100
      assert.is_false(has(gpu.nodes.fitting, "n2")) -- drained
      assert.is_true(gpu.fits)
    end)
    slurm("scontrol update nodename=n2 state=resume")
    drained = false
    assert(ok_, err)
  end)

  it("for 8 GPUs per node only n3 fits", function()
    local pv = preview({ recipe_id = "smoke-test", values = { gpus_per_node = 8 } })
    local gpu = by_partition(pv, "gpu")
    assert.same({ "n3" }, gpu.nodes.fitting)
    assert.equal(1, gpu.fitting_nodes)
    assert.is_false(by_partition(pv, "debug").fits) -- n0 has 4 GPUs
  end)

  it("a preview for account teaching does not offer debug; choosing debug with it is a field error", function()
    local pv = preview({ recipe_id = "smoke-test", values = { account = "teaching" } })
    assert.is_true(has(pv.partitions_offered, "gpu"))
    assert.is_false(has(pv.partitions_offered, "debug"))
    assert.is_false(by_partition(pv, "debug").takes_account)
    assert.same({ "research" }, by_partition(pv, "debug").accounts)
    pv = preview({ recipe_id = "smoke-test", values = { account = "teaching", partition = "debug" } })
    assert.equal("AccountNotAllowed", error_for(pv, "account").code)
    assert.same({ "research" }, pv.accounts_offered)
  end)

  it("QoS long on debug is a field error, and launch refuses it with 422, storing nothing", function()
    local body = { recipe_id = "smoke-test", api_model_name = "refused-long", values = { partition = "debug", qos = "long" } }
    local pv = preview(body)
    assert.is_false(pv.ok)
    assert.equal("QOSNotAllowed", error_for(pv, "qos").code)
    local st, doc = srv:request("POST", "/api/v1/deployments/launch", body)
    assert.equal(422, st)
    assert.equal("qos", doc.error.field)
    assert.equal("qos", doc.errors[1].field)
    local _, models = srv:request("GET", "/api/v1/models")
    for _, m in ipairs(models.models) do assert.is_true(m.name ~= "refused-long") end
    local _, l = srv:request("GET", "/api/v1/deployments/launches")
    assert.equal(0, #l.launches)
  end)

  it("a 1-hour time limit on debug is a field error (MaxTime is 30 min)", function()
    local pv = preview({ recipe_id = "smoke-test", values = { partition = "debug", time_limit = "1:00:00" } })
    assert.equal("PartitionTimeLimit", error_for(pv, "time_limit").code)
    pv = preview({ recipe_id = "smoke-test", values = { partition = "debug", time_limit = "0:30:00" } })
    assert.is_nil(error_for(pv, "time_limit"))
  end)

  it("the preview's slurm_request is the job/submit body of the cluster's API version the provisioner would send", function()
    local pv = preview({ recipe_id = "smoke-test", api_model_name = "req/one",
      values = { time_limit = "20", exclude = "n[1-2]", inputs = { mode = "never-healthy" } } })
    local v = harness.API_VERSION
    assert.equal(v, pv.api_version)
    local body = pv.slurm_request
    local script
    if v == "v0.0.38" then
      -- v0.0.38 shapes, worked out from the API's documentation: top-level script, integer minutes,
      -- hostlist string for excluded nodes, environment as an object, nodes as [min, max]
      script = body.script
      assert.equal(20, body.job.time_limit)
      assert.equal("n[1-2]", body.job.exclude_nodes)
      assert.equal(512, body.job.memory_per_node)
      assert.equal("req/one", body.job.environment.OBLETH_API_MODEL_NAME)
      assert.equal("22000", body.job.environment.OBLETH_PORT)
    else
      -- v0.0.41 and later: the script inside job, numbers as {set, infinite, number}, excluded nodes
      -- as an array of names, the environment as an array of "K=V"
      assert.is_nil(body.script)
      script = body.job.script
      assert.same({ set = true, infinite = false, number = 20 }, body.job.time_limit)
      assert.same({ "n1", "n2" }, body.job.excluded_nodes)
      assert.same({ set = true, infinite = false, number = 512 }, body.job.memory_per_node)
      local env = {}
      for _, kv in ipairs(body.job.environment) do env[kv:match("^([^=]*)=")] = kv:match("=(.*)$") end
      assert.equal("req/one", env.OBLETH_API_MODEL_NAME)
      assert.equal("22000", env.OBLETH_PORT)
    end
    assert.is_string(script)
    assert.equal(pv.job_script, script)
    assert.equal("1", body.job.nodes) -- a count string: v0.0.38 ignores [min, max]
    assert.equal("gpu", body.job.partition)
    assert.equal("research", body.job.account)
    assert.equal(logdir .. "/%x-%j.out", body.job.standard_output)
    assert.is_truthy(script:find("'--mode' 'never-healthy'", 1, true))
    -- and exactly what obleth.slurm.submit.body builds from the provisioner's job description
    local spec = pv.spec
    spec.generation = 1
    local _, settings = srv:request("GET", "/api/v1/settings/slurm")
    local defaults = { log_dir = logdir, partition = "gpu", account = "research", modules = {}, environment = {},
      port_range = { 22000, 22999 } }
    assert.equal(logdir, settings.defaults.log_dir)
    local exe = util.obleth()
    local instance = pv.placeholders.instance
    assert.matches("^%x%x%x%x%x%x%x%x$", instance) -- this installation's id
    local desc = jobscript.desc({ id = 0, name = "req/one", instance = instance },
      { slot = 1, nonce = "0000000000000000", port = 22000 },
      spec, defaults, exe:match("^(.*)/[^/]*$"), exe)
    local want = assert(submit.body(desc, v))
    assert.same(server.ints(require("cjson").decode(require("cjson").encode(want))), body)
  end)

  it("Edit as YAML: unknown keys, wrong types and refused values come back with their line and column", function()
    local yaml = table.concat({
      "partition: debug",    -- 1
      "qos: long",           -- 2 refused by the partition
      "nodes: [1, 2]",       -- 3 wrong type
      "colour: blue",        -- 4 unknown key
      "inputs:",             -- 5
      "  mode: sideways",    -- 6 bad value
      "  nope: 1",           -- 7 unknown input
      "time_limit: 1:00:00", -- 8 above MaxTime
    }, "\n") .. "\n"
    local doc = ok("POST", "/api/v1/deployments/check-yaml", { recipe_id = "smoke-test", yaml = yaml })
    assert.is_false(doc.ok)
    local got = {}
    for _, d in ipairs(doc.diagnostics) do got[d.field] = { d.line, d.column } end
    assert.same({ 2, 1 }, got.qos)
    assert.same({ 3, 1 }, got.nodes)
    assert.same({ 4, 1 }, got.colour)
    assert.same({ 6, 3 }, got["inputs.mode"])
    assert.same({ 7, 3 }, got["inputs.nope"])
    assert.same({ 8, 1 }, got.time_limit)
    doc = ok("POST", "/api/v1/deployments/check-yaml", { recipe_id = "smoke-test", yaml = "partition: [gpu\n" })
    assert.is_false(doc.ok)
    assert.equal(2, doc.diagnostics[1].line)
    doc = ok("POST", "/api/v1/deployments/check-yaml", { recipe_id = "smoke-test",
      yaml = "partition: gpu\nnodes: 1\ninputs:\n  mode: exit\n" })
    assert.is_true(doc.ok)
    assert.same({ value = "exit", provenance = "user" }, doc.settings["inputs.mode"])
    assert.same({ value = "gpu", provenance = "user" }, doc.settings.partition)
  end)

  it("a saved recipe launched again shows the account and QoS of its recent launches as learned", function()
    local first = ok("POST", "/api/v1/deployments/launch", { recipe_id = "smoke-test", api_model_name = "learn-0",
      values = { replicas = 0, account = "teaching", qos = "long", time_limit = "25" },
      save_recipe = { id = "my-smoke", name = "My smoke" } })
    assert.equal("my-smoke", first.recipe.id)
    assert.equal("staged", first.model.status)
    assert.equal(first.launch.id, first.spec.launch_id)
    assert.equal("token:admin", first.launch.created_by)
    local _, saved = srv:request("GET", "/api/v1/recipes/my-smoke")
    assert.equal(25, saved.recipe.resources.time_limit)
    -- the form's account and QoS are kept in the saved recipe too
    assert.same({ "teaching", "long" }, { saved.recipe.resources.account, saved.recipe.resources.qos })
    assert.same({ value = "teaching", provenance = "recipe" }, preview({ recipe_id = "my-smoke" }).settings.account)
    -- three launches of the saved recipe, all with teaching / long (the policy's window is 3)
    local ids = {}
    for i = 1, 3 do
      local pv = preview({ recipe_id = "my-smoke" })
      assert.equal(25, pv.settings.time_limit.value)
      assert.equal("recipe", pv.settings.time_limit.provenance)
      local l = ok("POST", "/api/v1/deployments/launch", { recipe_id = "my-smoke", api_model_name = "learn-" .. i,
        values = { replicas = 0, account = "teaching", qos = "long" } })
      ids[#ids + 1] = l.launch.id
      assert.equal("my-smoke", l.launch.recipe_id)
    end
    local pv = preview({ recipe_id = "my-smoke" })
    assert.same({ value = "teaching", provenance = "learned" }, pv.settings.account)
    assert.same({ value = "long", provenance = "learned" }, pv.settings.qos)
    table.sort(ids, function(a, b) return a > b end)
    assert.same(ids, pv.learned.evidence)
    -- what the user changes still wins
    pv = preview({ recipe_id = "my-smoke", values = { account = "research" } })
    assert.same({ value = "research", provenance = "user" }, pv.settings.account)
    -- the same recipe under two names is two models; a taken name is a 409 on api_model_name
    local st, doc = srv:request("POST", "/api/v1/deployments/launch", { recipe_id = "my-smoke",
      api_model_name = "learn-1", values = { replicas = 0 } })
    assert.equal(409, st)
    assert.equal("api_model_name", doc.error.field)
    for i = 0, 3 do
      local _, m = srv:request("GET", "/api/v1/models")
      for _, x in ipairs(m.models) do
        if x.name == "learn-" .. i then assert.equal(204, (srv:request("DELETE", "/api/v1/models/" .. x.id .. "/managed"))) end
      end
    end
  end)

  it("a recipe saved from an autoscaled launch keeps autoscale, and a launch from it is autoscaled again", function()
    local first = ok("POST", "/api/v1/deployments/launch", { recipe_id = "smoke-test", api_model_name = "auto-save-0",
      values = { autoscale = { min_replicas = 0, max_replicas = 2, target_inflight = 3, idle_to_zero_after = 600 } },
      save_recipe = { id = "my-auto-smoke" } })
    assert.equal("my-auto-smoke", first.recipe.id)
    local _, saved = srv:request("GET", "/api/v1/recipes/my-auto-smoke")
    assert.same({ min_replicas = 0, max_replicas = 2, target_inflight = 3, idle_to_zero_after = 600 },
      saved.recipe.autoscale)
    assert.is_nil(saved.recipe.replicas) -- smoke-test's fixed 2 is not kept beside it
    local again = ok("POST", "/api/v1/deployments/launch", { recipe_id = "my-auto-smoke",
      api_model_name = "auto-save-1" })
    assert.same({ min_replicas = 0, max_replicas = 2, target_inflight = 3, scale_down_after = 300,
      idle_to_zero_after = 600 }, again.spec.autoscale)
    assert.is_nil(again.spec.replicas)
    assert.equal("recipe", again.launch.settings.provenance["autoscale.max_replicas"])
    for _, l in ipairs({ first, again }) do
      assert.equal(204, (srv:request("DELETE", "/api/v1/models/" .. l.model.id .. "/managed")))
    end
  end)

  it("a stopped model is launched again under its own name (model_id), then deleted", function()
    local first = ok("POST", "/api/v1/deployments/launch", { recipe_id = "smoke-test", api_model_name = "again-1",
      values = { replicas = 0 } })
    local id = first.model.id
    -- still launched: launching it again is refused on model_id
    local st, doc = srv:request("POST", "/api/v1/deployments/launch", { recipe_id = "smoke-test", model_id = id,
      values = { replicas = 0 } })
    assert.equal(409, st)
    assert.equal("model_id", doc.error.field)
    ok("DELETE", "/api/v1/models/" .. id .. "/managed")
    st, doc = srv:request("POST", "/api/v1/deployments/launch", { recipe_id = "smoke-test", model_id = id,
      api_model_name = "another-name", values = { replicas = 0 } })
    assert.equal(400, st)
    assert.equal("api_model_name", doc.error.field)
    -- the page's Launch again: {model_id} alone is the last launch's recipe and settings (values over them)
    local again = ok("POST", "/api/v1/deployments/launch", { model_id = id, values = { time_limit = "20" } })
    assert.equal(id, again.model.id)
    assert.equal("again-1", again.model.name)
    assert.equal(20, again.spec.time_limit)
    assert.equal(again.launch.id, again.spec.launch_id)
    assert.equal(2, #ok("GET", "/api/v1/deployments/launches?model_id=" .. id).launches)
    st = srv:request("POST", "/api/v1/deployments/launch", { recipe_id = "smoke-test", model_id = 999999 })
    assert.equal(404, st)
    ok("DELETE", "/api/v1/models/" .. id .. "/managed")
    ok("DELETE", "/api/v1/models/" .. id)
    assert.equal(404, (srv:request("GET", "/api/v1/models/" .. id)))
  end)

  it("a launch of smoke-test through this flow ends with healthy replicas while the provisioner runs", function()
    prov = provisioner.start { base = srv.base, token = srv.token }
    local res = ok("POST", "/api/v1/deployments/launch", { recipe_id = "smoke-test", api_model_name = "smoke-launch",
      values = { replicas = 2, time_limit = "10", inputs = { startup_delay = 1 } } })
    local mid = res.model.id
    assert.equal("staged", res.model.status)
    assert.equal(2, res.spec.replicas)
    local healthy = wait_until(function()
      local _, doc = srv:request("GET", ("/api/v1/models/%d/replicas"):format(mid))
      local n = 0
      for _, r in ipairs(doc and doc.replicas or {}) do if r.state == "healthy" then n = n + 1 end end
      if n >= 2 then return n end
      return nil, ("%d healthy; provisioner log: %s\nserver: %s"):format(n, prov:log():sub(-600),
        srv:log():match("[^\n]*api_handler_error[^\n]*") or "no handler error")
    end, 120, "two healthy replicas")
    assert.equal(2, healthy)
    local _, m = srv:request("GET", "/api/v1/models/" .. mid)
    assert.equal("active", m.status)
    -- the launch record gets the replicas' launch id
    local _, reps = srv:request("GET", ("/api/v1/models/%d/replicas"):format(mid))
    for _, r in ipairs(reps.replicas) do assert.equal(res.launch.id, r.launch_id) end
    assert.equal(204, (srv:request("DELETE", ("/api/v1/models/%d/managed"):format(mid))))
    wait_until(function() return #model_jobs(mid) == 0 end, 60, "the model's jobs to end")
  end)
end)
