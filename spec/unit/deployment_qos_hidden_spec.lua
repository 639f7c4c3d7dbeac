-- A partition's own QoS and its limits, a job larger on its own than
-- its QoS's per-user limit, Hidden partitions, and what tells partitions apart.
--
-- Cluster facts come from real slurmrestd captures (Slurm 24.11, v0.0.42): partition `standard` =
-- cn[1-4] (64 CPUs, no GPUs; cn3 DOWN, cn4 drained) and `ia` = ia[1-2] (32 CPUs, gpu:h100:2 +
-- gpu:h200:4). The QoS limits are the recorded v0.0.42 `long` QoS with TRES limits written in, in
-- the shape PARSER_ARRAY(QOS) dumps (`limits.max.tres.per.{job,node,user}`: [{type, name, count}]).
local N = require "obleth.slurm.normalize"
local launch = require "obleth.deployment"
local recipe = require "obleth.recipe"
local fmt = require "obleth.util.format"
local cjson = require "cjson"
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

local has = require("spec.support.preview").has

local R = assert(recipe.validate({ id = "eng", engine = "custom", launch = { "engine", "--port", "$OBLETH_PORT" } }))
local ASSOC = {
  { account = "research", user = "u", qos = {}, default_qos = "normal", is_default = true },
}
local DEFAULTS = { partition = "standard", log_dir = "/logs", port_range = { 20000, 20999 }, modules = {},
  environment = {} }

describe("QoS limits, hidden partitions and the partition list", function()
  if not H.available() then
    it("needs the shared cases", function() pending(H.missing()) end)
    return
  end
  local V = "v0.0.42"
  local base_parts = N.partitions(H.load("captures/24.11/0.0.42/slurm-partitions.json"), V)
  local base_nodes = N.nodes(H.load("captures/24.11/0.0.42/slurm-nodes.json"), V)

  -- QoS read by the normalizer from the recorded v0.0.42 answer, with limits written in
  local function qos_list(edit)
    local doc = H.load("v0.0.42/qos.json")
    local long
    for _, q in ipairs(doc.qos) do if q.name == "long" then long = q end end
    local normal = cjson.decode(cjson.encode(long))
    normal.name = "normal"
    normal.limits.max.wall_clock.per.job = { set = false, infinite = true, number = 0 }
    local part = cjson.decode(cjson.encode(normal))
    part.name = "partq"
    doc.qos = { normal, long, part }
    edit(doc.qos)
    return N.qos(doc, V)
  end

  local function facts(qos, part_over)
    local f = { partitions = copy(base_parts), nodes = copy(base_nodes), associations = copy(ASSOC), qos = qos,
      user = { name = "u", groups = { u = true }, groups_from = "host" } }
    for _, p in ipairs(f.partitions) do
      for k, v in pairs(part_over and part_over[p.name] or {}) do p[k] = v end
    end
    return f
  end

  local function pv(f, values, defaults)
    return launch.preview({ recipe = R, values = values or {}, api_model_name = "m1", defaults = defaults or DEFAULTS,
      launches = {}, facts = f, api_version = V, policy = policy, instance = "abcdef01" })
  end

  it("the normalizer reads MaxTRESPerJob / PerNode / PerUser and the partition's QoS", function()
    local q = qos_list(function(list)
      list[1].limits.max.tres.per.user = { { type = "cpu", name = "", id = 1, count = 16 } }
      list[3].limits.max.tres.per.job = { { type = "gres", name = "gpu", id = 1001, count = 2 },
        { type = "node", name = "", id = 4, count = 1 } }
      list[3].limits.max.tres.per.node = { { type = "mem", name = "", id = 2, count = 65536 } }
    end)
    assert.same({ cpu = 16 }, q[1].max_tres_per_user)
    assert.is_nil(q[1].max_tres_per_job)
    assert.same({ ["gres/gpu"] = 2, node = 1 }, q[3].max_tres_per_job)
    assert.same({ mem = 65536 }, q[3].max_tres_per_node)
    assert.equal(2880, q[2].max_wall)
    local doc = H.load("captures/24.11/0.0.42/slurm-partitions.json")
    doc.partitions[1].qos.assigned = "partq"
    assert.equal("partq", N.partitions(doc, V)[1].qos)
  end)

  it("a job larger on its own than its QoS's MaxTRESPerUser is a field error (it would pend forever)", function()
    local q = qos_list(function(list)
      list[1].limits.max.tres.per.user = { { type = "cpu", name = "", id = 1, count = 16 } }
    end)
    local res = pv(facts(q), { qos = "normal", nodes = 2, cpus_per_node = 16, memory_per_node = 1000 })
    local e = err(res, "cpus_per_node")
    assert.is_table(e, cjson.encode(res.errors))
    assert.equal("QOSMaxCpuPerUserLimit", e.code)
    assert.matches("32 CPUs in the job is above QoS normal's MaxTRESPerUser cpu=16", e.message, 1, true)
    -- one node of 16 CPUs is within it
    assert.is_nil(err(pv(facts(q), { qos = "normal", nodes = 1, cpus_per_node = 16, memory_per_node = 1000 }),
      "cpus_per_node"))
  end)

  it("a partition's own QoS limits are checked: MaxWall and MaxTRESPerJob", function()
    local q = qos_list(function(list)
      list[3].limits.max.wall_clock.per.job = { set = true, infinite = false, number = 60 }
      list[3].limits.max.tres.per.job = { { type = "gres", name = "gpu", id = 1001, count = 2 } }
    end)
    local f = facts(q, { ia = { qos = "partq" } })
    local res = pv(f, { partition = "ia", qos = "normal", time_limit = 120, gpus_per_node = 4, nodes = 1 },
      { partition = "ia", log_dir = "/logs" })
    local t = err(res, "time_limit")
    assert.is_table(t, cjson.encode(res.errors))
    assert.equal("QOSMaxWallDurationPerJobLimit", t.code)
    assert.matches("partition ia's QoS partq", t.message, 1, true)
    local g = err(res, "gpus_per_node")
    assert.is_table(g, cjson.encode(res.errors))
    assert.equal("QOSMaxGRESPerJob", g.code)
    -- within both: no error
    local ok = pv(f, { partition = "ia", qos = "normal", time_limit = 30, gpus_per_node = 2, nodes = 1 },
      { partition = "ia", log_dir = "/logs" })
    assert.is_nil(err(ok, "time_limit"))
    assert.is_nil(err(ok, "gpus_per_node"))
  end)

  it("a Hidden partition is marked and not offered like a public one, unless it is the one chosen", function()
    local q = qos_list(function() end)
    local f = facts(q)
    local hid = copy(f.partitions[2])
    hid.name, hid.hidden = "secret", true
    f.partitions[#f.partitions + 1] = hid
    local res = pv(f, { gpus_per_node = 1 }, { partition = "ia", log_dir = "/logs" })
    local s
    for _, x in ipairs(res.partitions) do if x.partition == "secret" then s = x end end
    assert.is_true(s.hidden)
    assert.is_false(has(res.partitions_offered, "secret"))
    assert.is_true(has(res.partitions_offered, "ia"))
    local chosen = pv(f, { gpus_per_node = 1, partition = "secret" }, { partition = "ia", log_dir = "/logs" })
    assert.is_true(has(chosen.partitions_offered, "secret"))
  end)

  it("a Hidden partition that could run it does not stop the default giving way to the only public one", function()
    local q = qos_list(function() end)
    local f = facts(q)
    local hid = copy(f.partitions[2])
    hid.name, hid.hidden = "secret", true
    f.partitions[#f.partitions + 1] = hid
    -- standard (the default) has no GPUs; ia and the hidden secret could: ia is chosen
    local res = pv(f, { gpus_per_node = 2 })
    assert.is_true(res.ok, cjson.encode(res.errors))
    assert.equal("ia", res.values.partition)
  end)

  it("when the default partition cannot run a GPU job, the message names the partitions that could", function()
    local q = qos_list(function() end)
    local f = facts(q)
    local ia2 = copy(f.partitions[2])
    ia2.name = "ia2"
    f.partitions[#f.partitions + 1] = ia2
    -- standard has no GPUs; ia and ia2 both can: no single choice to make for the user
    local res = pv(f, { gpus_per_node = 2, partition = "standard" })
    local e = err(res, "gpus_per_node") or err(res, "partition")
    assert.is_table(e, cjson.encode(res.errors))
    assert.matches("partitions that can run it: ia, ia2", e.message, 1, true)
  end)

  it("obleth slurm partitions shows AllowGroups, the partition's QoS, MaxNodes, Hidden, PriorityTier, DefaultTime",
    function()
      local ps = copy(base_parts)
      ps[1].allowed_groups, ps[1].qos, ps[1].hidden, ps[1].priority_tier = { staff = true }, "partq", true, 7
      ps[1].max_nodes, ps[1].default_time = 2, 45
      local out = fmt.partitions_table(ps, base_nodes)
      for _, h in ipairs({ "GROUPS", "PART QOS", "MAX NODES", "HIDDEN", "TIER", "DEFAULT TIME" }) do
        assert.matches(h, out, 1, true)
      end
      local line = out:match("\n(standard[^\n]*)") or out:match("\n(" .. ps[1].name .. "[^\n]*)")
      assert.is_string(line, out)
      for _, v in ipairs({ "staff", "partq", "yes", " 7 ", " 2 ", "45" }) do assert.matches(v, line, 1, true) end
      -- --json carries the same fields
      local j = cjson.decode(require("obleth.util.json").encode(fmt.jsonable(ps)))
      assert.equal("partq", j[1].qos)
      assert.is_true(j[1].hidden)
      assert.equal(7, j[1].priority_tier)
      assert.same({ staff = true }, j[1].allowed_groups)
    end)
end)
