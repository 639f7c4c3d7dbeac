-- The directory's settings from the environment (obleth.api.ldap.from_env; docs/access.md "LDAP").
local ldap = require "obleth.api.ldap"

local function env(t) return function(k) return t[k] end end

describe("obleth.api.ldap.from_env", function()
  it("is nil without OBLETH_LDAP_URL", function()
    assert.is_nil((ldap.from_env(env {})))
    assert.is_nil((ldap.from_env(env { OBLETH_LDAP_URL = "" })))
  end)

  it("takes a DN template or a search base, with the default filters", function()
    local c = assert(ldap.from_env(env { OBLETH_LDAP_URL = "ldap://10.0.0.7",
      OBLETH_LDAP_USER_DN = "uid={user},ou=people,dc=x" }))
    assert.same({ "ldap://10.0.0.7", "uid={user},ou=people,dc=x", 10 }, { c.url, c.user_dn, c.timeout })
    local s = assert(ldap.from_env(env { OBLETH_LDAP_URL = "ldap://10.0.0.7:3389/", OBLETH_LDAP_USER_BASE = "ou=p,dc=x",
      OBLETH_LDAP_GROUP_BASE = "ou=g,dc=x" }))
    assert.same({ "(uid={user})", "(|(member={dn})(uniqueMember={dn})(memberUid={user}))" },
      { s.user_filter, s.group_filter })
  end)

  it("refuses what would not work, naming the variable", function()
    local cases = {
      { { OBLETH_LDAP_URL = "ldapi://h", OBLETH_LDAP_USER_BASE = "b" }, "OBLETH_LDAP_URL" },
      { { OBLETH_LDAP_URL = "ldaps://h", OBLETH_LDAP_USER_BASE = "b", OBLETH_LDAP_STARTTLS = "1" }, "OBLETH_LDAP_STARTTLS" },
      { { OBLETH_LDAP_URL = "ldap://h", OBLETH_LDAP_USER_BASE = "b", OBLETH_LDAP_STARTTLS = "on" }, "OBLETH_LDAP_STARTTLS" },
      { { OBLETH_LDAP_URL = "ldap://h", OBLETH_LDAP_USER_BASE = "b", OBLETH_LDAP_CA_FILE = "/etc/hostname" },
        "OBLETH_LDAP_CA_FILE" }, -- a CA file without TLS
      { { OBLETH_LDAP_URL = "ldaps://h", OBLETH_LDAP_USER_BASE = "b", OBLETH_LDAP_CA_FILE = "/nonexistent/ca.pem" },
        "OBLETH_LDAP_CA_FILE" },
      { { OBLETH_LDAP_URL = "ldap://h", OBLETH_LDAP_USER_BASE = "b", OBLETH_LDAP_GROUP_SEARCH_AS = "bind_dn" },
        "OBLETH_LDAP_GROUP_SEARCH_AS" }, -- a service bind without its DN
      { { OBLETH_LDAP_URL = "ldap://h", OBLETH_LDAP_USER_BASE = "b", OBLETH_LDAP_GROUP_SEARCH_AS = "admin" },
        "OBLETH_LDAP_GROUP_SEARCH_AS" },
      { { OBLETH_LDAP_URL = "ldap://h" }, "OBLETH_LDAP_USER_DN" },
      { { OBLETH_LDAP_URL = "ldap://h", OBLETH_LDAP_USER_DN = "uid=alice,dc=x" }, "OBLETH_LDAP_USER_DN" },
      { { OBLETH_LDAP_URL = "ldap://h", OBLETH_LDAP_USER_BASE = "b", OBLETH_LDAP_USER_FILTER = "(uid=x)" },
        "OBLETH_LDAP_USER_FILTER" },
      { { OBLETH_LDAP_URL = "ldap://h", OBLETH_LDAP_USER_BASE = "b", OBLETH_LDAP_BIND_DN = "cn=s" },
        "OBLETH_LDAP_BIND_PASSWORD_FILE" },
      { { OBLETH_LDAP_URL = "ldap://h", OBLETH_LDAP_USER_BASE = "b", OBLETH_LDAP_BIND_DN = "cn=s",
        OBLETH_LDAP_BIND_PASSWORD_FILE = "/nonexistent/pw" }, "OBLETH_LDAP_BIND_PASSWORD_FILE" },
      { { OBLETH_LDAP_URL = "ldap://h", OBLETH_LDAP_USER_BASE = "b", OBLETH_LDAP_TIMEOUT = "0" }, "OBLETH_LDAP_TIMEOUT" },
      -- a URL that names more than a host and a port (a password in it would reach the log)
      { { OBLETH_LDAP_URL = "ldap://u:pw@127.0.0.1", OBLETH_LDAP_USER_BASE = "b" }, "OBLETH_LDAP_URL" },
      { { OBLETH_LDAP_URL = "ldap://host name", OBLETH_LDAP_USER_BASE = "b" }, "OBLETH_LDAP_URL" },
      { { OBLETH_LDAP_URL = "ldap://127.0.0.1,127.0.0.2", OBLETH_LDAP_USER_BASE = "b" }, "OBLETH_LDAP_URL" },
      { { OBLETH_LDAP_URL = "ldaps://127.0.0.1:99999", OBLETH_LDAP_USER_BASE = "b" }, "OBLETH_LDAP_URL" },
      { { OBLETH_LDAP_URL = "ldap://127.0.0.1:abc", OBLETH_LDAP_USER_BASE = "b" }, "OBLETH_LDAP_URL" },
      { { OBLETH_LDAP_URL = "ldap://h?x", OBLETH_LDAP_USER_BASE = "b" }, "OBLETH_LDAP_URL" },
      -- a password file that never ends
      { { OBLETH_LDAP_URL = "ldap://h", OBLETH_LDAP_USER_BASE = "b", OBLETH_LDAP_BIND_DN = "cn=s",
        OBLETH_LDAP_BIND_PASSWORD_FILE = "/dev/zero" }, "OBLETH_LDAP_BIND_PASSWORD_FILE" },
    }
    for _, c in ipairs(cases) do
      local cfg, err = ldap.from_env(env(c[1]))
      assert.is_nil(cfg, c[1].OBLETH_LDAP_URL)
      assert.same({ "invalid", c[2] }, { err.code, err.field })
      assert.falsy(err.message:find("pw@", 1, true))
    end
    assert.truthy(ldap.from_env(env { OBLETH_LDAP_URL = "ldap://[::1]:389", OBLETH_LDAP_USER_BASE = "b" }))
    assert.truthy(ldap.from_env(env { OBLETH_LDAP_URL = "ldaps://ldap-1.example.org:636/", OBLETH_LDAP_USER_BASE = "b" }))
  end)

  it("reads the bind DN's password from its file, the line's end dropped", function()
    local p = os.tmpname()
    local f = assert(io.open(p, "w"))
    f:write("s3cret-pw\n")
    f:close()
    local c = assert(ldap.from_env(env { OBLETH_LDAP_URL = "ldap://h", OBLETH_LDAP_USER_BASE = "b",
      OBLETH_LDAP_BIND_DN = "cn=s", OBLETH_LDAP_BIND_PASSWORD_FILE = p }))
    os.remove(p)
    assert.equal("s3cret-pw", c.bind_password)
  end)
end)
