-- The router's per-model load window (obleth.router.load) on a clock the test moves: what the
-- snapshot hands the scale policy. Values worked out by hand; buckets are 10 s.
local load = require "obleth.router.load"

local function clock(t0)
  local t = t0
  return function() return t end, function(dt) t = t + dt end
end

describe("obleth.router.load", function()
  it("counts requests in flight and finished per model, and the time of the last request", function()
    local now, move = clock(1000)
    local w = load.new { now = now }
    w:begin("a"); w:begin("a"); w:begin("b")
    move(3)
    w:finish("a", 3)
    local v = w:view("a")
    assert.equal(1, v.inflight)
    assert.equal(1, v.finished)
    assert.equal(1000, v.last_request_at)
    assert.equal(1, w:view("b").inflight)
    assert.same({ "a", "b" }, w:names())
  end)

  it("keeps the peak of each 10 s bucket, its arrivals and finishes", function()
    local now, move = clock(1000)
    local w = load.new { now = now }
    for _ = 1, 5 do w:begin("m") end       -- bucket 1000: peak 5, 5 arrivals
    move(4)
    for _ = 1, 4 do w:finish("m", 4) end   -- still bucket 1000: 4 finished, 1 left
    move(10)
    w:begin("m")                           -- bucket 1010: 2 in flight
    local v = w:view("m")
    assert.equal(2, #v.samples)
    assert.same({ at = 1000, span = 10, inflight = 5, queued = 0, arrivals = 5, finished = 4 }, v.samples[1])
    assert.same({ at = 1010, span = 10, inflight = 2, queued = 0, arrivals = 1, finished = 0 }, v.samples[2])
    -- rate over the last 60 s: 6 arrivals / 60; latency: 4 requests of 4 s; no tokens reported
    assert.equal(0.1, v.rate)
    assert.equal(4, v.latency)
    assert.is_nil(v.tokens_per_s)
    w:finish("m", 1, 600)
    assert.equal(10, w:view("m").tokens_per_s, "600 completion tokens over 60 s")
  end)

  it("held requests count as queued, and as in flight once a replica takes them", function()
    local now = clock(2000)
    local w = load.new { now = now }
    w:hold("m"); w:hold("m")
    local v = w:view("m")
    assert.equal(2, v.queued)
    assert.equal(2, v.samples[1].queued)
    w:release("m"); w:begin("m", true)  -- a replica took one
    w:release("m")                       -- the other one was answered 503
    v = w:view("m")
    assert.equal(0, v.queued)
    assert.equal(1, v.inflight)
    assert.equal(2, v.samples[1].arrivals, "a held request is one arrival, whatever happens to it")
  end)

  it("drops buckets older than the span, and says how far back the window reaches", function()
    local now, move = clock(10000)
    local w = load.new { now = now, span = 600 }
    w:begin("m")
    w:finish("m", 1)
    move(700)
    w:begin("m")
    local v = w:view("m")
    assert.equal(1, #v.samples)
    assert.equal(10700, v.samples[1].at)
    assert.equal(10100, v.observed_since, "span 600 s back (serve started earlier)")
    assert.equal(10000, load.new({ now = function() return 10000 end }):view("x").observed_since)
  end)

  it("a request in flight since before `since` still counts, though no event came since", function()
    local now, move = clock(5000)
    local w = load.new { now = now }
    w:begin("m"); w:begin("m"); w:begin("m")
    move(400)
    -- since = now - 300 = 5100: the bucket at 5000 ended before; its 3 in flight carry in
    local v = w:view("m", 5100)
    assert.same({ { at = 5100, span = 0, inflight = 3, queued = 0, arrivals = 0, finished = 0 } }, v.samples)
    assert.equal(0, v.rate)
  end)

  it("feeds the scale policy: a burst 400 s ago no longer holds three replicas", function()
    local scale = require "obleth.policy.scale"
    local now, move = clock(0)
    local w = load.new { now = now }
    move(100)
    for _ = 1, 9 do w:begin("m") end
    move(5)
    for _ = 1, 9 do w:finish("m", 5) end
    move(400)
    local as = { min_replicas = 1, max_replicas = 4, target_inflight = 4, scale_down_after = 300,
      idle_to_zero_after = 1800 }
    local reps = { { state = "healthy" }, { state = "healthy" }, { state = "healthy" } }
    local d = scale.decide { now = now(), autoscale = as, replicas = reps, load = w:view("m", now() - 300) }
    assert.equal(1, d.desired)
    -- a fresh window (obleth serve just started) holds them
    local now2 = clock(0)
    local w2 = load.new { now = now2 }
    d = scale.decide { now = 1, autoscale = as, replicas = reps, load = w2:view("m") }
    assert.equal("hold", d.change, "a window begun 1 s ago never scales down")
  end)
end)
