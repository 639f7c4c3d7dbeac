-- obleth.policy.suggestions: expected values worked out by hand from the
-- rules in the module header (double the limit that timed out, capped by
-- the partition's MaxTime and the QoS's MaxWall; avoid a node after
-- NODE_FAIL/BOOT_FAIL or repeated start-up failures there; more memory or
-- nodes after OUT_OF_MEMORY, whatever the exit code).
local suggestions = require "obleth.policy.suggestions"

local function o(launch_id, job_id, state, node, extra)
  local t = { launch_id = launch_id, job_id = job_id, state = state, node = node, healthy = false,
    exit_code = 0, time_limit = 60, started_at = 1000, ended_at = 4600 }
  for k, v in pairs(extra or {}) do t[k] = v end
  return t
end

local gpu = { name = "gpu", max_time = 240, max_nodes = 4 }

local function kinds(list)
  local out = {}
  for _, s in ipairs(list) do out[#out + 1] = s.kind end
  return out
end

describe("policy.suggestions", function()
  describe("after TIMEOUT", function()
    it("suggests double the limit that timed out, with the timed-out jobs as evidence", function()
      local s = suggestions.suggest({ o(2, 102, "TIMEOUT", "n0"), o(1, 101, "TIMEOUT", "n1") },
        { time_limit = 60, partition = gpu })
      assert.same({ "time_limit" }, kinds(s))
      assert.equal(120, s[1].value)
      assert.equal("time_limit", s[1].field)
      assert.is_nil(s[1].capped_by)
      assert.equal(2, #s[1].evidence)
      assert.same({ 2, 102, "TIMEOUT", "n0" }, { s[1].evidence[1].launch_id, s[1].evidence[1].job_id,
        s[1].evidence[1].state, s[1].evidence[1].node })
    end)

    it("caps at the partition's MaxTime: 180 min timed out -> 240, not 360", function()
      local s = suggestions.suggest({ o(1, 101, "TIMEOUT", "n0", { time_limit = 180 }) },
        { time_limit = 180, partition = gpu })
      assert.equal(240, s[1].value)
      assert.equal("partition", s[1].capped_by)
    end)

    it("caps at the QoS's MaxWall when that is lower: 200", function()
      local s = suggestions.suggest({ o(1, 101, "TIMEOUT", "n0", { time_limit = 180 }) },
        { time_limit = 180, partition = gpu, qos = { name = "normal", max_wall = 200 } })
      assert.equal(200, s[1].value)
      assert.equal("qos", s[1].capped_by)
    end)

    it("suggests nothing when the limit is already at the cap", function()
      local s = suggestions.suggest({ o(1, 101, "TIMEOUT", "n0", { time_limit = 240 }) },
        { time_limit = 240, partition = gpu })
      assert.same({}, s)
    end)

    it("suggests nothing when the form already asks for at least double", function()
      local s = suggestions.suggest({ o(1, 101, "TIMEOUT", "n0") }, { time_limit = 120, partition = gpu })
      assert.same({}, s)
    end)
  end)

  describe("avoiding a node", function()
    it("after NODE_FAIL on n2 suggests excluding n2", function()
      local s = suggestions.suggest({ o(3, 103, "NODE_FAIL", "n2"), o(2, 102, "COMPLETED", "n1", { healthy = true }) },
        { exclude = nil })
      assert.same({ "avoid_node" }, kinds(s))
      assert.equal("n2", s[1].node)
      assert.equal("n2", s[1].value)
      assert.equal("exclude", s[1].field)
      assert.equal(103, s[1].evidence[1].job_id)
    end)

    it("after BOOT_FAIL adds the node to the nodes already avoided", function()
      local s = suggestions.suggest({ o(3, 103, "BOOT_FAIL", "n2") }, { exclude = "n0" })
      assert.equal("n[0,2]", s[1].value)
    end)

    it("does not suggest a node that is already avoided", function()
      assert.same({}, suggestions.suggest({ o(3, 103, "NODE_FAIL", "n2") }, { exclude = { "n2" } }))
    end)

    it("after two start-up failures on n1 while n0 became healthy suggests avoiding n1", function()
      local s = suggestions.suggest({ o(3, 103, "FAILED", "n1", { exit_code = 1 }),
        o(2, 102, "CANCELLED", "n0", { healthy = true }), o(1, 101, "FAILED", "n1", { exit_code = 1 }) }, {})
      assert.same({ "avoid_node" }, kinds(s))
      assert.equal("n1", s[1].node)
      assert.equal(2, #s[1].evidence)
    end)

    it("after two start-up failures all on n1 (and nothing else) suggests avoiding n1", function()
      local s = suggestions.suggest({ o(2, 102, "FAILED", "n1"), o(1, 101, "FAILED", "n1") }, {})
      assert.equal("n1", s[1].node)
    end)

    it("exit 127 (command not found) twice on n1 suggests no node: a missing command fails on every node", function()
      local failures = require "obleth.policy.failures"
      local outs = {}
      for i = 3, 1, -1 do
        local x = o(i, 100 + i, "FAILED", "n1", { exit_code = 127 })
        x.failure = failures.classify { state = "FAILED", exit_code = 127, stderr = { "x: line 3: vllm: command not found" } }
        outs[#outs + 1] = x
      end
      assert.equal("command_not_found", outs[1].failure.class)
      assert.same({}, suggestions.suggest(outs, {}))
    end)

    it("a start-up failure whose class says it is not the node's fault is not counted against the node", function()
      local notnode = { class = "python_traceback", node_fault = false }
      local a, b2 = o(2, 102, "FAILED", "n1", { exit_code = 1 }), o(1, 101, "FAILED", "n1", { exit_code = 1 })
      a.failure, b2.failure = notnode, notnode
      assert.same({}, suggestions.suggest({ a, b2 }, {}))
    end)

    it("start-up failures on n1 and on n2 suggest no node, even when n0 became healthy", function()
      local s = suggestions.suggest({ o(4, 104, "FAILED", "n1", { exit_code = 1 }), o(3, 103, "FAILED", "n2", { exit_code = 1 }),
        o(2, 102, "CANCELLED", "n0", { healthy = true }), o(1, 101, "FAILED", "n1", { exit_code = 1 }) }, {})
      assert.same({}, s)
    end)

    it("one start-up failure is not enough", function()
      assert.same({}, suggestions.suggest({ o(1, 101, "FAILED", "n1") }, {}))
    end)

    it("failures spread over nodes with no healthy run blame the model, not a node", function()
      local s = suggestions.suggest({ o(4, 104, "FAILED", "n1"), o(3, 103, "FAILED", "n2"),
        o(2, 102, "FAILED", "n1"), o(1, 101, "FAILED", "n2") }, {})
      assert.same({}, s)
    end)
  end)

  describe("after OUT_OF_MEMORY", function()
    it("doubles memory per node when the spec asks for part of a node, also when the exit code is 0", function()
      local s = suggestions.suggest({ o(1, 101, "OUT_OF_MEMORY", "n0", { exit_code = 0 }) },
        { memory_per_node = 16384, max_node_memory = 256000, nodes = 1, partition = gpu })
      assert.same({ "memory" }, kinds(s))
      assert.equal(32768, s[1].value)
      assert.equal("memory_per_node", s[1].field)
      assert.equal(0, s[1].evidence[1].exit_code)
    end)

    it("suggests the whole node when doubling would pass the largest node", function()
      local s = suggestions.suggest({ o(1, 101, "OUT_OF_MEMORY", "n0") },
        { memory_per_node = 200000, max_node_memory = 256000, nodes = 1 })
      assert.equal(0, s[1].value)
    end)

    it("suggests one more node when the spec already has whole nodes", function()
      local s = suggestions.suggest({ o(1, 101, "OUT_OF_MEMORY", "n0") }, { memory_per_node = 0, nodes = 2,
        partition = gpu })
      assert.same({ "nodes" }, kinds(s))
      assert.equal(3, s[1].value)
    end)

    it("says so when the partition allows no more nodes", function()
      local s = suggestions.suggest({ o(1, 101, "OUT_OF_MEMORY", "n0") }, { memory_per_node = 0, nodes = 4,
        partition = gpu })
      assert.equal("nodes", s[1].kind)
      assert.is_nil(s[1].value)
      assert.matches("no more than 4", s[1].message)
    end)

    it("reads an OOM kill from the reason when the state says FAILED", function()
      local s = suggestions.suggest({ o(1, 101, "FAILED", "n0", { reason = "OutOfMemory" }) },
        { memory_per_node = 0, nodes = 1 })
      assert.same({ "nodes" }, kinds(s))
    end)

    it("does not count an OOM as a start-up failure of the node", function()
      local s = suggestions.suggest({ o(2, 102, "OUT_OF_MEMORY", "n1"), o(1, 101, "OUT_OF_MEMORY", "n1") },
        { memory_per_node = 0, nodes = 1 })
      assert.same({ "nodes" }, kinds(s))
    end)
  end)

  it("cancelled and completed jobs suggest nothing", function()
    assert.same({}, suggestions.suggest({ o(2, 102, "CANCELLED", "n0"), o(1, 101, "COMPLETED", "n0") },
      { time_limit = 60 }))
  end)

  it("gives every kind at once, each with its own evidence", function()
    local s = suggestions.suggest({ o(3, 103, "TIMEOUT", "n0"), o(2, 102, "NODE_FAIL", "n3"),
      o(1, 101, "OUT_OF_MEMORY", "n1") }, { time_limit = 60, memory_per_node = 0, nodes = 1, partition = gpu })
    assert.same({ "time_limit", "avoid_node", "nodes" }, kinds(s))
    assert.equal(103, s[1].evidence[1].job_id)
    assert.equal(102, s[2].evidence[1].job_id)
    assert.equal(101, s[3].evidence[1].job_id)
  end)

  it("looks at the newest `window` outcomes only", function()
    local s = suggestions.suggest({ o(2, 102, "COMPLETED", "n0"), o(1, 101, "TIMEOUT", "n0") }, { time_limit = 60 },
      { window = 1 })
    assert.same({}, s)
  end)
end)
