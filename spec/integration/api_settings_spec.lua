-- Slurm settings, the connection test, cluster resources; secrets never leave
-- except through the provisioner snapshot (responses and the server log are grepped).
local server = require "spec.support.server"
local cjson = require "cjson"

local JWT = "eyJhbGciOiJIUzI1NiJ9.eyJleHAiOjQxMDI0NDQ4MDAsInN1YiI6Im9ibGV0aCJ9.c2lnbmF0dXJlLXNlY3JldC14eXo"
local HF = "hf_SecretTokenValue0123456789abcdef"

local function closed_port()
  local http = require "obleth.http"
  local s = assert(http.server { port = 0, handler = function() return { status = 200 } end })
  local p = s:port()
  s:close()
  return p
end

describe("obleth serve: Slurm settings", function()
  local srv
  local bodies = {}
  local function req(...)
    local st, doc, raw = srv:request(...)
    bodies[#bodies + 1] = raw or ""
    return st, doc, raw
  end
  setup(function() srv = server.start() end)
  teardown(function() srv:cleanup() end)

  it("starts empty and disabled", function()
    local st, s = req("GET", "/api/v1/settings/slurm")
    assert.equal(200, st)
    assert.is_false(s.enabled)
    assert.equal(cjson.null, s.token)
    assert.same({ 20000, 20999 }, s.defaults.port_range)
    assert.equal(0, s.provisioner.failed_passes)
  end)

  it("masks the JWT and the Hugging Face token; sending the mask back keeps them; null clears", function()
    local st, s = req("PUT", "/api/v1/settings/slurm", { enabled = true, url = "http://127.0.0.1:6820",
      user = "obleth", token = JWT, defaults = { hf_token = HF, partition = "gpu", modules = { "cuda/12" },
        log_dir = "/scratch/logs", port_range = { 21000, 21999 }, environment = { HF_HOME = "/cache" } } })
    assert.equal(200, st)
    assert.equal("********", s.token)
    assert.is_true(s.token_set)
    assert.equal(4102444800, s.token_expires_at)
    assert.equal("********", s.defaults.hf_token)
    assert.same({ "cuda/12" }, s.defaults.modules)
    -- the dashboard sends back what it got
    st, s = req("PUT", "/api/v1/settings/slurm", s)
    assert.equal(200, st)
    local _, snap = req("GET", "/api/v1/provisioner/snapshot")
    assert.equal(JWT, snap.settings.token)
    assert.equal(HF, snap.settings.defaults.hf_token)
    assert.equal("gpu", snap.settings.defaults.partition)
    table.remove(bodies) -- the snapshot is the one answer allowed to carry them
    s.defaults.hf_token = cjson.null
    _, s = req("PUT", "/api/v1/settings/slurm", s)
    assert.is_false(s.defaults.hf_token_set)
    assert.is_true(s.token_set)
    local _, snap2 = req("GET", "/api/v1/provisioner/snapshot")
    table.remove(bodies)
    assert.equal(cjson.null, snap2.settings.defaults.hf_token)
    s.defaults.hf_token = HF
    req("PUT", "/api/v1/settings/slurm", s)
  end)

  it("a bad setting is a 400 naming the field and keeps the stored settings", function()
    local _, before = req("GET", "/api/v1/settings/slurm")
    local st, e = req("PUT", "/api/v1/settings/slurm", { enabled = true, url = "ftp://x" })
    assert.equal(400, st)
    assert.equal("url", e.error.field)
    _, e = req("PUT", "/api/v1/settings/slurm", { defaults = { port_range = { 1, 2, 3 } } })
    assert.equal("defaults.port_range", e.error.field)
    st, e = req("PUT", "/api/v1/settings/slurm?force=1", {})
    assert.equal(400, st)
    assert.equal("force", e.error.field)
    local _, after = req("GET", "/api/v1/settings/slurm")
    assert.same(before, after)
  end)

  it("turning Slurm off while replicas run answers 409 with how many, unless ?confirm=true", function()
    local _, m = req("POST", "/api/v1/models", { name = "running" })
    req("POST", "/api/v1/provisioner/report", { pass = { started_at = 1, duration = 1 }, replicas = {
      { nonce = "00000000000000c1", model_id = m.id, slot = 1, state = "healthy" },
      { nonce = "00000000000000c2", model_id = m.id, slot = 2, state = "starting" } } })
    local _, s = req("GET", "/api/v1/settings/slurm")
    s.enabled = false
    local st, e = req("PUT", "/api/v1/settings/slurm", s)
    assert.equal(409, st)
    assert.equal("confirm", e.error.code)
    assert.equal(2, e.error.running)
    assert.matches("2 replicas", e.error.message)
    local _, still = req("GET", "/api/v1/settings/slurm")
    assert.is_true(still.enabled)
    st, s = req("PUT", "/api/v1/settings/slurm?confirm=true", s)
    assert.equal(200, st)
    assert.is_false(s.enabled)
    assert.is_true(s.token_set)
  end)

  it("the test against a closed port reports unreachable well under the timeout", function()
    local port = closed_port()
    local loop = require "obleth.loop"
    local t0 = loop.monotonic()
    local st, r = req("POST", "/api/v1/settings/slurm/test", { url = "http://127.0.0.1:" .. port, timeout = 10 })
    local took = loop.monotonic() - t0
    assert.equal(200, st)
    assert.is_false(r.reachable)
    assert.equal("unreachable", r.error.code)
    assert.is_true(took < 2, "took " .. took .. " s")
    -- the saved token goes to the saved URL only: a test against another one has none
    assert.equal(require("cjson").null, r.token)
    st, r = req("POST", "/api/v1/settings/slurm/test", { url = "gopher://x" })
    assert.equal(400, st)
    assert.equal("url", r.error.field)
  end)

  it("resources need a connection and report slurmrestd failures as 502", function()
    local _, s = req("GET", "/api/v1/settings/slurm")
    s.url = "http://127.0.0.1:" .. closed_port()
    req("PUT", "/api/v1/settings/slurm?confirm=true", s)
    local st, e = req("GET", "/api/v1/slurm/resources")
    assert.equal(502, st)
    assert.equal("slurm_unreachable", e.error.code)
  end)

  it("no answer and no log line ever carried the admin token, the JWT or the HF token", function()
    local log = srv:log()
    assert.matches("event=http_request", log)
    for _, secret in ipairs({ srv.token, JWT, HF, JWT:match("%.([^.]+)$") }) do
      assert.is_nil(log:find(secret, 1, true), "secret in the log")
      for i, b in ipairs(bodies) do assert.is_nil(b:find(secret, 1, true), "secret in answer " .. i) end
    end
  end)
end)

describe("obleth serve: against the harness cluster", function()
  local url, user, token = os.getenv("OBLETH_SLURM_URL"), os.getenv("OBLETH_SLURM_USER"), os.getenv("OBLETH_SLURM_TOKEN")
  local srv
  setup(function() if url and token then srv = server.start() end end)
  teardown(function() if srv then srv:cleanup() end end)

  it("the connection test reports the API version, the Slurm release and the token's expiry", function()
    if not (url and token) then pending("harness cluster not running") return end
    local st, s = srv:request("PUT", "/api/v1/settings/slurm", { enabled = true, url = url, user = user, token = token })
    assert.equal(200, st)
    local r
    st, r = srv:request("POST", "/api/v1/settings/slurm/test")
    assert.equal(200, st)
    assert.is_true(r.reachable)
    assert.is_true(r.ok)
    local harness = require "spec.support.harness"
    assert.equal(harness.API_VERSION, r.api_version)
    assert.matches(harness.RELEASE_PATTERN, r.release)
    assert.equal(require("obleth.slurm").token_expiry(token), r.token.expires_at)
    assert.is_true(r.token.seconds_left > 0)
    assert.is_number(r.latency_ms)
    assert.equal(s.token_expires_at, r.token.expires_at)
    local log = srv:log()
    assert.is_nil(log:find(token, 1, true))
    assert.is_nil(select(3, srv:request("GET", "/api/v1/settings/slurm")):find(token, 1, true))
  end)

  it("resources list partitions with their ACLs, nodes with state, the user's accounts; cached briefly", function()
    if not (url and token) then pending("harness cluster not running") return end
    local st, r = srv:request("GET", "/api/v1/slurm/resources")
    assert.equal(200, st)
    assert.is_false(r.cached)
    assert.is_true(#r.partitions >= 1)
    assert.is_true(#r.nodes >= 1)
    local p = r.partitions[1]
    assert.is_string(p.name)
    assert.is_not_nil(p.max_time)
    assert.is_table(r.nodes[1].state)
    assert.is_string(r.nodes[1].state.base)
    assert.is_table(r.user_accounts)
    assert.is_true(#r.user_accounts >= 1)
    -- the harness's slurm.conf: debug AllowAccounts=research DenyQos=long; inference AllowQos=inference
    local by = {}
    for _, x in ipairs(r.partitions) do by[x.name] = x end
    assert.same({ "research" }, by.debug.allowed_accounts)
    assert.same({ "long" }, by.debug.denied_qos)
    assert.same({ "inference" }, by.inference.allowed_qos)
    assert.same({ "obleth-staff" }, by.staff.allowed_groups)
    assert.equal(cjson.null, by.gpu.allowed_accounts) -- no restriction
    -- the user's associations and the QoS the accounting database knows
    assert.is_true(#r.associations >= 1)
    local qos = {}
    for _, q in ipairs(r.qos) do qos[q.name] = true end
    assert.is_true(qos.long and qos.inference and true or false)
    local _, again = srv:request("GET", "/api/v1/slurm/resources")
    assert.is_true(again.cached)
  end)
end)
