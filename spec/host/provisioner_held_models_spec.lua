-- A pass reads the snapshot's models as the provisioner's client holds them, without a copy
-- (obleth.provisioner.client: snapshot): nothing a pass does may write into them, or the next pass
-- (a delta merged into the same tables) would start from the last pass's edits instead of what obleth
-- serve answered. A pass that ends a replica, cancels a surplus one, submits, carries a drain deadline
-- it remembers and applies failing and passing health checks, against a real obleth serve and a
-- stand-in slurmrestd (the recorded v0.0.38 shapes); the held models are compared, field by field,
-- with a copy taken when the snapshot was read.
local cjson = require "cjson"
local http = require "obleth.http"
local tables = require "obleth.util.tables"
local tag = require "obleth.job.tag"
local daemon = require "obleth.provisioner"
local client = require "obleth.provisioner.client"
local server = require "spec.support.server"

describe("a provisioner pass and the snapshot models its client holds", function()
  local shared = os.getenv("OBLETH_SHARED") or "../shared"
  local srv, slurmd, db

  teardown(function()
    if srv then srv:cleanup() end
    if slurmd then slurmd:close() end
  end)

  it("leaves them as obleth serve answered them, pass after pass", function()
    local recorded = cjson.decode(assert(io.open(shared .. "/cases/slurmrestd/v0.0.38/jobs.json")):read("a"))
    local template
    for _, j in ipairs(recorded.jobs) do if j.job_state == "RUNNING" then template = j break end end
    local nodes = assert(io.open(shared .. "/cases/slurmrestd/v0.0.38/nodes.json")):read("a")
    local jobs, cancelled, submitted = {}, {}, 0
    slurmd = assert(http.server { host = "127.0.0.1", port = 0, handler = function(req)
      local p = req.path
      if p == "/openapi/v3" then
        return { status = 200, body = cjson.encode({ paths = { ["/slurm/v0.0.38/jobs"] = {},
          ["/slurm/v0.0.38/ping"] = {}, ["/slurm/v0.0.38/nodes"] = {} } }) }
      elseif p == "/slurm/v0.0.38/jobs" then
        return { status = 200, body = cjson.encode({ meta = recorded.meta, errors = {}, jobs = jobs }) }
      elseif p == "/slurm/v0.0.38/nodes" then
        return { status = 200, body = nodes }
      elseif p == "/slurm/v0.0.38/job/submit" then
        submitted = submitted + 1
        return { status = 200, body = cjson.encode({ job_id = 9000 + submitted, errors = {} }) }
      elseif p:match("^/slurm/v0.0.38/job/%d+$") and req.method == "DELETE" then
        cancelled[#cancelled + 1] = tonumber(p:match("(%d+)$"))
        return { status = 200, body = cjson.encode({ errors = {} }) }
      elseif p == "/ok/health" then
        return { status = 200, body = "{}" }
      elseif p == "/bad/health" then
        return { status = 500, body = "{}" }
      end
      return { status = 404, body = "{}" }
    end })
    local port = slurmd:port()
    db = server.tmpdb()
    local store = assert(require("obleth.store").open(db))
    local instance = store:instance()
    local now = os.time()
    local reps = {}
    local function replica(m, s, id, state, path)
      local n = ("%08x%08x"):format(m, s)
      local j = tables.copy(template)
      j.job_id, j.name, j.comment, j.nodes = id, tag.name(instance, m, s, n), tag.comment(instance, m, s, n, 1), "n0"
      jobs[#jobs + 1] = j
      reps[#reps + 1] = { model_id = m, slot = s, nonce = n, state = state, job_id = id, generation = 1, node = "n0",
        port = 20000 + id, endpoint = ("http://127.0.0.1:%d/%s"):format(port, path), started_at = now - 60,
        healthy_at = state == "healthy" and now - 50 or nil, check_failures = 0 }
      return j
    end
    assert(store:transaction(function()
      for m = 1, 3 do
        local row = assert(store:create_model { name = "model-" .. m })
        assert(row.id == m)
        assert(store:put_spec(m, { enabled = true, replicas = m == 1 and 2 or 1, partition = "gpu",
          time_limit = 24 * 60, launch_command = "true",
          health = { path = "/health", interval = 1, timeout = 5, startup_grace = 600, failure_threshold = 1 } }))
      end
      replica(1, 1, 101, "healthy", "ok")
      replica(1, 2, 102, "healthy", "bad") -- fails its check: unhealthy
      replica(2, 1, 201, "starting", "ok") -- passes its check: healthy
      replica(2, 2, 202, "healthy", "ok") -- above the model's 1 replica: cancelled
      local ended = replica(3, 1, 301, "healthy", "ok") -- its job ended: an outcome, and a new job submitted
      ended.job_state = "COMPLETED"
      assert(store:apply_report({ pass = { started_at = now, duration = 0.1 }, replicas = reps, outcomes = {},
        endpoints = {}, provision_errors = {}, acknowledged = { restart = {}, clear_lost = {} } }, now))
      return true
    end))
    assert(store:put_settings { enabled = true, url = ("http://127.0.0.1:%d"):format(port), user = "obleth",
      token = "x", defaults = { port_range = { 20000, 29999 } } })
    store:close()
    srv = server.start { db = db }

    local api = client.new(srv.base, srv.token)
    local read = getmetatable(api).__index.snapshot
    local as_read
    api.snapshot = function(self, opts)
      local doc, err = read(self, opts)
      if doc then as_read = tables.deep_copy(self.held.models) end
      return doc, err
    end
    local d = daemon.new { api = api }
    -- a drain deadline only this process knows, carried into the pass's rows
    d.memory["0000000100000001"] = { cancel_at = now + 3600, cancel_why = "scaled_down" }
    for pass = 1, 3 do
      local rep = assert(d:pass())
      assert.same(as_read, api.held.models, "pass " .. pass .. " wrote into the held models")
      if pass == 1 then -- the pass did what the comment above says (else the check proves little)
        local by = {}
        for _, r in ipairs(rep.replicas) do by[r.nonce] = r end
        assert.equal("unhealthy", by["0000000100000002"].state)
        assert.equal("healthy", by["0000000200000001"].state)
        assert.equal("ending", by["0000000200000002"].state)
        assert.equal("ended", by["0000000300000001"].state)
        assert.same({ 202 }, cancelled)
        assert.equal(1, submitted)
        assert.is_nil(as_read[1].replicas[1].cancel_at) -- the remembered deadline stays out of them
      end
    end
  end)
end)
