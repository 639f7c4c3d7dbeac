-- The checks Slurm makes that the launch preview must make first:
-- AllowGroups, an empty account / QoS read as the defaults Slurm fills in, a
-- request that fits no node of the partition as an error on the field that
-- breaks it, the one partition that can run a replica preferred, the
-- partition's DefaultTime, EnforcePartLimits in the messages, and `fields`
-- holding every setting of the form.
--
-- Cluster facts come from real slurmrestd captures (Slurm 24.11, v0.0.42):
-- partition `standard` = cn[1-4] (64 CPUs, 131072 MiB, no GPUs; cn3 DOWN, cn4
-- drained) and `ia` = ia[1-2] (32 CPUs, 524288 MiB, gpu:h100:2 + gpu:h200:4,
-- no features). Associations, QoS and access lists are written by hand on top.
local N = require "obleth.slurm.normalize"
local launch = require "obleth.deployment"
local recipe = require "obleth.recipe"
local validate = require "obleth.policy.validate"
local H = dofile("spec/fixtures/slurmrestd/cases.lua")

local function policy(name) return require("obleth.policy." .. name) end

local function copy(t)
  if type(t) ~= "table" then return t end
  local out = {}
  for k, v in pairs(t) do out[k] = copy(v) end
  return out
end

local function err(res, field)
  for _, e in ipairs(res.errors) do if e.field == field then return e end end
end

local function fit(res, name)
  for _, f in ipairs(res.partitions) do if f.partition == name then return f end end
end

local has = require("spec.support.preview").has

-- a recipe that says nothing about the time limit or the partition
local R = assert(recipe.validate({ id = "eng", engine = "custom", launch = { "engine", "--port", "$OBLETH_PORT" } }))
-- and one that insists on 2 hours
local R_TIMED = assert(recipe.validate({ id = "timed", engine = "custom", resources = { time_limit = "2:00:00" },
  launch = { "engine" } }))

local ASSOC = {
  { account = "research", user = "u", qos = { normal = true, long = true, inference = true }, default_qos = "normal",
    is_default = true },
  { account = "teaching", user = "u", qos = { normal = true, long = true, inference = true }, default_qos = "normal" },
}
local QOS = { { name = "normal" }, { name = "long", max_wall = 2880 }, { name = "inference" } }
local DEFAULTS = { partition = "standard", log_dir = "/logs", port_range = { 20000, 20999 }, modules = {},
  environment = {} }

describe("launch checks against a real cluster's layout", function()
  if not H.available() then
    it("needs the shared cases", function() pending(H.missing()) end)
    return
  end
  local V = "v0.0.42"
  local base_parts = N.partitions(H.load("captures/24.11/0.0.42/slurm-partitions.json"), V)
  local base_nodes = N.nodes(H.load("captures/24.11/0.0.42/slurm-nodes.json"), V)

  -- facts with extra partitions (name -> fields over a copy of `standard` / `ia`)
  local function facts(over)
    local f = { partitions = copy(base_parts), nodes = copy(base_nodes), associations = copy(ASSOC), qos = copy(QOS),
      user = { name = "u", groups = { u = true, hpc = true }, groups_from = "host" } }
    for k, v in pairs(over or {}) do f[k] = v end
    return f
  end
  local function part(f, name)
    for _, p in ipairs(f.partitions) do if p.name == name then return p end end
  end
  local function add_part(f, like, name, fields)
    local p = copy(part(f, like))
    p.name = name
    for k, v in pairs(fields) do p[k] = v end
    f.partitions[#f.partitions + 1] = p
    return p
  end

  local function pv(over)
    local p = { recipe = R, values = {}, api_model_name = "m1", defaults = DEFAULTS, launches = {}, facts = facts(),
      api_version = V, policy = policy, instance = "abcdef01" }
    for k, v in pairs(over or {}) do p[k] = v end
    return launch.preview(p)
  end

  describe("the normalizer", function()
    it("keeps AllowGroups: v0.0.38 allowed_groups and v0.0.40+ groups.allowed; empty or ALL is no restriction", function()
      local doc = H.load("v0.0.38/partitions.json")
      doc.partitions[1].allowed_groups = "staff,hpc"
      local p = N.partitions(doc, "v0.0.38")
      assert.same({ staff = true, hpc = true }, p[1].allowed_groups)
      assert.is_nil(p[2].allowed_groups) -- "" in the recording
      doc = H.load("captures/24.11/0.0.42/slurm-partitions.json")
      doc.partitions[2].groups.allowed = "gpu-users"
      p = N.partitions(doc, V)
      assert.is_nil(p[1].allowed_groups)
      assert.same({ ["gpu-users"] = true }, p[2].allowed_groups)
      doc.partitions[2].groups.allowed = "ALL"
      assert.is_nil(N.partitions(doc, V)[2].allowed_groups)
    end)
  end)

  describe("AllowGroups", function()
    it("a partition takes the user when one of the user's groups is allowed; root always", function()
      local p = { name = "staff", allowed_groups = { staff = true, admins = true } }
      assert.is_true(validate.partition_takes_user(p, { name = "u", groups = { admins = true } }))
      local ok, why = validate.partition_takes_user(p, { name = "u", groups = { u = true } })
      assert.is_false(ok)
      assert.matches("admins, staff", why)
      assert.is_true(validate.partition_takes_user(p, { name = "root", groups = {} }))
      assert.is_true(validate.partition_takes_user({ name = "open" }, { name = "u", groups = {} }))
      ok, why = validate.partition_takes_user(p, { name = "u" })
      assert.is_nil(ok) -- groups unknown: cannot tell
      assert.matches("user_groups", why)
    end)

    it("a partition the user's groups may not use is shown unavailable with its reason and never offered", function()
      local f = facts()
      add_part(f, "ia", "staff", { allowed_groups = { staff = true } })
      local res = pv({ facts = f, values = { gpus_per_node = 1 }, defaults = { partition = "ia", log_dir = "/logs" } })
      assert.is_true(res.ok)
      local staff = fit(res, "staff")
      assert.is_false(staff.available)
      assert.is_false(staff.takes_user)
      assert.matches("takes only members of staff", staff.unavailable_reason)
      assert.is_false(has(res.partitions_offered, "staff"))
      assert.is_true(has(res.partitions_offered, "ia"))
    end)

    it("choosing it is an error on the partition field (Slurm refuses the job at submit)", function()
      local f = facts()
      add_part(f, "ia", "staff", { allowed_groups = { staff = true } })
      local res = pv({ facts = f, values = { partition = "staff" } })
      assert.is_false(res.ok)
      assert.equal("GroupNotAllowed", err(res, "partition").code)
      assert.matches("not permitted", err(res, "partition").message)
    end)

    it("with the user's groups unknown, it is an error too, naming the setting that fixes it", function()
      local f = facts({ user = { name = "u" } })
      add_part(f, "ia", "staff", { allowed_groups = { staff = true } })
      local res = pv({ facts = f, values = { partition = "staff" } })
      assert.equal("groups_unknown", err(res, "partition").code)
      assert.is_false(has(res.partitions_offered, "staff"))
    end)
  end)

  describe("an empty QoS is the association's default QoS", function()
    it("Slurm's rule: the association's default QoS, else its only QoS, else normal", function()
      assert.equal("normal", validate.default_qos("research", "ia", ASSOC, QOS))
      local one = { { account = "a", qos = { gold = true } } }
      assert.equal("gold", validate.default_qos("a", "ia", one, QOS))
      local many = { { account = "a", qos = { gold = true, silver = true } } }
      assert.equal("normal", validate.default_qos("a", "ia", many, QOS))
      assert.is_nil(validate.default_qos("a", "ia", many, { { name = "gold" } }))
      -- an association for the partition wins over the account-wide one
      local per = { { account = "a", qos = { gold = true }, default_qos = "gold" },
        { account = "a", partition = "ia", qos = { silver = true }, default_qos = "silver" } }
      assert.equal("silver", validate.default_qos("a", "ia", per, QOS))
      assert.equal("gold", validate.default_qos("a", "standard", per, QOS))
    end)

    it("a partition that does not take the default QoS is a QoS error when QoS is left empty", function()
      local f = facts()
      f.partitions[2].allowed_qos = { long = true, inference = true } -- two: nothing to preselect
      local errs = validate.check({ partition = "ia", account = "research" }, f)
      assert.equal(1, #errs)
      assert.equal("qos", errs[1].field)
      assert.equal("QOSNotAllowed", errs[1].code)
      assert.matches("default QoS", errs[1].message)
      assert.matches("inference, long", errs[1].message)
    end)

    it("when the partition takes exactly one QoS the user holds, the form preselects it (cluster_default)", function()
      local f = facts()
      f.partitions[2].allowed_qos = { inference = true }
      local res = pv({ facts = f, values = { partition = "ia" } })
      assert.is_true(res.ok)
      assert.same({ value = "inference", provenance = "cluster_default" }, res.settings.qos)
      assert.equal("inference", res.slurm_request.job.qos)
      -- a QoS the user chose stays, with its error
      res = pv({ facts = f, values = { partition = "ia", qos = "normal" } })
      assert.equal("QOSNotAllowed", err(res, "qos").code)
      assert.same({ value = "normal", provenance = "user" }, res.settings.qos)
    end)

    it("an empty account is the user's default account for the checks and for qos_offered", function()
      local f = facts()
      f.partitions[2].allowed_accounts = { teaching = true }
      local errs = validate.check({ partition = "ia" }, f)
      assert.equal("account", errs[1].field)
      assert.equal("AccountNotAllowed", errs[1].code)
      assert.matches("default account", errs[1].message)
      local res = pv({ facts = facts(), values = { partition = "ia" } })
      assert.is_nil(res.settings.account.value)
      assert.same({ "inference", "long", "normal" }, res.qos_offered)
    end)
  end)

  describe("a request that fits no node of the partition is an error on the field that breaks it", function()
    local cases = {
      { "GPUs on a partition without GPUs", { partition = "standard", gpus_per_node = 1 }, "gpus_per_node",
        "partition standard has no GPUs" },
      { "more GPUs than any node has", { partition = "ia", gpus_per_node = 8 }, "gpus_per_node", "at most 6" },
      { "a GPU type no node of the partition has", { partition = "ia", gpus_per_node = 1, gpu_type = "a100" },
        "gpu_type", "types here: h100 %(up to 2 per node%), h200 %(up to 4 per node%)" },
      { "more GPUs of the type than a node has", { partition = "ia", gpus_per_node = 3, gpu_type = "h100" },
        "gpu_type", "no node of partition ia has 3 GPUs of type h100" },
      { "more CPUs than a node has", { partition = "ia", cpus_per_node = 33 }, "cpus_per_node", "at most 32" },
      { "memory above the node's", { partition = "standard", memory_per_node = 200000 }, "memory_per_node",
        "at most 131072 MiB" },
      { "a feature no node of the partition has", { partition = "ia", constraint = "a100&ib" }, "constraint",
        "features a100, ib" },
      { "a malformed constraint", { partition = "ia", constraint = "a100&" }, "constraint", "incomplete" },
      { "every fitting node avoided", { partition = "ia", gpus_per_node = 4, exclude = "ia[1-2]" }, "exclude",
        "every node of partition ia that fits is avoided" },
      { "more nodes than the partition has", { partition = "ia", nodes = 3 }, "nodes", "partition ia has 2" },
      { "more nodes than have the GPUs", { partition = "ia", nodes = 2, gpus_per_node = 4, gpu_type = "h200",
        exclude = "ia1" }, "exclude", "leaves 1 node" },
    }
    for _, c in ipairs(cases) do
      it(c[1] .. " → " .. c[3], function()
        local res = pv({ values = c[2] })
        assert.is_false(res.ok)
        local e = err(res, c[3])
        assert.is_truthy(e, ("no error on %s; errors: %s"):format(c[3], require("cjson").encode(res.errors)))
        assert.matches(c[4], e.message)
        -- the user chose the partition: it stays
        assert.equal(c[2].partition, res.settings.partition.value)
        -- and the form shows the error at its field
        for _, f in ipairs(res.fields) do
          if f.field == c[3] then assert.equal(e.message, f.error.message) end
        end
      end)
    end

    it("nodes that fit but are down or drained are a warning, not an error (Slurm queues the job)", function()
      local f = facts()
      for _, n in ipairs(f.nodes) do
        if n.name == "ia1" or n.name == "ia2" then n.state = { base = "DOWN", flags = {} }; n.idle = false end
      end
      local res = pv({ facts = f, values = { partition = "ia", gpus_per_node = 1 } })
      assert.is_true(res.ok)
      assert.is_false(fit(res, "ia").fits)
      assert.matches("cannot start on partition ia now", res.warnings[#res.warnings])
    end)
  end)

  describe("the partition that can run the replica", function()
    it("replaces a default partition without GPUs when exactly one partition can run it", function()
      local res = pv({ values = { gpus_per_node = 2 } })
      assert.is_true(res.ok)
      assert.same({ value = "ia", provenance = "cluster_default" }, res.settings.partition)
      assert.matches("partition standard cannot run this replica", res.warnings[1])
      assert.equal("ia", res.slurm_request.job.partition)
    end)

    it("never replaces a partition the user chose", function()
      local res = pv({ values = { gpus_per_node = 2, partition = "standard" } })
      assert.equal("standard", res.settings.partition.value)
      assert.equal("gpus_per_node", res.errors[1].field)
    end)

    it("keeps the partition when two could run it (the user picks)", function()
      local f = facts()
      add_part(f, "ia", "ia2", {})
      local res = pv({ facts = f, values = { gpus_per_node = 2 } })
      assert.equal("standard", res.settings.partition.value)
      assert.equal("gpus_per_node", err(res, "gpus_per_node").field)
    end)

    it("prefers a partition the user may use over one whose AllowGroups shuts them out", function()
      local f = facts()
      add_part(f, "ia", "ia-staff", { allowed_groups = { staff = true } })
      local res = pv({ facts = f, values = { gpus_per_node = 2 } })
      assert.equal("ia", res.settings.partition.value)
    end)
  end)

  describe("walltime", function()
    it("the partition's DefaultTime is the starting walltime when the recipe does not insist", function()
      local f = facts()
      f.partitions[2].default_time = 45
      local res = pv({ facts = f, values = { partition = "ia" } })
      assert.same({ value = 45, provenance = "cluster_default" }, res.settings.time_limit)
      res = pv({ facts = f, recipe = R_TIMED, values = { partition = "ia" } })
      assert.same({ value = 120, provenance = "recipe" }, res.settings.time_limit)
      res = pv({ facts = f, values = { partition = "ia", time_limit = 20 } })
      assert.same({ value = 20, provenance = "user" }, res.settings.time_limit)
    end)

    it("a DefaultTime above MaxTime is not offered; MaxTime caps the built-in fallback, as Slurm would", function()
      local f = facts()
      f.partitions[2].default_time, f.partitions[2].max_time = 200, 30
      local res = pv({ facts = f, values = { partition = "ia" } })
      assert.same({ value = 30, provenance = "cluster_default" }, res.settings.time_limit)
      assert.is_true(res.ok)
    end)

    it("the built-in fallback says it is built in, not the recipe's", function()
      local f = facts()
      f.partitions[2].max_time = math.huge
      local res = pv({ facts = f, values = { partition = "ia" } })
      assert.same({ value = 60, provenance = "builtin" }, res.settings.time_limit)
    end)

    it("with EnforcePartLimits=ALL a time limit above MaxTime is refused at submit, and the message says so", function()
      local res = pv({ facts = facts({ enforce_part_limits = "ALL" }), values = { partition = "ia", time_limit = 200 } })
      local e = err(res, "time_limit")
      assert.equal("PartitionTimeLimit", e.code)
      assert.matches("Slurm refuses the job at submit: EnforcePartLimits=ALL", e.message)
      res = pv({ facts = facts({ enforce_part_limits = "NO" }), values = { partition = "ia", time_limit = 200 } })
      assert.matches("would pend forever: PartitionTimeLimit", err(res, "time_limit").message)
      res = pv({ values = { partition = "ia", time_limit = 200 } })
      assert.matches("or be refused at submit where EnforcePartLimits is set", err(res, "time_limit").message)
      assert.is_nil(res.enforce_part_limits)
    end)
  end)

  describe("a managed spec (PUT /managed)", function()
    it("is checked by the preview's own checks, on the values the provisioner submits", function()
      local f = facts()
      f.partitions[2].allowed_qos = { inference = true }
      -- partition from the cluster defaults, no QoS anywhere: Slurm's default QoS normal pends forever
      local errs = launch.spec_errors(policy, { gpus_per_node = 1, nodes = 1, time_limit = 60 }, { partition = "ia" }, f)
      assert.equal("qos", errs[1].field)
      assert.equal("QOSNotAllowed", errs[1].code)
      assert.same({}, launch.spec_errors(policy, { gpus_per_node = 1, nodes = 1, time_limit = 60, qos = "inference" },
        { partition = "ia" }, f))
      errs = launch.spec_errors(policy, { gpus_per_node = 2, nodes = 1, time_limit = 60 }, { partition = "standard" }, f)
      assert.equal("gpus_per_node", errs[1].field)
      -- a GPU type without GPUs is never sent, so never checked
      assert.same({}, launch.spec_errors(policy, { gpus_per_node = 0, gpu_type = "a100", partition = "standard",
        nodes = 1, time_limit = 60 }, {}, f))
      errs = launch.spec_errors(policy, { nodes = 1 }, {}, f) -- v0.0.42 reports no default partition
      assert.equal("partition", errs[1].field)
    end)
  end)

  describe("fields", function()
    it("holds every setting of the form, also those nobody set, each with value, provenance and error", function()
      local res = pv({ values = { partition = "ia", gpus_per_node = 1, gpu_type = "a100" }, defaults = { } })
      local by = {}
      local names = {}
      for _, f in ipairs(res.fields) do by[f.field] = f; names[#names + 1] = f.field end
      for _, name in ipairs(launch.SETTINGS) do assert.is_truthy(by[name], name .. " missing from fields") end
      for _, k in ipairs(launch.HEALTH_KEYS) do assert.is_truthy(by["health." .. k]) end
      assert.equal("api_model_name", names[1])
      for _, name in ipairs({ "account", "qos", "constraint", "exclude", "stdout", "stderr" }) do
        assert.is_nil(by[name].value, name)
        assert.is_nil(by[name].provenance, name)
        assert.is_nil(by[name].error, name)
      end
      assert.equal("a100", by.gpu_type.value)
      assert.equal("user", by.gpu_type.provenance)
      assert.equal("node_config", by.gpu_type.error.code)
      assert.is_nil(by.partition.error)
    end)
  end)
end)
