-- obleth.store's semantics, the same on every backend: models and endpoints, managed specs and their
-- generation, the provisioner lease and its fencing, submits, reports, launch history and the
-- snapshot's recent ends, settings, keys, recipes, and a transaction that rolls back as a whole.
-- Runs on SQLite (a file in a temp directory) and, where spec.support.pg can start Debian's
-- PostgreSQL, on PostgreSQL too (one database per case).
local stores = require "spec.support.stores"
local cjson = require "cjson"
local NULL = cjson.null

local function report(t)
  local r = { pass = { started_at = 1000, duration = 0.5, error = NULL }, replicas = {}, outcomes = {},
    endpoints = {}, provision_errors = {}, acknowledged = { restart = {}, clear_lost = {} } }
  for k, v in pairs(t or {}) do r[k] = v end
  return r
end

local HASH_A = string.rep("a", 64)
local HASH_B = string.rep("b", 64)

for _, backend in ipairs(stores.backends()) do
describe("obleth.store on " .. backend.name, function()
  local store, why_not, location
  before_each(function() store, why_not, location = backend.open() end)
  after_each(function() if store then store:close() end end)
  local busted_it = it
  local it = function(name, fn) -- a backend that cannot run here marks its cases pending
    busted_it(name, function() if not store then return pending(why_not) end fn() end)
  end

  it("a key's usage counters saturate at their bound instead of wrapping (or turning REAL)", function()
    local k = assert(store:create_api_key { name = "big", prefix = "ob-big", hash = HASH_B })
    local max = store.USAGE_COUNTER_MAX
    assert(store:add_api_key_usage { [k.id] = { requests = 1, prompt_tokens = max - 5, completion_tokens = 7 } })
    assert(store:add_api_key_usage { [k.id] = { requests = 1, prompt_tokens = 90071992547409929,
      completion_tokens = 7 } })
    local u = store:get_api_key(k.id).usage
    assert.same({ "integer", max, 14, 2 }, { math.type(u.prompt_tokens), u.prompt_tokens, u.completion_tokens,
      u.requests })
    -- an unbounded delta is held to the bound too
    assert(store:add_api_key_usage { [k.id] = { prompt_tokens = math.maxinteger } })
    assert.equal(max, store:get_api_key(k.id).usage.prompt_tokens)
  end)

  it("creates, renames and deletes models; a taken name is a conflict on field name", function()
    local a = assert(store:create_model { name = "a", description = "first" })
    assert.equal("staged", a.status)
    assert.is_false(a.managed)
    assert.same({}, a.endpoints)
    local _, err = store:create_model { name = "a" }
    assert.equal("conflict", err.code)
    assert.equal("name", err.field)
    local b = assert(store:create_model { name = "b", description = NULL })
    assert.equal(NULL, b.description)
    local _, err2 = store:update_model(b.id, { name = "a" })
    assert.equal("conflict", err2.code)
    local b2 = assert(store:update_model(b.id, { name = "b2", description = "second" }))
    assert.equal("b2", b2.name)
    assert.equal("second", store:model_by_name("b2").description)
    assert.equal(2, #store:list_models())
    assert.is_true(store:delete_model(a.id))
    assert.is_nil(store:get_model(a.id))
    local _, err3 = store:delete_model(a.id)
    assert.equal("not_found", err3.code)
  end)

  it("adds endpoints once each, in order; the model is active while it has one", function()
    local m = assert(store:create_model { name = "m" })
    assert(store:add_endpoint(m.id, "http://h:2"))
    assert(store:add_endpoint(m.id, "http://h:1"))
    local again = assert(store:add_endpoint(m.id, "http://h:2"))
    assert.same({ "http://h:2", "http://h:1" }, again.endpoints)
    assert.equal("active", again.status)
    local r = store:route_model("m")
    assert.same({ id = m.id, name = "m", status = "active", endpoints = { "http://h:2", "http://h:1" } }, r)
    assert.is_nil(store:route_model("nope"))
    local rm = store:route_models()
    assert.equal(1, #rm)
    assert.equal(2, rm[1].endpoints)
    assert.equal(0, rm[1].healthy)
    assert(store:remove_endpoint(m.id, "http://h:2"))
    local last = assert(store:remove_endpoint(m.id, "http://h:1"))
    assert.equal("staged", last.status)
    local _, err = store:remove_endpoint(m.id, "http://h:1")
    assert.equal("not_found", err.code)
    assert.equal("url", err.field)
  end)

  it("bumps a spec's generation on every change only, and never back across a delete", function()
    local m = assert(store:create_model { name = "m" })
    local spec = { replicas = 1, enabled = true, partition = "gpu", launch_command = "serve" }
    local p1 = assert(store:put_spec(m.id, spec))
    assert.is_true(p1.created)
    assert.equal(1, p1.spec.generation)
    assert.equal(1, assert(store:put_spec(m.id, spec)).spec.generation)
    assert.is_true(store:get_model(m.id).managed)
    spec.replicas = 2
    assert.equal(2, assert(store:put_spec(m.id, spec)).spec.generation)
    assert.is_true(store:delete_spec(m.id))
    assert.is_nil(store:get_spec(m.id))
    local p4 = assert(store:put_spec(m.id, spec))
    assert.is_true(p4.created)
    assert.equal(4, p4.spec.generation)
    assert.same({}, p4.spec.preamble)
    local _, err = store:delete_model(m.id)
    assert.equal("conflict", err.code)
    assert.equal(1, #store:list_specs())
  end)

  it("grants the lease to one holder, renews it only with its token, fences submits and reports", function()
    local req = { holder = "p1", host = "h", pid = 10, ttl = 30, token_hash = HASH_A }
    local got = assert(store:acquire_lease(req, 1000))
    assert.is_true(got.acquired)
    assert.equal(1, got.lease.generation)
    local _, held = store:acquire_lease({ holder = "p2", host = "h", pid = 11, ttl = 30, token_hash = HASH_B }, 1010)
    assert.equal("lease_held", held.code)
    assert.equal("p1", held.lease.holder)
    -- the generation alone renews nothing
    local _, held2 = store:acquire_lease({ holder = "p2", host = "h", pid = 11, ttl = 30, generation = 1,
      proof = HASH_B, token_hash = HASH_B }, 1010)
    assert.equal("lease_held", held2.code)
    local renewed = assert(store:acquire_lease({ holder = "p1", host = "h", pid = 10, ttl = 30, generation = 1,
      proof = HASH_A, token_hash = HASH_A }, 1020))
    assert.is_false(renewed.acquired)
    assert.equal(1050, renewed.lease.expires_at)
    local m = assert(store:create_model { name = "m" })
    local rows = { { nonce = "n1", model_id = m.id, slot = 1, state = "pending", port = 8000, generation = 1 } }
    assert(store:record_submits(1, rows, 1021, HASH_A))
    assert.equal("pending", store:replica_by_nonce("n1").state)
    local _, lost = store:record_submits(1, { { nonce = "n2", model_id = m.id, slot = 2, state = "pending" } },
      1022, HASH_B)
    assert.equal("lease_lost", lost.code)
    assert.is_nil(store:replica_by_nonce("n2"))
    -- a report without the lease is refused while the lease is live
    local _, noreport = store:apply_report(report(), 1023)
    assert.equal("lease_lost", noreport.code)
    -- after expiry another holder takes over with generation 2; the old one is fenced off
    local taken = assert(store:acquire_lease({ holder = "p2", host = "h", pid = 11, ttl = 30, token_hash = HASH_B },
      2000))
    assert.is_true(taken.acquired)
    assert.equal(2, taken.lease.generation)
    assert.equal("p1", taken.previous.holder)
    local stale = report { lease_generation = 1, lease_proof = HASH_A }
    local _, fenced = store:apply_report(stale, 2001)
    assert.equal("lease_lost", fenced.code)
    assert.equal("lease_generation", fenced.field)
    assert.is_false(store:release_lease(1, HASH_A, 2002))
    assert.is_true(store:release_lease(2, HASH_B, 2002))
    local st = store:provisioner_status()
    assert.equal(2, st.lease.generation)
    assert.equal(2002, st.lease.expires_at)
  end)

  it("keeps the audit trail newest first, filtered by actor, model and time, and a deleted model's rows", function()
    local m = assert(store:create_model { name = "audited" })
    assert(store:add_audit { at = 100, actor = "alice", via = "proxy", role = "operator", method = "POST",
      route = "/api/v1/deployments/launch", target = "/api/v1/deployments/launch", model_id = m.id, status = 201,
      summary = { api_model_name = "audited" } })
    assert(store:add_audit { at = 200, actor = "admin-token", via = "token", method = "PUT",
      route = "/api/v1/settings/router", target = "/api/v1/settings/router", status = 200 })
    assert(store:delete_model(m.id))
    local all = store:list_audit()
    assert.same({ "admin-token", "alice" }, { all[1].actor, all[2].actor })
    assert.equal(NULL, all[1].model_id)
    assert.same({ api_model_name = "audited" }, all[2].summary)
    assert.equal(1, #store:list_audit { actor = "alice" })
    assert.equal(1, #store:list_audit { model_id = m.id })
    assert.equal(1, #store:list_audit { since = 150 })
    assert.equal(1, #store:list_audit { limit = 1 })
  end)

  it("applies a report: replicas, outcomes, endpoints, errors, acknowledgements, in one transaction", function()
    local m = assert(store:create_model { name = "m" })
    assert(store:put_spec(m.id, { replicas = 1, enabled = true, partition = "gpu", launch_command = "serve" }))
    local lid = assert(store:add_launch { model_id = m.id, recipe_id = "r1", settings = { a = 1 }, created_by = "me" })
    local res = assert(store:apply_report(report {
      replicas = { { nonce = "n1", model_id = m.id, slot = 1, state = "healthy", job_id = 42, node = "c1", port = 8000,
        endpoint = "http://c1:8000", healthy_at = 1000.5, restart_requested = false,
        slurm = { state = "RUNNING", time_limit = 60 }, ["end"] = NULL } },
      endpoints = { [m.id] = { "http://c1:8000" } },
      provision_errors = { [m.id] = { message = "no partition" } },
    }, 1001))
    assert.same({}, res.ignored)
    assert.is_true(res.changes.replicas[m.id])
    assert.is_true(res.changes.models[m.id])
    local r = store:replica_by_nonce("n1")
    assert.equal("healthy", r.state)
    assert.equal(lid, r.launch_id)
    assert.equal(1000.5, r.healthy_at)
    assert.equal("RUNNING", r.slurm.state)
    assert.is_false(r.restart_requested)
    assert.equal(NULL, r["end"])
    assert.same({ "http://c1:8000" }, store:get_model(m.id).endpoints)
    assert.equal("no partition", store:get_spec(m.id).provision_error.message)
    assert.equal(1, store:route_models()[1].healthy)
    assert.equal(1, store:count_live_replicas())
    -- restart asked, then acknowledged; the job ends (signal as a number and as a name)
    assert.is_true(assert(store:request_restart(r.id)).restart_requested)
    assert.same({ r.id }, store:snapshot_head(1002).restart)
    assert.same({ model_id = m.id, lost = 0 }, assert(store:request_clear_lost(m.id)))
    assert(store:request_clear_lost(m.id))
    assert.same({ m.id }, store:snapshot_head(1002).clear_lost)
    assert(store:apply_report(report {
      replicas = { { nonce = "n1", state = "ended", ended_at = 1003.25,
        ["end"] = { state = "CANCELLED", reason = "asked", exit_code = 0, signal = 15, node = "c1" } } },
      outcomes = { { nonce = "n1", model_id = m.id, job_id = 42, state = "CANCELLED", signal = "SIGTERM",
        started_at = 999, ended_at = 1003.25 } },
      acknowledged = { restart = { r.id }, clear_lost = { m.id } },
    }, 1004))
    local ended = store:get_replica(r.id)
    assert.equal("ended", ended.state)
    assert.same({ state = "CANCELLED", reason = "asked", exit_code = 0, signal = 15, node = "c1" }, ended["end"])
    assert.is_false(ended.restart_requested)
    assert.same({}, store:snapshot_head(1005).restart)
    assert.same({}, store:snapshot_head(1005).clear_lost)
    assert.equal(0, store:count_live_replicas(m.id))
    local hist = store:list_launches { model_id = m.id }
    assert.equal(1, #hist)
    assert.same({ a = 1 }, hist[1].settings)
    assert.equal("me", hist[1].created_by)
    assert.equal(1, #hist[1].outcomes)
    local o = hist[1].outcomes[1]
    assert.equal("SIGTERM", o.signal)
    assert.is_true(o.healthy)
    assert.equal(1, o.slot)
    assert.equal(42, o.job_id)
    assert.equal(1, #store:list_launches { recipe_id = "r1" })
    local snap = store:snapshot(1006)
    assert.equal(1, #snap.models)
    local ends = snap.models[1].recent_ends
    assert.equal(1, #ends)
    assert.equal("CANCELLED", ends[1].state)
    assert.is_true(ends[1].healthy)
    assert.equal(1003.25, ends[1].at)
    assert.same({ m.id }, store:replica_model_ids())
    assert.is_string(snap.instance)
    assert.equal(8, #snap.instance)
  end)

  it("takes the provisioner's fractional clock for a report's times", function()
    local m = assert(store:create_model { name = "m" })
    assert(store:apply_report(report {
      replicas = { { nonce = "n1", model_id = m.id, slot = 1, state = "ended", ended_at = 1000.5 } },
      outcomes = { { nonce = "n1", model_id = m.id, state = "COMPLETED" } },
    }, 1000.75))
    assert.equal(1000.75, store:replica_by_nonce("n1").updated_at)
    assert(store:apply_report(report { acknowledged = { restart = { store:replica_by_nonce("n1").id }, clear_lost = {} } },
      1001.25))
    assert.equal(1001.25, store:replica_by_nonce("n1").updated_at)
    -- an outcome without its own end time is at the time it was recorded
    assert.equal(1000.75, store:snapshot_model({ id = m.id, name = "m", status = "staged" }).recent_ends[1].at)
  end)

  it("records a rollover's successor with the nonce of the replica it takes over from", function()
    local m = assert(store:create_model { name = "m" })
    assert(store:apply_report(report { replicas = { { nonce = "0a1b2c3d4e5f6a7b", model_id = m.id, slot = 1,
      state = "healthy" } } }, 1000))
    assert(store:apply_report(report { replicas = { { nonce = "9f8e7d6c5b4a3f2e", model_id = m.id, slot = 1,
      state = "pending", successor_of = "0a1b2c3d4e5f6a7b" } } }, 1002))
    assert.equal("0a1b2c3d4e5f6a7b", store:replica_by_nonce("9f8e7d6c5b4a3f2e").successor_of)
  end)

  it("rolls a whole report back when one replica in it is invalid", function()
    local m = assert(store:create_model { name = "m" })
    local _, err = store:apply_report(report {
      replicas = { { nonce = "ok1", model_id = m.id, slot = 1, state = "submitted" },
        { nonce = "bad", model_id = m.id } },
    }, 1000)
    assert.equal("invalid", err.code)
    assert.is_nil(store:replica_by_nonce("ok1"))
    assert.equal(0, store:provisioner_status().passes)
  end)

  it("keeps replica logs per stream, the last report replacing the one before", function()
    local m = assert(store:create_model { name = "m" })
    assert(store:apply_report(report { replicas = { { nonce = "n1", model_id = m.id, slot = 1, state = "starting" } } },
      1000))
    local id = store:replica_by_nonce("n1").id
    assert(store:put_replica_log(id, "stderr", "first", "/tmp/x.err", nil, 1001))
    assert(store:put_replica_log(id, "stderr", "second", "/tmp/x.err", 3, 1002))
    local logs = store:replica_logs(id)
    assert.equal("second", logs.stderr.tail)
    assert.equal(3, logs.stderr.exit_code)
    assert.is_nil(logs.stdout)
  end)

  it("replaces settings, runs their check inside the transaction, and keeps keys and recipes", function()
    assert.is_nil(store:get_settings())
    assert(store:put_settings({ url = "http://a", enabled = true }))
    local s = assert(store:put_settings({ url = "http://b", enabled = false, updated_at = 5 }))
    assert.equal("http://b", s.url)
    local _, err = store:put_settings({ url = "http://c" }, function(cur)
      return nil, { code = "conflict", message = "no: " .. cur.url, field = "enabled" }
    end)
    assert.same({ code = "conflict", message = "no: http://b", field = "enabled" }, err)
    assert.equal("http://b", store:get_settings().url)
    local k = assert(store:create_api_key { name = "ci", prefix = "ob-abc", hash = HASH_A })
    assert.equal(k.id, store:api_key_id(HASH_A))
    assert.equal(NULL, k.revoked_at)
    local rk = assert(store:revoke_api_key(k.id))
    assert.is_number(rk.revoked_at)
    assert.is_nil(store:api_key_id(HASH_A))
    assert.equal(1, #store:list_api_keys())
    local _, kerr = store:create_api_key { name = "dup", prefix = "ob-abc", hash = HASH_A }
    assert.equal("storage", kerr.code)
    local put = assert(store:put_recipe("r1", "One", '{"a":1}', true))
    assert.is_true(put.created)
    local _, rerr = store:put_recipe("r1", "One", '{"a":1}', true)
    assert.equal("conflict", rerr.code)
    assert.is_false(assert(store:put_recipe("r1", "Uno", '{"a":2}')).created)
    assert.equal(1, #store:list_recipes())
    assert.is_true(store:delete_recipe("r1"))
    assert.equal("not_found", select(2, store:delete_recipe("r1")).code)
  end)

  it("versions the snapshot: every write to a model's entry moves it, and names the model", function()
    local function changed(v)
      local out = {}
      for _, m in ipairs(store:snapshot_models(v)) do out[#out + 1] = m.name end
      return out, store:snapshot_changed(v)
    end
    local a = assert(store:create_model { name = "a" })
    local b = assert(store:create_model { name = "b" })
    local c = assert(store:create_model { name = "c" })
    for _, m in ipairs({ a, b, c }) do
      assert(store:put_spec(m.id, { replicas = 1, enabled = true, partition = "gpu", launch_command = "x" }))
    end
    local v0 = store:snapshot_version()
    assert.same({}, (changed(v0)))
    assert(store:apply_report(report { replicas = { { nonce = "n1", model_id = a.id, slot = 1, state = "healthy",
      job_id = 5, node = "n1", port = 20001, endpoint = "http://n1:20001" } },
      endpoints = { [tostring(a.id)] = { "http://n1:20001" } } }, 1000))
    local v1 = store:snapshot_version()
    assert.is_true(v1 > v0)
    assert.same({ "a" }, (changed(v0)))
    assert.same({}, (changed(v1)))
    assert(store:request_restart(store:replica_by_nonce("n1").id)) -- a replica's row
    assert(store:add_endpoint(b.id, "http://x:1"))                  -- an endpoint
    assert(store:put_spec(c.id, { replicas = 2, enabled = true, partition = "gpu", launch_command = "x" }))
    assert.same({ "a", "b", "c" }, (changed(v1)))
    local v2 = store:snapshot_version()
    assert(store:delete_spec(c.id)) -- no longer listed, still named as changed
    local names, ids = changed(v2)
    assert.same({}, names)
    assert.same({ c.id }, ids)
  end)

  it("shares one database between two stores: each sees the other's writes at once, one writer at a time", function()
    local loop = require "obleth.loop"
    local other = assert(require("obleth.store").open(location))
    local m = assert(store:create_model { name = "shared" })
    assert.equal(m.id, other:model_by_name("shared").id)
    assert(other:add_endpoint(m.id, "http://h:1"))
    assert.same({ "http://h:1" }, store:route_model("shared").endpoints)
    -- many tasks, half through each store, create the same name and take the lease: one wins each
    local created, conflicts, acquired, held, done = 0, 0, 0, 0, 0
    local all = loop.notifier()
    for i = 1, 8 do
      loop.spawn(function()
        local s = i % 2 == 0 and store or other
        local ok, err = s:create_model { name = "race" }
        if ok then created = created + 1 elseif err.code == "conflict" then conflicts = conflicts + 1 end
        local l, lerr = s:acquire_lease({ holder = "p" .. i, host = "h", pid = i, ttl = 30,
          token_hash = string.rep(string.format("%x", i % 16), 64) }, 5000)
        if l then acquired = acquired + 1 elseif lerr.code == "lease_held" then held = held + 1 end
        done = done + 1
        if done == 8 then all:notify() end
      end)
    end
    all:wait()
    assert.same({ 1, 7, 1, 7 }, { created, conflicts, acquired, held })
    assert.equal(1, store:provisioner_status().lease.generation)
    other:close()
  end)

  it("reports its schema version: every migration applied", function()
    assert.equal(#store.db.migrations, store:schema_version())
    assert.is_true(store:schema_version() >= 8)
  end)
end)
end
