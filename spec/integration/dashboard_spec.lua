-- The server side of the dashboard over real sockets (docs/dashboard.md): its files and
-- headers, sign-in sessions and cross-site refusals, and the live-update event stream.
local server = require "spec.support.server"
local util = require "spec.support.util"
local http = require "obleth.http"
local loop = require "obleth.loop"
local sys = require "obleth.sys"
local events = require "spec.support.events"
local open_events, wait_event = events.open, events.wait

local CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
  .. "font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

-- A built dashboard in a temporary directory, and a secret file beside it that must never be served.
local function web_dir()
  local dir = os.tmpname()
  os.remove(dir)
  assert(sys.mkdir(dir))
  assert(sys.mkdir(dir .. "/assets"))
  assert(sys.mkdir(dir .. "/assets/sub"))
  local function put(p, s) local fh = assert(io.open(dir .. "/" .. p, "w")); fh:write(s); fh:close() end
  put("index.html", '<!doctype html><script type="module" src="/assets/app-1a2b3c4d.js"></script>')
  put("assets/app-1a2b3c4d.js", "export const x = 1;\n")
  put("assets/app-5e6f7a8b.css", "body { color: black }\n")
  put("assets/favicon-00ff00ff.svg", "<svg xmlns='http://www.w3.org/2000/svg'/>")
  put("assets/.hidden", "hidden")
  put("assets/sub/deep.js", "deep")
  put("secret.txt", "not for the web")
  return dir
end

local function rmrf(dir) util.sh("rm -rf " .. util.shq(dir)) end

local function raw(srv, method, path, headers, body)
  local r = assert(http.request { url = srv.base .. path, method = method, headers = headers, body = body,
    timeout = 10, path_as_is = true })
  return r
end

local function assert_page_headers(r, what)
  assert.equal(CSP, r.headers["content-security-policy"], what)
  assert.equal("nosniff", r.headers["x-content-type-options"], what)
  assert.equal("no-referrer", r.headers["referrer-policy"], what)
  assert.equal("DENY", r.headers["x-frame-options"], what)
end

describe("obleth serve: the dashboard's files", function()
  local srv, dir
  setup(function()
    dir = web_dir()
    srv = server.start { args = { "--web-dir", dir } }
  end)
  teardown(function() srv:cleanup(); rmrf(dir) end)

  it("answers index.html on every page path, revalidated every time, with the security headers", function()
    for _, p in ipairs({ "/", "/signin", "/deployments", "/deployments/new", "/deployments/17", "/keys", "/cluster",
      "/tokens", "/audit", "/docs/replicas-and-failures",
      "/deployments?slurm=1" }) do
      local r = raw(srv, "GET", p)
      assert.equal(200, r.status, p)
      assert.equal("text/html; charset=utf-8", r.headers["content-type"], p)
      assert.equal("no-cache", r.headers["cache-control"], p)
      assert.matches("/assets/app%-1a2b3c4d%.js", r.body)
      assert_page_headers(r, p)
    end
    local h = raw(srv, "HEAD", "/deployments")
    assert.equal(200, h.status)
    assert.equal("", h.body)
    assert_page_headers(h, "HEAD")
  end)

  it("the built dashboard's main JS: gzipped at build time, answered with Content-Encoding: gzip when the "
    .. "browser takes it, plain otherwise, Vary: Accept-Encoding on both", function()
    local built = require("obleth.web").default_dir()
    local fh = assert(io.open(built .. "/index.html"), "the dashboard is built (make)")
    local index = fh:read("a")
    fh:close()
    local main = assert(index:match('src="/assets/(main%-[%w]+%.js)"'), "index.html names its main JS")
    local bsrv = server.start { args = { "--web-dir", built } }
    local ok_, err = pcall(function()
      local gz = raw(bsrv, "GET", "/assets/" .. main, { ["Accept-Encoding"] = "gzip, deflate, br" })
      local plain = raw(bsrv, "GET", "/assets/" .. main)
      assert.equal(200, gz.status)
      assert.equal("gzip", gz.headers["content-encoding"])
      assert.equal("Accept-Encoding", gz.headers["vary"])
      assert.equal("text/javascript; charset=utf-8", gz.headers["content-type"])
      assert.is_nil(plain.headers["content-encoding"])
      assert.equal("Accept-Encoding", plain.headers["vary"])
      assert.is_true(#gz.body < #plain.body / 2, ("%d gzipped vs %d"):format(#gz.body, #plain.body))
      -- the gzipped body is the plain one (gunzip, not obleth, says so)
      local tmp = os.tmpname()
      local out = assert(io.open(tmp, "wb"))
      out:write(gz.body)
      out:close()
      local _, unzipped = util.sh("gunzip -c < " .. util.shq(tmp))
      os.remove(tmp)
      assert.equal(plain.body, unzipped)
      -- gzip;q=0 refuses it; identity only too
      for _, ae in ipairs({ "gzip;q=0", "identity", "br", "*;q=0" }) do
        assert.is_nil(raw(bsrv, "GET", "/assets/" .. main, { ["Accept-Encoding"] = ae }).headers["content-encoding"], ae)
      end
      assert.equal("gzip", raw(bsrv, "GET", "/assets/" .. main, { ["Accept-Encoding"] = "*" }).headers["content-encoding"])
    end)
    bsrv:cleanup()
    assert(ok_, err)
  end)

  it("answers assets with their type, cacheable for a year, and 404 for anything else", function()
    local r = raw(srv, "GET", "/assets/app-1a2b3c4d.js")
    assert.equal(200, r.status)
    assert.equal("export const x = 1;\n", r.body)
    assert.equal("text/javascript; charset=utf-8", r.headers["content-type"])
    assert.equal("public, max-age=31536000, immutable", r.headers["cache-control"])
    assert_page_headers(r, "asset")
    assert.equal("text/css; charset=utf-8", raw(srv, "GET", "/assets/app-5e6f7a8b.css").headers["content-type"])
    assert.equal("image/svg+xml", raw(srv, "GET", "/assets/favicon-00ff00ff.svg").headers["content-type"])
    assert.equal(200, raw(srv, "HEAD", "/assets/app-1a2b3c4d.js").status)
    for _, p in ipairs({ "/assets/missing-00000000.js", "/assets/.hidden", "/assets/sub/deep.js", "/assets/",
      "/secret.txt", "/index.html", "/deployments/1/replicas", "/keys/new", "/favicon.ico" }) do
      local x = raw(srv, "GET", p)
      assert.equal(404, x.status, p)
      assert.not_matches("not for the web", x.body)
      assert_page_headers(x, p)
    end
    assert.equal(405, raw(srv, "POST", "/deployments", nil, "x").status)
    assert.equal("GET, HEAD", raw(srv, "POST", "/", nil, "x").headers["allow"])
  end)

  it("never leaves the web directory, however the path is spelt", function()
    for _, p in ipairs({ "/assets/../secret.txt", "/assets/%2e%2e/secret.txt", "/assets/..%2fsecret.txt",
      "/assets/%2E%2E%2Fsecret.txt", "/assets/..%5csecret.txt", "/assets/%2e%2e/%2e%2e/etc/passwd",
      "/../secret.txt", "/assets//etc/passwd", "/assets/%00.js" }) do
      local r = raw(srv, "GET", p)
      assert.equal(400, r.status, p) -- refused before routing (not canonical), never looked up
      assert_page_headers(r, p)
      assert.not_matches("not for the web", r.body, 1, true)
      assert.not_matches("root:", r.body, 1, true)
    end
  end)

  it("gives JSON answers of the API nosniff and no-referrer too, and leaves /v1 and /metrics alone", function()
    for _, c in ipairs({ { {}, 200 }, { { Authorization = false }, 401 } }) do
      local st, _, _, headers = srv:request("GET", "/api/v1/models", nil, c[1])
      assert.equal(c[2], st)
      assert.equal("nosniff", headers["x-content-type-options"])
      assert.equal("no-referrer", headers["referrer-policy"])
    end
    local r = raw(srv, "GET", "/metrics")
    assert.equal(200, r.status)
    assert.is_nil(r.headers["content-security-policy"])
  end)
end)

describe("obleth serve: the dashboard when it is not built", function()
  it("answers 503 on / saying to run make, and 404 for assets", function()
    local srv = server.start { args = { "--web-dir", "/nonexistent/web" } }
    local r = raw(srv, "GET", "/")
    assert.equal(503, r.status)
    assert.matches("make", r.body)
    assert_page_headers(r, "503")
    assert.equal(404, raw(srv, "GET", "/assets/app-1a2b3c4d.js").status)
    local _, _, err = srv:stop()
    assert.matches("event=dashboard_not_built", err)
    srv:cleanup()
  end)

  it("installed as PREFIX/bin/obleth, serves PREFIX/share/obleth/web by default", function()
    local prefix = os.tmpname()
    os.remove(prefix)
    local q = util.shq
    assert(util.sh(("mkdir -p %s/bin %s/share/obleth && cp %s %s/bin/obleth && cp -R %s/lua %s/share/obleth/")
      :format(q(prefix), q(prefix), q(util.obleth()), q(prefix), q(util.root()), q(prefix))) == 0)
    local web = web_dir()
    assert(util.sh(("mv %s %s/share/obleth/web"):format(q(web), q(prefix))) == 0)
    local srv = server.start { exe = prefix .. "/bin/obleth" }
    local r = raw(srv, "GET", "/deployments")
    assert.equal(200, r.status)
    assert.matches("/assets/app%-1a2b3c4d%.js", r.body)
    srv:cleanup()
    util.sh("rm -rf " .. q(prefix))
  end)

  it("serves build/web by default from a source tree; OBLETH_WEB_DIR and --web-dir choose another", function()
    assert.equal(util.root() .. "/build/web", require("obleth.web").default_dir())
    local fake = os.tmpname()
    assert.equal(fake .. "/web", require("obleth.web").default_dir(fake)) -- an installed share/obleth
    os.remove(fake)
    local dir = web_dir()
    local srv = server.start { env = { OBLETH_WEB_DIR = dir } }
    assert.equal(200, raw(srv, "GET", "/keys").status)
    local _, _, err = srv:stop()
    assert.matches("web_dir=" .. dir, err, 1, true)
    srv:cleanup()
    rmrf(dir)
  end)
end)

-- the session id from a Set-Cookie value
local function sid_of(set_cookie) return set_cookie and set_cookie:match("obleth_session=(%x+);") end

describe("obleth serve: sign-in sessions", function()
  local srv
  setup(function() srv = server.start() end)
  teardown(function() srv:cleanup() end)

  local function sign_in(headers)
    local h = { Authorization = false }
    for k, v in pairs(headers or {}) do h[k] = v end
    local st, doc, _, hs = srv:request("POST", "/api/v1/session", { token = srv.token }, h)
    return st, hs["set-cookie"], doc
  end

  local function with_cookie(method, path, sid, body, headers)
    local h = { Authorization = false, Cookie = "theme=dark; obleth_session=" .. sid }
    for k, v in pairs(headers or {}) do h[k] = v end
    return srv:request(method, path, body, h)
  end

  it("exchanges the admin token for an HttpOnly, SameSite=Strict cookie that expires", function()
    local st, set = sign_in()
    assert.equal(204, st)
    local sid = sid_of(set)
    assert.equal(64, #sid)
    assert.equal("obleth_session=" .. sid .. "; Path=/; HttpOnly; SameSite=Strict; Max-Age=43200", set)
    local st2, doc = with_cookie("GET", "/api/v1/session", sid)
    assert.equal(200, st2)
    assert.is_true(doc.signed_in)
    assert.near(os.time() + 43200, doc.expires_at, 5)
    -- the cookie works on every /api/ route a GET can reach
    assert.equal(200, (with_cookie("GET", "/api/v1/models", sid)))
    assert.equal(200, (with_cookie("GET", "/api/v1/settings/slurm", sid)))
    -- the session id never reaches the log
    assert.not_matches(sid, srv:log(), 1, true)
  end)

  it("refuses a wrong token with 401, and a request without a live session", function()
    local st, set = sign_in({})
    assert.equal(204, st)
    assert.truthy(set)
    local doc
    st, doc = srv:request("POST", "/api/v1/session", { token = "not-the-token-0123456789" }, { Authorization = false })
    assert.equal(401, st)
    assert.equal("unauthorized", doc.error.code)
    -- a password with no directory to check it against (no OBLETH_LDAP_URL) names the user field
    st, doc = srv:request("POST", "/api/v1/session", { password = "x" }, { Authorization = false })
    assert.equal(400, st)
    assert.equal("user", doc.error.field)
    assert.truthy(doc.error.message:find("admin token only", 1, true), doc.error.message)
    assert.equal(401, (with_cookie("GET", "/api/v1/session", ("0"):rep(64))))
    assert.equal(401, (srv:request("GET", "/api/v1/session", nil, { Authorization = false })))
    -- a wrong bearer token is not rescued by a good cookie
    local sid = sid_of(select(2, sign_in()))
    assert.equal(401, (with_cookie("GET", "/api/v1/models", sid, nil, { Authorization = "Bearer wrong-0123456789" })))
    -- the bearer token still works alone, and GET /session says so
    local st3, d3 = srv:request("GET", "/api/v1/session")
    assert.equal(200, st3)
    assert.equal("token", d3.via)
  end)

  it("refuses a cookie-authenticated write from another site (403 csrf); the dashboard's own writes pass", function()
    local sid = sid_of(select(2, sign_in()))
    local origin = srv.base
    local function post(headers)
      return with_cookie("POST", "/api/v1/keys", sid, { name = "from the page" }, headers)
    end
    local st, doc = post({})
    assert.equal(403, st)
    assert.equal("csrf", doc.error.code)
    st, doc = post({ ["X-Requested-With"] = "obleth", Origin = "http://evil.example" })
    assert.equal(403, st)
    assert.equal("csrf", doc.error.code)
    st = post({ ["X-Requested-With"] = "obleth", Origin = origin, ["Sec-Fetch-Site"] = "cross-site" })
    assert.equal(403, st)
    st = post({ ["X-Requested-With"] = "XMLHttpRequest", Origin = origin })
    assert.equal(403, st)
    st = post({ ["X-Requested-With"] = "obleth", Origin = origin, ["Sec-Fetch-Site"] = "same-origin" })
    assert.equal(201, st)
    st = post({ ["X-Requested-With"] = "obleth" })
    assert.equal(201, st)
    -- DELETE and PUT too
    st = with_cookie("PUT", "/api/v1/settings/router", sid, { keyless = false }, { Origin = "http://evil.example",
      ["X-Requested-With"] = "obleth" })
    assert.equal(403, st)
    -- the bearer token needs no such header: unchanged
    st = srv:request("POST", "/api/v1/keys", { name = "script" })
    assert.equal(201, st)
    -- nothing from the refused requests was stored
    local _, keys = srv:request("GET", "/api/v1/keys")
    local names = {}
    for _, k in ipairs(keys.keys) do names[#names + 1] = k.name end
    table.sort(names)
    assert.same({ "from the page", "from the page", "script" }, names)
  end)

  it("signs out: the session is revoked and the cookie cleared", function()
    local sid = sid_of(select(2, sign_in()))
    local st, _, _, hs = with_cookie("DELETE", "/api/v1/session", sid, nil, { ["X-Requested-With"] = "obleth" })
    assert.equal(204, st)
    assert.equal("obleth_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0", hs["set-cookie"])
    assert.equal(401, (with_cookie("GET", "/api/v1/models", sid)))
    -- signing out without a session still clears the cookie
    st = srv:request("DELETE", "/api/v1/session", nil, { Authorization = false })
    assert.equal(204, st)
  end)

  it("slows down guessing: 10 wrong tokens from one address, then 429 — yet the admin token still signs in", function()
    local s2 = server.start()
    local st, hs, _
    for _ = 1, 10 do
      st = s2:request("POST", "/api/v1/session", { token = "wrong-token-0123456789" }, { Authorization = false })
      assert.equal(401, st)
    end
    st, _, _, hs = s2:request("POST", "/api/v1/session", { token = "wrong-token-0123456789" }, { Authorization = false })
    assert.equal(429, st)
    assert.matches("^%d+$", hs["retry-after"])
    -- behind a proxy every browser shares one address: wrong guesses must not lock the admin out
    st, _, _, hs = s2:request("POST", "/api/v1/session", { token = s2.token }, { Authorization = false })
    assert.equal(204, st)
    assert.matches("^obleth_session=", hs["set-cookie"])
    s2:cleanup()
  end)

  it("the provisioner's routes answer the bearer token only, never a dashboard session (the snapshot has secrets)", function()
    local s2 = server.start()
    local _, _, _, hs = s2:request("POST", "/api/v1/session", { token = s2.token }, { Authorization = false })
    local cookie = hs["set-cookie"]:match("^([^;]+)")
    local st, doc = s2:request("GET", "/api/v1/provisioner/snapshot", nil, { Authorization = false, Cookie = cookie })
    assert.equal(403, st)
    assert.equal("bearer_only", doc.error.code)
    st = s2:request("POST", "/api/v1/provisioner/report", { pass = { started_at = 1, duration = 1 } },
      { Authorization = false, Cookie = cookie, ["X-Requested-With"] = "obleth" })
    assert.equal(403, st)
    assert.equal(200, (s2:request("GET", "/api/v1/provisioner/snapshot")))
    s2:cleanup()
  end)
end)

describe("obleth serve: sessions across restarts and behind https", function()
  it("a restart revokes every session, and so does another admin token", function()
    local srv = server.start()
    local _, _, _, hs = srv:request("POST", "/api/v1/session", { token = srv.token }, { Authorization = false })
    local sid = sid_of(hs["set-cookie"])
    local cookie = { Authorization = false, Cookie = "obleth_session=" .. sid }
    assert.equal(200, (srv:request("GET", "/api/v1/models", nil, cookie)))
    srv:stop()
    local again = server.start { db = srv.db, token = srv.token }
    assert.equal(401, (again:request("GET", "/api/v1/models", nil, cookie)))
    again:stop()
    local rotated = server.start { db = srv.db }
    assert.equal(401, (rotated:request("GET", "/api/v1/models", nil, cookie)))
    rotated:cleanup()
  end)

  it("marks the cookie Secure behind https (--public-url https://..., or X-Forwarded-Proto: https)", function()
    local srv = server.start { args = { "--public-url", "https://dash.example.org" } }
    local _, _, _, hs = srv:request("POST", "/api/v1/session", { token = srv.token }, { Authorization = false })
    assert.matches("; Secure$", hs["set-cookie"])
    local sid = sid_of(hs["set-cookie"])
    -- the public origin is this server's own origin for the cross-site check
    local st = srv:request("POST", "/api/v1/keys", { name = "k" }, { Authorization = false,
      Cookie = "obleth_session=" .. sid, ["X-Requested-With"] = "obleth", Origin = "https://dash.example.org" })
    assert.equal(201, st)
    srv:cleanup()
    srv = server.start()
    _, _, _, hs = srv:request("POST", "/api/v1/session", { token = srv.token }, { Authorization = false,
      ["X-Forwarded-Proto"] = "https" })
    assert.matches("; Secure$", hs["set-cookie"])
    _, _, _, hs = srv:request("POST", "/api/v1/session", { token = srv.token }, { Authorization = false })
    assert.not_matches("Secure", hs["set-cookie"])
    srv:cleanup()
    local code, out = util.sh(("OBLETH_ADMIN_TOKEN=%s %s serve --public-url ftp://x --db /tmp/obleth-public-url-%d.db")
      :format(("a"):rep(32), util.shq(util.obleth()), sys.getpid()))
    assert.not_equal(0, code)
    assert.matches("public%-url", out)
  end)
end)

describe("obleth serve: live updates (GET /api/v1/events)", function()
  local srv
  setup(function()
    srv = server.start { env = { OBLETH_EVENTS_KEEPALIVE = "0.3", OBLETH_EVENTS_MAX_STREAMS = "3" } }
  end)
  teardown(function() srv:cleanup() end)

  it("streams a change within a second of each write, naming the topic and the model", function()
    local s = assert(open_events(srv))
    assert.equal(200, s.status)
    assert.matches("^text/event%-stream", s.headers["content-type"])
    assert.equal("nosniff", s.headers["x-content-type-options"])
    util.wait_until(function() return #s.events > 0 end, 5, "the ready event")
    assert.equal("ready", s.events[1].event)

    local t0 = loop.monotonic()
    local st, m = srv:request("POST", "/api/v1/models", { name = "events-model" })
    assert.equal(201, st)
    local e, i, _ = wait_event(s, "models", m.id)
    assert.is_true(e.at - t0 < 1, "took " .. (e.at - t0))

    st = srv:request("PUT", "/api/v1/models/" .. m.id .. "/managed", { replicas = 1, partition = "debug",
      launch_command = "obleth smoke-engine" })
    assert.equal(201, st)
    _, i = wait_event(s, "managed", m.id, i)
    st = srv:request("PUT", "/api/v1/settings/router", { keyless = false })
    assert.equal(200, st)
    e = wait_event(s, "keys", nil, i)
    assert.is_nil(e.data.model_id)

    -- a refused write publishes nothing
    local before = #s.events
    st = srv:request("DELETE", "/api/v1/models/" .. m.id) -- 409: it has a managed spec
    assert.equal(409, st)
    srv:request("GET", "/api/v1/models")
    st = srv:request("POST", "/api/v1/keys", { name = "marker" })
    assert.equal(201, st)
    wait_event(s, "keys", nil, before)
    for j = before + 1, #s.events do assert.not_equal("models", s.events[j].data.topic) end

    -- the provisioner's report: a replica's step, its Slurm state, the check-in
    local nonce = "00000000000000e1"
    local function report(rep_rows)
      local code = srv:request("POST", "/api/v1/provisioner/report", { pass = { started_at = os.time(), duration = 0.1 },
        replicas = rep_rows })
      assert.equal(200, code)
    end
    local mark = #s.events
    local est = os.time() + 120
    t0 = loop.monotonic()
    report({ { nonce = nonce, model_id = m.id, slot = 1, state = "submitted", job_id = 77,
      slurm = { state = "PENDING", reason = "Resources", start_time = est, estimated = true } } })
    e = wait_event(s, "replicas", m.id, mark)
    assert.is_true(e.at - t0 < 1, "took " .. (e.at - t0))
    wait_event(s, "provisioner", nil, mark)
    local _, reps = srv:request("GET", "/api/v1/models/" .. m.id .. "/replicas")
    assert.same({ state = "PENDING", reason = "Resources", start_time = est, estimated = true }, reps.replicas[1].slurm)
    -- the same report again changes no replica: only the check-in is announced
    mark = #s.events
    report({ { nonce = nonce, model_id = m.id, slot = 1, state = "submitted", job_id = 77,
      slurm = reps.replicas[1].slurm } })
    wait_event(s, "provisioner", nil, mark)
    srv:request("POST", "/api/v1/keys", { name = "marker2" })
    wait_event(s, "keys", nil, mark)
    for j = mark + 1, #s.events do assert.not_equal("replicas", s.events[j].data.topic) end
    -- running: the step and the Slurm view change together
    mark = #s.events
    report({ { nonce = nonce, model_id = m.id, slot = 1, state = "starting", node = "n1",
      slurm = { state = "RUNNING", start_time = os.time(), end_time = os.time() + 3600, time_limit = 60,
        estimated = false } } })
    wait_event(s, "replicas", m.id, mark)
    s.resp:close()
  end)

  it("sends a keep-alive comment when nothing happens", function()
    local s = assert(open_events(srv))
    util.wait_until(function() return s.comments >= 2 end, 10, "two keep-alive comments")
    s.resp:close()
  end)

  it("works with the session cookie, and not without credentials", function()
    local _, _, _, hs = srv:request("POST", "/api/v1/session", { token = srv.token }, { Authorization = false })
    local sid = sid_of(hs["set-cookie"])
    local s = assert(open_events(srv, { Authorization = false, Cookie = "obleth_session=" .. sid }))
    assert.equal(200, s.status)
    srv:request("POST", "/api/v1/models", { name = "cookie-events" })
    wait_event(s, "models")
    -- signing out ends the stream the session opened
    local st = srv:request("DELETE", "/api/v1/session", nil, { Authorization = false,
      Cookie = "obleth_session=" .. sid, ["X-Requested-With"] = "obleth" })
    assert.equal(204, st)
    util.wait_until(function() return s.done end, 5, "the stream to end")
    s.resp:close()
    local r = assert(http.request { url = srv.base .. "/api/v1/events", timeout = 5 })
    assert.equal(401, r.status)
  end)

  it("caps concurrent streams, and frees a stream once its client is gone", function()
    local open = {}
    for _ = 1, 3 do -- (streams of the tests before are freed within seconds)
      local s
      util.wait_until(function()
        s = open_events(srv)
        if s and s.status == 200 then return true end
        if s then s.resp:close() end
        return false, s and s.status
      end, 15, "a stream")
      open[#open + 1] = s
    end
    local over = assert(open_events(srv))
    assert.equal(503, over.status)
    over.resp:close()
    open[1].resp:close()
    local again
    util.wait_until(function()
      again = open_events(srv)
      if again and again.status == 200 then return true end
      if again then again.resp:close() end
      return false
    end, 15, "the closed stream to be freed")
    again.resp:close()
    for i = 2, 3 do open[i].resp:close() end
  end)

  it("ends its streams on SIGTERM instead of holding up the shutdown", function()
    local s2 = server.start()
    local s = assert(open_events(s2))
    util.wait_until(function() return #s.events > 0 end, 5, "ready")
    local t0 = loop.monotonic()
    local code = s2:stop()
    assert.equal(0, code)
    assert.is_true(loop.monotonic() - t0 < 5, "shutdown took " .. (loop.monotonic() - t0))
    s2:cleanup()
  end)
end)
