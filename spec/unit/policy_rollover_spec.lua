-- Rollover times worked out by hand: a job started at t=10000 with a 60 min
-- limit ends at 10000 + 3600 = 13600.
local rollover = require "obleth.policy.rollover"

describe("policy.rollover", function()
  it("starts the successor start-up + 5 min before the walltime ends", function()
    -- healthy after 120 s: margin 120 + 300 = 420; at = 13600 - 420 = 13180
    local p = rollover.plan({ time_limit = 60, started_at = 10000, healthy_at = 10120, now = 13000 })
    assert.is_false(p.start_successor)
    assert.equal(13180, p.at)
    assert.equal(13600, p.ends_at)
    assert.equal(420, p.margin)
    assert.equal(120, p.evidence.startup_seconds)
    assert.equal(300, p.evidence.policy_margin)
    assert.equal("policy", p.evidence.margin_source)
  end)

  it("says start once now reaches that time", function()
    local p = rollover.plan({ time_limit = 60, started_at = 10000, healthy_at = 10120, now = 13180 })
    assert.is_true(p.start_successor)
  end)

  it("a spec's rollover_margin (minutes) overrides the policy margin", function()
    -- 120 s start-up + 15 min = 1020 s; at = 13600 - 1020 = 12580
    local p = rollover.plan({ time_limit = 60, started_at = 10000, healthy_at = 10120, now = 12600,
      rollover_margin = 15 })
    assert.equal(12580, p.at)
    assert.is_true(p.start_successor)
    assert.equal("spec", p.evidence.margin_source)
  end)

  it("takes the policy margin from DEFAULTS through new()", function()
    local p = rollover.new({ margin = 600 }).plan({ time_limit = 60, started_at = 10000, healthy_at = 10000,
      now = 0 })
    assert.equal(13000, p.at)
  end)

  it("never rolls a replica that is not healthy yet", function()
    local p = rollover.plan({ time_limit = 60, started_at = 10000, now = 99999 })
    assert.is_false(p.start_successor)
    assert.is_nil(p.at)
  end)

  it("never rolls a job without a time limit", function()
    local p = rollover.plan({ time_limit = math.huge, started_at = 1, healthy_at = 2, now = 3 })
    assert.is_false(p.start_successor)
  end)

  it("a walltime shorter than start-up plus margin starts the successor as soon as it is healthy", function()
    -- 10 min limit, 8 min start-up: at = 10000 + 600 - (480 + 300) = 9820, before healthy_at 10480
    local p = rollover.plan({ time_limit = 10, started_at = 10000, healthy_at = 10480, now = 10480 })
    assert.equal(9820, p.at)
    assert.is_true(p.start_successor)
    assert.is_string(p.evidence.reason)
  end)
end)
