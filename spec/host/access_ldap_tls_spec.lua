-- LDAP over TLS and a service bind for the group search (docs/access.md "LDAP"): Debian's slapd
-- started here on loopback with a CA and a server certificate this spec makes with openssl (the
-- certificate names IP 127.0.0.1 only), listening for ldap:// (StartTLS offered) and ldaps:// on
-- 127.0.0.1, and ldaps:// on 127.0.0.2 too (the same certificate: a name that does not match).
-- The directory's ACLs hide the groups from users: only the service account cn=reader reads them.
-- obleth serve signs alice in over ldaps:// and over StartTLS, and refuses a server whose
-- certificate chains to another CA, or whose certificate names another address, saying why.
local has_host = pcall(require, "obleth.http")

describe("access: LDAP over TLS against slapd", function()
  if not has_host then
    it("needs the obleth runtime", function() pending("obleth.http is missing: run under build/obleth lua") end)
    return
  end
  local slapd = require "spec.support.slapd"
  for _, f in ipairs { slapd.BIN, "/usr/bin/openssl" } do
    local fh = io.open(f)
    if not fh then
      it("needs slapd and openssl", function() pending("no " .. f .. " (scripts/deps.sh all installs it)") end)
      return
    end
    fh:close()
  end
  local http = require "obleth.http"
  local cjson = require "cjson"
  local util = require "spec.support.util"
  local server = require "spec.support.server"
  local ldap = require "obleth.ldap"
  local loop = require "obleth.loop"

  local SUFFIX = slapd.SUFFIX
  local dir, prefix, PORT, TLS_PORT, URL, LDAPS
  local srvs = {}

  local function write(path, text)
    local f = assert(io.open(path, "w"))
    f:write(text)
    f:close()
  end

  local free_port = require("spec.support.util").free_port

  local function sh(cmd)
    local code, out = util.sh(cmd .. " 2>&1")
    assert(code == 0, cmd .. ": " .. tostring(out))
  end

  -- obleth serve with this directory and `env` added; stopped in teardown
  local function start(env)
    local e = { OBLETH_LDAP_USER_BASE = "ou=people," .. SUFFIX, OBLETH_LDAP_GROUP_BASE = "ou=groups," .. SUFFIX,
      OBLETH_POLICY_DIR = prefix .. "/policy.d" }
    for k, v in pairs(env) do e[k] = v end
    local s = server.start { env = e }
    srvs[#srvs + 1] = s
    return s
  end

  local function call(srv, method, path, body, cookie)
    local h = { ["X-Requested-With"] = "obleth", Cookie = cookie }
    if body then h["Content-Type"] = "application/json" end
    local r = assert(http.request { url = srv.base .. path, method = method, headers = h,
      body = body and cjson.encode(body), timeout = 30 })
    local ok, doc = pcall(cjson.decode, r.body)
    return r.status, ok and doc or nil, r.headers
  end

  -- sign in; answers the status, the session (user, role, groups) or the error body
  local function signin(srv, user, password)
    local st, doc, hs = call(srv, "POST", "/api/v1/session", { user = user, password = password })
    if st ~= 204 then return st, doc end
    local cookie = (hs["set-cookie"] or hs["Set-Cookie"]):match("^(obleth_session=%x+)")
    local _, s = call(srv, "GET", "/api/v1/session", nil, cookie)
    return st, s
  end

  setup(function()
    dir = slapd.new()
    prefix = dir.prefix
    PORT, TLS_PORT = free_port(), free_port()
    URL, LDAPS = "ldap://127.0.0.1:" .. PORT, "ldaps://127.0.0.1:" .. TLS_PORT
    local p = util.shq(prefix)
    -- the site's CA, another CA, and slapd's certificate (signed by the first, for IP 127.0.0.1 only)
    write(prefix .. "/san.ext", "subjectAltName = IP:127.0.0.1\nbasicConstraints = CA:FALSE\n")
    for _, ca in ipairs { "ca", "other-ca" } do
      sh(("cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 "
        .. "-subj /CN=obleth-spec-%s -keyout %s.key -out %s.pem"):format(p, ca, ca, ca))
    end
    sh(("cd %s && openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=ldap-spec "
      .. "-keyout server.key -out server.csr && openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key "
      .. "-CAcreateserial -days 2 -extfile san.ext -out server.pem && chmod 644 server.key"):format(p))
    dir:start { urls = { URL, LDAPS, "ldaps://127.0.0.2:" .. TLS_PORT }, conf = ([[
TLSCACertificateFile PREFIX/ca.pem
TLSCertificateFile PREFIX/server.pem
TLSCertificateKeyFile PREFIX/server.key
]]):gsub("PREFIX", prefix), acl = ([[
access to dn.subtree="ou=groups,SUFFIX" by dn.exact="cn=reader,SUFFIX" read by * none
]]):gsub("SUFFIX", SUFFIX), ldif = ([[
dn: cn=reader,SUFFIX
objectClass: organizationalRole
objectClass: simpleSecurityObject
cn: reader
userPassword: reader-secret
]]) }
    write(prefix .. "/reader-password", "reader-secret\n")
  end)

  teardown(function()
    for _, s in ipairs(srvs) do s:cleanup() end
    if dir then dir:stop() end
  end)

  local function service_bind(env)
    env.OBLETH_LDAP_BIND_DN = "cn=reader," .. SUFFIX
    env.OBLETH_LDAP_BIND_PASSWORD_FILE = prefix .. "/reader-password"
    env.OBLETH_LDAP_GROUP_SEARCH_AS = "bind_dn"
    return env
  end

  it("signs alice in over ldaps:// with the site's CA, her groups read by the service bind", function()
    local srv = start(service_bind { OBLETH_LDAP_URL = LDAPS, OBLETH_LDAP_CA_FILE = prefix .. "/ca.pem" })
    local st, s = signin(srv, "alice", "alice-pw")
    assert.equal(204, st)
    assert.same({ "alice", "operator", { "hpc-ops" } }, { s.user, s.role, s.groups })
    assert.equal(401, (signin(srv, "alice", "wrong")))
    assert.falsy(srv:log():find("reader-secret", 1, true))
    assert.falsy(srv:log():find("alice-pw", 1, true))
  end)

  it("signs alice in over StartTLS on ldap://", function()
    local srv = start(service_bind { OBLETH_LDAP_URL = URL, OBLETH_LDAP_STARTTLS = "1",
      OBLETH_LDAP_CA_FILE = prefix .. "/ca.pem" })
    local st, s = signin(srv, "alice", "alice-pw")
    assert.equal(204, st)
    assert.same({ "alice", "operator", { "hpc-ops" } }, { s.user, s.role, s.groups })
  end)

  it("with the groups read by the user's own bind, the directory hides them: alice is a viewer", function()
    -- what the service bind is for: without it (the default) this directory shows alice no group
    local srv = start { OBLETH_LDAP_URL = URL, OBLETH_LDAP_STARTTLS = "1", OBLETH_LDAP_CA_FILE = prefix .. "/ca.pem" }
    local st, s = signin(srv, "alice", "alice-pw")
    assert.equal(204, st)
    assert.same({ "alice", "viewer", {} }, { s.user, s.role, s.groups })
  end)

  it("refuses a server whose certificate chains to another CA, on ldaps:// and StartTLS, saying why", function()
    for _, env in ipairs { { OBLETH_LDAP_URL = LDAPS }, { OBLETH_LDAP_URL = URL, OBLETH_LDAP_STARTTLS = "1" } } do
      env.OBLETH_LDAP_CA_FILE = prefix .. "/other-ca.pem"
      local srv = start(env)
      local st, e = signin(srv, "alice", "alice-pw")
      assert.same({ 503, "ldap_unavailable" }, { st, e.error.code })
      -- slapd (GnuTLS) sends its CA along: OpenSSL's words for a chain ending in a CA not trusted here
      assert.matches("certificate was refused: self-signed certificate in certificate chain (CA file "
        .. prefix .. "/other-ca.pem)", e.error.message, 1, true)
      assert.truthy(srv:log():find("self-signed certificate in certificate chain", 1, true))
      assert.falsy(srv:log():find("alice-pw", 1, true))
    end
  end)

  it("refuses a certificate that does not name the address it was reached at", function()
    local srv = start { OBLETH_LDAP_URL = "ldaps://127.0.0.2:" .. TLS_PORT, OBLETH_LDAP_CA_FILE = prefix .. "/ca.pem" }
    local st, e = signin(srv, "alice", "alice-pw")
    assert.same({ 503, "ldap_unavailable" }, { st, e.error.code })
    assert.matches("certificate was refused: IP address mismatch", e.error.message, 1, true)
  end)

  it("refuses a server the system's CAs do not vouch for (the certificate is verified by default)", function()
    local srv = start { OBLETH_LDAP_URL = LDAPS }
    local st, e = signin(srv, "alice", "alice-pw")
    assert.same({ 503, "ldap_unavailable" }, { st, e.error.code })
    assert.matches("certificate was refused: self-signed certificate in certificate chain (the system's CAs)",
      e.error.message, 1, true)
  end)

  it("names the setting that is wrong at start", function()
    local from_env = require("obleth.api.ldap").from_env
    local function err(env)
      local cfg, e = from_env(function(k) return env[k] end)
      assert.is_nil(cfg)
      return e.field, e.message
    end
    local base = { OBLETH_LDAP_USER_BASE = "ou=people," .. SUFFIX }
    local function with(t)
      local o = {}
      for k, v in pairs(base) do o[k] = v end
      for k, v in pairs(t) do o[k] = v end
      return o
    end
    assert.equal("OBLETH_LDAP_CA_FILE", (err(with { OBLETH_LDAP_URL = URL, OBLETH_LDAP_CA_FILE = prefix .. "/ca.pem" })))
    assert.equal("OBLETH_LDAP_CA_FILE", (err(with { OBLETH_LDAP_URL = LDAPS, OBLETH_LDAP_CA_FILE = prefix .. "/nope" })))
    assert.equal("OBLETH_LDAP_CA_FILE", (err(with { OBLETH_LDAP_URL = LDAPS, OBLETH_LDAP_CA_FILE = prefix .. "/san.ext" })))
    assert.equal("OBLETH_LDAP_STARTTLS", (err(with { OBLETH_LDAP_URL = LDAPS, OBLETH_LDAP_STARTTLS = "1" })))
    assert.equal("OBLETH_LDAP_STARTTLS", (err(with { OBLETH_LDAP_URL = URL, OBLETH_LDAP_STARTTLS = "maybe" })))
    assert.equal("OBLETH_LDAP_GROUP_SEARCH_AS", (err(with { OBLETH_LDAP_URL = URL, OBLETH_LDAP_GROUP_SEARCH_AS = "bind_dn" })))
    assert.equal("OBLETH_LDAP_GROUP_SEARCH_AS", (err(with { OBLETH_LDAP_URL = URL, OBLETH_LDAP_GROUP_SEARCH_AS = "root" })))
    assert.equal("OBLETH_LDAP_URL", (err(with { OBLETH_LDAP_URL = "ldapi://x" })))
    local cfg = assert(from_env(function(k) return with { OBLETH_LDAP_URL = LDAPS,
      OBLETH_LDAP_CA_FILE = prefix .. "/ca.pem" }[k] end))
    assert.same({ LDAPS, prefix .. "/ca.pem", "user" }, { cfg.url, cfg.ca_file, cfg.group_search_as })
  end)

  describe("obleth.ldap over TLS (host/ldap.c)", function()
    it("binds and searches over ldaps:// and StartTLS, the TLS layer under libldap for every operation", function()
      for _, how in ipairs { { LDAPS, {} }, { URL, { starttls = true } } } do
        local opts = how[2]
        opts.ca_file, opts.timeout = prefix .. "/ca.pem", 10
        local c = assert(ldap.open(how[1], opts))
        assert.is_true(c:bind("cn=reader," .. SUFFIX, "reader-secret"))
        local es = assert(c:search("ou=groups," .. SUFFIX, "sub", "(member=uid=alice,ou=people," .. SUFFIX .. ")",
          { "cn" }))
        assert.same({ "hpc-ops" }, es[1].attrs.cn)
        local _, werr = c:bind("uid=alice,ou=people," .. SUFFIX, "nope")
        assert.equal("invalid_credentials", werr.code)
        -- a search with many entries in more than one TLS record: every one arrives
        assert.is_true(c:bind("cn=reader," .. SUFFIX, "reader-secret"))
        local all = assert(c:search(SUFFIX, "sub", "(objectClass=*)", nil, { limit = 1000 }))
        assert.equal(6, #all)
        c:close()
      end
      local _, e = ldap.open(LDAPS, { starttls = true })
      assert.equal("invalid", e.code)
      local _, fe = ldap.open(LDAPS, { ca_file = prefix .. "/san.ext" })
      assert.same({ "invalid", true }, { fe.code, fe.message:find("cannot read the CA file", 1, true) ~= nil })
    end)

    it("the loop keeps turning during a handshake with a server that never answers, until the deadline", function()
      -- a listener that never accepts: the kernel completes the connect, nobody reads or answers
      local sink_fh = assert(io.popen("exec python3 -c " .. util.shq("import os, socket, time\n"
        .. "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(8)\n"
        .. "print(os.getpid(), s.getsockname()[1], flush=True); time.sleep(120)")))
      local sink_pid, sink_port = assert(sink_fh:read("l")):match("^(%d+) (%d+)$")
      local sink = { port = function() return tonumber(sink_port) end, close = function()
        os.execute("kill " .. sink_pid)
        sink_fh:close()
      end }
      local ticks, done = 0, false
      loop.spawn(function()
        while not done do
          ticks = ticks + 1
          loop.sleep(0.02)
        end
      end)
      local _, err = ldap.open("ldaps://127.0.0.1:" .. sink:port(), { timeout = 0.5, ca_file = prefix .. "/ca.pem" })
      done = true
      assert.equal("timeout", err.code)
      assert.matches("TLS handshake", err.message, 1, true)
      assert.is_true(ticks >= 2) -- another task ran while this one waited
      -- and StartTLS asked of a server that never answers
      local _, serr = ldap.open("ldap://127.0.0.1:" .. sink:port(), { timeout = 0.3, starttls = true })
      assert.equal("timeout", serr.code)
      sink:close()
    end)
  end)
end)
