-- obleth.deployment on plain tables: provenance, learned defaults, Slurm-side
-- field errors, partition fit, suggestions, the job script and the exact
-- slurmrestd body, prefill, "save as recipe", and the YAML settings reader.
-- Expected values are worked out by hand from the facts below.
local launch = require "obleth.deployment"
local recipe = require "obleth.recipe"

local function policy(name) return require("obleth.policy." .. name) end

local R = assert(recipe.validate({
  id = "eng", name = "Engine", engine = "custom", programs = { "engine" },
  inputs = {
    model = { type = "string", required = true },
    tp = { type = "integer", default = 1, min = 1, max = 8 },
  },
  resources = { cpus_per_node = 4, memory_per_node = 1000, time_limit = "2:00:00" },
  launch = { "engine", "--model", "{{ inputs.model }}", "--port", "$OBLETH_PORT", "--name", "{{ model.api_name }}",
    "--tp", "{{ inputs.tp }}" },
}))

local function node(name, over)
  local n = { name = name, cpus = 8, alloc_cpus = 0, memory = 32000, alloc_memory = 0, idle = true,
    state = { base = "IDLE", flags = {} }, features = { a100 = true },
    gres = { gpu = { total = 4, by_type = { a100 = 4 } } }, gres_free = { gpu = { total = 4, by_type = { a100 = 4 } } } }
  for k, v in pairs(over or {}) do n[k] = v end
  return n
end

-- a: idle A100 node; b: busy (MIXED) but with room; c: idle H100 node; d: drained A100 node
local FACTS = {
  partitions = {
    { name = "gpu", node_list = { "a", "b", "c", "d" }, max_time = 240, max_nodes = math.huge, state = "UP",
      default = true },
    { name = "debug", node_list = { "a" }, max_time = 30, max_nodes = math.huge, state = "UP",
      allowed_accounts = { research = true }, denied_qos = { long = true } },
  },
  nodes = {
    node("a"),
    node("b", { idle = false, state = { base = "MIXED", flags = {} }, alloc_cpus = 2, alloc_memory = 1000 }),
    node("c", { memory = 64000, features = { h100 = true }, gres = { gpu = { total = 8, by_type = { h100 = 8 } } },
      gres_free = { gpu = { total = 8, by_type = { h100 = 8 } } } }),
    node("d", { idle = false, state = { base = "IDLE", flags = { DRAIN = true } } }),
  },
  associations = {
    { account = "research", user = "u", qos = { normal = true, long = true } },
    { account = "teaching", user = "u", qos = { normal = true, long = true } },
  },
  qos = { { name = "normal" }, { name = "long", max_wall = 2880 } },
}

local DEFAULTS = { partition = "gpu", account = "research", log_dir = "/logs", port_range = { 20000, 20999 },
  hf_token = "hf_secret_value", hf_token_path = "/home/svc/.hf-token", modules = {}, environment = {} }

local function pv(over)
  local p = { recipe = R, values = { inputs = { model = "x y" } }, api_model_name = "m1", defaults = DEFAULTS,
    launches = {}, facts = FACTS, api_version = "v0.0.38", policy = policy, instance = "abcdef01" }
  for k, v in pairs(over or {}) do p[k] = v end
  return launch.preview(p)
end

local function fit(res, name)
  for _, f in ipairs(res.partitions) do if f.partition == name then return f end end
end

local function err(res, field)
  for _, e in ipairs(res.errors) do if e.field == field then return e end end
end

local function launches(n, account, qos)
  local out = {}
  for i = n, 1, -1 do out[#out + 1] = { id = i, settings = { account = account, qos = qos, time_limit = 60 }, outcomes = {} } end
  return out
end

describe("obleth.deployment.preview: autoscale from the form", function()
  local function field(res, name)
    for _, f in ipairs(res.fields) do if f.field == name then return f end end
  end

  it("holds every autoscale setting, unset (a fixed count) until the user gives one", function()
    local res = pv()
    for _, k in ipairs({ "min_replicas", "max_replicas", "target_inflight", "scale_down_after", "idle_to_zero_after" }) do
      local f = field(res, "autoscale." .. k)
      assert.is_table(f, k)
      assert.is_nil(f.value)
      assert.is_nil(f.provenance)
    end
    assert.equal(1, res.spec.replicas)
    assert.is_nil(res.spec.autoscale)
  end)

  it("the user's autoscale values go in the spec (defaults filled), marked the user's, with no fixed count", function()
    local res = pv({ values = { inputs = { model = "m" }, autoscale = { min_replicas = "0", max_replicas = 2 } } })
    assert.is_true(res.ok, res.errors[1] and res.errors[1].message)
    assert.same({ value = 0, provenance = "user" }, res.settings["autoscale.min_replicas"])
    assert.same({ value = 2, provenance = "user" }, res.settings["autoscale.max_replicas"])
    assert.same({ min_replicas = 0, max_replicas = 2, target_inflight = 4, scale_down_after = 300,
      idle_to_zero_after = 1800 }, res.spec.autoscale)
    assert.is_nil(res.spec.replicas)
    assert.is_nil(field(res, "replicas").value)
    -- dotted keys as the form sends them work alike
    res = pv({ values = { inputs = { model = "m" }, ["autoscale.max_replicas"] = 3 } })
    assert.equal(3, res.spec.autoscale.max_replicas)
  end)

  it("refuses replicas with autoscale, and autoscale out of the spec's bounds, on the field", function()
    local res = pv({ values = { inputs = { model = "m" }, replicas = 2, autoscale = { max_replicas = 2 } } })
    assert.is_false(res.ok)
    assert.matches("replicas or autoscale, not both", err(res, "replicas").message)
    res = pv({ values = { inputs = { model = "m" }, autoscale = { max_replicas = 2, scale_down_after = 7200 } } })
    assert.is_false(res.ok)
    assert.is_table(err(res, "autoscale.scale_down_after"))
    res = pv({ values = { inputs = { model = "m" }, autoscale = { min_replicas = 0 } } })
    assert.is_false(res.ok, "max_replicas is required")
    assert.is_table(err(res, "autoscale.max_replicas"))
  end)

  -- a recipe saved from an autoscaled launch once kept only the fixed `replicas` of the recipe it came
  -- from (smoke-test's 2), so a launch from it had a fixed count again
  it("a recipe saved from an autoscaled launch keeps autoscale and no fixed count; a launch from it restores it",
    function()
    local doc = { id = "eng", name = "Engine", engine = "custom", programs = { "engine" }, replicas = 2,
      inputs = { model = { type = "string", required = true } }, launch = { "engine", "{{ inputs.model }}" } }
    local src = assert(recipe.validate(doc))
    local res = pv({ recipe = src, values = { inputs = { model = "m" },
      autoscale = { min_replicas = 0, max_replicas = 3, target_inflight = 6 } } })
    assert.is_true(res.ok, res.errors[1] and res.errors[1].message)
    local prov = {}
    for _, f in ipairs(res.fields) do prov[f.field] = f.provenance end
    local out = launch.saved_recipe(doc, { id = "mine" }, res.values, prov)
    assert.same({ min_replicas = 0, max_replicas = 3, target_inflight = 6 }, out.autoscale)
    assert.is_nil(out.replicas) -- the library recipe's fixed 2 is not kept beside it
    local saved = assert(recipe.validate(out))
    -- the launch from the saved recipe: the same autoscale, the recipe's, with the spec's defaults filled
    local again = pv({ recipe = saved, values = { inputs = { model = "m" } } })
    assert.is_true(again.ok, again.errors[1] and again.errors[1].message)
    assert.same({ min_replicas = 0, max_replicas = 3, target_inflight = 6, scale_down_after = 300,
      idle_to_zero_after = 1800 }, again.spec.autoscale)
    assert.is_nil(again.spec.replicas)
    assert.same({ value = 3, provenance = "recipe" }, again.settings["autoscale.max_replicas"])
    assert.is_nil(field(again, "autoscale.scale_down_after").provenance)
    -- the user's value is laid over the recipe's; a fixed count of theirs replaces the recipe's autoscale
    local over = pv({ recipe = saved, values = { inputs = { model = "m" }, autoscale = { max_replicas = 5 } } })
    assert.same({ 0, 5, 6 }, { over.spec.autoscale.min_replicas, over.spec.autoscale.max_replicas,
      over.spec.autoscale.target_inflight })
    local fixed = pv({ recipe = saved, values = { inputs = { model = "m" }, replicas = 2 } })
    assert.is_true(fixed.ok, fixed.errors[1] and fixed.errors[1].message)
    assert.equal(2, fixed.spec.replicas)
    assert.is_nil(fixed.spec.autoscale)
    assert.is_nil(field(fixed, "autoscale.max_replicas").value)
    -- saved from that fixed launch: the fixed count, and no autoscale
    local prov2 = {}
    for _, f in ipairs(fixed.fields) do prov2[f.field] = f.provenance end
    local out2 = launch.saved_recipe(out, { id = "mine-fixed" }, fixed.values, prov2)
    assert.equal(2, out2.replicas)
    assert.is_nil(out2.autoscale)
    assert.is_truthy(recipe.validate(out2))
  end)

  it("a recipe's autoscale is checked like the spec's (keys, bounds) and not with replicas", function()
    local base = { id = "eng", name = "Engine", engine = "custom", programs = { "engine" }, launch = { "engine" } }
    local function bad(extra)
      local d = {}
      for k, v in pairs(base) do d[k] = v end
      for k, v in pairs(extra) do d[k] = v end
      local r, e = recipe.validate(d)
      assert.is_nil(r)
      return e.errors[1]
    end
    assert.same({ "autoscale.min", true }, (function()
      local e = bad({ autoscale = { min = 0 } })
      return { e.field, e.message:find("min_replicas, max_replicas", 1, true) ~= nil }
    end)())
    assert.equal("autoscale.scale_down_after", bad({ autoscale = { max_replicas = 2, scale_down_after = 7200 } }).field)
    assert.equal("autoscale", bad({ autoscale = 3 }).field)
    assert.equal("replicas", bad({ replicas = 1, autoscale = { max_replicas = 2 } }).field)
  end)

  it("the YAML view reads autoscale as a mapping, and names its keys for an unknown one", function()
    local values, diags = launch.yaml_values({ autoscale = { min_replicas = 0, max_replicas = 2 } }, nil, R)
    assert.same({}, diags)
    assert.same({ min_replicas = 0, max_replicas = 2 }, values.autoscale)
    local _, d2 = launch.yaml_values({ autoscale = { min = 0 } }, nil, R)
    assert.equal("autoscale.min", d2[1].field)
    assert.matches("unknown key autoscale.min (min_replicas, max_replicas, target_inflight", d2[1].message, 1, true)
  end)

  it("the form's hints for autoscale are the managed schema's", function()
    local a = require("obleth.api.deployments").answer({ ok = true, settings = {}, learned = {}, fields = {
      { field = "autoscale.scale_down_after" }, { field = "autoscale.min_replicas" } } },
      { recipe = { id = "r" }, source = "library" })
    assert.same({ min = 0, max = require("obleth.schema.managed").SCALE_DOWN_MAX, default = 300, unit = "seconds" },
      a.fields[1].hint)
    assert.same({ min = 0, max = 64, default = 1 }, a.fields[2].hint)
  end)
end)

describe("obleth.deployment.preview", function()
  it("gives every setting its value and where it came from", function()
    local res = pv()
    assert.is_true(res.ok)
    assert.same({ value = "m1", provenance = "user" }, res.settings.api_model_name)
    assert.same({ value = "gpu", provenance = "cluster_default" }, res.settings.partition)
    assert.same({ value = "research", provenance = "cluster_default" }, res.settings.account)
    assert.same({ value = 120, provenance = "recipe" }, res.settings.time_limit) -- 2:00:00 in minutes
    assert.same({ value = 4, provenance = "recipe" }, res.settings.cpus_per_node)
    assert.same({ value = 1, provenance = "builtin" }, res.settings.nodes) -- obleth's fallback: the recipe says nothing
    assert.same({ value = "/logs/%x-%j.out", provenance = "cluster_default" }, res.settings.stdout)
    assert.same({ value = "x y", provenance = "user" }, res.settings["inputs.model"])
    assert.same({ value = 1, provenance = "recipe" }, res.settings["inputs.tp"])
    assert.is_nil(res.settings.qos.value)
    assert.is_nil(res.settings.qos.provenance)
  end)

  it("starts with the account and QoS of the recipe's last three launches, marked learned; the user's value wins", function()
    local res = pv({ launches = launches(3, "teaching", "long") })
    assert.same({ value = "teaching", provenance = "learned" }, res.settings.account)
    assert.same({ value = "long", provenance = "learned" }, res.settings.qos)
    assert.same({ 3, 2, 1 }, res.learned.evidence)
    assert.is_true(res.learned.applied)
    res = pv({ launches = launches(3, "teaching", "long"), values = { account = "research", inputs = { model = "m" } } })
    assert.same({ value = "research", provenance = "user" }, res.settings.account)
    assert.same({ value = "long", provenance = "learned" }, res.settings.qos)
    -- two launches are too few; mixed accounts teach nothing
    res = pv({ launches = launches(2, "teaching", "long") })
    assert.equal("cluster_default", res.settings.account.provenance)
    assert.equal("too_few", res.learned.reason)
    local mixed = launches(3, "teaching", "long")
    mixed[2].settings.account = "research"
    res = pv({ launches = mixed })
    assert.equal("mixed", res.learned.reason)
  end)

  it("turns what Slurm would accept but never run into field errors", function()
    local res = pv({ values = { partition = "debug", qos = "long", time_limit = "1:00:00", inputs = { model = "m" } } })
    assert.is_false(res.ok)
    assert.equal("QOSNotAllowed", err(res, "qos").code)
    assert.equal("PartitionTimeLimit", err(res, "time_limit").code) -- 60 min > MaxTime 30
    res = pv({ values = { partition = "debug", account = "teaching", time_limit = 30, inputs = { model = "m" } } })
    assert.equal("AccountNotAllowed", err(res, "account").code)
    assert.is_nil(err(res, "time_limit"))
    res = pv({ values = { qos = "long", time_limit = "2-01:00:00", partition = "gpu", inputs = { model = "m" } } })
    assert.equal("PartitionTimeLimit", err(res, "time_limit").code) -- 2940 min > 240
  end)

  it("reports a missing required input and a bad API model name by field", function()
    local res = pv({ values = {}, api_model_name = "bad name" })
    assert.is_truthy(err(res, "inputs.model"))
    assert.is_truthy(err(res, "api_model_name"))
  end)

  it("refuses an API model name that starts with '-': the engine would read it as an option", function()
    local res = pv({ values = { inputs = { model = "m" } }, api_model_name = "--trust-remote-code" })
    assert.matches("starting with a letter or digit", err(res, "api_model_name").message, 1, true)
    res = pv({ values = { inputs = { model = "m" } }, api_model_name = "org/model-1.5:q4" })
    assert.is_nil(err(res, "api_model_name"))
  end)

  it("counts idle fitting nodes: 4 A100 GPUs fit a and b, only a is idle; never the H100 node or the drained one", function()
    local res = pv({ values = { gpus_per_node = 4, gpu_type = "a100", inputs = { model = "m" } } })
    local gpu = fit(res, "gpu")
    assert.same({ "a", "b" }, gpu.nodes.fitting)
    assert.same({ "a" }, gpu.nodes.idle)
    assert.equal(1, gpu.idle_fitting_nodes)
    assert.is_true(gpu.fits)
    local debug = fit(res, "debug")
    assert.is_false(debug.fits) -- 120 min is above its MaxTime
    res = pv({ values = { gpus_per_node = 8, inputs = { model = "m" } } })
    assert.same({ "c" }, fit(res, "gpu").nodes.fitting)
  end)

  it("offers only the partitions that take the account, and only the accounts the partition takes", function()
    local res = pv({ values = { account = "teaching", inputs = { model = "m" } } })
    assert.same({ "gpu" }, res.partitions_offered)
    assert.same({ "research", "teaching" }, res.accounts_offered) -- for gpu
    assert.same({ "research" }, fit(res, "debug").accounts)
    assert.is_false(fit(res, "debug").takes_account)
    res = pv({ values = { partition = "debug", inputs = { model = "m" }, time_limit = 30 } })
    assert.same({ "research" }, res.accounts_offered)
    assert.same({ "normal" }, res.qos_offered) -- long is denied by debug
  end)

  it("renders the job script and the exact v0.0.38 body, without the Hugging Face token (only the path of the "
    .. "site's token file)", function()
    local res = pv({ values = { gpus_per_node = 4, gpu_type = "a100", exclude = "b,d", inputs = { model = "x y" } } })
    local line = [[exec 'engine' '--model' 'x y' '--port' "${OBLETH_PORT}" '--name' 'm1' '--tp' '1']]
    assert.is_truthy(res.job_script:find(line, 1, true))
    local body = res.slurm_request
    assert.equal(res.job_script, body.script)
    assert.equal("obleth-abcdef01-m0-s1-0000000000000000", body.job.name)
    assert.equal("obleth instance=abcdef01 model=0 slot=1 nonce=0000000000000000 gen=1 port=20000", body.job.comment)
    assert.equal(120, body.job.time_limit)
    assert.equal("a100:4", body.job.gpus_per_node)
    assert.equal("1", body.job.nodes)
    assert.equal(4, body.job.minimum_cpus_per_node)
    assert.equal(1000, body.job.memory_per_node)
    assert.equal("b,d", body.job.exclude_nodes)
    assert.equal("gpu", body.job.partition)
    assert.equal("research", body.job.account)
    assert.equal("20000", body.job.environment.OBLETH_PORT)
    assert.equal("m1", body.job.environment.OBLETH_API_MODEL_NAME)
    assert.is_nil(body.job.environment.HF_TOKEN)
    assert.equal("/home/svc/.hf-token", body.job.environment.HF_TOKEN_PATH)
    for k, v in pairs(body.job.environment) do assert.is_nil(v:find("hf_secret_value", 1, true), k) end
    assert.is_nil(res.job_script:find("hf_secret_value", 1, true))
    assert.equal("/logs/%x-%j.out", body.job.standard_output)
    assert.equal("/logs", body.job.current_working_directory)
    -- requeue = false is left out on v0.0.38 (slurmrestd 22.05 reads any value as true)
    assert.is_nil(body.job.requeue)
  end)

  it("a recipe's time_limit max is the longest the partition allows, so its form opens with no problem", function()
    local lib = assert(recipe.validate({ id = "long", engine = "custom", inputs = { model = { type = "string" } },
      programs = { "engine" }, resources = { time_limit = "max" }, launch = { "engine", "{{ inputs.model }}" } }))
    for _, part in ipairs({ "gpu", "debug" }) do
      local res = pv({ recipe = lib, values = { partition = part, inputs = { model = "org/m" } } })
      assert.same({}, res.errors)
      assert.equal(part == "gpu" and 240 or 30, res.slurm_request.job.time_limit)
    end
    -- a time the user types still wins, and is checked against MaxTime
    local res = pv({ recipe = lib, values = { time_limit = "5:00:00", inputs = { model = "org/m" } } })
    assert.equal("time_limit", res.errors[1].field)
    -- without cluster facts: a day
    local r2 = recipe.resolve(lib, { inputs = { model = "org/m" } }, {}, nil)
    assert.equal(1440, r2.values.time_limit)
    assert.equal("recipe", r2.provenance.time_limit)
    -- "max" is also what a user may type
    res = pv({ recipe = lib, values = { partition = "debug", time_limit = "max", inputs = { model = "org/m" } } })
    assert.same({}, res.errors)
    assert.equal(30, res.slurm_request.job.time_limit)
  end)

  it("builds the v0.0.40 shapes when the cluster speaks v0.0.40", function()
    local res = pv({ api_version = "v0.0.40", values = { gpus_per_node = 2, gpu_type = "a100", inputs = { model = "m" } } })
    local job = res.slurm_request.job
    assert.same({ set = true, infinite = false, number = 120 }, job.time_limit)
    assert.same({ set = true, infinite = false, number = 1000 }, job.memory_per_node)
    assert.equal("gres/gpu:a100:2", job.tres_per_node)
    local found = false
    for _, kv in ipairs(job.environment) do
      assert.is_nil(kv:find("hf_secret_value", 1, true), kv)
      assert.is_nil(kv:find("HF_TOKEN=", 1, true), kv)
      if kv == "HF_TOKEN_PATH=/home/svc/.hf-token" then found = true end
    end
    assert.is_true(found)
  end)

  it("without cluster facts: no Slurm checks, a warning, and no body when the API version is unknown", function()
    local res = pv({ facts = false, api_version = false,
      values = { partition = "debug", qos = "long", inputs = { model = "m" } } })
    assert.same({}, res.errors)
    assert.is_true(res.ok)
    assert.same({}, res.partitions)
    assert.is_nil(res.slurm_request)
    assert.is_string(res.job_script)
    assert.is_true(#res.warnings >= 2)
  end)

  it("suggests a longer time limit after TIMEOUT, capped by the partition's MaxTime, with the evidence", function()
    local hist = { { id = 7, settings = { account = "research", time_limit = 150 },
      outcomes = { { job_id = 70, state = "TIMEOUT", node = "a", healthy = true, ended_at = 100 } } } }
    local res = pv({ launches = hist })
    local s = res.suggestions[1]
    assert.equal("time_limit", s.field)
    assert.equal(240, s.value) -- 150 × 2 = 300, capped at gpu's 240
    assert.equal(7, s.evidence[1].launch_id)
    assert.equal(70, s.evidence[1].job_id)
    assert.equal(120, res.settings.time_limit.value) -- never applied
  end)
end)

describe("obleth.deployment helpers", function()
  it("outcomes: every launch's job ends, newest end first, with its launch id and time limit", function()
    local out = launch.outcomes({
      { id = 2, settings = { time_limit = 30 }, outcomes = { { job_id = 21, state = "FAILED", ended_at = 50 },
        { job_id = 22, state = "TIMEOUT", ended_at = 90 } } },
      { id = 1, settings = { time_limit = 20 }, outcomes = { { job_id = 11, state = "NODE_FAIL", node = "n1", ended_at = 70 } } },
    })
    local got = {}
    for i, o in ipairs(out) do got[i] = { o.job_id, o.launch_id, o.time_limit } end
    assert.same({ { 22, 2, 30 }, { 11, 1, 20 }, { 21, 2, 30 } }, got)
  end)

  it("suggestion_ctx: the partition's limits (UNLIMITED as none) and its largest node's memory", function()
    local ctx = launch.suggestion_ctx({ partition = "gpu", qos = "long", time_limit = 60, nodes = 1,
      memory_per_node = 0 }, FACTS)
    assert.same({ name = "gpu", max_time = 240 }, ctx.partition)
    assert.same({ name = "long", max_wall = 2880 }, ctx.qos)
    assert.equal(64000, ctx.max_node_memory) -- node c
  end)

  it("user_values: the top-level API model name wins and is renamed for recipe.resolve", function()
    assert.same({ api_name = "top", nodes = 2 }, launch.user_values({ api_model_name = "inner", nodes = 2 }, "top"))
    assert.same({ api_name = "inner" }, launch.user_values({ api_model_name = "inner" }, nil))
  end)

  it("apply_prefill: a Hugging Face choice fills input defaults and GPUs; unknown inputs are reported", function()
    local r2, warnings = launch.apply_prefill(R, { inputs = { model = "org/repo", revision = "main" },
      gpus_per_node = 2, gpu_type = "h100" })
    assert.equal("org/repo", r2.inputs.model.default)
    assert.equal(2, r2.resources.gpus_per_node)
    assert.equal("h100", r2.resources.gpu_type)
    assert.equal(1, #warnings)
    assert.is_truthy(warnings[1]:find("revision", 1, true))
    assert.is_nil(R.inputs.model.default) -- the original is untouched
    local res = pv({ recipe = r2, values = {} })
    assert.same({ value = "org/repo", provenance = "recipe" }, res.settings["inputs.model"])
    assert.same({ value = 2, provenance = "recipe" }, res.settings.gpus_per_node)
  end)

  it("saved_recipe: keeps what the user changed or was learned, with account, QoS, job logs and rollover; "
    .. "cluster defaults stay defaults", function()
    local doc = { id = "eng", name = "Engine", engine = "custom", resources = { cpus_per_node = 4 },
      inputs = { model = { type = "string", required = true }, tp = { type = "integer", default = 1 } },
      launch = { "engine" } }
    local out = launch.saved_recipe(doc, { id = "mine", name = "Mine" },
      { partition = "gpu", nodes = 2, time_limit = 90, account = "teaching", qos = "long", replicas = 3,
        stdout = "/logs/%j.out", stderr = "/site/%j.err", rollover_margin = 15,
        health = { path = "/ready" }, inputs = { model = "m", tp = 1 } },
      { partition = "cluster_default", nodes = "user", time_limit = "user", account = "user", qos = "learned",
        replicas = "user", stdout = "user", stderr = "cluster_default", rollover_margin = "user",
        ["health.path"] = "user", ["inputs.model"] = "user", ["inputs.tp"] = "recipe" })
    assert.equal("mine", out.id)
    assert.equal("Mine", out.name)
    assert.same({ cpus_per_node = 4, nodes = 2, time_limit = 90, account = "teaching", qos = "long" }, out.resources)
    assert.equal(3, out.replicas)
    assert.equal("/logs/%j.out", out.stdout)
    assert.is_nil(out.stderr) -- from the cluster's log dir: the recipe keeps following it
    assert.equal(15, out.rollover_margin)
    assert.same({ path = "/ready" }, out.health)
    assert.equal("m", out.inputs.model.default)
    assert.equal(1, out.inputs.tp.default)
    assert.is_nil(doc.inputs.model.default) -- the original is untouched
    local r = assert(recipe.validate(out))
    assert.equal("teaching", r.resources.account)
    assert.equal(15, r.rollover_margin)
  end)

  it("saved_recipe: a Hugging Face choice's repo id and GPUs are written into the saved recipe", function()
    local r2, _, applied = launch.apply_prefill(R, { inputs = { model = "org/repo" }, gpus_per_node = 2,
      gpu_type = "h100" })
    assert.same({ ["inputs.model"] = true, gpus_per_node = true, gpu_type = true }, applied)
    local res = pv({ recipe = r2, values = {} })
    local prov = {}
    for _, f in ipairs(res.fields) do prov[f.field] = f.provenance end
    local doc = { id = R.id, name = "x", engine = R.engine, inputs = { model = { type = "string", required = true } },
      launch = { "engine", "{{ inputs.model }}" } }
    local out = launch.saved_recipe(doc, { id = "from-hf" }, res.values, prov, applied)
    assert.equal("org/repo", out.inputs.model.default)
    assert.equal(2, out.resources.gpus_per_node)
    assert.equal("h100", out.resources.gpu_type)
  end)

  it("yaml_values: unknown keys and lists where a value belongs are diagnostics at their key's position", function()
    local inputs = { model = "m", nope = 1 }
    local doc = { partition = "gpu", nodes = { 1, 2 }, colour = "blue", inputs = inputs }
    local pos = { [doc] = { partition = { line = 1, column = 1 }, nodes = { line = 2, column = 1 },
      colour = { line = 3, column = 1 }, inputs = { line = 4, column = 1 } },
      [inputs] = { model = { line = 5, column = 3 }, nope = { line = 6, column = 3 } } }
    local values, diags = launch.yaml_values(doc, pos, R)
    assert.same({ partition = "gpu", inputs = { model = "m" } }, values)
    local got = {}
    for _, d in ipairs(diags) do got[#got + 1] = { d.field, d.line, d.column } end
    assert.same({ { "nodes", 2, 1 }, { "colour", 3, 1 }, { "inputs.nope", 6, 3 } }, got)
    assert.same({ 5, 3 }, { launch.yaml_position(doc, pos, "inputs.model") })
    assert.same({ 1, 1 }, { launch.yaml_position(doc, pos, "partition") })
    assert.is_nil(launch.yaml_position(doc, pos, "account"))
    local _, d2 = launch.yaml_values({ "a", "b" }, nil, R)
    assert.equal(1, #d2)
  end)

  it("yaml_values: 80,000 unknown keys give the first MAX_DIAGNOSTICS by line and one line counting the rest", function()
    local doc, at = {}, {}
    for i = 1, 80000 do
      doc["k" .. i] = i
      at["k" .. i] = { line = i + 1, column = 1 }
    end
    local _, diags = launch.yaml_values(doc, { [doc] = at }, R)
    assert.equal(50, launch.MAX_DIAGNOSTICS)
    assert.equal(51, #diags)
    for i = 1, 50 do
      assert.equal(i + 1, diags[i].line)
      assert.equal("k" .. i, diags[i].field)
    end
    assert.equal("79950 more problems not listed", diags[51].message)
  end)
end)

describe("obleth.deployment.suggestions and the job's last lines", function()
  local set = require("obleth.policy").new { dir = "/nonexistent" }
  local function history(stderr)
    local outs = {}
    for i = 1, 2 do
      outs[i] = { job_id = 100 + i, state = "FAILED", exit_code = 1, node = "n1", healthy = false,
        started_at = 1000 * i, ended_at = 1000 * i + 5, stderr = stderr }
    end
    return { { id = 1, settings = { time_limit = 30 }, outcomes = outs } }
  end

  it("two start-up failures on n1 whose log is a Python traceback suggest avoiding no node", function()
    local tb = { "Traceback (most recent call last):", "  File \"serve.py\", line 3", "ValueError: bad --dtype" }
    assert.same({}, launch.suggestions(set.get, history(tb), {}, nil))
  end)

  it("without the log, the same two failures on n1 still point at n1", function()
    local s = launch.suggestions(set.get, history(nil), {}, nil)
    assert.equal(1, #s)
    assert.equal("avoid_node", s[1].kind)
    assert.equal("n1", s[1].node)
  end)
end)
