local events = require "obleth.api.changes"

-- a notifier that records wake-ups instead of waiting (the real one: spec/host/loop_spec.lua)
local function fake_notifier()
  local n = { notified = 0, waits = {} }
  function n:notify() self.notified = self.notified + 1 end
  function n:wait(t) self.waits[#self.waits + 1] = t; return false end
  return n
end

describe("obleth.api.changes", function()
  local hub
  before_each(function() hub = events.new { max = 2, notifier = fake_notifier } end)

  it("hands each subscriber every change once per topic and model, in order, and wakes it", function()
    local a = assert(hub:subscribe())
    local b = assert(hub:subscribe())
    hub:publish("replicas", 3)
    hub:publish("provisioner")
    hub:publish("replicas", 3)
    hub:publish("replicas", 4)
    assert.same({ { topic = "replicas", model_id = 3 }, { topic = "provisioner" }, { topic = "replicas", model_id = 4 } },
      a:next(5))
    assert.equal(4, a.wake.notified)
    assert.same({}, a.wake.waits) -- something was pending: no wait
    assert.same({}, a:next(5))    -- taken: the next call waits
    assert.same({ 5 }, a.wake.waits)
    assert.equal(3, #b:next(5))
  end)

  it("refuses a subscriber past the cap, and takes one again after an unsubscribe", function()
    local a = assert(hub:subscribe())
    assert(hub:subscribe())
    local c, err = hub:subscribe()
    assert.is_nil(c)
    assert.equal("too_many", err.code)
    hub:unsubscribe(a)
    assert.is_true(a.closed)
    assert.is_truthy(hub:subscribe())
  end)

  it("a closed subscriber gets nothing more and does not wait", function()
    local a = assert(hub:subscribe())
    hub:close_all()
    hub:publish("models", 1)
    assert.same({}, a:next(5))
    assert.same({}, a.wake.waits)
    assert.equal(0, hub.count)
  end)

  it("closes the subscribers of one owner (a session signed out)", function()
    local a = assert(hub:subscribe())
    local b = assert(hub:subscribe())
    a.owner, b.owner = "s1", "s2"
    hub:close_owned("s1")
    assert.is_true(a.closed)
    assert.is_false(b.closed)
    assert.equal(1, hub.count)
  end)

  it("refuses a topic it does not know (a programming error)", function()
    assert.has_error(function() hub:publish("model", 1) end)
  end)
end)
