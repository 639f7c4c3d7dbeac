-- Managed specs, replicas, the provisioner protocol and launch history over real HTTP.
local server = require "spec.support.server"

local function new_model(srv, name)
  local st, m = srv:request("POST", "/api/v1/models", { name = name })
  assert.equal(201, st)
  return m
end

local NONCE1, NONCE2, NONCE3 = "00000000000000a1", "00000000000000a2", "00000000000000a3"

describe("obleth serve: managed specs", function()
  local srv
  setup(function() srv = server.start() end)
  teardown(function() srv:cleanup() end)

  it("GET .../load answers the model's per-minute history with its words, refuses hours outside 1 to 6, "
    .. "and the OpenAPI document names its schema", function()
    local m = new_model(srv, "load-a")
    local path = "/api/v1/models/" .. m.id .. "/load"
    local st, doc = srv:request("GET", path .. "?hours=2")
    assert.equal(200, st)
    assert.same({ m.id, "load-a", 60, 2, 6 }, { doc.model_id, doc.model, doc.step, doc.hours, doc.hours_max })
    assert.equal(2 * 3600, doc.to - doc.from)
    assert.matches("^No request in the last %d+ min%.$", doc.summary)
    -- sampled on the read: this minute's point, with no replicas (no managed spec)
    assert.equal(1, #doc.points)
    assert.same({ 0, 0, 0 }, { doc.points[1].inflight, doc.points[1].queued, doc.points[1].finished })
    assert.is_nil(doc.points[1].current)
    for _, h in ipairs({ "0", "7", "x" }) do
      local st2, e = srv:request("GET", path .. "?hours=" .. h)
      assert.equal(400, st2, h)
      assert.equal("hours", e.error.field)
    end
    assert.equal(404, (srv:request("GET", "/api/v1/models/999999/load")))
    local _, api = srv:request("GET", "/api/v1/openapi.json")
    assert.equal("#/components/schemas/ModelLoad",
      api.paths["/api/v1/models/{id}/load"].get.responses["200"].content["application/json"].schema["$ref"])
    assert.is_table(api.components.schemas.ModelLoad.properties.points)
  end)

  it("PUT stores a checked spec with defaults and minutes; GET returns it; identical PUT keeps the generation", function()
    local m = new_model(srv, "spec-a")
    local path = "/api/v1/models/" .. m.id .. "/managed"
    assert.equal(404, (srv:request("GET", path)))
    local st, s = srv:request("PUT", path, { launch_command = "vllm serve x", time_limit = "1-00:00:30",
      image = "/images/vllm.sif", preamble = { "module load cuda/12" }, replicas = 2 })
    assert.equal(201, st)
    assert.equal(1441, s.time_limit)
    assert.equal(1, s.generation)
    assert.equal(2, s.replicas)
    assert.equal("/health", s.health.path)
    local _, again = srv:request("GET", path)
    assert.same(s, again)
    st, s = srv:request("PUT", path, again) -- a GET sent back unchanged
    assert.equal(200, st)
    assert.equal(1, s.generation)
    again.replicas = 3
    st, s = srv:request("PUT", path, again)
    assert.equal(200, st)
    assert.equal(2, s.generation)
    local _, list = srv:request("GET", "/api/v1/managed")
    assert.equal(1, #list.managed)
    assert.equal("spec-a", list.managed[1].model_name)
    local _, model = srv:request("GET", "/api/v1/models/" .. m.id)
    assert.is_true(model.managed)
  end)

  it("a bad spec is a 400 naming the field, and nothing is stored", function()
    local m = new_model(srv, "spec-b")
    local path = "/api/v1/models/" .. m.id .. "/managed"
    local _, good = srv:request("PUT", path, { launch_command = "a" })
    local cases = {
      { { launch_command = "a", time_limit = "UNLIMITED" }, "time_limit" },
      { { launch_command = "a", replicas = 65 }, "replicas" },
      { { launch_command = "a", script_body = "b" }, "script_body" },
      { { replicas = 1 }, "launch_command" },
      { { launch_command = "a", gpus = 1 }, "gpus" },
      { { launch_command = "a", health = { interval = "10s" } }, "health.interval" },
      { { launch_command = "a", environment = { ["A-B"] = "x" } }, "environment.A-B" },
    }
    for _, c in ipairs(cases) do
      local st, doc = srv:request("PUT", path, c[1])
      assert.equal(400, st, c[2])
      assert.equal("invalid", doc.error.code)
      assert.equal(c[2], doc.error.field)
    end
    local _, after = srv:request("GET", path)
    assert.same(good, after)
    assert.equal(404, (srv:request("PUT", "/api/v1/models/99999/managed", { launch_command = "a" })))
  end)

  it("DELETE stops launching: the spec is gone, the snapshot keeps the model with spec null while replicas live", function()
    local m = new_model(srv, "spec-c")
    local path = "/api/v1/models/" .. m.id .. "/managed"
    srv:request("PUT", path, { launch_command = "a" })
    assert.equal(200, (srv:request("POST", "/api/v1/provisioner/report", { pass = { started_at = 1, duration = 0.1 },
      replicas = { { nonce = NONCE3, model_id = m.id, slot = 1, state = "healthy", job_id = 7 } } })))
    assert.equal(204, (srv:request("DELETE", path)))
    assert.equal(404, (srv:request("GET", path)))
    assert.equal(404, (srv:request("DELETE", path)))
    local _, snap = srv:request("GET", "/api/v1/provisioner/snapshot")
    local found
    for _, sm in ipairs(snap.models) do if sm.id == m.id then found = sm end end
    assert.is_not_nil(found)
    assert.equal(require("cjson").null, found.spec)
    assert.equal(NONCE3, found.replicas[1].nonce)
    -- once the replica has ended the model leaves the snapshot; a new PUT gets a higher generation
    srv:request("POST", "/api/v1/provisioner/report", { pass = { started_at = 2, duration = 0.1 },
      replicas = { { nonce = NONCE3, state = "ended", ["end"] = { state = "CANCELLED" } } } })
    _, snap = srv:request("GET", "/api/v1/provisioner/snapshot")
    for _, sm in ipairs(snap.models) do assert.is_true(sm.id ~= m.id) end
    local _, s = srv:request("PUT", path, { launch_command = "b" })
    assert.equal(3, s.generation)
  end)
end)

describe("obleth serve: replicas and the provisioner protocol", function()
  local srv, m
  setup(function()
    srv = server.start()
    m = new_model(srv, "proto")
    srv:request("PUT", "/api/v1/models/" .. m.id .. "/managed", { launch_command = "serve", replicas = 2 })
  end)
  teardown(function() srv:cleanup() end)

  it("a report upserts replicas by nonce, sets endpoints and status, records outcomes and the check-in", function()
    local st, res = srv:request("POST", "/api/v1/provisioner/report", {
      pass = { started_at = 1764496800.5, duration = 0.42, error = nil },
      replicas = {
        { nonce = NONCE1, model_id = m.id, slot = 1, state = "healthy", job_id = 42, node = "n1", port = 20001,
          endpoint = "http://127.0.0.1:20001", healthy_at = 1764496801 },
        { nonce = NONCE2, model_id = m.id, slot = 2, state = "submitted", job_id = 43 },
      },
      outcomes = { { nonce = NONCE2, model_id = m.id, slot = 2, job_id = 41, state = "NODE_FAIL", reason = "n2 died",
        exit_code = 0, node = "n2", ended_at = 1764496700 } },
      endpoints = { [tostring(m.id)] = { "http://127.0.0.1:20001" } },
      provision_errors = { [tostring(m.id)] = { message = "Invalid account", field = "account", code = "refused",
        slurm_code = 2045 } },
    })
    assert.equal(200, st)
    assert.is_true(res.ok)
    local _, model = srv:request("GET", "/api/v1/models/" .. m.id)
    assert.equal("active", model.status)
    assert.same({ "http://127.0.0.1:20001" }, model.endpoints)
    local _, reps = srv:request("GET", "/api/v1/models/" .. m.id .. "/replicas")
    assert.equal(2, #reps.replicas)
    assert.equal("healthy", reps.replicas[1].state)
    assert.equal("n1", reps.replicas[1].node)
    -- fields not sent are kept
    srv:request("POST", "/api/v1/provisioner/report", { pass = { started_at = 2, duration = 0.1 },
      replicas = { { nonce = NONCE1, check_failures = 1 } } })
    _, reps = srv:request("GET", "/api/v1/replicas")
    assert.equal("n1", reps.replicas[1].node)
    assert.equal(1, reps.replicas[1].check_failures)
    local _, spec = srv:request("GET", "/api/v1/models/" .. m.id .. "/managed")
    assert.equal("account", spec.provision_error.field)
    assert.equal("refused", spec.provision_error.code)
    assert.equal(2045, spec.provision_error.slurm_code)
    local _, snap = srv:request("GET", "/api/v1/provisioner/snapshot")
    local sm = snap.models[1]
    assert.equal(2, #sm.replicas)
    -- with its exit code: which ends count is the lost policy's decision, from these facts
    assert.same({ slot = 2, state = "NODE_FAIL", healthy = false, at = 1764496700, exit_code = 0 }, sm.recent_ends[1])
    -- an end obleth caused carries its cancel_why into recent ends (the lost rule leaves it out)
    srv:request("POST", "/api/v1/provisioner/report", { pass = { started_at = 3, duration = 0.1 },
      replicas = { { nonce = NONCE2, state = "ending", cancel_why = "spec paused" } },
      outcomes = { { nonce = NONCE2, model_id = m.id, slot = 2, job_id = 43, state = "CANCELLED",
        ended_at = 1764496900, cancel_why = "spec paused" } } })
    _, snap = srv:request("GET", "/api/v1/provisioner/snapshot")
    assert.same({ slot = 2, state = "CANCELLED", healthy = false, at = 1764496900, cancel_why = "spec paused" },
      snap.models[1].recent_ends[1])
    -- ?ends=N: each slot's last N ends (the provisioner asks for its lost policy's window)
    local function slot2(s)
      local n = 0
      for _, e in ipairs(s.models[1].recent_ends) do if e.slot == 2 then n = n + 1 end end
      return n
    end
    assert.equal(2, slot2(snap))
    local code
    code, snap = srv:request("GET", "/api/v1/provisioner/snapshot?ends=1")
    assert.equal(200, code)
    assert.equal(1, slot2(snap))
    assert.equal("CANCELLED", snap.models[1].recent_ends[1].state)
    code = srv:request("GET", "/api/v1/provisioner/snapshot?ends=0")
    assert.equal(400, code)
    _, reps = srv:request("GET", "/api/v1/models/" .. m.id .. "/replicas")
    for _, r in ipairs(reps.replicas) do
      if r.slot == 2 then assert.equal("spec paused", r.cancel_why) end
    end
    local _, settings = srv:request("GET", "/api/v1/settings/slurm")
    assert.equal(0.1, settings.provisioner.last_pass_duration) -- the second report's
    assert.equal(0, settings.provisioner.failed_passes)
    assert.is_number(settings.provisioner.checked_in_at)
  end)

  it("failed passes are counted in a row and the last error shown; a good pass resets the count", function()
    for i = 1, 2 do
      srv:request("POST", "/api/v1/provisioner/report",
        { pass = { started_at = i, duration = 1, error = "slurmrestd down " .. i } })
    end
    local _, s = srv:request("GET", "/api/v1/settings/slurm")
    assert.equal(2, s.provisioner.failed_passes)
    assert.equal("slurmrestd down 2", s.provisioner.last_error)
    srv:request("POST", "/api/v1/provisioner/report", { pass = { started_at = 3, duration = 1 } })
    _, s = srv:request("GET", "/api/v1/settings/slurm")
    assert.equal(0, s.provisioner.failed_passes)
  end)

  it("dismissing the provision error clears it", function()
    local st, spec = srv:request("PATCH", "/api/v1/models/" .. m.id .. "/managed/provision-error")
    assert.equal(200, st)
    assert.equal(require("cjson").null, spec.provision_error)
    assert.equal(404, (srv:request("PATCH", "/api/v1/models/99999/managed/provision-error")))
  end)

  it("restart and clear-lost are listed in the snapshot until a report acknowledges them", function()
    local _, reps = srv:request("GET", "/api/v1/models/" .. m.id .. "/replicas")
    local rid = reps.replicas[1].id
    local st, r = srv:request("POST", "/api/v1/replicas/" .. rid .. "/restart")
    assert.equal(202, st)
    assert.is_true(r.restart_requested)
    assert.equal(404, (srv:request("POST", "/api/v1/replicas/99999/restart")))
    assert.equal(202, (srv:request("POST", "/api/v1/models/" .. m.id .. "/replicas/clear-lost")))
    assert.equal(404, (srv:request("POST", "/api/v1/models/99999/replicas/clear-lost")))
    local _, snap = srv:request("GET", "/api/v1/provisioner/snapshot")
    assert.same({ rid }, snap.restart)
    assert.same({ m.id }, snap.clear_lost)
    srv:request("POST", "/api/v1/provisioner/report", { pass = { started_at = 4, duration = 1 },
      acknowledged = { restart = { rid }, clear_lost = { m.id } } })
    _, snap = srv:request("GET", "/api/v1/provisioner/snapshot")
    assert.same({}, snap.restart)
    assert.same({}, snap.clear_lost)
    -- an ended replica cannot be restarted
    srv:request("POST", "/api/v1/provisioner/report", { pass = { started_at = 5, duration = 1 },
      replicas = { { nonce = NONCE2, state = "ended" } } })
    local id2
    for _, x in ipairs(select(2, srv:request("GET", "/api/v1/replicas")).replicas) do
      if x.nonce == NONCE2 then id2 = x.id end
    end
    assert.equal(409, (srv:request("POST", "/api/v1/replicas/" .. id2 .. "/restart")))
    local _, live = srv:request("GET", "/api/v1/replicas?state=live")
    for _, x in ipairs(live.replicas) do assert.is_true(x.state ~= "ended") end
    assert.equal(400, (srv:request("GET", "/api/v1/replicas?state=dead")))
  end)

  it("a bad report is a 400 naming the field and changes nothing", function()
    local _, before = srv:request("GET", "/api/v1/replicas")
    local st, doc = srv:request("POST", "/api/v1/provisioner/report", { pass = { started_at = 6, duration = 1 },
      replicas = { { nonce = NONCE1, state = "healthy", node = "n9" }, { nonce = NONCE2, state = "dancing" } } })
    assert.equal(400, st)
    assert.equal("replicas[1].state", doc.error.field)
    local _, after = srv:request("GET", "/api/v1/replicas")
    assert.same(before, after)
    st, doc = srv:request("POST", "/api/v1/provisioner/report", { pass = {}, extra = 1 })
    assert.equal(400, st)
    assert.equal("extra", doc.error.field)
  end)

  it("reports for models that do not exist are ignored, not fatal", function()
    local st, res = srv:request("POST", "/api/v1/provisioner/report", { pass = { started_at = 7, duration = 1 },
      replicas = { { nonce = "00000000000000ff", model_id = 424242, slot = 1, state = "submitted" } },
      endpoints = { ["424242"] = {} } })
    assert.equal(200, st)
    assert.equal(2, #res.ignored)
  end)
end)

describe("obleth serve: launch history", function()
  local srv, m
  setup(function()
    srv = server.start()
    m = new_model(srv, "launched")
    local store = assert(require("obleth.store").open(srv.db))
    for i = 1, 60 do
      assert(store:add_launch { model_id = m.id, recipe_id = i % 2 == 0 and "vllm" or "sglang",
        settings = { partition = "gpu", n = i }, created_by = "admin", created_at = 1000 + i })
    end
    store:close()
  end)
  teardown(function() srv:cleanup() end)

  it("lists newest first, 50 by default, filtered by model and recipe, at most 500", function()
    local _
    local st, doc = srv:request("GET", "/api/v1/deployments/launches")
    assert.equal(200, st)
    assert.equal(50, #doc.launches)
    assert.equal(60, doc.launches[1].settings.n)
    assert.equal(1060, doc.launches[1].created_at)
    _, doc = srv:request("GET", "/api/v1/deployments/launches?recipe_id=sglang&limit=500&model_id=" .. m.id)
    assert.equal(30, #doc.launches)
    assert.equal(59, doc.launches[1].settings.n)
    _, doc = srv:request("GET", "/api/v1/deployments/launches?model_id=999")
    assert.same({}, doc.launches)
    for q, field in pairs({ ["limit=501"] = "limit", ["limit=x"] = "limit", ["model_id=-1"] = "model_id",
      ["recipe_id=a%20b"] = "recipe_id", ["order=asc"] = "order" }) do
      local s2, e = srv:request("GET", "/api/v1/deployments/launches?" .. q)
      assert.equal(400, s2, q)
      assert.equal(field, e.error.field, q)
    end
  end)

  it("attaches job outcomes to the launch of their replica", function()
    srv:request("POST", "/api/v1/provisioner/report", { pass = { started_at = 1, duration = 1 },
      replicas = { { nonce = "0000000000000b01", model_id = m.id, slot = 1, state = "ended" } },
      outcomes = { { nonce = "0000000000000b01", model_id = m.id, job_id = 77, state = "TIMEOUT", exit_code = 0 } } })
    local _, doc = srv:request("GET", "/api/v1/deployments/launches?limit=1")
    assert.equal("TIMEOUT", doc.launches[1].outcomes[1].state)
    assert.equal(77, doc.launches[1].outcomes[1].job_id)
  end)
end)
