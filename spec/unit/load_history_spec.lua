-- obleth.deployment.load_history on the router's real load window and a clock the spec moves: points per
-- minute (peaks, arrivals, finished, replicas), its bounds, and the answer's words. Expected values are
-- counted by hand from the requests each test makes.
local history = require "obleth.deployment.load_history"
local load = require "obleth.router.load"

describe("obleth.deployment.load_history", function()
  local t, w, h
  local function now() return t end
  before_each(function()
    t = 1800000000 -- a minute's start (1800000000 % 60 == 0)
    w = load.new { now = now }
    h = history.new { now = now }
  end)
  local function sample(name, row) h:sample(name, w:view(name, h:since()), row) end

  it("a minute's point has its peaks in flight and queued, its arrivals and finished, and the replicas", function()
    t = t + 5
    w:begin("m"); w:begin("m"); w:hold("m")     -- 2 in flight, 1 queued
    t = t + 10
    w:finish("m", 10)                           -- 1 in flight
    sample("m", { current = 1, desired = 2 })
    t = t + 20
    w:release("m"); w:begin("m", true)          -- the held one goes: 2 in flight, 0 queued
    sample("m", { current = 2, desired = 2 })
    local p = h:points("m")
    assert.equal(1, #p)
    assert.same({ at = 1800000000, inflight = 2, queued = 1, arrivals = 3, finished = 1, current = 2, desired = 2 },
      p[1])
  end)

  it("requests in a minute's last seconds, after its last sample, are counted by the next minute's first", function()
    t = t + 50
    w:begin("m"); w:finish("m", 1)
    sample("m", { current = 1, desired = 1 })  -- the minute's last sample: 1 so far
    t = t + 5
    for _ = 1, 4 do w:begin("m"); w:finish("m", 1) end -- 4 more at second 55, no sample sees them in this minute
    t = t + 10                                  -- the next minute
    sample("m", { current = 1, desired = 1 })
    local p = h:points("m")
    assert.equal(2, #p)
    assert.same({ 1800000000, 5, 5 }, { p[1].at, p[1].arrivals, p[1].finished })
    assert.same({ 1800000060, 0, 0 }, { p[2].at, p[2].arrivals, p[2].finished })
    -- a minute with load and no sample at all gets its point from the next minute's sample
    t = 1800000000 + 180 + 30
    w:begin("m"); w:finish("m", 1)
    t = t + 40
    sample("m", nil)
    p = h:points("m")
    assert.same({ 1800000180, 1 }, { p[#p - 1].at, p[#p - 1].finished })
  end)

  it("sampling a minute again counts nothing twice", function()
    t = t + 1
    w:begin("m"); w:finish("m", 1)
    for _ = 1, 5 do sample("m", nil) end
    assert.same({ 1, 1 }, { h:points("m")[1].arrivals, h:points("m")[1].finished })
  end)

  it("a request in flight through a quiet minute shows in that minute's point", function()
    t = t + 30
    w:begin("m")
    sample("m")
    t = t + 60 -- the next minute: no request arrives or ends in it
    sample("m")
    local p = h:points("m")
    assert.equal(2, #p)
    assert.same({ 1800000060, 1, 0, 0 }, { p[2].at, p[2].inflight, p[2].arrivals, p[2].finished })
    assert.is_nil(p[2].current) -- no scaling row: not a managed model
  end)

  it("keeps six hours: 360 points at most, a model with none left is forgotten", function()
    for _ = 1, 400 do
      w:begin("m"); w:finish("m", 1)
      sample("m", { current = 1, desired = 1 })
      t = t + 60
    end
    local p = h:points("m")
    assert.equal(360, #p)
    assert.equal(t - 360 * 60, p[1].at) -- t is the minute after the last point's
    h:forget({ m = true })
    assert.equal(360, #h:points("m"))
    t = t + 6 * 3600
    h:forget({})
    assert.is_nil(h.models.m)
  end)

  it("answers the hours asked, with the capacity line and the words from the scale settings", function()
    t = t + 60 * 10
    w:begin("m"); w:begin("m"); w:begin("m"); w:finish("m", 2)
    sample("m", { current = 1, desired = 1.0 }) -- a spec's replicas as the store may give it
    local a = h:answer("m", "m", 1, { current = 1, desired = 1.0 }, { target_inflight = 4, min_replicas = 0,
      max_replicas = 3 })
    assert.equal("m", a.model)
    assert.equal(60, a.step)
    assert.equal(t - t % 60 + 60 - 3600, a.from)
    assert.equal(1800000000, a.observed_since) -- the history started then
    assert.equal(1, #a.points)
    assert.equal(4, a.points[1].capacity)
    assert.equal("In the last 11 min: at most 3 requests in flight and 0 queued at once, 1 finished (at most 1 in a "
      .. "minute). Replicas in this span: 1 running or on their way, 1 wanted. A replica is added when the "
      .. "requests in flight and queued pass 4 requests per replica (capacity).", a.summary)
    local keys = {}
    for _, s in ipairs(a.series) do keys[#keys + 1] = s.key end
    assert.same({ "inflight", "queued", "finished", "capacity", "current", "desired" }, keys)
    -- a model with no spec and no load: no replicas series, and says so
    local b = h:answer("other", "other", 6, nil, nil)
    assert.equal(0, #b.points)
    assert.equal("No request in the last 11 min.", b.summary)
    keys = {}
    for _, s in ipairs(b.series) do keys[#keys + 1] = s.key end
    assert.same({ "inflight", "queued", "finished" }, keys)
  end)

  it("sample_all samples every managed model with its scaling row, and models with load only, by model id", function()
    local store = {
      spec_generations = function() return { { model_id = 1, generation = 1, model_name = "a" } } end,
      get_spec = function() return { model_id = 1, generation = 1, model_name = "a", replicas = 3, enabled = true } end,
      replica_counts = function() return { [1] = 2 } end,
      list_replicas = function() error("a fixed spec's replicas are counted, not read") end,
      route_model = function(_, name) return ({ b = { id = 2, name = "b" } })[name] end,
    }
    t = t + 1
    w:begin("b")
    w:begin("gone") -- load for a name no model has (deleted meanwhile): not kept
    assert.equal(2, h:sample_all(store, w, require("obleth.policy.scale")))
    assert.same({ 2, 3 }, { h:points(1)[1].current, h:points(1)[1].desired })
    assert.same({ 1, nil }, { h:points(2)[1].inflight, h:points(2)[1].current })
    assert.equal(0, #h:points("b"))
  end)
end)
