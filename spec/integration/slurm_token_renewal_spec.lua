-- A JWT that stays fresh: with token_source "key_file" the provisioner
-- (and obleth serve, for the connection test) mint short-lived tokens from the harness
-- cluster's HS256 key, as `scontrol token` does, and renew them before they expire, so
-- passes keep succeeding across expiries. The token is never logged or returned.
--
-- In the suite tokens live 30 s and the run crosses the first one's expiry; with
-- OBLETH_SOAK_SECONDS (make soak) they live two minutes and the run lasts that long.
local loop = require "obleth.loop"
local slurm = require "obleth.slurm"
local jwt = require "obleth.slurm.jwt"
local util = require "spec.support.util"
local harness = require "spec.support.harness"
local provisioner = require "spec.support.provisioner"
local wait_until = util.wait_until
local plain = require("obleth.provisioner.client").plain

describe("Slurm JWT renewal from the key file", function()
  local dir = os.getenv("OBLETH_CLUSTER_DIR")
  if not harness.URL or not dir then
    it("needs the harness cluster", function() pending("harness cluster not running (OBLETH_SLURM_URL unset)") end)
    return
  end
  -- obleth reads its own copy of the site's key: owned by its service user, mode 0600 (slurmctld's
  -- copy belongs to the slurm user; token_key_file refuses a file another user owns)
  local KEY = os.tmpname()
  assert(os.execute(("cp %s/etc/jwt_hs256.key %s && chmod 600 %s"):format(dir, KEY, KEY)))
  local SOAK = tonumber(os.getenv("OBLETH_SOAK_SECONDS") or "")
  local LIFESPAN = SOAK and 120 or 30
  local RUN = SOAK and math.max(SOAK, 600) or LIFESPAN + 20

  local h, srv, prov
  local bodies = {}
  local function ok(method, path, body)
    local status, doc, raw = srv:request(method, path, body)
    assert(status and status < 300, ("%s %s -> %s %s"):format(method, path, tostring(status), tostring(raw)))
    bodies[#bodies + 1] = raw
    return plain(doc)
  end

  setup(function()
    h = harness.start { port_range = { 25000, 25999 } }
    srv = h.srv
  end)
  teardown(function()
    if prov then prov:stop() end
    if h then h:stop() end
    os.remove(KEY)
  end)

  it("slurmrestd takes a token minted with the site's key and refuses one minted with another", function()
    local key = assert(io.open(KEY, "rb")):read("a")
    local now = os.time()
    local good = jwt.mint { key = key, user = harness.USER, lifespan = 60, now = now }
    local c = assert(slurm.connect { url = harness.URL, user = harness.USER, token = good })
    assert.is_true(assert(c:ping()).ok)
    local bad = jwt.mint { key = key .. "x", user = harness.USER, lifespan = 60, now = now }
    local c2, err = slurm.connect { url = harness.URL, user = harness.USER, token = bad }
    local p, perr
    if c2 then p, perr = c2:ping() end
    assert.is_nil(p)
    assert.equal("auth", (perr or err).code)
  end)

  it("keeps passes succeeding and replicas healthy across token expiries, and shows the expiry", function()
    local s = ok("PUT", "/api/v1/settings/slurm", { enabled = true, url = harness.URL, user = harness.USER,
      token = require("cjson").null, token_source = "key_file", token_key_file = KEY, token_lifespan = LIFESPAN,
      defaults = { partition = "gpu", account = "research", log_dir = h.logdir, port_range = { 25000, 25999 } } })
    assert.equal("key_file", s.token_source)
    assert.is_false(s.token_set)
    -- obleth serve mints its own for the connection test
    local t = ok("POST", "/api/v1/settings/slurm/test", {})
    assert.is_true(t.ok, t.error and t.error.message)
    assert.equal("key_file", t.token.source)
    assert.is_true(t.token.renewed)
    assert.is_true(t.token.seconds_left > LIFESPAN - 5 and t.token.seconds_left <= LIFESPAN)

    local m = ok("POST", "/api/v1/models", { name = "fresh-token" })
    local mid = (m.model or m).id
    ok("PUT", "/api/v1/models/" .. mid .. "/managed", { replicas = 1, partition = "gpu", account = "research",
      time_limit = 30, cpus_per_node = 1, memory_per_node = 200, launch_command = "obleth smoke-engine",
      health = { path = "/health", interval = 1, timeout = 1, startup_grace = 30, failure_threshold = 2 } })
    prov = provisioner.start { base = srv.base, token = srv.token }
    local function replica()
      local doc = ok("GET", ("/api/v1/models/%d/replicas?state=live"):format(mid))
      return (doc.replicas or doc)[1]
    end
    wait_until(function() local r = replica(); return r and r.state == "healthy" end, 90, "a healthy replica")
    local rep = replica()
    local first = wait_until(function() return ok("GET", "/api/v1/settings/slurm").token_expires_at end, 10,
      "the provisioner's token expiry")

    local t_end = loop.monotonic() + RUN
    local expiries, passes0 = { [first] = true }, ok("GET", "/api/v1/settings/slurm").provisioner.passes
    while loop.monotonic() < t_end do
      local st = ok("GET", "/api/v1/settings/slurm")
      assert.equal(0, st.provisioner.failed_passes, st.provisioner.last_error)
      assert.is_nil(st.token_warning)
      if st.token_expires_at then expiries[st.token_expires_at] = true end
      local r = replica()
      assert.equal(rep.id, r.id)
      assert.equal("healthy", r.state)
      loop.sleep(1)
    end
    local st = ok("GET", "/api/v1/settings/slurm")
    assert.is_true(os.time() > first, "the run crossed the first token's expiry")
    local n = 0
    for _ in pairs(expiries) do n = n + 1 end
    assert.is_true(n >= 2, "the token was renewed")
    assert.is_true(st.token_expires_at > os.time(), "the current token is valid")
    assert.is_true(st.provisioner.passes - passes0 >= RUN / 2, "passes kept running")
    assert.equal("key_file", st.provisioner.token.source)
    assert.is_nil(st.provisioner.token.error)

    ok("DELETE", "/api/v1/models/" .. mid .. "/managed")
    wait_until(function() return #h:live_jobs(mid) == 0 end, 30, "no job")
    -- the tokens (base64url JSON, "eyJ...") appear in no answer and no log line
    prov:stop()
    local logs = prov.err .. srv:log()
    prov = nil
    assert.is_nil(logs:find("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9", 1, true))
    for _, b in ipairs(bodies) do assert.is_nil(b:find("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9", 1, true)) end
    assert.matches("event=job_submit", logs, 1, true)
  end)
end)
