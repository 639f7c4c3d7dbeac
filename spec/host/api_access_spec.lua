-- Roles as Lua policy and trusted-proxy identities (docs/access.md): obleth serve's application on
-- a real port, users named by a proxy header sent from loopback, roles from policy.d/access.lua.
local has_host = pcall(require, "obleth.http")

describe("access: roles and a trusted proxy", function()
  if not has_host then
    it("needs the obleth runtime", function() pending("obleth.http is missing: run under build/obleth lua") end)
    return
  end
  local http = require "obleth.http"
  local cjson = require "cjson"
  local api = require "obleth.api"
  local access = require "obleth.api.access"

  local ADMIN = "admin-token-for-access-spec-0123"
  local dir = os.tmpname()
  local servers, stores = {}, {}
  local lines = {}
  local log = setmetatable({ warn = function(ev, f) lines[#lines + 1] = { ev = ev, f = f } end },
    { __index = require("obleth.log") })

  -- an app whose trusted proxy is believed from `from`; roles from a policy.d file in `dir`
  local function start(from)
    local store = assert(require("obleth.store").open(":memory:"))
    local proxy = assert(access.proxy_from_env(function(k)
      return ({ OBLETH_AUTH_PROXY_HEADER = "X-Remote-User", OBLETH_AUTH_PROXY_GROUPS_HEADER = "X-Remote-Groups",
        OBLETH_AUTH_PROXY_FROM = from })[k]
    end))
    local set = require("obleth.policy").new { dir = dir, names = { "access" } }
    local process = require("obleth.serve").new { store = store, admin_token = ADMIN, auth_proxy = proxy, log = log,
      access_policy = set.get("access") }
    local srv = assert(http.server { host = "127.0.0.1", port = 0, handler = process:handler() })
    servers[#servers + 1], stores[#stores + 1] = srv, store
    return "http://127.0.0.1:" .. srv:port(), store
  end

  local base
  local function call(method, path, body, headers)
    local h = { ["X-Requested-With"] = "obleth" }
    for k, v in pairs(headers or {}) do h[k] = v end
    for k, v in pairs(h) do if v == false or k == "base" then h[k] = nil end end
    if body then h["Content-Type"] = "application/json" end
    local r = assert(http.request { url = (headers and headers.base or base) .. path, method = method, headers = h,
      body = body and cjson.encode(body), timeout = 10 })
    return r.status, r.body ~= "" and cjson.decode(r.body) or nil
  end
  local function as(user, groups) return { ["X-Remote-User"] = user, ["X-Remote-Groups"] = groups } end

  setup(function()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir))
    local f = assert(io.open(dir .. "/access.lua", "w"))
    f:write('return { DEFAULTS = { group_roles = { ["ml-ops"] = "operator", ["hpc-admins"] = "admin" } } }\n')
    f:close()
    base = start("127.0.0.1/32, ::1")
  end)
  teardown(function()
    for _, s in ipairs(servers) do s:close() end
    for _, s in ipairs(stores) do s:close() end
    os.execute("rm -rf " .. dir)
  end)

  it("a user in a group mapped to operator launches and manages deployments, and is refused the keys", function()
    local alice = as("alice", "staff, ml-ops")
    local st, m = call("POST", "/api/v1/models", { name = "alice-model" }, alice)
    assert.equal(201, st)
    assert.equal(200, (call("PATCH", "/api/v1/models/" .. ("%d"):format(m.id), { description = "x" }, alice)))
    local st2, e = call("POST", "/api/v1/keys", { name = "k" }, alice)
    assert.equal(403, st2)
    assert.same({ "forbidden", "keys.manage", "admin" }, { e.error.code, e.error.action, e.error.role })
    assert.equal("alice (role operator) may not keys.manage: that needs the admin role", e.error.message)
  end)

  it("a user with no mapped group is a viewer: sees the deployments, gets 403 on Launch naming the action", function()
    local bob = as("bob", nil)
    local st, doc = call("GET", "/api/v1/models", nil, bob)
    assert.equal(200, st)
    assert.is_true(#doc.models >= 0)
    local st2, e = call("POST", "/api/v1/deployments/launch", { recipe_id = "smoke-test", api_model_name = "b" }, bob)
    assert.equal(403, st2)
    assert.same({ "deployments.launch", "operator" }, { e.error.action, e.error.role })
    assert.truthy(e.error.message:find("deployments.launch", 1, true))
    -- the provisioner's snapshot carries secrets: not for a viewer
    assert.equal(403, (call("GET", "/api/v1/provisioner/snapshot", nil, bob)))
    assert.equal(403, (call("POST", "/api/v1/models", { name = "bob-model" }, bob)))
  end)

  it("says who is signed in, with the role and the actions it may take", function()
    local st, s = call("GET", "/api/v1/session", nil, as("alice", "ml-ops"))
    assert.equal(200, st)
    assert.same({ "alice", "operator", "proxy", "alice" }, { s.user, s.role, s.via, s.actor })
    local can = {}
    for _, a in ipairs(s.can) do can[a] = true end
    assert.is_true(can["deployments.launch"])
    assert.is_nil(can["keys.manage"])
    local _, b = call("GET", "/api/v1/session", nil, as("bob"))
    assert.equal("viewer", b.role)
    local _, h = call("GET", "/api/v1/session", nil, as("carol", "ml-ops;hpc-admins"))
    assert.equal("admin", h.role)
    -- the roles a personal token of theirs may have (the dashboard offers these)
    assert.same({ "viewer", "operator" }, s.token_roles)
    assert.same({ "viewer" }, b.token_roles)
    assert.same({ "viewer", "operator", "admin" }, h.token_roles)
    local _, adm = call("GET", "/api/v1/session", nil, { Authorization = "Bearer " .. ADMIN })
    assert.same({}, adm.token_roles)
  end)

  it("the admin token stays admin", function()
    local st, k = call("POST", "/api/v1/keys", { name = "script" }, { Authorization = "Bearer " .. ADMIN })
    assert.equal(201, st)
    assert.equal("token:admin", k.owner)
    local _, s = call("GET", "/api/v1/session", nil, { Authorization = "Bearer " .. ADMIN })
    assert.same({ "admin", "token" }, { s.role, s.via })
  end)

  it("a key made by a user is owned by that user", function()
    local _, k = call("POST", "/api/v1/keys", { name = "h" }, as("carol", "hpc-admins"))
    assert.equal("carol", k.owner)
  end)

  it("a write a proxy vouches for needs the dashboard's header, as a session's does", function()
    local st, e = call("POST", "/api/v1/models", { name = "csrf" }, { ["X-Requested-With"] = false,
      ["X-Remote-User"] = "alice", ["X-Remote-Groups"] = "ml-ops" })
    assert.equal(403, st)
    assert.equal("csrf", e.error.code)
  end)

  it("ignores and logs the header sent from an address not in OBLETH_AUTH_PROXY_FROM", function()
    local other = start("10.0.0.0/8")
    lines = {}
    local st = call("GET", "/api/v1/models", nil, { base = other, ["X-Remote-User"] = "alice",
      ["X-Remote-Groups"] = "hpc-admins" })
    assert.equal(401, st)
    assert.equal("auth_proxy_header_ignored", lines[1] and lines[1].ev)
    assert.equal("127.0.0.1", lines[1].f.remote_addr)
  end)

  it("the launch history and GET /api/v1/audit say who launched; a refused write is not recorded", function()
    local alice = as("alice", "ml-ops")
    local st, l = call("POST", "/api/v1/deployments/launch", { recipe_id = "smoke-test", api_model_name = "alice-launch",
      values = { replicas = 1, partition = "gpu", account = "research" } }, alice)
    assert.equal(201, st)
    assert.equal("alice", l.launch.created_by)
    local mid = ("%d"):format(l.launch.model_id)
    local _, hist = call("GET", "/api/v1/deployments/launches?model_id=" .. mid, nil, as("bob"))
    assert.equal("alice", hist.launches[1].created_by)
    assert.equal(403, (call("DELETE", "/api/v1/models/" .. mid, nil, as("bob"))))
    -- a viewer reads the trail
    local st2, a = call("GET", "/api/v1/audit?model=alice-launch", nil, as("bob"))
    assert.equal(200, st2)
    assert.equal(1, #a.entries) -- bob's refused delete is not there
    local e = a.entries[1]
    assert.same({ "alice", "proxy", "operator", "POST", "/api/v1/deployments/launch", 201 },
      { e.actor, e.via, e.role, e.method, e.target, e.status })
    assert.equal(l.launch.model_id, e.model_id)
    assert.equal("alice-launch", e.summary.api_model_name)
    assert.is_number(e.at)
    -- by user, by model id, since, limit
    local _, byu = call("GET", "/api/v1/audit?user=alice", nil, as("bob"))
    for _, x in ipairs(byu.entries) do assert.equal("alice", x.actor) end
    assert.is_true(#byu.entries >= 3) -- her model, its PATCH, the launch
    local _, bym = call("GET", "/api/v1/audit?model=" .. mid, nil, as("bob"))
    assert.equal(1, #bym.entries)
    -- a model named with digits is found by its name, not taken for the id those digits spell
    local st9, named = call("POST", "/api/v1/models", { name = tostring(mid) }, as("alice", "ml-ops"))
    assert.equal(201, st9)
    local _, byname = call("GET", "/api/v1/audit?model=" .. mid, nil, as("bob"))
    assert.equal(1, #byname.entries)
    assert.equal(named.id, byname.entries[1].model_id)
    local _, lim = call("GET", "/api/v1/audit?limit=1", nil, as("bob"))
    assert.equal(1, #lim.entries)
    local _, later = call("GET", "/api/v1/audit?since=" .. ("%d"):format(e.at + 3600), nil, as("bob"))
    assert.equal(0, #later.entries)
    assert.equal(400, (call("GET", "/api/v1/audit?limit=0", nil, as("bob"))))
  end)

  it("a viewer sees a managed spec's environment values masked; an operator sees them", function()
    local alice = as("alice", "ml-ops")
    local st, l = call("POST", "/api/v1/deployments/launch", { recipe_id = "smoke-test", api_model_name = "env-masked",
      values = { replicas = 1, partition = "gpu", account = "research" } }, alice)
    assert.equal(201, st)
    local mid = ("%d"):format(l.launch.model_id)
    local _, spec = call("GET", "/api/v1/models/" .. mid .. "/managed", nil, alice)
    local put = {}
    for k, v in pairs(spec) do
      if k ~= "scaling" and k ~= "generation" and k ~= "model_id" and k ~= "model_name" and k ~= "provision_error"
        and k ~= "updated_at" and k ~= "created_at" then put[k] = v end
    end
    put.environment = { WANDB_API_KEY = "wandb-secret-0123", MODE = "serve" }
    local st2, e2 = call("PUT", "/api/v1/models/" .. mid .. "/managed?check=false", put, alice)
    assert.equal(200, st2, e2 and e2.error and e2.error.message)
    -- the operator (who may edit it, and sends every value back) sees the values
    local _, mine = call("GET", "/api/v1/models/" .. mid .. "/managed", nil, alice)
    assert.same({ WANDB_API_KEY = "wandb-secret-0123", MODE = "serve" }, mine.environment)
    -- the viewer sees every value masked, by one model and in the list, but the rest of the spec
    local mask = require("obleth.deployment.input").MASK
    local st3, seen = call("GET", "/api/v1/models/" .. mid .. "/managed", nil, as("bob"))
    assert.equal(200, st3)
    assert.same({ WANDB_API_KEY = mask, MODE = mask }, seen.environment)
    assert.equal(spec.partition, seen.partition)
    local _, all = call("GET", "/api/v1/managed", nil, as("bob"))
    local found
    for _, m in ipairs(all.managed) do
      if m.model_id == l.launch.model_id then found = m end
      for _, v in pairs(m.environment or {}) do assert.equal(mask, v) end
    end
    assert.same({ WANDB_API_KEY = mask, MODE = mask }, found.environment)
    local body = select(2, call("GET", "/api/v1/managed", nil, as("bob")))
    assert.falsy(cjson.encode(body):find("wandb-secret", 1, true))
    local _, mine_all = call("GET", "/api/v1/managed", nil, alice)
    for _, m in ipairs(mine_all.managed) do
      if m.model_id == l.launch.model_id then assert.equal("wandb-secret-0123", m.environment.WANDB_API_KEY) end
    end
  end)

  it("the audit summary of a write never holds a secret", function()
    local st = call("PUT", "/api/v1/settings/router", { keyless = false }, { Authorization = "Bearer " .. ADMIN })
    assert.equal(200, st)
    local redact = require("obleth.api.audit").redact
    local r = redact { url = "http://x", token = "eyJsecret", defaults = { hf_token = "hf_abc", partition = "gpu" },
      api_key = "k", token_source = "static" }
    assert.same({ url = "http://x", token = "***", defaults = { hf_token = "***", partition = "gpu" }, api_key = "***",
      token_source = "static" }, r)
    local _, a = call("GET", "/api/v1/audit?user=token:admin&limit=1", nil, { Authorization = "Bearer " .. ADMIN })
    assert.same({ "token:admin", "token", "/api/v1/settings/router" }, { a.entries[1].actor, a.entries[1].via,
      a.entries[1].target })
  end)

  it("a personal access token acts as its user with a role no higher than theirs, until revoked", function()
    local alice = as("alice", "ml-ops")
    local st, t = call("POST", "/api/v1/tokens", { name = "ci" }, alice)
    assert.equal(201, st)
    assert.matches("^obp_%x+$", t.token)
    assert.same({ "alice", "operator", "ci" }, { t.user, t.role, t.name })
    local bearer = { Authorization = "Bearer " .. t.token, ["X-Requested-With"] = false }
    local _, s = call("GET", "/api/v1/session", nil, bearer)
    assert.same({ "alice", "operator", "pat" }, { s.user, s.role, s.via })
    assert.equal(201, (call("POST", "/api/v1/models", { name = "by-token" }, bearer)))
    local _, a = call("GET", "/api/v1/audit?user=alice&limit=1", nil, bearer)
    assert.same({ "alice", "pat", "/api/v1/models" }, { a.entries[1].actor, a.entries[1].via, a.entries[1].target })
    assert.equal(403, (call("POST", "/api/v1/keys", { name = "no" }, bearer)))
    -- a token limited below her role; none above it
    local _, v = call("POST", "/api/v1/tokens", { name = "read-only", role = "viewer" }, alice)
    assert.equal(403, (call("POST", "/api/v1/models", { name = "nope" },
      { Authorization = "Bearer " .. v.token, ["X-Requested-With"] = false })))
    local st3, e = call("POST", "/api/v1/tokens", { role = "admin" }, alice)
    assert.equal(403, st3)
    assert.equal("role", e.error.field)
    -- a field the body does not take is refused by name (an expiry would be believed and ignored)
    local st4, u = call("POST", "/api/v1/tokens", { name = "x", expires_at = 99999999999 }, alice)
    assert.same({ 400, "expires_at" }, { st4, u.error.field })
    -- a token cannot make another, which would outlive its revocation
    local st5, m = call("POST", "/api/v1/tokens", { name = "child" }, bearer)
    assert.equal(403, st5)
    assert.matches("cannot make another", m.error.message, 1, true)
    -- only its hash is kept; the list never holds a token
    local _, list = call("GET", "/api/v1/tokens", nil, alice)
    assert.equal(2, #list.tokens)
    for _, x in ipairs(list.tokens) do assert.is_nil(x.token) end
    assert.is_nil(stores[1]:personal_token_by_hash(t.token))
    -- bob can neither see nor revoke it
    local _, bl = call("GET", "/api/v1/tokens", nil, as("bob"))
    assert.equal(0, #bl.tokens)
    assert.equal(404, (call("DELETE", "/api/v1/tokens/" .. ("%d"):format(t.id), nil, as("bob"))))
    assert.equal(200, (call("DELETE", "/api/v1/tokens/" .. ("%d"):format(t.id), nil, alice)))
    assert.equal(401, (call("GET", "/api/v1/models", nil, bearer)))
    -- the admin token is no user
    assert.equal(409, (call("POST", "/api/v1/tokens", {}, { Authorization = "Bearer " .. ADMIN })))
  end)

  it("another user's tokens are listed and revoked only with users.manage (an admin's)", function()
    local alice, carol = as("alice", "ml-ops"), as("carol", "hpc-admins")
    local _, t = call("POST", "/api/v1/tokens", { name = "nightly" }, alice)
    local st, e = call("GET", "/api/v1/tokens?user=carol", nil, alice)
    assert.same({ 403, "user" }, { st, e.error.field })
    local st2, l = call("GET", "/api/v1/tokens?user=alice", nil, carol)
    assert.equal(200, st2)
    local names = {}
    for _, x in ipairs(l.tokens) do names[x.name] = x.user end
    assert.equal("alice", names.nightly)
    local _, own = call("GET", "/api/v1/tokens", nil, carol)
    for _, x in ipairs(own.tokens) do assert.equal("carol", x.user) end
    assert.equal(200, (call("DELETE", "/api/v1/tokens/" .. ("%d"):format(t.id), nil, carol)))
  end)

  it("every route declares an action the access policy knows", function()
    local pol = require "obleth.policy.access"
    for _, r in ipairs(api.load_routes()) do
      if not r.public then
        assert.is_string(pol.DEFAULTS.actions[r.action], r.method .. " " .. r.path .. ": " .. tostring(r.action))
      end
    end
  end)
end)
