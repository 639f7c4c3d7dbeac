-- obleth.policy.partition_fit on the harness cluster's shape, written out by
-- hand: n0-n2 gpu:a100:4 (feature a100; n0 also ib), n3 gpu:h100:8 (h100);
-- 32 CPUs and 256000 MiB each. Partition gpu = n[0-3] MaxTime 4 h; debug =
-- n0, MaxTime 30 min. Expected counts were worked out from that table.
local fit = require "obleth.policy.partition_fit"

local function node(name, gtype, count, features, state, extra)
  local n = {
    name = name, cpus = 32, alloc_cpus = 0, memory = 256000, alloc_memory = 0,
    state = state or { base = "IDLE", flags = {} },
    gres = { gpu = { total = count, by_type = { [gtype] = count } } },
    gres_free = { gpu = { total = count, by_type = { [gtype] = count } } },
    features = features,
  }
  n.idle = n.state.base == "IDLE" and next(n.state.flags) == nil
  for k, v in pairs(extra or {}) do n[k] = v end
  return n
end

local function cluster()
  return {
    node("n0", "a100", 4, { a100 = true, ib = true }),
    node("n1", "a100", 4, { a100 = true }),
    node("n2", "a100", 4, { a100 = true }),
    node("n3", "h100", 8, { h100 = true }),
  }
end

local gpu = { name = "gpu", node_list = { "n0", "n1", "n2", "n3" }, max_time = 240, max_nodes = math.huge,
  state = "UP" }
local debug = { name = "debug", node_list = { "n0" }, max_time = 30, max_nodes = math.huge, state = "UP",
  allowed_accounts = { research = true }, denied_qos = { long = true } }

describe("policy.partition_fit", function()
  it("4 A100 GPUs per node fit gpu on the three A100 nodes, all idle", function()
    local r = fit.partition(gpu, cluster(), { nodes = 1, gpus_per_node = 4, gpu_type = "a100", time_limit = 60 })
    assert.is_true(r.fits)
    assert.equal(3, r.fitting_nodes)
    assert.equal(3, r.idle_fitting_nodes)
    assert.same({ "n0", "n1", "n2" }, r.nodes.fitting)
  end)

  it("8 GPUs per node fit only n3", function()
    local r = fit.partition(gpu, cluster(), { nodes = 1, gpus_per_node = 8, time_limit = 60 })
    assert.is_true(r.fits)
    assert.same({ "n3" }, r.nodes.fitting)
    assert.equal(1, r.idle_fitting_nodes)
  end)

  it("a drained node does not fit, and a mixed node fits but is not idle", function()
    local nodes = cluster()
    nodes[3] = node("n2", "a100", 4, { a100 = true }, { base = "IDLE", flags = { DRAIN = true } })
    nodes[2] = node("n1", "a100", 4, { a100 = true }, { base = "MIXED", flags = {} },
      { alloc_cpus = 8, gres_free = { gpu = { total = 1, by_type = { a100 = 1 } } } })
    local r = fit.partition(gpu, nodes, { nodes = 1, gpus_per_node = 4, gpu_type = "a100" })
    assert.equal(3, r.configured_fitting_nodes)
    assert.equal(2, r.fitting_nodes)        -- n0, n1 (n2 is drained)
    assert.equal(1, r.idle_fitting_nodes)   -- n0
    assert.equal(1, r.free_fitting_nodes)   -- n1 has 1 of 4 A100s free: not enough
    local one = fit.partition(gpu, nodes, { nodes = 1, gpus_per_node = 1, gpu_type = "a100" })
    assert.equal(2, one.free_fitting_nodes) -- n0 and n1 (one free A100 is enough)
  end)

  it("0 CPUs per node (the whole node) fits any node, but only one with no job on it is free", function()
    local nodes = cluster()
    nodes[2] = node("n1", "a100", 4, { a100 = true }, { base = "MIXED", flags = {} }, { alloc_cpus = 2 })
    local r = fit.partition(gpu, nodes, { nodes = 1, cpus_per_node = 0, gpus_per_node = 1 })
    assert.equal(4, r.fitting_nodes)
    assert.equal(3, r.free_fitting_nodes) -- n1 runs a job: not free for a whole-node job
    local some = fit.partition(gpu, nodes, { nodes = 1, cpus_per_node = 2, gpus_per_node = 1 })
    assert.equal(4, some.free_fitting_nodes)
  end)

  it("a node drained while idle never counts as idle, whatever its base state says", function()
    local nodes = cluster()
    for i = 1, 3 do nodes[i].state = { base = "IDLE", flags = { DRAIN = true } }; nodes[i].idle = false end
    local r = fit.partition(gpu, nodes, { gpus_per_node = 4, gpu_type = "a100" })
    assert.equal(0, r.idle_fitting_nodes)
    assert.is_false(r.fits)
  end)

  it("a constraint a100&ib fits n0 only; a100|h100 fits all four", function()
    local r = fit.partition(gpu, cluster(), { constraint = "a100&ib" })
    assert.same({ "n0" }, r.nodes.fitting)
    r = fit.partition(gpu, cluster(), { constraint = "a100|h100" })
    assert.equal(4, r.fitting_nodes)
    r = fit.partition(gpu, cluster(), { constraint = "h100" })
    assert.same({ "n3" }, r.nodes.fitting)
  end)

  it("avoided nodes do not count; avoiding every fitting node means it does not fit", function()
    local r = fit.partition(gpu, cluster(), { gpus_per_node = 4, gpu_type = "a100", exclude = "n[0-1]" })
    assert.same({ "n2" }, r.nodes.fitting)
    r = fit.partition(gpu, cluster(), { gpus_per_node = 8, exclude = { "n3" } })
    assert.is_false(r.fits)
    assert.equal(0, r.fitting_nodes)
  end)

  it("two nodes of 8 GPUs do not fit: only one node has 8", function()
    local r = fit.partition(gpu, cluster(), { nodes = 2, gpus_per_node = 8 })
    assert.is_false(r.fits)
    assert.equal(1, r.fitting_nodes)
    assert.matches("2 nodes wanted, 1 fits", r.reasons[1])
  end)

  it("a time limit above the partition's MaxTime does not fit", function()
    local r = fit.partition(debug, cluster(), { time_limit = 60 })
    assert.is_false(r.fits)
    assert.equal(1, r.fitting_nodes)
    assert.matches("MaxTime 30", r.reasons[1])
  end)

  it("memory above a node's size does not fit; 0 means the whole node and fits", function()
    assert.is_false(fit.partition(gpu, cluster(), { memory_per_node = 300000 }).fits)
    local whole = fit.partition(gpu, cluster(), { memory_per_node = 0, cpus_per_node = 32 })
    assert.is_true(whole.fits)
    assert.equal(4, whole.fitting_nodes)
    assert.is_false(fit.partition(gpu, cluster(), { cpus_per_node = 33 }).fits)
  end)

  it("a GPU type no node has does not fit", function()
    local r = fit.partition(gpu, cluster(), { gpus_per_node = 1, gpu_type = "v100" })
    assert.is_false(r.fits)
    assert.equal(0, r.fitting_nodes)
  end)

  it("more nodes than the partition's MaxNodes does not fit", function()
    local p = { name = "small", node_list = { "n0", "n1", "n2" }, max_time = 60, max_nodes = 2 }
    local r = fit.partition(p, cluster(), { nodes = 3 })
    assert.is_false(r.fits)
    assert.matches("at most 2", r.reasons[1])
  end)

  it("fit() answers for every partition in order", function()
    local rs = fit.fit({ gpu, debug }, cluster(), { gpus_per_node = 8 })
    assert.equal("gpu", rs[1].partition)
    assert.is_true(rs[1].fits)
    assert.equal("debug", rs[2].partition)
    assert.is_false(rs[2].fits) -- n0 has 4 GPUs
  end)

  describe("constraint", function()
    local f = { a = true, b = true }
    local cases = {
      { "a", true }, { "c", false }, { "a&b", true }, { "a&c", false }, { "a|c", true }, { "c|d", false },
      { "a,b", true }, { "(c|a)&b", true }, { "c|a&b", true }, { "!c", true }, { "a*2", true },
      { "[a|c]&b", true },
    }
    for _, c in ipairs(cases) do
      it(("%q on {a, b} is %s"):format(c[1], tostring(c[2])), function()
        local pred = assert(fit.constraint(c[1]))
        assert.equal(c[2], pred(f))
      end)
    end

    it("reports a malformed expression", function()
      assert.is_nil(fit.constraint("a&"))
      assert.is_nil(fit.constraint("(a"))
      assert.is_nil(fit.constraint("a$b"))
    end)
  end)
end)

describe("policy.partition_fit on nodes read by the normalizer", function()
  local N = require "obleth.slurm.normalize"
  -- a v0.0.44 node record: 4 H100s, 32 CPUs, nothing allocated
  local function rec(name, state)
    return N.node_record({ name = name, state = state, cpus = 32, alloc_cpus = 0, real_memory = 256000,
      alloc_memory = 0, gres = "gpu:h100:4", gres_used = "gpu:h100:0(IDX:N/A)", features = {} }, "v0.0.44")
  end
  local part = { name = "gpu", node_list = { "g1" }, max_time = math.huge, max_nodes = math.huge, state = "UP" }

  for _, flag in ipairs({ "RESERVED", "BLOCKED" }) do
    it("IDLE+" .. flag .. " is neither idle nor free: the replica cannot start there now", function()
      local r = fit.partition(part, { rec("g1", { "IDLE", flag }) }, { nodes = 1, gpus_per_node = 4 })
      assert.equal(1, r.fitting_nodes) -- its configuration fits
      assert.equal(0, r.idle_fitting_nodes)
      assert.equal(0, r.free_fitting_nodes)
      assert.is_false(r.fits)
      assert.same({}, r.errors) -- not something Slurm refuses
    end)
  end

  it("fits is false, with a reason, when every fitting node is busy (Slurm would pend on Resources)", function()
    local busy = N.node_record({ name = "g1", state = { "MIXED" }, cpus = 32, alloc_cpus = 4, real_memory = 256000,
      alloc_memory = 1000, gres = "gpu:h100:4", gres_used = "gpu:h100:1(IDX:0)", features = {} }, "v0.0.44")
    local r = fit.partition(part, { busy }, { nodes = 1, gpus_per_node = 4 })
    assert.equal(1, r.fitting_nodes)
    assert.equal(0, r.free_fitting_nodes)
    assert.is_false(r.fits)
    assert.matches("every fitting node is busy now", r.reasons[1], 1, true)
    assert.same({}, r.errors)
    -- 3 GPUs are free on it: a 3-GPU replica can start now
    assert.is_true(fit.partition(part, { busy }, { nodes = 1, gpus_per_node = 3, memory_per_node = 1000 }).fits)
  end)

  it("a plain idle node fits and is free", function()
    local r = fit.partition(part, { rec("g1", { "IDLE" }) }, { nodes = 1, gpus_per_node = 4 })
    assert.is_true(r.fits)
    assert.equal(1, r.free_fitting_nodes)
  end)
end)
