-- The checks Slurm makes that the launch preview makes first, on
-- the harness cluster (spec/cluster/README.md): partition staff (AllowGroups
-- obleth-staff, which the job user obleth is not in), partition inference
-- (n[1-3], AllowQos=inference, DefaultTime 45 min, MaxTime 2 h; obleth holds
-- normal, long and inference with default QoS normal), gpu and debug.
--
-- Each error the preview gives is checked against Slurm itself: the preview's
-- own slurmrestd request is submitted, and Slurm refuses it or leaves it
-- pending for the same reason; what the preview calls ok is not.
local util = require "spec.support.util"
local server = require "spec.support.server"
local harness = require "spec.support.harness"
local cjson = require "cjson"

local read = require "spec.support.preview"
local by_partition, has, error_for = read.by_partition, read.has, read.error_for

describe("launch checks on the harness cluster", function()
  if not harness.URL then
    it("needs the harness cluster", function() pending("harness cluster not running") end)
    return
  end

  local cluster, srv
  local submitted = {}

  setup(function()
    cluster = harness.start { port_range = { 23000, 23999 } }
    srv = cluster.srv
    -- a job of several nodes needs a script that runs on each (a launch command runs on the
    -- first node only and is refused with nodes > 1): a saved recipe whose script does
    local st, _, raw = srv:request("POST", "/api/v1/recipes", { id = "multi-sleep", name = "Sleep on every node",
      engine = "smoke", description = "srun sleep on each node of the job",
      resources = { nodes = 1, cpus_per_node = 1, memory_per_node = 200, gpus_per_node = 0, time_limit = "10" },
      health = { path = "/health", interval = 2, timeout = 2, startup_grace = 60, failure_threshold = 3 },
      script = "srun sleep 600\n" })
    assert(st == 201, "saving the multi-node recipe: " .. tostring(raw))
  end)

  teardown(function()
    for _, id in ipairs(submitted) do cluster.conn:cancel(id) end
    if cluster then cluster:stop() end
  end)

  local function ok(method, path, body)
    local status, doc, raw = srv:request(method, path, body)
    assert(status and status < 300, ("%s %s -> %s %s"):format(method, path, tostring(status), tostring(raw)))
    return doc
  end

  local function preview(values, recipe_id)
    return ok("POST", "/api/v1/deployments/preview", { recipe_id = recipe_id or "smoke-test", values = values })
  end

  -- Cluster defaults over the harness's (partition gpu, account research, its log dir)
  local function defaults(over)
    local _, s = srv:request("GET", "/api/v1/settings/slurm")
    local d = s.defaults
    d.hf_token, d.hf_token_set = nil, nil
    for k, v in pairs(over) do d[k] = v end
    local st, _, raw = srv:request("PUT", "/api/v1/settings/slurm", { enabled = true, url = harness.URL,
      user = harness.USER, token = "********", defaults = d })
    assert.equal(200, st, raw)
  end

  -- Submit the preview's own request body to slurmrestd: job id, or nil and Slurm's refusal
  local function submit(pv)
    assert.is_table(pv.slurm_request, "the preview built no request")
    local id, res = cluster.conn:submit_body(server.ints(cjson.decode(cjson.encode(pv.slurm_request))))
    if id then submitted[#submitted + 1] = id end
    return id, res
  end

  -- Wait until Slurm has decided about a job: it started (or ended), or it pends for a reason
  -- other than waiting its turn. Returns the job.
  local function decided(id)
    return util.wait_until(function()
      local j = cluster.conn:job(id)
      if not j then return nil, "job not readable" end
      if j.state.base ~= "PENDING" then return j end
      if j.reason and j.reason ~= "Priority" and j.reason ~= "Resources" and j.reason ~= "None" then return j end
      return nil, ("%s %s"):format(j.state.base, tostring(j.reason))
    end, 60, "Slurm to start or hold job " .. id)
  end

  -- 22.05 refuses such a job at submit; 24.11 and 26.05 accept it and leave it pending (seen live on
  -- both harness clusters)
  local refused_at_submit = require("spec.support.harness").RELEASE == "22.05"
  it("the group-restricted partition is unavailable with its reason, never offered; Slurm "
    .. (refused_at_submit and "refuses it at submit" or "leaves it pending forever") .. ": obleth's check is the guard",
    function()
    local pv = preview({})
    local staff = by_partition(pv, "staff")
    assert.is_false(staff.available)
    assert.is_false(staff.takes_user)
    assert.matches("obleth%-staff", staff.unavailable_reason)
    assert.is_false(has(pv.partitions_offered, "staff"))
    assert.is_true(has(pv.partitions_offered, "gpu"))
    assert.equal("host", pv.slurm_user.groups_from) -- this host's group database
    assert.is_false(has(pv.slurm_user.groups, "obleth-staff"))
    pv = preview({ partition = "staff" })
    assert.is_false(pv.ok)
    assert.equal("GroupNotAllowed", error_for(pv, "partition").code)
    local id, res = submit(pv)
    if refused_at_submit then
      assert.is_nil(id)
      assert.equal("refused", res.code)
      assert.matches("group not permitted", res.message)
    else
      -- accepted (26.05 with a warning, "Requested partition configuration not available now") and held
      assert.is_number(id, res and res.message)
      local j = decided(id)
      cluster.conn:cancel(id)
      assert.equal("PENDING", j.state.base)
      -- PartitionConfig at first, then AccountNotAllowed ("uid N not in group permitted ..."): never starts
      assert.is_true(j.reason == "PartitionConfig" or j.reason == "AccountNotAllowed", j.reason)
      assert.is_true(require("obleth.slurm").never_starts(j.reason), j.reason)
    end
  end)

  it("GET /api/v1/slurm/resources lists each partition's AllowGroups", function()
    local r = ok("GET", "/api/v1/slurm/resources")
    local by = {}
    for _, p in ipairs(r.partitions) do by[p.name] = p end
    assert.same({ "obleth-staff" }, by.staff.allowed_groups)
    assert.equal(cjson.null, by.gpu.allowed_groups)
    assert.same({ "inference" }, by.inference.allowed_qos)
    assert.equal(45, by.inference.default_time)
  end)

  it("groups the site configures in Cluster defaults replace the host's: then staff is offered", function()
    defaults({ user_groups = { "obleth", "obleth-staff" } })
    local pv = preview({})
    assert.equal("cluster_default", pv.slurm_user.groups_from)
    assert.is_true(by_partition(pv, "staff").available)
    assert.is_true(has(pv.partitions_offered, "staff"))
    defaults({ user_groups = cjson.null })
    pv = preview({})
    assert.equal("host", pv.slurm_user.groups_from)
    assert.is_false(by_partition(pv, "staff").available)
  end)

  it("with QoS left empty on the single-QoS partition the form preselects it, and Slurm runs the job", function()
    local pv = preview({ partition = "inference" })
    assert.is_true(pv.ok, cjson.encode(pv.errors))
    assert.same({ value = "inference", provenance = "cluster_default" }, pv.settings.qos)
    assert.same({ "inference" }, pv.qos_offered)
    assert.equal("inference", pv.slurm_request.job.qos)
    local id = assert(submit(pv))
    local j = decided(id)
    assert.is_true(j.state.base ~= "PENDING", ("job %d pends: %s"):format(id, tostring(j.reason)))
    cluster.conn:cancel(id)
  end)

  it("the association's default QoS on that partition is a QoS error, and Slurm leaves it pending forever", function()
    local pv = preview({ partition = "inference", qos = "normal" })
    assert.is_false(pv.ok)
    assert.equal("QOSNotAllowed", error_for(pv, "qos").code)
    local id = assert(submit(pv))
    local j = decided(id)
    assert.equal("PENDING", j.state.base)
    -- Slurm 22.05 names it either way (spec/integration/slurm_spec.lua)
    cluster.conn:cancel(id)
    assert.is_true(j.reason == "QOSNotAllowed" or j.reason == "PartitionConfig", j.reason)
  end)

  it("qos_offered lists the QoS of the user's default account when no account is chosen", function()
    defaults({ account = cjson.null })
    local pv = preview({})
    defaults({ account = "research" })
    assert.same({ value = cjson.null, provenance = cjson.null }, pv.settings.account)
    assert.same({ "inference", "long", "normal" }, pv.qos_offered)
    assert.is_true(pv.ok)
  end)

  describe("a request no node of the partition fits is an error on its field; Slurm refuses it or never runs it", function()
    -- the last element: the pending reasons Slurm gives instead of refusing (EnforcePartLimits unset)
    local cases = {
      { "8 GPUs on debug, whose node has 4", { partition = "debug", gpus_per_node = 8 }, "gpus_per_node" },
      { "an H100 on debug, whose node has A100s", { partition = "debug", gpus_per_node = 1, gpu_type = "h100" },
        "gpu_type" },
      { "a feature no node has", { constraint = "v100" }, "constraint" },
      { "more memory than a node has", { memory_per_node = 64000 }, "memory_per_node" },
      { "avoiding every node of debug", { partition = "debug", exclude = "n0" }, "exclude" },
      { "more nodes than gpu has", { nodes = 5 }, "nodes", { PartitionNodeLimit = true, PartitionConfig = true },
        "multi-sleep" },
    }
    for _, c in ipairs(cases) do
      it(c[1] .. " → " .. c[3], function()
        local pv = preview(c[2], c[5])
        assert.is_false(pv.ok)
        assert.is_truthy(error_for(pv, c[3]), cjson.encode(pv.errors))
        local id, res = submit(pv)
        if c[4] then
          assert.is_number(id, res and res.message)
          local j = decided(id)
          cluster.conn:cancel(id)
          assert.equal("PENDING", j.state.base)
          assert.is_true(c[4][j.reason] == true, j.reason)
        else
          assert.is_nil(id, "Slurm took the job the preview refused")
          assert.equal("refused", res.code)
        end
      end)
    end
  end)

  it("a 2-node replica is a 2-node job (slurmrestd v0.0.38 ran a [min, max] node count on one node)", function()
    local pv = preview({ nodes = 2 }, "multi-sleep")
    assert.is_true(pv.ok, cjson.encode(pv.errors))
    local id = assert(submit(pv))
    local j = decided(id)
    cluster.conn:cancel(id)
    assert.equal("RUNNING", j.state.base)
    assert.equal(2, #j.node_list)
  end)

  it("a default partition that cannot run the replica gives way to the only one that can", function()
    defaults({ partition = "inference" }) -- n[1-3]: no node has feature ib
    local ok_, e = pcall(function()
      local pv = preview({ account = "teaching", constraint = "ib" }) -- debug does not take teaching
      assert.is_true(pv.ok, cjson.encode(pv.errors))
      assert.same({ value = "gpu", provenance = "cluster_default" }, pv.settings.partition)
      assert.matches("partition inference cannot run this replica", pv.warnings[1])
      -- with research, gpu and debug both can: the user picks, and inference stays with its error
      pv = preview({ account = "research", constraint = "ib" })
      assert.equal("inference", pv.settings.partition.value)
      assert.equal("invalid_feature", error_for(pv, "constraint").code)
    end)
    defaults({ partition = "gpu" })
    assert(ok_, e)
  end)

  it("DefaultTime is the starting walltime where the recipe does not insist; the fallback says builtin", function()
    ok("POST", "/api/v1/recipes", { id = "no-walltime", name = "No walltime", engine = "custom",
      launch = { "true" } })
    local pv = preview({ partition = "inference" }, "no-walltime")
    assert.same({ value = 45, provenance = "cluster_default" }, pv.settings.time_limit)
    pv = preview({ partition = "gpu" }, "no-walltime") -- no DefaultTime, MaxTime 4 h
    assert.same({ value = 60, provenance = "builtin" }, pv.settings.time_limit)
    pv = preview({ partition = "debug" }, "no-walltime") -- MaxTime 30 caps the fallback
    assert.same({ value = 30, provenance = "cluster_default" }, pv.settings.time_limit)
    assert.is_true(pv.ok)
    pv = preview({ partition = "inference" }) -- smoke-test insists on 30 min
    assert.same({ value = 30, provenance = "recipe" }, pv.settings.time_limit)
  end)

  it("with EnforcePartLimits=NO (this cluster) a time limit above MaxTime is said to pend forever, as it does", function()
    defaults({ enforce_part_limits = "NO" })
    local pv = preview({ partition = "debug", time_limit = "1:00:00" })
    defaults({ enforce_part_limits = cjson.null })
    assert.equal("NO", pv.enforce_part_limits)
    assert.matches("would pend forever: PartitionTimeLimit", error_for(pv, "time_limit").message)
    local id = assert(submit(pv))
    local j = decided(id)
    cluster.conn:cancel(id)
    assert.equal("PENDING", j.state.base)
    -- Slurm 22.05 names it either way (spec/integration/slurm_spec.lua), both never start
    assert.is_true(j.reason == "PartitionTimeLimit" or j.reason == "PartitionConfig", j.reason)
    -- with the Cluster default unset: Slurm 26.05 (v0.0.45) says EnforcePartLimits in GET /conf, so the
    -- message is as exact; older releases do not, and the message gives both outcomes
    pv = preview({ partition = "debug", time_limit = "1:00:00" })
    if require("obleth.slurm.versions").number(cluster.conn:version()) >= 45 then
      assert.equal("NO", pv.enforce_part_limits)
      assert.matches("would pend forever: PartitionTimeLimit", error_for(pv, "time_limit").message)
    else
      assert.matches("or be refused at submit where EnforcePartLimits is set", error_for(pv, "time_limit").message)
    end
  end)

  it("fields holds every setting of the form, also those nobody set, with value, provenance and error", function()
    local pv = preview({ partition = "debug", gpus_per_node = 1, gpu_type = "h100" })
    local by = {}
    for _, f in ipairs(pv.fields) do by[f.field] = f end
    for _, name in ipairs({ "api_model_name", "partition", "account", "qos", "time_limit", "nodes", "gpus_per_node",
      "gpu_type", "cpus_per_node", "memory_per_node", "constraint", "exclude", "replicas", "stdout", "stderr",
      "health.path", "inputs.mode" }) do
      assert.is_truthy(by[name], name .. " is missing from fields")
    end
    for _, name in ipairs({ "qos", "constraint", "exclude" }) do
      assert.same({ field = name, label = require("obleth.deployment.labels").of(name), value = cjson.null,
        provenance = cjson.null, error = cjson.null, hint = cjson.null }, by[name])
    end
    -- a bounded setting carries the managed spec's bounds (docs/managed-spec.md: 0 is the whole node)
    assert.same({ min = 0, max = 1024, default = 1 }, by.cpus_per_node.hint)
    assert.equal("h100", by.gpu_type.value)
    assert.equal("user", by.gpu_type.provenance)
    assert.equal(error_for(pv, "gpu_type").message, by.gpu_type.error.message)
  end)

  describe("PUT /api/v1/models/{id}/managed runs the same cluster checks", function()
    local function put(mid, spec, query)
      return srv:request("PUT", ("/api/v1/models/%d/managed%s"):format(mid, query or ""), spec)
    end
    local function base(over)
      local s = { replicas = 1, partition = "gpu", account = "research", time_limit = 10, nodes = 1, cpus_per_node = 1,
        memory_per_node = 200, launch_command = "obleth smoke-engine --startup-delay 1",
        health = { path = "/health", interval = 1, timeout = 1, startup_grace = 30, failure_threshold = 2 } }
      for k, v in pairs(over or {}) do s[k] = v end
      return s
    end

    it("refuses what the preview refuses, with the preview's per-field errors, and stores nothing", function()
      local m = ok("POST", "/api/v1/models", { name = "put-checks" })
      local cases = {
        { { partition = "debug", account = "teaching" }, "account", "AccountNotAllowed" },
        { { partition = "debug", qos = "long" }, "qos", "QOSNotAllowed" },
        { { partition = "debug", time_limit = 60 }, "time_limit", "PartitionTimeLimit" },
        -- no QoS: the provisioner submits none and Slurm uses the default QoS normal, which pends forever
        -- (the form preselects inference instead: see above)
        { { partition = "inference" }, "qos", "QOSNotAllowed", "no preview" },
        { { partition = "staff" }, "partition", "GroupNotAllowed" },
        { { gpus_per_node = 8, gpu_type = "a100" }, "gpu_type", "node_config" },
        { { constraint = "v100" }, "constraint", "invalid_feature" },
        { { account = "nosuch" }, "account", "no_association" },
      }
      for _, c in ipairs(cases) do
        local st, doc = put(m.id, base(c[1]))
        assert.equal(422, st, cjson.encode(c[1]))
        assert.equal(c[2], doc.error.field)
        assert.equal(c[2], doc.errors[1].field)
        assert.equal(c[3], doc.errors[1].code)
        -- the preview says the same about the same settings
        if not c[4] then
          local values = { replicas = 0 }
          for k, v in pairs(c[1]) do values[k] = v end
          local pv = preview(values)
          assert.equal(doc.errors[1].message, error_for(pv, c[2]).message)
        end
      end
      assert.equal(404, (srv:request("GET", ("/api/v1/models/%d/managed"):format(m.id))))
      -- the fields' own checks still come first (400), and ?check=false stores without the cluster's
      assert.equal(400, (put(m.id, base({ nodes = 0 }))))
      assert.equal(201, (put(m.id, base({ partition = "debug", account = "teaching" }), "?check=false")))
      assert.equal(204, (srv:request("DELETE", ("/api/v1/models/%d/managed"):format(m.id))))
    end)

    it("a paused spec (enabled: false) is stored unchecked, since it submits nothing; resuming it is checked", function()
      local m = ok("POST", "/api/v1/models", { name = "put-paused" })
      local path = ("/api/v1/models/%d/managed"):format(m.id)
      local bad = base({ partition = "debug", account = "teaching" })
      assert.equal(201, (put(m.id, bad, "?check=false")))
      bad.enabled = false
      assert.equal(200, (put(m.id, bad)))
      local _, stored = srv:request("GET", path)
      assert.is_false(stored.enabled)
      bad.enabled = true
      local st, doc = put(m.id, bad)
      assert.equal(422, st)
      assert.equal("account", doc.error.field)
      local _, still = srv:request("GET", path)
      assert.is_false(still.enabled)
      assert.equal(204, (srv:request("DELETE", path)))
    end)

    it("a refused edit leaves the running replicas untouched", function()
      local provisioner = require "spec.support.provisioner"
      local prov = provisioner.start { base = srv.base, token = srv.token }
      local m = ok("POST", "/api/v1/models", { name = "put-running" })
      local path = ("/api/v1/models/%d/managed"):format(m.id)
      local okp, e = pcall(function()
        assert.equal(201, (put(m.id, base())))
        local function healthy()
          local _, doc = srv:request("GET", ("/api/v1/models/%d/replicas?state=live"):format(m.id))
          local r = doc and doc.replicas and doc.replicas[1]
          if r and r.state == "healthy" then return r end
          return nil, r and r.state or "no replica"
        end
        local before = util.wait_until(healthy, 120, "a healthy replica")
        local _, spec_before = srv:request("GET", path)
        local st, doc = put(m.id, base({ partition = "debug", account = "teaching" }))
        assert.equal(422, st)
        assert.equal("account", doc.error.field)
        local _, spec_after = srv:request("GET", path)
        assert.same(spec_before, spec_after) -- same generation, same settings
        -- a pass later the same job still serves, healthy
        local _, snap1 = srv:request("GET", "/api/v1/settings/slurm")
        util.wait_until(function()
          local _, s2 = srv:request("GET", "/api/v1/settings/slurm")
          return (s2.provisioner.passes or 0) >= (snap1.provisioner.passes or 0) + 2
        end, 60, "two more provisioner passes")
        local after = assert(healthy())
        assert.equal(before.job_id, after.job_id)
        local live = cluster:live_jobs(m.id)
        assert.equal(1, #live)
        assert.equal(before.job_id, live[1].id)
      end)
      srv:request("DELETE", path)
      util.wait_until(function() return #cluster:live_jobs(m.id) == 0 end, 60, "the model's job to end")
      prov:stop()
      assert(okp, e)
    end)
  end)

  it("Edit as YAML answers its diagnostics in line order", function()
    local doc = ok("POST", "/api/v1/deployments/check-yaml", { recipe_id = "smoke-test",
      yaml = "time_limit: 1:00:00\npartition: debug\ncolour: blue\nnodes: [1]\n" })
    assert.is_false(doc.ok)
    local lines = {}
    for _, d in ipairs(doc.diagnostics) do lines[#lines + 1] = d.line end
    assert.same({ 1, 3, 4 }, lines)
    assert.equal("time_limit", doc.diagnostics[1].field)
  end)
end)
