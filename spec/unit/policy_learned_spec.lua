local learned = require "obleth.policy.learned"

local function l(id, account, qos) return { id = id, account = account, qos = qos } end

describe("policy.learned", function()
  it("learns account and QoS when the last 3 launches agree, with their ids as evidence", function()
    local d = learned.defaults({ l(9, "research", "long"), l(8, "research", "long"), l(7, "research", "long"),
      l(6, "teaching", "normal") })
    assert.same({ account = "research", qos = "long", provenance = "learned", evidence = { 9, 8, 7 } }, d)
  end)

  it("learns nothing when one of the last 3 used another QoS", function()
    local d, why = learned.defaults({ l(9, "research", "long"), l(8, "research", "normal"), l(7, "research", "long") })
    assert.is_nil(d)
    assert.equal("mixed", why.reason)
    assert.same({ 9, 8, 7 }, why.evidence)
  end)

  it("learns nothing when one of the last 3 used another account", function()
    local d = learned.defaults({ l(3, "research", "normal"), l(2, "teaching", "normal"), l(1, "research", "normal") })
    assert.is_nil(d)
  end)

  it("learns nothing from fewer launches than the window", function()
    local d, why = learned.defaults({ l(2, "research", "normal"), l(1, "research", "normal") })
    assert.is_nil(d)
    assert.equal("too_few", why.reason)
  end)

  it("looks only at the newest launches: older disagreement does not matter", function()
    local d = learned.defaults({ l(5, "a", "q"), l(4, "a", "q"), l(3, "a", "q"), l(2, "b", "r"), l(1, "c", "s") })
    assert.equal("a", d.account)
  end)

  it("takes the window from opts, and from DEFAULTS through new()", function()
    local ls = { l(2, "a", "q"), l(1, "a", "q") }
    assert.equal("a", learned.defaults(ls, { window = 2 }).account)
    assert.equal("a", learned.new({ window = 2 }).defaults(ls).account)
    assert.is_nil(learned.new({ window = 4 }).defaults({ l(3, "a", "q"), l(2, "a", "q"), l(1, "a", "q") }))
    assert.equal(3, learned.DEFAULTS.window, "new() leaves the built-in module alone")
  end)

  it("learns a launch series without QoS as account only", function()
    local d = learned.defaults({ l(3, "a"), l(2, "a"), l(1, "a") })
    assert.equal("a", d.account)
    assert.is_nil(d.qos)
  end)
end)
