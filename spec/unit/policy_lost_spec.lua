local lost = require "obleth.policy.lost"

local function e(healthy, at) return { healthy = healthy, at = at, state = healthy and "CANCELLED" or "FAILED" } end

describe("policy.lost", function()
  it("backs off 10, 20, 40 ... seconds, capped at 10 minutes", function()
    assert.equal(0, lost.backoff(0))
    assert.equal(10, lost.backoff(1))
    assert.equal(20, lost.backoff(2))
    assert.equal(40, lost.backoff(3))
    assert.equal(320, lost.backoff(6))
    assert.equal(600, lost.backoff(7))   -- 640 capped
    assert.equal(600, lost.backoff(1000))
  end)

  it("a slot whose last 3 ends never became healthy is lost", function()
    local r = lost.check({ e(false, 1000), e(false, 900), e(false, 800), e(true, 100) })
    assert.is_true(r.lost)
    assert.equal(3, r.failures)
    assert.equal(1000 + 40, r.backoff_until)
    assert.equal(3, #r.evidence)
  end)

  it("two failures after a healthy run are not lost yet; resubmit waits 20 s", function()
    local r = lost.check({ e(false, 500), e(false, 400), e(true, 300), e(false, 200) })
    assert.is_false(r.lost)
    assert.equal(2, r.failures)
    assert.equal(520, r.backoff_until)
  end)

  it("a newest end that was healthy means no backoff", function()
    local r = lost.check({ e(true, 500), e(false, 400), e(false, 300), e(false, 200) })
    assert.is_false(r.lost)
    assert.equal(0, r.failures)
    assert.is_nil(r.backoff_until)
  end)

  it("no ends: not lost, no backoff", function()
    local r = lost.check({})
    assert.is_false(r.lost)
    assert.is_nil(r.backoff_until)
  end)

  it("K comes from opts or DEFAULTS", function()
    assert.is_true(lost.check({ e(false, 1) }, { k = 1 }).lost)
    assert.is_false(lost.new({ k = 5 }).check({ e(false, 4), e(false, 3), e(false, 2), e(false, 1) }).lost)
  end)
end)
