-- Users sign in against the site's directory (docs/access.md "LDAP"): Debian's slapd started here
-- on loopback (slapadd into a temp dir, slapd -f; stopped at the end) with a small directory: alice
-- in groupOfNames hpc-ops (mapped to operator in policy.d) and in posixGroup gpu-users, bob in no
-- group. obleth serve finds the user by a search (OBLETH_LDAP_USER_BASE), binds as them, reads
-- their groups, and the session carries them; over real HTTP with the session cookie.
-- Runs on PostgreSQL too (OBLETH_TEST_STORE=postgresql: the session is kept in the store).
local has_host = pcall(require, "obleth.http")

describe("access: LDAP sign-in against slapd", function()
  if not has_host then
    it("needs the obleth runtime", function() pending("obleth.http is missing: run under build/obleth lua") end)
    return
  end
  local slapd = require "spec.support.slapd"
  if not slapd.available() then
    it("needs slapd", function() pending("no " .. slapd.BIN .. " (scripts/deps.sh all installs it)") end)
    return
  end
  local http = require "obleth.http"
  local cjson = require "cjson"
  local util = require "spec.support.util"
  local server = require "spec.support.server"

  local PORT = tonumber(os.getenv("OBLETH_TEST_SLAPD_PORT") or "") or util.free_port()
  local URL = "ldap://127.0.0.1:" .. PORT
  local SUFFIX = slapd.SUFFIX
  local dir, prefix, srv

  local function write(path, text)
    local f = assert(io.open(path, "w"))
    f:write(text)
    f:close()
  end

  -- a request to obleth; o.cookie: the session cookie to send
  local function call(method, path, body, o)
    o = o or {}
    local h = { ["X-Requested-With"] = "obleth" }
    if o.cookie then h.Cookie = o.cookie end
    if body then h["Content-Type"] = "application/json" end
    local r = assert(http.request { url = srv.base .. path, method = method, headers = h,
      body = body and cjson.encode(body), timeout = 20 })
    local ok, doc = pcall(cjson.decode, r.body)
    return r.status, ok and server.ints(doc) or nil, r.headers
  end

  local function signin(user, password)
    local st, doc, hs = call("POST", "/api/v1/session", { user = user, password = password })
    local set = hs and (hs["set-cookie"] or hs["Set-Cookie"])
    return st, set and set:match("^(obleth_session=%x+)"), doc, hs
  end

  setup(function()
    dir = slapd.new()
    prefix = dir.prefix
    dir:start { urls = { URL }, ldif = ([[
dn: uid=bob,ou=people,SUFFIX
objectClass: inetOrgPerson
uid: bob
cn: Bob
sn: B
userPassword: bob-pw

dn: cn=gpu-users,ou=groups,SUFFIX
objectClass: posixGroup
cn: gpu-users
gidNumber: 5000
memberUid: alice
]]) }
    srv = server.start { env = { OBLETH_LDAP_URL = URL, OBLETH_LDAP_USER_BASE = "ou=people," .. SUFFIX,
      OBLETH_LDAP_GROUP_BASE = "ou=groups," .. SUFFIX, OBLETH_POLICY_DIR = prefix .. "/policy.d" } }
  end)

  teardown(function()
    if srv then srv:cleanup() end
    if dir then dir:stop() end
  end)

  it("says it signs in with the directory", function()
    local st, m = call("GET", "/api/v1/session/methods")
    assert.equal(200, st)
    assert.same({ token = true, ldap = true }, m)
  end)

  it("alice (in hpc-ops, mapped to operator) signs in and launches; the history and the audit say alice", function()
    local st, cookie = signin("alice", "alice-pw")
    assert.equal(204, st)
    assert.truthy(cookie)
    local _, s = call("GET", "/api/v1/session", nil, { cookie = cookie })
    assert.same({ "alice", "operator", "session" }, { s.user, s.role, s.via })
    assert.same({ "gpu-users", "hpc-ops" }, s.groups)
    local st3, l = call("POST", "/api/v1/deployments/launch", { recipe_id = "smoke-test", api_model_name = "alice-ldap",
      values = { replicas = 1, partition = "gpu", account = "research" } }, { cookie = cookie })
    assert.equal(201, st3)
    local _, hist = call("GET", "/api/v1/deployments/launches?model_id=" .. l.launch.model_id, nil, { cookie = cookie })
    assert.equal("alice", hist.launches[1].created_by)
    local _, a = call("GET", "/api/v1/audit?model=alice-ldap", nil, { cookie = cookie })
    assert.same({ "alice", "session", "operator", "/api/v1/deployments/launch" }, { a.entries[1].actor,
      a.entries[1].via, a.entries[1].role, a.entries[1].target })
    -- the password is in no log line
    assert.falsy(srv:log():find("alice-pw", 1, true))
  end)

  it("bob (no group) signs in, sees the deployments and gets 403 on Launch naming the action", function()
    local st, cookie = signin("bob", "bob-pw")
    assert.equal(204, st)
    local _, s = call("GET", "/api/v1/session", nil, { cookie = cookie })
    assert.same({ "bob", "viewer" }, { s.user, s.role })
    local st2, doc = call("GET", "/api/v1/models", nil, { cookie = cookie })
    assert.equal(200, st2)
    local names = {}
    for _, m in ipairs(doc.models) do names[m.name] = true end
    assert.is_true(names["alice-ldap"])
    local st3, e = call("POST", "/api/v1/deployments/launch", { recipe_id = "smoke-test", api_model_name = "bob-l" },
      { cookie = cookie })
    assert.equal(403, st3)
    assert.same({ "forbidden", "deployments.launch", "operator" }, { e.error.code, e.error.action, e.error.role })
  end)

  it("a hostile user name finds nobody (the filter value is escaped)", function()
    local ldap = require "obleth.ldap"
    assert.equal("\\2a\\29\\28uid\\3d\\2a", ldap.escape_filter("*)(uid=*"))
    assert.equal("a\\2cb\\3dc\\2b\\5c", ldap.escape_dn("a,b=c+\\"))
    local st = signin("*)(uid=*", "alice-pw")
    assert.equal(401, st)
    assert.equal(401, (signin("*", "alice-pw")))
    assert.equal(401, (signin("ali*", "alice-pw"))) -- unescaped, (uid=ali*) would find alice
  end)

  it("a wrong password is 401, an empty one is refused, and the sign-in throttle applies", function()
    local st, cookie, e = signin("alice", "wrong")
    assert.equal(401, st)
    assert.is_nil(cookie)
    assert.equal("unauthorized", e.error.code)
    assert.equal(400, (signin("alice", "")))
    -- the earlier hostile names counted too: wrong ones until the throttle holds the address back
    local last, hs
    for _ = 1, 12 do
      last, _, _, hs = signin("alice", "wrong")
      if last == 429 then break end
      assert.equal(401, last)
    end
    assert.equal(429, last)
    assert.truthy(hs["retry-after"] or hs["Retry-After"])
    -- the right password is held back too while the window lasts: the directory is not asked
    assert.equal(429, (signin("alice", "alice-pw")))
  end)

  it("signs in with a DN template, and with a search as a bind DN whose password is in a file", function()
    local pwfile = prefix .. "/bind-password"
    write(pwfile, "admin-secret\n")
    for _, env in ipairs {
      { OBLETH_LDAP_USER_DN = "uid={user},ou=people," .. SUFFIX },
      { OBLETH_LDAP_USER_BASE = "ou=people," .. SUFFIX, OBLETH_LDAP_BIND_DN = "cn=admin," .. SUFFIX,
        OBLETH_LDAP_BIND_PASSWORD_FILE = pwfile },
    } do
      env.OBLETH_LDAP_URL, env.OBLETH_LDAP_GROUP_BASE = URL, "ou=groups," .. SUFFIX
      env.OBLETH_POLICY_DIR = prefix .. "/policy.d"
      local keep = srv
      srv = server.start { env = env }
      local ok, err = pcall(function()
        local st, cookie = signin("alice", "alice-pw")
        assert.equal(204, st)
        local _, s = call("GET", "/api/v1/session", nil, { cookie = cookie })
        assert.same({ "alice", "operator" }, { s.user, s.role })
        assert.equal(401, (signin("*)(uid=*", "alice-pw")))
        assert.equal(401, (signin("alice", "bob-pw")))
        assert.falsy(srv:log():find("admin-secret", 1, true))
        assert.falsy(srv:log():find("alice-pw", 1, true))
      end)
      srv:cleanup()
      srv = keep
      assert(ok, err)
    end
    -- the bind DN is used: with a wrong password in its file, nobody signs in (503, not 401)
    write(pwfile, "not-the-secret\n")
    local keep = srv
    srv = server.start { env = { OBLETH_LDAP_URL = URL, OBLETH_LDAP_USER_BASE = "ou=people," .. SUFFIX,
      OBLETH_LDAP_BIND_DN = "cn=admin," .. SUFFIX, OBLETH_LDAP_BIND_PASSWORD_FILE = pwfile } }
    local ok, err = pcall(function()
      local st, _, e = signin("alice", "alice-pw")
      assert.same({ 503, "ldap_unavailable" }, { st, e.error.code })
    end)
    srv:cleanup()
    srv = keep
    assert(ok, err)
  end)

  describe("obleth.ldap (host/ldap.c)", function()
    local ldap = require "obleth.ldap"
    local loop = require "obleth.loop"

    it("binds, searches, and answers a wrong password with its own code", function()
      local c = assert(ldap.open(URL, { timeout = 10 }))
      local ok, err = c:bind("uid=alice,ou=people," .. SUFFIX, "nope")
      assert.is_nil(ok)
      assert.same({ "invalid_credentials", 49 }, { err.code, err.ldap_code })
      assert.is_true(c:bind("uid=alice,ou=people," .. SUFFIX, "alice-pw"))
      local es = assert(c:search("ou=people," .. SUFFIX, "one", "(objectClass=inetOrgPerson)", { "uid" }))
      local uids = {}
      for _, e in ipairs(es) do uids[#uids + 1] = e.attrs.uid[1] end
      table.sort(uids)
      assert.same({ "alice", "bob" }, uids)
      assert.same({}, assert(c:search("ou=nowhere," .. SUFFIX, "sub", "(uid=alice)")))
      assert.equal(1, #assert(c:search("ou=people," .. SUFFIX, "one", "(uid=*)", nil, { limit = 1 })))
      local _, ferr = c:search(SUFFIX, "sub", "(uid=")
      assert.equal("invalid", ferr.code)
      c:close()
      c:close()
      assert.has_error(function() c:bind("x", "y") end)
    end)

    it("says connection when nobody listens, and times out on a server that never answers", function()
      local _, err = ldap.open("ldap://127.0.0.1:" .. (PORT + 1))
      assert.equal("connection", err.code)
      local _, uerr = ldap.open("ldapi:///")
      assert.equal("invalid", uerr.code)
      -- a name that does not resolve, and a connect refused at once: nil and the error, as any other
      for _, u in ipairs { "ldap://ldap.nonexistent.invalid", "ldap://255.255.255.255:389" } do
        local c, e = ldap.open(u, { timeout = 2 })
        assert.is_nil(c, u)
        assert.equal("connection", e.code, u)
      end
      -- a listener that accepts (the kernel does) and never reads
      local sink = assert(require("obleth.http").server { host = "127.0.0.1", port = 0, handler = function() end,
        header_timeout = 60 })
      local c = assert(ldap.open("ldap://127.0.0.1:" .. sink:port(), { timeout = 0.3 }))
      local ok, terr = c:bind("cn=x", "y")
      assert.is_nil(ok)
      assert.equal("timeout", terr.code)
      -- a task waiting on the connection is told when it is closed
      local got
      loop.spawn(function() got = select(2, c:search(SUFFIX, "sub", "(uid=alice)")) end)
      c:close()
      util.wait_until(function() return got ~= nil end, 10, "the waiting task to be resumed")
      assert.equal("closed", got.code)
      sink:close()
    end)
  end)
end)
