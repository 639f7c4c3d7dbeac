-- The managed spec's autoscale (obleth.schema.managed, obleth.deployment.input.managed_spec):
-- exclusive with a fixed replicas, min may be 0, max required, defaults from the schema.
local input = require "obleth.deployment.input"
local cjson = require "cjson"

local function spec(over)
  local s = { launch_command = "obleth smoke-engine", partition = "gpu" }
  for k, v in pairs(over or {}) do s[k] = v end
  return s
end

describe("managed spec autoscale", function()
  it("takes autoscale with the defaults filled, and drops the fixed count", function()
    local out = assert(input.managed_spec(spec { autoscale = { min_replicas = 0, max_replicas = 3 } }))
    assert.same({ min_replicas = 0, max_replicas = 3, target_inflight = 4, scale_down_after = 300,
      idle_to_zero_after = 1800 }, out.autoscale)
    assert.is_nil(out.replicas)
  end)

  it("refuses replicas and autoscale together, on replicas", function()
    local out, err = input.managed_spec(spec { replicas = 2, autoscale = { max_replicas = 3 } })
    assert.is_nil(out)
    assert.equal("replicas", err.field)
    assert.matches("replicas or autoscale, not both", err.message)
  end)

  it("a spec read back (autoscale, replicas null) goes in again unchanged", function()
    local first = assert(input.managed_spec(spec { autoscale = { max_replicas = 3 } }))
    local back = cjson.decode(cjson.encode(first))
    back.replicas = cjson.null
    local again = assert(input.managed_spec(back))
    assert.same(first.autoscale, again.autoscale)
  end)

  it("needs max_replicas, and min not above it", function()
    local _, err = input.managed_spec(spec { autoscale = { min_replicas = 0 } })
    assert.equal("autoscale.max_replicas", err.field)
    _, err = input.managed_spec(spec { autoscale = { min_replicas = 4, max_replicas = 3 } })
    assert.equal("autoscale.min_replicas", err.field)
    _, err = input.managed_spec(spec { autoscale = { max_replicas = 3, target_inflight = 0 } })
    assert.equal("autoscale.target_inflight", err.field)
  end)

  it("without autoscale the spec is a fixed count, as before", function()
    local out = assert(input.managed_spec(spec { replicas = 2 }))
    assert.equal(2, out.replicas)
    assert.is_nil(out.autoscale)
    assert.is_nil(assert(input.managed_spec(spec { autoscale = cjson.null })).autoscale)
  end)
end)
