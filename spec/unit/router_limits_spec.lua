-- obleth.router.limits: a key's requests_per_minute (sliding window) and max_concurrent,
-- with the time given by the spec.
local limits = require "obleth.router.limits"

describe("router limits", function()
  it("admits requests_per_minute requests in any 60 s and says when the oldest leaves the window", function()
    local lim = limits.new()
    local rpm = { requests_per_minute = 3 }
    for _, t in ipairs({ 0, 10, 20 }) do
      assert.is_true((lim:admit(1, rpm, t)))
      lim:release(1)
    end
    -- the request at 0 leaves the window at 60: 35 s after 25
    assert.same({ false, 35, "requests_per_minute", 3 }, { lim:admit(1, rpm, 25) })
    assert.same({ false, 1, "requests_per_minute", 3 }, { lim:admit(1, rpm, 59.5) })
    assert.is_true((lim:admit(1, rpm, 60)))
    -- now 10, 20 and 60 are in the window: the next has to wait for 10 to leave (at 70)
    assert.same({ false, 9, "requests_per_minute", 3 }, { lim:admit(1, rpm, 61) })
  end)

  it("does not count a refused request in the window", function()
    local lim = limits.new { window = 10 }
    local rpm = { requests_per_minute = 1 }
    assert.is_true((lim:admit(7, rpm, 0)))
    for t = 1, 9 do assert.is_false((lim:admit(7, rpm, t))) end
    assert.is_true((lim:admit(7, rpm, 10)))
  end)

  it("refuses a request over max_concurrent until one in flight is released", function()
    local lim = limits.new()
    local c = { max_concurrent = 2 }
    assert.is_true((lim:admit(1, c, 0)))
    assert.is_true((lim:admit(1, c, 0)))
    assert.same({ false, 1, "max_concurrent", 2 }, { lim:admit(1, c, 0) })
    lim:release(1)
    assert.is_true((lim:admit(1, c, 0)))
  end)

  it("keeps keys apart, and a key without limits is always admitted", function()
    local lim = limits.new()
    assert.is_true((lim:admit(1, { requests_per_minute = 1 }, 0)))
    assert.is_false((lim:admit(1, { requests_per_minute = 1 }, 1)))
    assert.is_true((lim:admit(2, { requests_per_minute = 1 }, 1)))
    for t = 1, 100 do assert.is_true((lim:admit(3, {}, t))) end
  end)

  it("keeps the newest admissions when the limit changes", function()
    local lim = limits.new()
    for t = 1, 5 do lim:admit(1, { requests_per_minute = 5 }, t); lim:release(1) end
    -- lowered to 2: the two newest (4 and 5) are kept, so the next waits for 4 to leave (at 64)
    assert.same({ false, 54, "requests_per_minute", 2 }, { lim:admit(1, { requests_per_minute = 2 }, 10) })
    assert.same({ 2, 0 }, { lim:count(1, 10) })
  end)

  it("forgets keys with nothing in the window and nothing in flight", function()
    local lim = limits.new { window = 5 }
    lim:admit(1, { requests_per_minute = 2 }, 0)
    lim:release(1)
    lim:prune(6)
    assert.is_nil(next(lim._keys))
  end)
end)
