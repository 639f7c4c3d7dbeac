local sessions = require "obleth.api.sessions"

describe("obleth.api.sessions", function()
  local t, s
  before_each(function()
    t = 1764500000
    s = sessions.new { now = function() return t end }
  end)

  it("makes 32-byte random ids that last TTL seconds and are bound to the admin token", function()
    local id, exp = s:create("admin-token-0123456789")
    assert.matches("^%x+$", id)
    assert.equal(64, #id)
    assert.equal(t + sessions.TTL, exp)
    assert.not_equal(id, (s:create("admin-token-0123456789")))
    assert.is_table(s:check(id, "admin-token-0123456789"))
    -- another admin token in force (rotation): the session no longer counts, and is gone
    assert.is_nil(s:check(id, "another-token-0123456789"))
    assert.is_nil(s:check(id, "admin-token-0123456789"))
  end)

  it("expires, and revokes", function()
    local a = s:create("admin-token-0123456789")
    local b = s:create("admin-token-0123456789")
    s:revoke(b)
    assert.is_nil(s:check(b, "admin-token-0123456789"))
    t = t + sessions.TTL - 1
    assert.is_table(s:check(a, "admin-token-0123456789"))
    t = t + 1
    assert.is_nil(s:check(a, "admin-token-0123456789"))
    assert.equal(0, s.count)
  end)

  it("ignores ids that are not its own shape", function()
    for _, id in ipairs({ false, "", "x", ("g"):rep(64), ("a"):rep(63) }) do assert.is_nil(s:check(id, "t")) end
  end)

  it("throttles an address after FAILURES wrong tokens within WINDOW seconds", function()
    for _ = 1, sessions.FAILURES - 1 do s:failed("10.0.0.1") end
    assert.is_nil(s:throttled("10.0.0.1"))
    s:failed("10.0.0.1")
    assert.equal(sessions.WINDOW, s:throttled("10.0.0.1"))
    assert.is_nil(s:throttled("10.0.0.2"))
    t = t + sessions.WINDOW + 1
    assert.is_nil(s:throttled("10.0.0.1"))
  end)

  it("remembers at most MAX_ADDRESSES addresses' failures (stale ones go first)", function()
    for i = 1, sessions.MAX_ADDRESSES do s:failed("10.1." .. i) end
    t = t + sessions.WINDOW + 1
    s:failed("10.9.9.9")
    local n = 0
    for _ in pairs(s.failures) do n = n + 1 end
    assert.equal(1, n)
    for i = 1, sessions.MAX_ADDRESSES + 5 do s:failed("10.2." .. i) end
    n = 0
    for _ in pairs(s.failures) do n = n + 1 end
    assert.is_true(n <= sessions.MAX_ADDRESSES, n)
  end)

  it("reads its cookie from a Cookie header and writes the Set-Cookie value", function()
    assert.equal("abc", sessions.cookie("a=1; obleth_session=abc; b=2", "obleth_session"))
    assert.equal("abc", sessions.cookie("obleth_session=abc", "obleth_session"))
    assert.is_nil(sessions.cookie("xobleth_session=abc", "obleth_session"))
    assert.is_nil(sessions.cookie(nil, "obleth_session"))
    assert.equal("obleth_session=ff; Path=/; HttpOnly; SameSite=Strict; Max-Age=43200", sessions.set_cookie("ff", false))
    assert.equal("obleth_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0; Secure", sessions.set_cookie(nil, true))
  end)

  it("keeps at most MAX sessions, dropping the one closest to expiry", function()
    local first = s:create("admin-token-0123456789")
    t = t + 1
    for _ = 2, sessions.MAX do s:create("admin-token-0123456789") end
    assert.equal(sessions.MAX, s.count)
    s:create("admin-token-0123456789")
    assert.equal(sessions.MAX, s.count)
    assert.is_nil(s:check(first, "admin-token-0123456789"))
  end)
end)
