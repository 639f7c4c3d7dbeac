-- res:proxy against an endpoint that breaks HTTP (spec/support/raw_upstream.py writes
-- the bytes): answers that end early come back at once as errors, never as a wait
-- for the time limit, and invalid answers are not passed on as they are.
local loop = require("obleth.loop")
local http = require("obleth.http")

-- The misbehaving endpoint for one mode: its port and a stop function.
local raw_upstream = require("spec.support.raw_upstream")

local front = require("spec.support.proxy_front")

-- One client request through a front server to the endpoint of this mode; returns
-- the answer (or nil, err), what res:proxy returned, and the seconds it took.
local function exchange(mode)
  local port, stop = raw_upstream(mode)
  local fr, base, results = front(port, { timeout = 30 })
  local t0 = loop.monotonic()
  local r, err = http.request { url = base .. "/v1/x", timeout = 20 }
  local secs = loop.monotonic() - t0
  stop()
  fr:close()
  return r, err, results[1], secs
end

describe("res:proxy against an endpoint that breaks HTTP", function()
  for _, mode in ipairs { "partial_firstline", "partial_headers" } do
    it("reports an answer cut off in its " .. mode:gsub("partial_", "") .. " at once, as upstream_broke", function()
      local r, _, got, secs = exchange(mode)
      assert.is_true(secs < 3, ("took %.1f s"):format(secs))
      assert.equal(502, r.status)
      assert.equal("upstream_broke", got.why) -- bytes came back: not "closed", so no retry
    end)
  end

  it("closes the client's connection at once when a passed-through answer ends inside a chunk", function()
    local r, err, got, secs = exchange("partial_chunk")
    assert.is_true(secs < 3, ("took %.1f s"):format(secs))
    assert.is_nil(r) -- the client sees a broken answer, not a complete one
    assert.truthy(err)
    assert.equal(200, got.status)
    assert.equal("upstream_broke", got.why)
  end)

  for _, mode in ipairs { "status_101", "status_negative", "not_http" } do
    it("does not pass on an answer with " .. mode:gsub("_", " "), function()
      local r, _, got = exchange(mode)
      assert.equal(502, r.status)
      assert.is_nil(got.status)
      assert.equal("bad_response", got.why)
    end)
  end

  it("sends its own reason phrase, never the endpoint's", function()
    local r = assert(exchange("reason_cr"))
    assert.equal(200, r.status)
    assert.equal("ok", r.body)
    assert.is_nil(r.headers["set-cookie"])
  end)

  it("drops answer headers whose names are not tokens", function()
    local r = assert(exchange("bad_header_name"))
    assert.equal(200, r.status)
    assert.equal("ok", r.body)
    assert.equal("yes", r.headers["x-fine"])
    for k in pairs(r.headers) do assert.is_nil(k:find(" ", 1, true), "header name with a space: " .. k) end
    assert.is_nil(r.headers["transfer-encoding"])
  end)
end)
