-- Two `obleth serve` on one PostgreSQL (Debian's, started by the test: spec.support.pg), as behind a
-- load balancer: what is written through one is read through the other at once, a dashboard session
-- signed in on one is valid on the other (and signed out on both), the sign-in throttle counts wrong
-- tokens across them, and a change made through one reaches an event stream open on the other.
local pgs = require "spec.support.pg"
local available, why = pgs.available()

describe("two obleth serve on one PostgreSQL", function()
  if not available then
    it("needs PostgreSQL", function() pending(why) end)
    return
  end
  local server = require "spec.support.server"
  local events = require "spec.support.events"
  local sys = require "obleth.sys"
  local a, b, drop

  setup(function()
    local url
    url, drop = pgs.database()
    local token = sys.random_hex(24)
    a = server.start { db = url, token = token }
    b = server.start { db = url, token = token }
  end)
  teardown(function()
    if a then a:stop() end
    if b then b:stop() end
    drop()
  end)

  local function cookie_of(headers)
    local sc = headers["set-cookie"]
    return sc and sc:match("^(obleth_session=%x+)")
  end

  it("lists on one a model created through the other, at once", function()
    local st, m = a:request("POST", "/api/v1/models", { name = "made-on-a" })
    assert.equal(201, st)
    local st2, list = b:request("GET", "/api/v1/models")
    assert.equal(200, st2)
    assert.equal(m.id, list.models[#list.models].id)
    assert.equal("made-on-a", list.models[#list.models].name)
    local st3 = b:request("DELETE", "/api/v1/models/" .. m.id)
    assert.equal(204, st3)
    assert.equal(404, (a:request("GET", "/api/v1/models/" .. m.id)))
  end)

  it("honours on one a dashboard session signed in on the other, and signs it out on both", function()
    local st, _, _, h = a:request("POST", "/api/v1/session", { token = a.token }, { Authorization = false })
    assert.equal(204, st)
    local cookie = assert(cookie_of(h))
    local st2, s = b:request("GET", "/api/v1/session", nil, { Authorization = false, Cookie = cookie })
    assert.equal(200, st2)
    assert.equal("session", s.via)
    assert.equal(200, (b:request("GET", "/api/v1/models", nil, { Authorization = false, Cookie = cookie })))
    assert.equal(204, (b:request("DELETE", "/api/v1/session", nil, { Authorization = false, Cookie = cookie,
      ["X-Requested-With"] = "obleth" })))
    assert.equal(401, (a:request("GET", "/api/v1/models", nil, { Authorization = false, Cookie = cookie })))
  end)

  it("counts wrong tokens from an address on both: the throttle holds on the other", function()
    local sessions = require "obleth.api.sessions"
    for i = 1, sessions.FAILURES do
      local srv = i % 2 == 0 and a or b
      assert.equal(401, (srv:request("POST", "/api/v1/session", { token = "wrong-token-" .. i },
        { Authorization = false })))
    end
    local st, body, _, h = a:request("POST", "/api/v1/session", { token = "wrong-again" }, { Authorization = false })
    assert.equal(429, st)
    assert.equal("too_many_attempts", body.code or (body.error and body.error.code))
    assert.is_truthy(h["retry-after"])
    -- the right token still signs in (the throttle holds back wrong tokens only)
    assert.equal(204, (b:request("POST", "/api/v1/session", { token = b.token }, { Authorization = false })))
  end)

  it("sends a change made through one to an event stream open on the other", function()
    local s = assert(events.open(b))
    assert.equal(200, s.status)
    local st, m = a:request("POST", "/api/v1/models", { name = "seen-on-b" })
    assert.equal(201, st)
    local ev = events.wait(s, "models", m.id, 0, 10)
    assert.equal(m.id, ev.data.model_id)
    s.resp:close()
  end)
end)
