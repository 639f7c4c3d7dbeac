-- A report larger than obleth serve's body limit (docs/managed-spec.md, "A report in parts"): the
-- first pass over a restored or copied store reports every row, about 0.47 KB per replica, which
-- past a few thousand replicas is more than one request body may carry. obleth serve says its limit
-- in the lease answer; the provisioner's client sends such a report in parts, each under the limit
-- and fenced by the lease, and the store applies it whole: every row, one check-in.
local server = require "spec.support.server"
local client = require "obleth.provisioner.client"
local cjson = require "cjson"

local LIMIT = 16384
local ROWS = 120

describe("a report larger than obleth serve's body limit", function()
  local srv, db, model_id, ids
  setup(function()
    db = server.tmpdb()
    local store = assert(require("obleth.store").open(db))
    ids = {}
    for i = 1, 2 do -- 60 slots each (a spec has at most 64)
      local m = assert(store:create_model { name = "big" .. i })
      ids[i] = m.id
      assert(store:put_spec(m.id, { replicas = ROWS // 2, enabled = true, partition = "gpu", launch_command = "x" }))
    end
    model_id = ids[1]
    store:close()
    srv = server.start { db = db, args = { "--body-limit", tostring(LIMIT) } }
  end)
  teardown(function() if srv then srv:cleanup() end end)

  local function report(generation, state)
    local reps = {}
    for s = 1, ROWS do
      reps[s] = { nonce = ("%016x"):format(s), model_id = ids[(s - 1) // (ROWS // 2) + 1],
        slot = (s - 1) % (ROWS // 2) + 1, state = state, job_id = 1000 + s,
        node = ("node-%04d"):format(s), port = 20000 + s, endpoint = ("http://node-%04d:%d"):format(s, 20000 + s),
        problem = ("a row as long as a real one: %s"):format(("x"):rep(200)) }
    end
    return { pass = { started_at = os.time(), duration = 0.5 }, lease_generation = generation, replicas = reps,
      outcomes = {}, endpoints = { [tostring(model_id)] = { "http://node-0001:20001" } }, provision_errors = {},
      acknowledged = { restart = {}, clear_lost = {} } }
  end
  local function passes()
    local store = assert(require("obleth.store").open(db))
    local n = store:provisioner_status().passes
    store:close()
    return n
  end
  local function states()
    local n, by = 0, {}
    for _, id in ipairs(ids) do
      local st, doc = srv:request("GET", ("/api/v1/models/%d/replicas"):format(id))
      assert.equal(200, st)
      for _, r in ipairs(doc.replicas) do n = n + 1; by[r.state] = (by[r.state] or 0) + 1 end
    end
    return n, by
  end

  local c, lease
  it("the lease answer says the body limit", function()
    c = client.new(srv.base, srv.token)
    lease = assert(c:lease { holder = "spec", host = "h", pid = 1, ttl = 3600 })
    assert.equal(LIMIT, lease.body_limit)
    assert.equal(LIMIT, c.body_limit)
  end)

  it("is sent in parts, each under the limit, and applied whole: every row, one check-in", function()
    local rep = report(lease.lease.generation, "starting")
    assert.is_true(#cjson.encode(rep) > 2 * LIMIT)
    local bodies = client.report_parts(rep, LIMIT)
    assert.is_true(#bodies > 2)
    for i, b in ipairs(bodies) do
      assert.is_true(#b <= LIMIT)
      assert.equal(i < #bodies, cjson.decode(b).more == true)
    end
    local before = passes()
    local res = assert(c:report(rep))
    assert.equal(#bodies, res.parts)
    local n, by = states()
    assert.equal(ROWS, n)
    assert.equal(ROWS, by.starting)
    assert.equal(before + 1, passes())
    local snap = assert(c:snapshot())
    assert.same({ "http://node-0001:20001" }, snap.models[1].endpoints)
  end)

  it("a part sent again changes nothing more; the check-in waits for the last part", function()
    local rep = report(lease.lease.generation, "healthy")
    local bodies = client.report_parts(rep, LIMIT)
    local before = passes()
    local a = assert(c:_call("POST", "/api/v1/provisioner/report", bodies[1]))
    local b = assert(c:_call("POST", "/api/v1/provisioner/report", bodies[1]))
    assert.same({}, a.ignored); assert.is_true(a.more)
    assert.is_true(b.more)
    assert.equal(before, passes())
    local _, by = states()
    local first = #cjson.decode(bodies[1]).replicas
    assert.equal(first, by.healthy)
    assert.equal(ROWS - first, by.starting)
    assert(c:report(rep))
    local n, by2 = states()
    assert.equal(ROWS, n)
    assert.equal(ROWS, by2.healthy)
    assert.equal(before + 1, passes())
  end)

  it("a part is fenced by the lease like a whole report", function()
    local rep = report(lease.lease.generation + 7, "ending")
    local st, doc = srv:request("POST", "/api/v1/provisioner/report", client.report_parts(rep, LIMIT)[1],
      { ["Content-Type"] = "application/json", [client.TOKEN_HEADER or "Obleth-Lease-Token"] = c.lease_token })
    assert.equal(409, st)
    assert.equal("lease_lost", doc.error.code)
    local _, by = states()
    assert.is_nil(by.ending)
  end)

  it("a part with more: true carries replica rows only", function()
    local st, doc = srv:request("POST", "/api/v1/provisioner/report", { pass = { started_at = 1 }, more = true,
      lease_generation = lease.lease.generation, outcomes = { { model_id = model_id, state = "COMPLETED" } } },
      { ["Obleth-Lease-Token"] = c.lease_token })
    assert.equal(400, st)
    assert.equal("outcomes", doc.error.field)
  end)
end)
