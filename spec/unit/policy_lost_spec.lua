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

  it("an end with exit 98 (a port someone else held) neither counts nor breaks the row", function()
    local clash = { healthy = false, at = 950, state = "FAILED", exit_code = 98 }
    local r = lost.check({ e(false, 1000), clash, e(false, 900), e(true, 100) })
    assert.is_false(r.lost)
    assert.equal(2, r.failures)
    assert.same({ { ["end"] = clash, why = "port clash (exit 98)" } }, r.skipped)
    assert.is_false((lost.counts(clash)))
  end)

  it("only the health checks' cancels count: a cancel for obleth's own reasons is skipped", function()
    local function c(why, at) return { healthy = false, at = at, state = "CANCELLED", cancel_why = why } end
    assert.is_true(lost.counts(c("startup grace exceeded", 1)))
    assert.is_true(lost.counts(c("unhealthy past grace", 1)))
    for _, why in ipairs({ "restart asked", "spec paused", "surplus replica", "walltime rollover", "slot lost" }) do
      local counts, reason = lost.counts(c(why, 1))
      assert.is_false(counts)
      assert.equal("cancelled: " .. why, reason)
    end
    -- the backoff counts from the newest end that counted
    local r = lost.check({ c("restart asked", 2000), c("startup grace exceeded", 1000), e(false, 900) })
    assert.equal(2, r.failures)
    assert.equal(1000 + 20, r.backoff_until)
  end)

  it("reads k + slack ends per slot: 10 by default, 19 when an override asks for k = 12", function()
    assert.equal(10, lost.window())
    local twelve = lost.new({ k = 12 })
    assert.equal(19, twelve.window())
    local ends = {}
    for i = 1, 12 do ends[i] = e(false, 2000 - i) end
    assert.is_true(twelve.check(ends).lost)
    assert.equal(12, twelve.check(ends).failures)
    table.remove(ends)
    assert.is_false(twelve.check(ends).lost)
    -- ends past the window are not read
    local many = {}
    for i = 1, 15 do many[i] = e(false, 2000 - i) end
    assert.equal(10, lost.check(many, { k = 20, slack = -10 }).failures)
  end)
end)
