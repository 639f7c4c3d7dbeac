-- With slurmrestd unreachable a pass fails, is reported, and changes no
-- replica: a failed poll never marks a replica failed.
-- No cluster needed: the Slurm connection points at a closed port.
local server = require "spec.support.server"
local util = require "spec.support.util"
local http = require "obleth.http"
local plain = require("obleth.provisioner.client").plain

describe("obleth-provisioner when slurmrestd is down", function()
  local srv
  setup(function() srv = server.start() end)
  teardown(function() srv:stop(); srv:cleanup() end)

  local function api(method, path, body)
    local status, doc, raw = srv:request(method, path, body)
    assert(status and status < 300, ("%s %s -> %s %s"):format(method, path, tostring(status), tostring(raw)))
    return plain(doc)
  end

  it("reports the failed pass and leaves a healthy replica healthy", function()
    -- a closed port
    local s = assert(http.server { port = 0, handler = function() end })
    local dead = ("http://127.0.0.1:%d"):format(s:port())
    s:close()
    api("PUT", "/api/v1/settings/slurm", { enabled = true, url = dead, user = "obleth", token = "x.y.z" })
    local m = api("POST", "/api/v1/models", { name = "outage" })
    m = m.model or m
    api("PUT", "/api/v1/models/" .. m.id .. "/managed", { replicas = 1, partition = "gpu", time_limit = 10,
      launch_command = "true" })
    -- what an earlier pass reported: a healthy replica with its endpoint
    api("POST", "/api/v1/provisioner/report", { pass = { started_at = os.time(), duration = 0.1 },
      replicas = { { nonce = "00000000000000aa", model_id = m.id, slot = 1, state = "healthy", job_id = 42,
        node = "n0", port = 20000, endpoint = "http://127.0.0.1:20000", healthy_at = os.time() } },
      endpoints = { [tostring(m.id)] = { "http://127.0.0.1:20000" } } })

    local fh = io.popen(("OBLETH_ADMIN_BASE_URL=%s OBLETH_ADMIN_TOKEN=%s %s provisioner --once 2>&1; echo status=$?")
      :format(util.shq(srv.base), util.shq(srv.token), util.shq(util.obleth())))
    local out = fh:read("a")
    fh:close()
    assert.matches("status=1", out, 1, true)

    local reps = api("GET", "/api/v1/models/" .. m.id .. "/replicas")
    reps = reps.replicas or reps
    assert.equal(1, #reps)
    assert.equal("healthy", reps[1].state)
    local model = api("GET", "/api/v1/models/" .. m.id)
    model = model.model or model
    assert.equal("active", model.status)
    local st = api("GET", "/api/v1/settings/slurm").provisioner
    assert.equal(1, st.failed_passes)
    assert.matches("unreachable", st.last_error)
  end)
end)
