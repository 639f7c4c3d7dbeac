-- `obleth serve` process life: start-up refusals, clean stop, restart with
-- everything kept, SIGKILL during a burst of writes.
local server = require "spec.support.server"
local util = require "spec.support.util"
local loop = require "obleth.loop"

describe("obleth serve: process", function()
  it("refuses to start without an admin token, says how to set one, exits 2", function()
    local code, _, err = util.run_obleth({ "serve", "--listen", "127.0.0.1:0", "--db", server.tmpdb() })
    if os.getenv("OBLETH_ADMIN_TOKEN") then pending("OBLETH_ADMIN_TOKEN is set in this environment") return end
    assert.equal(2, code)
    assert.matches("OBLETH_ADMIN_TOKEN", err)
    assert.matches("export", err)
  end)

  it("refuses a bad --listen with exit 2", function()
    local code, _, err = util.run_obleth({ "serve", "--listen", "nowhere" })
    assert.equal(2, code)
    assert.matches("HOST:PORT", err)
  end)

  it("SIGTERM finishes and exits 0; restarted on the same database, everything is still there", function()
    local srv = server.start()
    finally(function() srv:cleanup() end)
    local _, m = srv:request("POST", "/api/v1/models", { name = "kept" })
    srv:request("PUT", "/api/v1/models/" .. m.id .. "/managed", { launch_command = "serve", replicas = 3 })
    srv:request("PUT", "/api/v1/settings/slurm", { url = "http://h:6820", token = "abc.def.ghi",
      defaults = { partition = "gpu" } })
    local recipe = require("obleth.yaml").decode(io.open(util.root() .. "/recipes/smoke-test.yaml"):read("a"))
    recipe.id = "my-recipe"
    assert.equal(201, (srv:request("POST", "/api/v1/recipes", recipe)))
    srv:request("POST", "/api/v1/provisioner/report", { pass = { started_at = 1, duration = 1 },
      replicas = { { nonce = "00000000000000d1", model_id = m.id, slot = 1, state = "healthy" } },
      endpoints = { [tostring(m.id)] = { "http://10.1.1.1:20001" } } })
    local _, before_spec = srv:request("GET", "/api/v1/models/" .. m.id .. "/managed")
    local code, _, err = srv:stop("TERM")
    assert.equal(0, code)
    assert.matches("event=serve_stopped", err)

    local srv2 = server.start { db = srv.db, token = srv.token }
    finally(function() srv2:cleanup() end)
    local _, model = srv2:request("GET", "/api/v1/models/" .. m.id)
    assert.equal("kept", model.name)
    assert.equal("active", model.status)
    local _, spec = srv2:request("GET", "/api/v1/models/" .. m.id .. "/managed")
    assert.same(before_spec, spec)
    local _, s = srv2:request("GET", "/api/v1/settings/slurm")
    assert.equal("gpu", s.defaults.partition)
    assert.is_true(s.token_set)
    local _, reps = srv2:request("GET", "/api/v1/replicas")
    assert.equal(1, #reps.replicas)
    local st = srv2:request("GET", "/api/v1/recipes/my-recipe")
    assert.equal(200, st)
    srv2:cleanup()
  end)

  it("SIGKILL during a burst of writes: every acknowledged write is there, nothing half-written", function()
    local srv = server.start()
    finally(function() srv:cleanup() end)
    local acked_models, acked_specs, acked_batches = {}, {}, {}
    local running, stop = 0, false
    for w = 1, 8 do
      running = running + 1
      loop.spawn(function()
        local i = 0
        while not stop do
          i = i + 1
          local st, m = srv:request("POST", "/api/v1/models", { name = ("burst-%d-%d"):format(w, i) })
          if st ~= 201 then break end
          acked_models[#acked_models + 1] = m
          st = srv:request("PUT", "/api/v1/models/" .. m.id .. "/managed",
            { launch_command = "serve " .. i, replicas = 1 + i % 4 })
          if st ~= 201 then break end
          acked_specs[m.id] = 1 + i % 4
          local reps = {}
          for k = 1, 4 do
            reps[k] = { nonce = ("%04x%04x%08x"):format(w, i, k), model_id = m.id, slot = k, state = "submitted",
              job_id = w * 100000 + i * 10 + k }
          end
          st = srv:request("POST", "/api/v1/provisioner/report", { pass = { started_at = i, duration = 0.01 },
            replicas = reps, endpoints = { [tostring(m.id)] = { ("http://10.0.%d.%d:20001"):format(w, i % 250) } } })
          if st ~= 200 then break end
          acked_batches[m.id] = true
        end
        running = running - 1
      end)
    end
    loop.sleep(0.8)
    local code = srv:stop("KILL")
    stop = true
    local t0 = loop.monotonic()
    while running > 0 and loop.monotonic() - t0 < 25 do loop.sleep(0.05) end
    assert.equal(0, running)
    assert.is_true(code ~= 0)
    assert.is_true(#acked_models > 20, "only " .. #acked_models .. " writes before the kill")

    -- the database is sound, then the restarted server has every acknowledged write
    local sqlite = require "obleth.sqlite"
    local db = assert(sqlite.open(srv.db))
    assert.equal("ok", db:first("PRAGMA integrity_check").integrity_check)
    -- nothing half-written: a spec's generation matches its model's, a batch of replicas is whole
    for _, r in ipairs(db:query([[SELECT m.id, m.generation AS mg, s.generation AS sg FROM models m
        JOIN managed_specs s ON s.model_id = m.id]])) do
      assert.equal(r.mg, r.sg)
    end
    for _, r in ipairs(db:query("SELECT model_id, count(*) AS n FROM replicas GROUP BY model_id")) do
      assert.equal(4, r.n)
    end
    for _, r in ipairs(db:query([[SELECT m.id, m.status, (SELECT count(*) FROM endpoints e WHERE e.model_id = m.id) AS n
        FROM models m]])) do
      assert.equal(r.n > 0 and "active" or "staged", r.status)
    end
    db:close()

    local srv2 = server.start { db = srv.db, token = srv.token }
    finally(function() srv2:cleanup() end)
    for _, m in ipairs(acked_models) do
      local st, got = srv2:request("GET", "/api/v1/models/" .. m.id)
      assert.equal(200, st)
      assert.equal(m.name, got.name)
      if acked_specs[m.id] then
        local _, spec = srv2:request("GET", "/api/v1/models/" .. m.id .. "/managed")
        assert.equal(acked_specs[m.id], spec.replicas)
      end
      if acked_batches[m.id] then
        local _, reps = srv2:request("GET", "/api/v1/models/" .. m.id .. "/replicas")
        assert.equal(4, #reps.replicas)
        assert.equal("active", got.status)
      end
    end
    srv2:cleanup()
  end)
end)
