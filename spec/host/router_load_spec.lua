-- The router counts each model's requests (obleth.router.load) and the provisioner snapshot hands
-- the window over as the model's `load` (what the scale policy reads): in-process obleth serve on a
-- real port in front of a smoke engine, over a SQLite store in memory.
local has_host = pcall(require, "obleth.http")

describe("router load window in the snapshot", function()
  if not has_host then
    it("needs the obleth runtime", function() pending("obleth.http is missing: run under build/obleth lua") end)
    return
  end
  local cjson = require "cjson"
  local ADMIN = "admin-token-for-router-load-spec-01"
  local rig = require("spec.support.router_rig").new()
  local store

  setup(function() store = rig:start { admin_token = ADMIN } end)
  teardown(function() rig:close() end)

  local function snapshot_model(name)
    local r = rig:req("GET", "/api/v1/provisioner/snapshot", nil, { Authorization = "Bearer " .. ADMIN })
    assert.equal(200, r.status, r.body)
    for _, m in ipairs(cjson.decode(r.body).models) do if m.name == name then return m end end
    error("no model " .. name .. " in the snapshot")
  end

  it("counts finished requests per model; an autoscaled model's load carries its buckets", function()
    local _, u = rig:engine("load-1", { model = "auto" })
    local m = assert(store:create_model { name = "auto" })
    assert(store:add_endpoint(m.id, u))
    assert(store:put_spec(m.id, { replicas = 1, enabled = true, partition = "gpu", launch_command = "x",
      autoscale = { min_replicas = 0, max_replicas = 3, target_inflight = 4, scale_down_after = 300,
        idle_to_zero_after = 1200 } }))
    local _, u2 = rig:engine("load-2", { model = "fixed" })
    local f = assert(store:create_model { name = "fixed" })
    assert(store:add_endpoint(f.id, u2))
    assert(store:put_spec(f.id, { replicas = 1, enabled = true, partition = "gpu", launch_command = "x" }))
    for i = 1, 3 do
      local r = rig:req("POST", "/v1/chat/completions", { model = "auto", messages = { { role = "user", content = "x" .. i } } })
      assert.equal(200, r.status)
    end
    assert.equal(200, rig:req("POST", "/v1/completions", { model = "fixed", prompt = "p" }).status)

    local a = snapshot_model("auto").load
    assert.equal(3, a.finished)
    assert.equal(0, a.inflight)
    assert.equal(0, a.queued)
    assert.is_number(a.last_request_at)
    local arrivals = 0
    for _, s in ipairs(a.samples) do arrivals = arrivals + s.arrivals end
    assert.equal(3, arrivals, "the three requests are in the buckets")
    assert.is_true(a.rate > 0)

    local fx = snapshot_model("fixed").load
    assert.equal(1, fx.finished)
    assert.same({}, fx.samples, "a model that is not autoscaled gets the counts only")
  end)

  -- the load chart and the window never pass a model's load to the next model of its name
  it("a model deleted and made again by its name, or renamed, starts with no load", function()
    local auth = { Authorization = "Bearer " .. ADMIN }
    local _, u = rig:engine("load-3", { model = "ghost" })
    local function arrivals(id)
      local r = rig:req("GET", ("/api/v1/models/%d/load?hours=1"):format(id), nil, auth)
      assert.equal(200, r.status, r.body)
      local n = 0
      for _, p in ipairs(cjson.decode(r.body).points) do n = n + p.arrivals end
      return n
    end
    local g = assert(store:create_model { name = "ghost" })
    assert(store:add_endpoint(g.id, u))
    for _ = 1, 4 do
      assert.equal(200, rig:req("POST", "/v1/chat/completions", { model = "ghost", messages = { { role = "user",
        content = "x" } } }).status)
    end
    assert.equal(4, arrivals(g.id))
    assert.equal(204, rig:req("DELETE", ("/api/v1/models/%d"):format(g.id), nil, auth).status)
    local again = assert(store:create_model { name = "ghost" })
    assert.equal(0, arrivals(again.id))
    -- renamed to a name that had load: none of it comes along, and the old name's is forgotten
    local other = assert(store:create_model { name = "other" })
    assert(store:add_endpoint(again.id, u))
    assert.equal(200, rig:req("POST", "/v1/chat/completions", { model = "ghost", messages = { { role = "user",
      content = "x" } } }).status)
    assert.equal(1, arrivals(again.id))
    assert.equal(204, rig:req("DELETE", ("/api/v1/models/%d"):format(again.id), nil, auth).status)
    local r = rig:req("PATCH", ("/api/v1/models/%d"):format(other.id), { name = "ghost" },
      { Authorization = "Bearer " .. ADMIN, ["Content-Type"] = "application/json" })
    assert.equal(200, r.status, r.body)
    assert.equal(0, arrivals(other.id))
  end)
end)
