-- Bad input at the access and audit surfaces (the break review's F1, F3, F8, F10): a real `obleth
-- serve` over real sockets, a trusted proxy believed from loopback, requests written byte for byte
-- by spec/support/raw_client.py where a header must come twice.
local server = require "spec.support.server"
local util = require "spec.support.util"
local cjson = require "cjson"

describe("access and audit under bad input", function()
  local srv, dir
  local H = { ["X-Requested-With"] = "obleth" }

  setup(function()
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir))
    local f = assert(io.open(dir .. "/access.lua", "w"))
    f:write('return { DEFAULTS = { group_roles = { ["hpc-admins"] = "admin", ["ml-ops"] = "operator" } } }\n')
    f:close()
    srv = server.start { env = { OBLETH_AUTH_PROXY_HEADER = "X-Remote-User",
      OBLETH_AUTH_PROXY_GROUPS_HEADER = "X-Remote-Groups", OBLETH_AUTH_PROXY_FROM = "127.0.0.1/32",
      OBLETH_POLICY_DIR = dir } }
  end)
  teardown(function()
    if srv then srv:stop() srv:cleanup() end
    os.execute("rm -rf " .. dir)
  end)

  local function admin(method, path, body) return srv:request(method, path, body) end
  local function as(user, groups)
    return { Authorization = false, ["X-Remote-User"] = user, ["X-Remote-Groups"] = groups,
      ["X-Requested-With"] = H["X-Requested-With"] }
  end

  -- raw bytes to the server; the status line and body that came back
  local function raw(bytes)
    local tmp = os.tmpname()
    local fh = assert(io.open(tmp, "wb"))
    fh:write(bytes)
    fh:close()
    local p = assert(io.popen(("python3 %s %d 3 <%s"):format(util.shq(util.root() .. "/spec/support/raw_client.py"),
      srv.port, util.shq(tmp))))
    local out = p:read("a")
    p:close()
    os.remove(tmp)
    return tonumber(out:match("HTTP/1%.[01] (%d%d%d)")), out:match("\r\n\r\n(.*)$")
  end

  local function session(extra)
    return "GET /api/v1/session HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" .. extra .. "\r\n"
  end

  it("a user or groups header that comes twice is refused with 400 naming it, and logged, never merged", function()
    local st, body = raw(session("X-Remote-User: alice\r\nX-Remote-User: bob\r\n"))
    assert.equal(400, st)
    local e = cjson.decode(body:match("{.*}")).error
    assert.same({ "proxy_header_repeated", "x-remote-user" }, { e.code, e.field })
    -- the escalation: a client-sent admin group appended to the proxy's own
    st, body = raw(session("X-Remote-User: mallory\r\nX-Remote-Groups: hpc-admins\r\nX-Remote-Groups: students\r\n"))
    assert.equal(400, st)
    assert.equal("x-remote-groups", cjson.decode(body:match("{.*}")).error.field)
    assert.matches("event=auth_proxy_header_ignored[^\n]*reason=repeated", srv:log())
    -- once each: believed
    st = raw(session("X-Remote-User: mallory\r\nX-Remote-Groups: students\r\n"))
    assert.equal(200, st)
  end)

  it("the admin token's actor is no user name: a proxy user cannot be taken for it", function()
    local _, s = admin("GET", "/api/v1/session")
    assert.equal("token:admin", s.actor)
    local st, e = srv:request("GET", "/api/v1/session", nil, as("token:admin"))
    assert.equal(400, st)
    assert.equal("proxy_user_invalid", e.error.code)
    local _, s2 = srv:request("GET", "/api/v1/session", nil, as("admin-token"))
    assert.same({ "admin-token", "viewer" }, { s2.actor, s2.role })
    assert.is_true(s2.actor ~= s.actor)
  end)

  it("the audit trail keeps no secret: schema secrets, environment values, YAML text, deep nesting", function()
    local st = admin("PUT", "/api/v1/settings/slurm", { url = "https://slurm.example:6820", token_source = "command",
      token_command = "echo eyJSECRETCMD", token = "eyJTOKEN", defaults = { environment = {
        DATABASE_URL = "postgres://u:PGPASSWORD1@db/x", HF_AUTH = "hf_ENVSECRET" } } })
    assert.equal(200, st)
    -- read-only POSTs are not writes: not recorded
    local cst = admin("POST", "/api/v1/deployments/check-yaml",
      { yaml = "hf_token: hf_SECRETYAML123\nenvironment:\n  HF_TOKEN: hf_SECRETENV\n" })
    assert.is_true(cst >= 200 and cst < 300, "check-yaml answered " .. tostring(cst))
    local deep = { token = "DEEPSECRET9" }
    for _ = 1, 12 do deep = { a = deep } end
    assert.equal(201, (admin("POST", "/api/v1/models", { name = "deep-one", description = "d" })))
    local _, a = srv:request("GET", "/api/v1/audit", nil, as("viewer-vic"))
    local text = cjson.encode(a)
    for _, secret in ipairs({ "eyJSECRETCMD", "eyJTOKEN", "PGPASSWORD1", "hf_ENVSECRET", "hf_SECRETYAML123",
      "hf_SECRETENV" }) do
      assert.is_nil(text:find(secret, 1, true), secret .. " is in the audit trail")
    end
    for _, e in ipairs(a.entries) do
      assert.is_true(e.target ~= "/api/v1/deployments/check-yaml", "a check is not a write")
    end
    local redact = require("obleth.api.audit").redact
    assert.is_nil(cjson.encode(redact(deep)):find("DEEPSECRET9", 1, true))
    local y = redact { yaml = "hf_token: hf_Y\nenvironment:\n  A: hf_Z\nreplicas: 2\n" }
    assert.is_nil(cjson.encode(y):find("hf_[YZ]"))
  end)

  it("a viewer's GET /settings/slurm shows no secret; an admin's still shows what it edits", function()
    local _, v = srv:request("GET", "/api/v1/settings/slurm", nil, as("viewer-vic"))
    assert.equal("********", v.token_command)
    assert.same({ DATABASE_URL = "********", HF_AUTH = "********" }, v.defaults.environment)
    local _, a = admin("GET", "/api/v1/settings/slurm")
    assert.equal("echo eyJSECRETCMD", a.token_command)
    assert.equal("hf_ENVSECRET", a.defaults.environment.HF_AUTH)
  end)

  it("a write whose summary is cut at 4 KiB is recorded, cut on a character boundary", function()
    local st, m = admin("POST", "/api/v1/models", { name = "euro" })
    assert.equal(201, st)
    local d = "x" .. string.rep("€", 1360)
    assert.equal(200, (admin("PATCH", ("/api/v1/models/%d"):format(m.id), { description = d, name = "euro-2" })))
    local raw_st, body = raw(("GET /api/v1/audit?model=%d&limit=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
      .. "Authorization: Bearer %s\r\n\r\n"):format(m.id, srv.token))
    assert.equal(200, raw_st)
    assert.truthy(utf8.len(body), "the audit answer is valid UTF-8")
    local e = cjson.decode(body:match("{.*}")).entries[1]
    assert.same({ "PATCH", true }, { e.method, e.summary.cut })
    assert.truthy(utf8.len(e.summary.text))
  end)

  it("edges: ?since= beyond the range is a 400 naming it; a key named empty is a 400", function()
    local st, e = admin("GET", "/api/v1/audit?since=9223372036854775808")
    assert.equal(400, st)
    assert.equal("since", e.error.field)
    st, e = admin("POST", "/api/v1/keys", { name = "" })
    assert.equal(400, st)
    assert.equal("name", e.error.field)
    local k
    st, k = admin("POST", "/api/v1/keys", { owner = cjson.null })
    assert.equal(201, st)
    assert.equal("key " .. k.prefix, k.name)
  end)
end)

describe("obleth.util.text.cut_utf8", function()
  local cut = require("obleth.util.text").cut_utf8
  it("never cuts a character in two", function()
    assert.same({ "x", true }, { cut("x€", 3) })
    assert.same({ "x€", true }, { cut("x€y", 4) })
    assert.same({ "ab", false }, { cut("ab", 4) })
    assert.same({ "", true }, { cut("€", 2) })
  end)
end)
