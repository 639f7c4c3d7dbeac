-- Trusted-proxy identities behind Debian's nginx (docs/access.md): obleth serve with
-- OBLETH_AUTH_PROXY_HEADER, nginx in front on loopback naming the user it authenticated (basic
-- auth here, as auth_request or an SSO module would) and the user's groups. nginx connects from
-- 127.0.0.2, the only address OBLETH_AUTH_PROXY_FROM believes, so a client that reaches obleth
-- directly on 127.0.0.1 with the same header is not believed.
local has_host = pcall(require, "obleth.http")
local nginx_bin = "/usr/sbin/nginx"

describe("access behind nginx", function()
  if not has_host then
    it("needs the obleth runtime", function() pending("obleth.http is missing: run under build/obleth lua") end)
    return
  end
  local fh = io.open(nginx_bin)
  if not fh then
    it("needs nginx", function() pending("no " .. nginx_bin .. " (scripts/deps.sh all installs it)") end)
    return
  end
  fh:close()
  local http = require "obleth.http"
  local cjson = require "cjson"
  local util = require "spec.support.util"
  local server = require "spec.support.server"

  local prefix, srv, front
  -- "user:pw" in base64 (printf 'alice:pw' | base64)
  local BASIC = { alice = "YWxpY2U6cHc=", bob = "Ym9iOnB3" }

  local free_port = require("spec.support.util").free_port

  local function write(path, text)
    local f = assert(io.open(path, "w"))
    f:write(text)
    f:close()
  end

  local function nginx(args)
    return util.sh(("%s -p %s -c %s/nginx.conf -e %s/error.log %s"):format(nginx_bin, util.shq(prefix),
      util.shq(prefix), util.shq(prefix), args or ""))
  end

  -- a request through nginx as user (password "pw"), or straight to obleth (direct = true)
  local function call(method, path, body, o)
    o = o or {}
    local h = { ["X-Requested-With"] = "obleth" }
    if o.user then h.Authorization = "Basic " .. BASIC[o.user] end
    for k, v in pairs(o.headers or {}) do h[k] = v end
    if body then h["Content-Type"] = "application/json" end
    local r = assert(http.request { url = (o.direct and srv.base or front) .. path, method = method, headers = h,
      body = body and cjson.encode(body), timeout = 20 })
    local ok, doc = pcall(cjson.decode, r.body)
    return r.status, ok and server.ints(doc) or nil
  end

  setup(function()
    prefix = os.tmpname()
    os.remove(prefix)
    assert(os.execute("mkdir -p " .. util.shq(prefix .. "/policy.d") .. " " .. util.shq(prefix .. "/tmp")))
    write(prefix .. "/policy.d/access.lua", 'return { DEFAULTS = { group_roles = { ["ml-ops"] = "operator" } } }\n')
    srv = server.start { env = { OBLETH_AUTH_PROXY_HEADER = "X-Remote-User",
      OBLETH_AUTH_PROXY_GROUPS_HEADER = "X-Remote-Groups", OBLETH_AUTH_PROXY_FROM = "127.0.0.2",
      OBLETH_POLICY_DIR = prefix .. "/policy.d" } }
    write(prefix .. "/htpasswd", "alice:{PLAIN}pw\nbob:{PLAIN}pw\n")
    local port = free_port()
    write(prefix .. "/nginx.conf", ([[
worker_processes 1;
pid PREFIX/nginx.pid;
error_log PREFIX/error.log;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path PREFIX/tmp/body;
  proxy_temp_path PREFIX/tmp/proxy;
  fastcgi_temp_path PREFIX/tmp/fastcgi;
  uwsgi_temp_path PREFIX/tmp/uwsgi;
  scgi_temp_path PREFIX/tmp/scgi;
  map $remote_user $obleth_groups { alice "staff, ml-ops"; default ""; }
  server {
    listen 127.0.0.1:PORT;
    auth_basic "obleth";
    auth_basic_user_file PREFIX/htpasswd;
    location / {
      proxy_pass http://127.0.0.1:UPSTREAM;
      proxy_bind 127.0.0.2;
      proxy_set_header X-Remote-User $remote_user;
      proxy_set_header X-Remote-Groups $obleth_groups;
      proxy_set_header Authorization "";
    }
  }
}
]]):gsub("PREFIX", prefix):gsub("UPSTREAM", tostring(srv.port)):gsub("PORT", tostring(port)))
    local code, out = nginx()
    assert(code == 0, "nginx did not start: " .. tostring(out))
    front = "http://127.0.0.1:" .. port
  end)

  teardown(function()
    if prefix then
      nginx("-s stop")
      -- nginx -s stop returns once the signal is sent: wait for the master to remove its pid file
      pcall(util.wait_until, function() return not io.open(prefix .. "/nginx.pid") end, 10, "nginx to stop")
    end
    if srv then srv:cleanup() end
    if prefix then os.execute("rm -rf " .. util.shq(prefix)) end
  end)

  it("alice (a group with the operator role) signs in through nginx and may launch", function()
    local st, s = call("GET", "/api/v1/session", nil, { user = "alice" })
    assert.equal(200, st)
    assert.same({ "alice", "operator", "proxy" }, { s.user, s.role, s.via })
    local st2, m = call("POST", "/api/v1/models", { name = "alice-behind-nginx" }, { user = "alice" })
    assert.equal(201, st2)
    assert.equal("alice-behind-nginx", m.name)
    local st3, l = call("POST", "/api/v1/deployments/launch", { recipe_id = "smoke-test", api_model_name = "alice-l",
      values = { replicas = 1, partition = "gpu", account = "research" } }, { user = "alice" })
    assert.equal(201, st3)
    -- the launch history and the audit trail say alice
    local _, hist = call("GET", "/api/v1/deployments/launches?model_id=" .. l.launch.model_id, nil, { user = "bob" })
    assert.equal("alice", hist.launches[1].created_by)
    local _, a = call("GET", "/api/v1/audit?model=alice-l", nil, { user = "bob" })
    assert.same({ "alice", "proxy", "/api/v1/deployments/launch" }, { a.entries[1].actor, a.entries[1].via,
      a.entries[1].target })
  end)

  it("bob (no group) sees the deployments and gets 403 on Launch, naming the action", function()
    local st, doc = call("GET", "/api/v1/models", nil, { user = "bob" })
    assert.equal(200, st)
    local names = {}
    for _, m in ipairs(doc.models) do names[m.name] = true end
    assert.is_true(names["alice-behind-nginx"])
    local st2, e = call("POST", "/api/v1/deployments/launch", { recipe_id = "smoke-test", api_model_name = "bob-l" },
      { user = "bob" })
    assert.equal(403, st2)
    assert.same({ "forbidden", "deployments.launch", "operator" }, { e.error.code, e.error.action, e.error.role })
    -- a header bob sends himself is replaced by nginx's
    local _, s = call("GET", "/api/v1/session", nil, { user = "bob", headers = { ["X-Remote-User"] = "alice" } })
    assert.equal("bob", s.user)
  end)

  it("ignores (and logs) the header sent straight to obleth from an address not in OBLETH_AUTH_PROXY_FROM", function()
    local st = call("GET", "/api/v1/models", nil, { direct = true,
      headers = { ["X-Remote-User"] = "alice", ["X-Remote-Groups"] = "ml-ops" } })
    assert.equal(401, st)
    assert.truthy(srv:log():find("event=auth_proxy_header_ignored", 1, true))
    assert.truthy(srv:log():find("remote_addr=127.0.0.1", 1, true))
  end)
end)
