-- obleth.router.balancer: fewest requests in flight, round robin on ties, and a
-- cool-down for an endpoint whose connection failed. Pure: no host needed.
local balancer = require "obleth.router.balancer"

describe("router balancer", function()
  local A, B, C = "http://a:1", "http://b:1", "http://c:1"

  it("goes round robin over idle endpoints, in their stored order", function()
    local b = balancer.new()
    local got = {}
    for i = 1, 6 do got[i] = b:pick("m", { A, B, C }, nil, 0) end
    assert.same({ A, B, C, A, B, C }, got)
  end)

  it("sends the next request to the endpoint with the fewest in flight", function()
    local b = balancer.new()
    b:acquire(A); b:acquire(A); b:acquire(B)
    assert.equal(C, b:pick("m", { A, B, C }, nil, 0))
    b:acquire(C); b:acquire(C)
    -- A 2, B 1, C 2
    assert.equal(B, b:pick("m", { A, B, C }, nil, 0))
  end)

  it("breaks ties among the least loaded round robin, not always the first", function()
    local b = balancer.new()
    b:acquire(A) -- A busy: B and C tie at 0
    assert.equal(B, b:pick("m", { A, B, C }, nil, 0))
    assert.equal(C, b:pick("m", { A, B, C }, nil, 0))
    assert.equal(B, b:pick("m", { A, B, C }, nil, 0))
  end)

  it("release brings the count back, and never below zero", function()
    local b = balancer.new()
    b:acquire(A)
    assert.equal(1, b:load(A))
    b:release(A); b:release(A)
    assert.equal(0, b:load(A))
  end)

  it("never picks an excluded endpoint, and gives nil when all are excluded", function()
    local b = balancer.new()
    for _ = 1, 4 do assert.equal(B, b:pick("m", { A, B }, { [A] = true }, 0)) end
    assert.is_nil(b:pick("m", { A, B }, { [A] = true, [B] = true }, 0))
    assert.is_nil(b:pick("m", {}, nil, 0))
  end)

  it("avoids an endpoint whose connection failed until its cool-down ends, unless nothing else is left", function()
    local b = balancer.new { cooldown = 5 }
    b:failed(A, 100)
    for _ = 1, 3 do assert.equal(B, b:pick("m", { A, B }, nil, 101)) end
    -- even with more in flight on B, the cooling A is not preferred
    b:acquire(B); b:acquire(B)
    assert.equal(B, b:pick("m", { A, B }, nil, 102))
    -- only A left: it is still used
    assert.equal(A, b:pick("m", { A }, nil, 102))
    -- after the cool-down, A is picked again (it has fewer in flight)
    assert.equal(A, b:pick("m", { A, B }, nil, 105.5))
  end)

  it("keeps a cursor per model, and copes with an endpoint list that shrank", function()
    local b = balancer.new()
    assert.equal(A, b:pick("m1", { A, B, C }, nil, 0))
    assert.equal(B, b:pick("m1", { A, B, C }, nil, 0))
    assert.equal(A, b:pick("m2", { A, B }, nil, 0))
    assert.equal(C, b:pick("m1", { A, B, C }, nil, 0))
    assert.equal(A, b:pick("m1", { A }, nil, 0))
  end)
end)
