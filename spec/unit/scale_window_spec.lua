-- The load window's reach and the autoscale bounds (break finding F11): every scale_down_after the
-- managed spec takes is one the router's window sees whole, idleness is not cut by the window, and
-- what 0 means. The real window (obleth.router.load) on a clock the test moves, the real policy.
local load = require "obleth.router.load"
local scale = require "obleth.policy.scale"
local input = require "obleth.deployment.input"
local schema = require "obleth.schema.managed"

local function clock(t0)
  local t = t0
  return function() return t end, function(dt) t = t + dt end
end

local function field(obj, name)
  for _, f in ipairs(obj.fields) do if f[1] == name then return f[2] end end
end

local function healthy(n)
  local out = {}
  for i = 1, n do out[i] = { slot = i, state = "healthy" } end
  return out
end

describe("autoscale: the load window and the spec's bounds", function()
  it("the longest scale_down_after the spec takes scales down once its window has passed", function()
    local longest = field(schema.autoscale, "scale_down_after").max
    assert(input.managed_spec { launch_command = "x", autoscale = { max_replicas = 2, scale_down_after = longest } })
    local as = { min_replicas = 1, max_replicas = 2, target_inflight = 4, scale_down_after = longest,
      idle_to_zero_after = 1800 }
    local now, move = clock(0)
    local w = load.new { now = now }
    move(1000)                           -- obleth serve has run a while
    for _ = 1, 8 do w:begin("m") end     -- a burst of 8: two replicas
    move(5)
    for _ = 1, 8 do w:finish("m", 5) end
    -- then one short request every 5 min for longest + 10 min
    local t_end = now() + longest + 600
    while now() < t_end do
      move(300)
      w:begin("m"); w:finish("m", 1)
    end
    -- the snapshot's view (obleth.api.provisioner.load_of), read by a pass 30 s later
    local view = w:view("m", now() - longest - w.bucket)
    local d = scale.decide { now = now() + 30, autoscale = as, replicas = healthy(2), load = view }
    assert.equal("down", d.change, d.reason)
    assert.equal(1, d.desired)
  end)

  it("refuses a scale_down_after longer than the window keeps", function()
    local _, err = input.managed_spec { launch_command = "x",
      autoscale = { max_replicas = 2, scale_down_after = load.REACH + 1 } }
    assert.is_table(err)
    assert.equal("autoscale.scale_down_after", err.field)
    local _, err2 = input.managed_spec { launch_command = "x", autoscale = { max_replicas = 2, scale_down_after = 7200 } }
    assert.equal("autoscale.scale_down_after", err2.field)
  end)

  it("a model without a request since obleth serve started goes to zero after an idle_to_zero_after "
    .. "longer than the window", function()
    local as = { min_replicas = 0, max_replicas = 2, target_inflight = 4, scale_down_after = 300,
      idle_to_zero_after = 7200 }
    local now, move = clock(50000)
    local w = load.new { now = now }
    move(7100)
    local d = scale.decide { now = now(), autoscale = as, replicas = healthy(1), load = w:view("m", now() - 310) }
    assert.equal(1, d.desired, "7100 s without a request: not yet")
    move(100)
    d = scale.decide { now = now(), autoscale = as, replicas = healthy(1), load = w:view("m", now() - 310) }
    assert.equal("to_zero", d.change, d.reason)
    assert.equal(0, d.desired)
  end)

  it("scale_down_after 0: down at the first pass where the load of the current bucket fits fewer", function()
    local as = { min_replicas = 1, max_replicas = 3, target_inflight = 4, scale_down_after = 0,
      idle_to_zero_after = 1800 }
    local now, move = clock(1000)
    local w = load.new { now = now }
    for _ = 1, 12 do w:begin("m") end
    local d = scale.decide { now = now(), autoscale = as, replicas = healthy(3), load = w:view("m", now() - 10) }
    assert.equal(3, d.desired, "12 in flight at target 4")
    for _ = 1, 11 do w:finish("m", 1) end
    move(10)                              -- the next bucket: 1 in flight
    d = scale.decide { now = now(), autoscale = as, replicas = healthy(3), load = w:view("m", now() - 10) }
    assert.equal(1, d.desired, d.reason)
  end)

  it("idle_to_zero_after 0: to zero once the demand is nothing (none in flight or waiting, none in the "
    .. "last minute's rate), never before", function()
    local as = { min_replicas = 0, max_replicas = 2, target_inflight = 4, scale_down_after = 300,
      idle_to_zero_after = 0 }
    local now, move = clock(1000)
    local w = load.new { now = now }
    w:begin("m")
    local function decide()
      return scale.decide { now = now(), autoscale = as, replicas = healthy(1), load = w:view("m", now() - 310) }
    end
    assert.equal(1, decide().desired, "a request in flight")
    move(2)
    w:finish("m", 2)
    assert.equal(1, decide().desired, "answered 2 s ago: 1/60 req/s x 2 s is still demand")
    move(68)                              -- the bucket at 1000 leaves the 60 s rate at 1070
    local d = decide()
    assert.equal("to_zero", d.change, d.reason)
  end)
end)
