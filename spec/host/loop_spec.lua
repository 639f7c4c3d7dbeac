local loop = require("obleth.loop")

describe("obleth.loop", function()
  it("sleep yields only the calling task: two sleepers overlap", function()
    local t0 = loop.monotonic()
    local done = 0
    for _ = 1, 2 do
      loop.spawn(function() loop.sleep(0.3); done = done + 1 end)
    end
    while done < 2 do loop.sleep(0.01) end
    local elapsed = loop.monotonic() - t0
    assert.is_true(elapsed >= 0.29, "slept less than asked: " .. elapsed)
    -- one after the other would take 0.6 s
    assert.is_true(elapsed < 0.55, "sleepers ran one after the other: " .. elapsed)
  end)

  it("a one-shot timer fires once, a repeating one until cancelled", function()
    local once, rep = 0, 0
    loop.after(0.02, function() once = once + 1 end)
    local t = loop.every(0.02, function() rep = rep + 1 end)
    loop.sleep(0.15)
    t:cancel()
    local at_cancel = rep
    loop.sleep(0.06)
    assert.equal(1, once)
    assert.is_true(at_cancel >= 4, "repeating timer fired " .. at_cancel .. " times in 150 ms")
    assert.equal(at_cancel, rep)
    assert.is_false(t:active())
  end)

  it("an error inside a timer task is contained and the loop keeps running", function()
    local after = false
    loop.after(0.01, function() error("boom from a timer") end)
    loop.after(0.03, function() after = true end)
    loop.sleep(0.06)
    assert.is_true(after)
  end)

  it("rejects negative durations with an argument error", function()
    assert.has_error(function() loop.sleep(-1) end)
    assert.has_error(function() loop.every(0, function() end) end)
  end)

  it("spawn passes arguments and returns nil for a task that finished at once", function()
    local got
    local co = loop.spawn(function(a, b) got = a + b end, 2, 3)
    assert.equal(5, got)
    assert.is_nil(co)
  end)

  it("clocks move forward", function()
    local a, w = loop.monotonic(), loop.now()
    loop.sleep(0.01)
    assert.is_true(loop.monotonic() > a)
    assert.is_true(w > 1.7e9)
  end)

  it("knows when it runs inside a task", function()
    assert.is_true(loop.in_task())
  end)
end)

describe("obleth.loop.notifier", function()
  it("wakes the waiting task when notified, not inside the notifier's caller", function()
    local n = loop.notifier()
    local got, woke_inside
    loop.spawn(function() got = n:wait(30) end)
    assert.is_nil(got)
    n:notify()
    woke_inside = got
    local t0 = loop.monotonic()
    while got == nil and loop.monotonic() - t0 < 5 do loop.sleep(0.001) end
    assert.is_nil(woke_inside)
    assert.is_true(got)
    assert.is_true(loop.monotonic() - t0 < 1)
  end)

  it("keeps a notify made while nobody waited; repeated notifies count once", function()
    local n = loop.notifier()
    n:notify(); n:notify()
    assert.is_true(n:wait(5))
    assert.is_false(n:wait(0.01))
  end)

  it("times out with false, and serves one task at a time", function()
    local n = loop.notifier()
    local t0 = loop.monotonic()
    assert.is_false(n:wait(0.05))
    assert.is_true(loop.monotonic() - t0 >= 0.045)
    local first
    loop.spawn(function() first = n:wait(5) end)
    assert.has_error(function() n:wait(1) end, "notifier: another task is already waiting")
    n:notify()
    while first == nil do loop.sleep(0.001) end
    assert.is_true(first)
  end)
end)

describe("obleth.loop after a long stretch without yielding", function()
  it("a sleep still lasts as long as asked", function()
    local t_busy = os.clock()
    while os.clock() - t_busy < 0.3 do end -- the loop's cached clock goes stale
    local t0 = require("obleth.loop").monotonic()
    require("obleth.loop").sleep(0.2)
    local slept = require("obleth.loop").monotonic() - t0
    assert.is_true(slept >= 0.19, "slept only " .. slept)
  end)
end)
