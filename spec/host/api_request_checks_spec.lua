-- What a route declares (its query parameters, its body) is checked by the dispatcher before the
-- handler runs, on a real obleth serve over HTTP; and the OpenAPI document it serves accepts the managed
-- specs and Slurm settings the API accepts and refuses those it refuses (spec/support/json_schema.lua reads
-- the document).
local server = require "spec.support.server"
local api = require "obleth.api"
local json_schema = require "spec.support.json_schema"
local cjson = require "cjson"

describe("obleth serve: a route's declared query and body", function()
  local srv, mid
  setup(function()
    srv = server.start()
    local st, m = srv:request("POST", "/api/v1/models", { name = "checks" })
    assert.equal(201, st)
    mid = m.id
  end)
  teardown(function() srv:stop(); srv:cleanup() end)

  local function path_of(route)
    return (route.path:gsub("{id}", tostring(mid)):gsub("{nonce}", "00ff00ff00ff00ff"):gsub("{stream}", "stdout")
      :gsub("{[%w_]+}", "x"))
  end

  it("every route that declares a body refuses one that is not a JSON object, naming it the same way", function()
    local n = 0
    for _, r in ipairs(api.load_routes()) do
      if r.body and not r.raw_body then
        n = n + 1
        local st, doc = srv:request(r.method, path_of(r), "[1, 2]")
        assert.equal(400, st, r.method .. " " .. r.path)
        assert.same({ code = "invalid", message = "the body must be a JSON object" }, doc.error, r.path)
        if not r.body_optional then
          st, doc = srv:request(r.method, path_of(r))
          assert.equal(400, st, r.method .. " " .. r.path)
          assert.equal("a JSON object body is required", doc.error.message, r.path)
        end
      end
    end
    assert.is_true(n >= 15, "routes with a body: " .. n)
  end)

  it("a route whose body is optional takes none", function()
    local st, doc = srv:request("POST", "/api/v1/keys")
    assert.equal(201, st, doc and doc.error and doc.error.message)
    st = srv:request("PATCH", ("/api/v1/models/%d/managed/provision-error"):format(mid))
    assert.is_true(st ~= 400, "status " .. tostring(st))
  end)

  it("refuses an unknown query parameter, a value outside the declared ones and a missing required one, by name",
    function()
      local cases = {
        { "PUT", ("/api/v1/models/%d/managed?colour=red"):format(mid), "colour", "unknown query parameter" },
        { "PUT", ("/api/v1/models/%d/managed?check=maybe"):format(mid), "check", "check: must be true or false" },
        { "PUT", "/api/v1/settings/slurm?confirm=yes", "confirm", "confirm: must be true or false" },
        { "GET", "/api/v1/replicas?state=odd", "state", "state: must be live or all" },
        { "GET", ("/api/v1/models/%d/replicas?x=1"):format(mid), "x", "unknown query parameter \"x\" (state)" },
        { "DELETE", "/api/v1/provisioner/lease", "generation", "generation: the lease generation to release" },
        { "DELETE", "/api/v1/provisioner/lease?generation=two", "generation", "the lease generation to release" },
        { "GET", "/api/v1/deployments/suggestions", "recipe_id", "recipe_id: is required" },
        { "GET", "/api/v1/deployments/launches?sort=name", "sort", "(model_id, recipe_id, limit)" },
        { "DELETE", ("/api/v1/models/%d/endpoints?uri=x"):format(mid), "uri", "unknown query parameter" },
      }
      for _, c in ipairs(cases) do
        local st, doc = srv:request(c[1], c[2], c[1] == "PUT" and { launch_command = "x" } or nil)
        assert.equal(400, st, c[2])
        assert.equal("invalid", doc.error.code, c[2])
        assert.equal(c[3], doc.error.field, c[2])
        assert.truthy(doc.error.message:find(c[4], 1, true), c[2] .. ": " .. doc.error.message)
      end
    end)

  describe("the OpenAPI document and the API agree on managed specs and Slurm settings", function()
    local doc
    setup(function()
      local st
      st, doc = srv:request("GET", "/api/v1/openapi.json")
      assert.equal(200, st)
    end)
    local N = cjson.null
    local function spec(over)
      local s = { launch_command = "engine --port $OBLETH_PORT", replicas = 0 }
      for k, v in pairs(over or {}) do s[k] = v end
      return s
    end
    -- each is the body of a PUT; the field is the one a refusal names
    local examples = {
      { spec() },
      { spec({ cpus_per_node = 0, partition = "gpu", account = N, qos = "", time_limit = "1-00:00:00" }) },
      { spec({ environment = { HF_HOME = "/x", N = 3, B = true }, preamble = { "module load cuda" } }) },
      { spec({ health = { path = "/v1/models", interval = 3600, timeout = 600, failure_threshold = 100 },
        rollover_margin = 10080, time_limit = 20000 }) },
      { spec({ generation = 7, provision_error = N, model_id = 3 }) },
      { spec({ exclude = "n[1-2],gpu7", stdout = "/logs/%j.out", constraint = "a100&ib" }) },
      { { script_body = "#!/bin/sh\nexec engine\n", nodes = 2, replicas = 0 } },
      { spec({ replicas = 65 }), "replicas" },
      { spec({ cpus_per_node = -1 }), "cpus_per_node" },
      { spec({ cpus_per_node = 1025 }), "cpus_per_node" },
      { spec({ rollover_margin = 10081, time_limit = 20000 }), "rollover_margin" },
      { spec({ health = { interval = 3601 } }), "health.interval" },
      { spec({ health = { failure_threshold = 101 } }), "health.failure_threshold" },
      { spec({ health = { speed = 1 } }), "health.speed" },
      { spec({ enabled = "yes" }), "enabled" },
      { spec({ partition = "gpu a" }), "partition" },
      { spec({ colour = "red" }), "colour" },
      { spec({ time_limit = 525601 }), "time_limit" },
      { spec({ preamble = { "a\nb" } }), "preamble[0]" },
      { spec({ recipe_id = "a b" }), "recipe_id" },
    }
    -- PUT /api/v1/settings/slurm: each replaces the document; the field is the one a refusal names
    local settings_examples = {
      { {} },
      { { url = "http://127.0.0.1:1", user = "slurm", token = "********", verify = false, timeout = 2.5,
        api_version = "auto" } },
      { { defaults = { modules = { "cuda/12" }, port_range = { 21000, 21999 }, environment = { A = "1", N = 3 },
        user_groups = N, enforce_part_limits = "ALL", partition = "gpu" } } },
      { { token_lifespan = N, ca_file = "", token_source = N, updated_at = 1, thresholds = { provisioner_stale = 1 } } },
      { { timeout = 0.05 }, "timeout" },
      { { token_lifespan = 29 }, "token_lifespan" },
      { { token_source = "env" }, "token_source" },
      { { url = "ftp://x" }, "url" },
      { { token = "a b" }, "token" },
      { { defaults = { port_range = { 80, 81 } } }, "defaults.port_range[0]" },
      { { defaults = { modules = { "a b" } } }, "defaults.modules[0]" },
      { { defaults = { enforce_part_limits = "SOME" } }, "defaults.enforce_part_limits" },
    }
    for i, ex in ipairs(settings_examples) do
      local body, field = ex[1], ex[2]
      it(("settings example %d: %s"):format(i, field and ("both refuse a bad " .. field) or "both take it"), function()
        local st, ans = srv:request("PUT", "/api/v1/settings/slurm", body)
        local ok, why = json_schema.check({ ["$ref"] = "#/components/schemas/SlurmSettings" },
          cjson.decode(cjson.encode(body)), doc)
        if field then
          assert.equal(400, st)
          assert.equal(field, ans.error.field)
          assert.is_false(ok)
        else
          assert.equal(200, st, ans and ans.error and ans.error.message)
          assert(ok, why)
        end
      end)
    end

    for i, ex in ipairs(examples) do
      local body, field = ex[1], ex[2]
      it(("example %d: %s"):format(i, field and ("both refuse a bad " .. field) or "both take it"), function()
        local st, ans = srv:request("PUT", ("/api/v1/models/%d/managed?check=false"):format(mid), body)
        local ok, why = json_schema.check({ ["$ref"] = "#/components/schemas/ManagedSpec" },
          cjson.decode(cjson.encode(body)), doc)
        if field then
          assert.equal(400, st)
          assert.equal(field, ans.error.field)
          assert.is_false(ok)
        else
          assert(st == 200 or st == 201, ans and ans.error and ans.error.message)
          assert(ok, why)
        end
      end)
    end
  end)
end)
