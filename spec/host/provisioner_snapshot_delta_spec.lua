-- The versioned provisioner snapshot (docs/managed-spec.md, "Snapshot versions"): given the version
-- the provisioner holds, GET /api/v1/provisioner/snapshot answers only the models changed since; a
-- full snapshot whenever it cannot (obleth serve restarted, another lease generation, a version it
-- does not know). The provisioner's client merges a delta into the models it holds, so every pass
-- still sees what a full snapshot would show: checked against a fresh full snapshot after each write.
local server = require "spec.support.server"
local client = require "obleth.provisioner.client"

local SNAP = "/api/v1/provisioner/snapshot"

describe("the versioned provisioner snapshot", function()
  local srv, db, ids
  setup(function()
    db = server.tmpdb()
    local store = assert(require("obleth.store").open(db))
    ids = {}
    local reps = {}
    for i, name in ipairs({ "a", "b", "c" }) do
      local m = assert(store:create_model { name = name })
      ids[name] = m.id
      assert(store:put_spec(m.id, { replicas = 2, enabled = true, partition = "gpu", launch_command = "x" }))
      if i < 3 then -- c has a spec and no replica
        for s = 1, 2 do
          reps[#reps + 1] = { nonce = ("%08x%08x"):format(i, s), model_id = m.id, slot = s, state = "healthy",
            job_id = 100 * i + s, node = "n1", port = 20000 + s, endpoint = ("http://n1:%d"):format(20000 + s) }
        end
      end
    end
    assert(store:apply_report({ pass = { started_at = os.time(), duration = 0.1 }, replicas = reps, outcomes = {},
      endpoints = {}, provision_errors = {}, acknowledged = { restart = {}, clear_lost = {} } }, os.time()))
    store:close()
    srv = server.start { db = db }
  end)
  teardown(function() if srv then srv:cleanup() end end)

  local function raw(since)
    local st, doc = srv:request("GET", since and (SNAP .. "?since=" .. since) or SNAP)
    assert.equal(200, st)
    return doc
  end
  local function names(doc)
    local out = {}
    for _, m in ipairs(doc.models) do out[#out + 1] = m.name end
    return out
  end
  -- what a provisioner without a held snapshot gets now
  local function full()
    local doc = assert(client.new(srv.base, srv.token):snapshot())
    assert.is_false(doc.delta)
    return doc
  end
  local function same_as_full(doc)
    assert.same(full().models, doc.models)
  end

  local c, lease
  it("a first snapshot is full and carries a version; the same version again answers no model", function()
    c = client.new(srv.base, srv.token)
    lease = assert(c:lease { holder = "spec", host = "h", pid = 1, ttl = 3600 })
    local doc = assert(c:snapshot())
    assert.is_false(doc.delta)
    assert.matches("^%x+%.%d+%.%d+$", doc.version)
    assert.same({ "a", "b", "c" }, names(doc))
    local d = raw(doc.version)
    assert.is_true(d.delta)
    assert.same({}, d.models)
    assert.same({}, d.removed)
    assert.equal(doc.version, d.version) -- nothing was written
    assert.is_table(d.settings)          -- the head is always whole
    assert.equal(doc.instance, d.instance)
    local again = assert(c:snapshot()) -- the client merges: the pass sees every model
    assert.is_true(again.delta)
    assert.same(doc.models, again.models)
    assert.equal(1, c.resyncs)
  end)

  it("a write between two passes is in the next delta, and only its model", function()
    local held = c.held.version
    local _, reps = srv:request("GET", ("/api/v1/models/%d/replicas"):format(ids.a))
    assert.equal(202, (srv:request("POST", ("/api/v1/replicas/%d/restart"):format(reps.replicas[1].id))))
    local d = raw(held)
    assert.is_true(d.delta)
    assert.same({ "a" }, names(d))
    assert.same({ reps.replicas[1].id }, d.restart)
    local doc = assert(c:snapshot())
    assert.is_true(doc.delta)
    assert.same({ "a", "b", "c" }, names(doc))
    same_as_full(doc)
  end)

  it("a report's changes come back in the next delta (a write between snapshot and report too)", function()
    local held = c.held.version
    local snap = assert(c:snapshot()) -- pass 1 reads ...
    assert.same({}, raw(held).models)
    -- ... an operator edits model c's spec meanwhile ...
    assert.equal(200, (srv:request("PUT", ("/api/v1/models/%d/managed"):format(ids.c),
      { replicas = 3, enabled = true, partition = "gpu", launch_command = "x" })))
    -- ... and pass 1 reports model b's first replica unhealthy
    local row
    for _, m in ipairs(snap.models) do if m.name == "b" then row = m.replicas[1] end end
    assert(c:report { lease_generation = lease.lease.generation, pass = { started_at = os.time(), duration = 0.1 },
      replicas = { { nonce = row.nonce, model_id = row.model_id, slot = row.slot, state = "unhealthy",
        check_failures = 3 } },
      outcomes = {}, endpoints = {}, provision_errors = {}, acknowledged = { restart = {}, clear_lost = {} } })
    local d = raw(snap.version)
    assert.same({ "b", "c" }, names(d))
    local doc = assert(c:snapshot())
    same_as_full(doc)
    for _, m in ipairs(doc.models) do
      if m.name == "c" then assert.equal(3, m.spec.replicas) end
      if m.name == "b" then assert.equal("unhealthy", m.replicas[1].state) end
    end
  end)

  it("a model no longer listed is named in removed, and the client forgets it", function()
    local held = c.held.version
    assert.equal(204, (srv:request("DELETE", ("/api/v1/models/%d/managed"):format(ids.c))))
    local d = raw(held)
    assert.same({}, d.models)
    assert.same({ ids.c }, d.removed)
    local doc = assert(c:snapshot())
    assert.same({ "a", "b" }, names(doc))
    same_as_full(doc)
  end)

  it("a version it cannot make a delta from gets the full snapshot", function()
    local v = c.held.version
    local boot, gen, n = v:match("^(%x+)%.(%d+)%.(%d+)$")
    for _, since in ipairs({ "x", "", boot .. "." .. gen .. "." .. (tonumber(n) + 1000), -- ahead of the store
      "00000000." .. gen .. "." .. n,                                                -- another obleth serve
      boot .. "." .. (tonumber(gen) + 1) .. "." .. n }) do                           -- another lease
      local d = raw(since)
      assert.is_false(d.delta, since)
      assert.same({ "a", "b" }, names(d))
      assert.is_nil(d.removed)
    end
  end)

  it("a new lease generation means a full resync", function()
    local old = c.held.version
    assert(c:release(lease.lease.generation))
    local other = client.new(srv.base, srv.token)
    local l2 = assert(other:lease { holder = "other", host = "h", pid = 2, ttl = 3600 })
    assert.is_true(l2.acquired)
    assert.is_true(l2.lease.generation > lease.lease.generation)
    assert.is_false(raw(old).delta) -- the old holder's version is no base any more
    assert(other:release(l2.lease.generation))
    lease = assert(c:lease { holder = "spec", host = "h", pid = 1, ttl = 3600 })
    assert.is_nil(c.held) -- acquiring dropped what it held
    local doc = assert(c:snapshot())
    assert.is_false(doc.delta)
    assert.equal(2, c.resyncs)
    same_as_full(doc)
  end)

  it("after obleth serve restarts, the version held is no base: full resync", function()
    local v = c.held.version
    srv:stop()
    srv = server.start { db = db, token = srv.token, port = srv.port }
    local d = raw(v)
    assert.is_false(d.delta)
    local doc = assert(c:snapshot())
    assert.is_false(doc.delta)
    assert.equal(3, c.resyncs)
    same_as_full(doc)
    assert.is_true(raw(c.held.version).delta)
  end)
end)
