-- Several `obleth serve`'s load windows read as one (obleth.router.load's export / import / combine:
-- what obleth.serve.load_share adds up on PostgreSQL). Windows on clocks the test moves; buckets are
-- 10 s; expected values worked out by hand.
local load = require "obleth.router.load"
local cjson = require "cjson"

local function clock(t0)
  local t = t0
  return function() return t end, function(dt) t = t + dt end
end

-- a window as another process would see it: exported, through JSON, imported
local function wire(w)
  return assert(load.import(cjson.decode(cjson.encode(w:export()))))
end

describe("obleth.router.load combined over instances", function()
  it("adds the counts now, the arrivals, the rate and the latency of two instances", function()
    local now, move = clock(1000)
    local a, b = load.new { now = now }, load.new { now = now }
    a:begin("m"); a:begin("m"); a:begin("m")  -- a: 3 in flight
    b:begin("m"); b:begin("m")                -- b: 2 in flight
    move(2)
    a:finish("m", 2)                          -- a: 2 left, one of 2 s
    b:finish("m", 4, 100)                     -- b: 1 left, one of 4 s with 100 tokens
    local v = load.combine({ a, wire(b) }, "m"):view("m")
    assert.equal(3, v.inflight)
    assert.equal(0, v.queued)
    assert.equal(2, v.finished)
    -- 5 arrivals over 60 s; mean of 2 s and 4 s; 100 tokens over 60 s
    assert.equal(5 / 60, v.rate)
    assert.equal(3, v.latency)
    assert.equal(100 / 60, v.tokens_per_s)
    assert.equal(1, #v.samples)
    -- the bucket's peak: a had 3 at once, b 2
    assert.same({ at = 1000, span = 10, inflight = 5, queued = 0, arrivals = 5, finished = 2 }, v.samples[1])
  end)

  it("a bucket only one instance has adds what the other still had in flight and queued then", function()
    local now, move = clock(1000)
    local a, b = load.new { now = now }, load.new { now = now }
    b:begin("m"); b:hold("m")                 -- b, bucket 1000: 1 in flight, 1 queued, and no event after
    move(20)
    a:begin("m"); a:begin("m")                -- a, bucket 1020: 2 in flight
    local v = load.combine({ a, wire(b) }, "m"):view("m")
    assert.equal(3, v.inflight)
    assert.equal(1, v.queued)
    assert.equal(2, #v.samples)
    assert.same({ at = 1000, span = 10, inflight = 1, queued = 1, arrivals = 2, finished = 0 }, v.samples[1])
    assert.same({ at = 1020, span = 10, inflight = 3, queued = 1, arrivals = 2, finished = 0 }, v.samples[2])
  end)

  it("a held request that leaves lowers the level the next bucket starts from", function()
    local now, move = clock(1000)
    local a, b = load.new { now = now }, load.new { now = now }
    b:hold("m")
    move(5)
    b:release("m")                            -- answered 503: nothing waits on b any more
    move(15)
    a:begin("m")                              -- bucket 1020
    local v = load.combine({ a, wire(b) }, "m"):view("m")
    assert.same({ at = 1020, span = 10, inflight = 1, queued = 0, arrivals = 1, finished = 0 }, v.samples[2])
  end)

  it("reaches back as far as the youngest instance, and idles from its start when no request came since", function()
    local now, move = clock(1000)
    local a = load.new { now = now }
    a:begin("m")
    a:finish("m", 1)
    move(600)
    local b = load.new { now = now }          -- started at 1600, after a's last request (1000)
    move(60)
    local v = load.combine({ a, wire(b) }, "m"):view("m")
    assert.equal(1600, v.observed_since)
    assert.equal(1600, v.started_at)
    assert.is_nil(v.last_request_at, "a request before an instance started is not known to be the last")
    b:begin("m")                              -- at 1660
    v = load.combine({ a, wire(b) }, "m"):view("m")
    assert.equal(1660, v.last_request_at)
    -- a alone: as before
    assert.equal(1000, a:view("m").last_request_at)
    assert.equal(1000, a:view("m").observed_since)
  end)

  it("lists the models any instance saw", function()
    local now = clock(1000)
    local a, b = load.new { now = now }, load.new { now = now }
    a:begin("x"); b:begin("y")
    assert.same({ "x", "y" }, load.combine({ a, wire(b) }):names())
  end)

  it("exports only the buckets inside the span", function()
    local now, move = clock(1000)
    local w = load.new { now = now, span = 60 }
    w:begin("m")
    move(100)
    w:finish("m", 100)
    local doc = w:export()
    assert.equal(1, #doc.models.m.buckets)
    assert.equal(1100, doc.models.m.buckets[1][1])
  end)

  it("refuses a published window that is not one, naming what is wrong", function()
    assert.is_nil((load.import({ models = {} })))
    local _, err = load.import({ since = 1, bucket = 10, models = { m = { inflight = -1, queued = 0, finished = 0,
      buckets = {} } } })
    assert.equal("invalid", err.code)
    assert.matches("model m: inflight, queued and finished must be counts", err.message, 1, true)
    _, err = load.import({ since = 1, bucket = 10, models = { m = { inflight = 0, queued = 0, finished = 0,
      buckets = { { 20, 0, 0, 0, 0, 0, cjson.null, 0, 0 }, { 10, 0, 0, 0, 0, 0, cjson.null, 0, 0 } } } } })
    assert.matches("model m: bucket 2 is out of order", err.message, 1, true)
    _, err = load.import({ since = 1, bucket = 10, models = { m = { inflight = 0, queued = 0, finished = 0,
      buckets = { { 10, 1.5, 0, 0, 0, 0, cjson.null, 0, 0 } } } } })
    assert.matches("model m: bucket 1: inflight must be a count", err.message, 1, true)
  end)
end)
