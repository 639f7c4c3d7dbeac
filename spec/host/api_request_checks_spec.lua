-- What a route declares (its query parameters, its body) is checked by the dispatcher before the
-- handler runs, on a real obleth serve over HTTP; and the OpenAPI document it serves accepts the bodies
-- the API accepts and refuses those it refuses (spec/support/json_schema.lua reads the document): managed
-- specs, Slurm settings, the provisioner protocol's report, lease and submits, the launch flow's preview,
-- launch and YAML check, and saved recipes. Rules between fields (exactly one of recipe_id or hf; a report
-- part with more: true carries replicas only) are not OpenAPI's to say, and are left out.
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

  describe("the OpenAPI document and the API agree on the provisioner's and the launch flow's bodies", function()
    local doc, gen, token
    setup(function()
      local st
      st, doc = srv:request("GET", "/api/v1/openapi.json")
      assert.equal(200, st)
      local lease
      st, lease = srv:request("POST", "/api/v1/provisioner/lease", { holder = "spec", host = "h", pid = 1, ttl = 3600 })
      assert.equal(200, st, lease and lease.error and lease.error.message)
      gen, token = lease.lease.generation, lease.token
    end)
    local N = cjson.null
    local NONCE = "0123456789abcdef"

    -- {route, schema, body (a function of the lease generation and the model id), field a refusal names}
    local function lease_body(over)
      return function()
        local b = { holder = "spec", host = "h", pid = 1, ttl = 3600, generation = gen }
        for k, v in pairs(over or {}) do b[k] = v end
        return b
      end
    end
    local function report_body(over)
      return function()
        local b = { lease_generation = gen, pass = { started_at = 1.5, duration = 0.4, error = N } }
        for k, v in pairs(type(over) == "function" and over() or over or {}) do b[k] = v end
        return b
      end
    end
    local function submits_body(replica)
      return function()
        local r = { nonce = NONCE, model_id = mid, slot = 1, state = "pending" }
        for k, v in pairs(replica or {}) do r[k] = v end
        return { lease_generation = gen, replicas = { r } }
      end
    end
    local LEASE = { "POST", "/api/v1/provisioner/lease", "ProvisionerLease" }
    local REPORT = { "POST", "/api/v1/provisioner/report", "ProvisionerReport" }
    local SUBMITS = { "POST", "/api/v1/provisioner/submits", "ProvisionerSubmits" }
    local PREVIEW = { "POST", "/api/v1/deployments/preview", "LaunchPreview" }
    local LAUNCH = { "POST", "/api/v1/deployments/launch", "LaunchRequest" }
    local YAML = { "POST", "/api/v1/deployments/check-yaml", "LaunchYaml" }
    local RECIPE = { "POST", "/api/v1/recipes", "Recipe" }
    local RECIPE_PUT = { "PUT", "/api/v1/recipes/saved-agree-put", "RecipeById" }
    local function recipe(over)
      local r = { id = "saved-agree", name = "Agree", engine = "custom", programs = { "engine" },
        launch = { "engine", "--port", "$OBLETH_PORT" }, resources = { time_limit = 600 } }
      for k, v in pairs(over or {}) do r[k] = v end
      return r
    end
    local examples = {
      -- the lease: provisioner_lease_spec's acquisitions and renewals
      { LEASE, lease_body() },
      { LEASE, lease_body({ generation = N, ttl = 2.5 }) },
      { LEASE, lease_body({ pid = 0 }), "pid" },
      { LEASE, lease_body({ ttl = 1 }), "ttl" },
      { LEASE, lease_body({ holder = N }), "holder" },
      { LEASE, lease_body({ holder = 3 }), "holder" },
      { LEASE, lease_body({ generation = 0 }), "generation" },
      { LEASE, lease_body({ colour = "red" }), "colour" },
      -- a pass's report: provisioner_spec's and provisioner_report_parts_spec's
      { REPORT, report_body() },
      { REPORT, report_body(function() return {
        replicas = { { nonce = NONCE, model_id = mid, slot = 1, state = "healthy", node = N, job_id = 7,
          successor_of = "fedcba9876543210", ["end"] = { state = "TIMEOUT", exit_code = 0, signal = 15 },
          slurm = { state = "RUNNING", start_time = 1e9, time_limit = 60, estimated = false } } },
        outcomes = { { model_id = mid, state = "NODE_FAIL", replica_id = 3, launch_id = N, signal = "SIGKILL" } },
        endpoints = { [tostring(mid)] = { "http://10.0.0.1:20001" } },
        provision_errors = { [tostring(mid)] = { message = "bad account", field = "account", code = 2045,
          generation = 2 } },
        acknowledged = { restart = {}, clear_lost = { 4 } } } end) },
      { REPORT, report_body({ pass = { started_at = 2, duration = 1, error = "slurmrestd: 503",
        policy_error = { file = "/etc/obleth/policy.d/lost.lua", line = 3, message = "boom", since = 1 },
        token = { source = "key_file", expires_at = 2e9, renewed_at = 1e9 } } }) },
      { REPORT, report_body({ more = true, replicas = {} }) },
      { REPORT, report_body(function() return { provision_errors = { [tostring(mid)] = N }, more = false } end) },
      { REPORT, report_body({ pass = N }), "pass" },
      { REPORT, report_body({ replicas = { { nonce = "ab", state = "dancing" } } }), "replicas[0].state" },
      { REPORT, report_body({ replicas = { { state = "ended" } } }), "replicas[0].nonce" },
      { REPORT, report_body({ replicas = { { nonce = "zz" } } }), "replicas[0].nonce" },
      { REPORT, report_body({ replicas = { { nonce = NONCE, slot = 65 } } }), "replicas[0].slot" },
      { REPORT, report_body({ replicas = { { nonce = NONCE, ["end"] = { signal = true } } } }), "replicas[0].end.signal" },
      { REPORT, report_body({ endpoints = { x = {} } }), "endpoints.x" },
      { REPORT, report_body({ endpoints = { ["1"] = { "ftp://x" } } }), "endpoints.1[0]" },
      { REPORT, report_body({ provision_errors = { ["1"] = { field = "x" } } }), "provision_errors.1.message" },
      { REPORT, report_body({ acknowledged = { restart = { 0 } } }), "acknowledged.restart[0]" },
      { REPORT, report_body({ pass = { token = { expires_at = 1 } } }), "pass.token.source" },
      { REPORT, report_body({ pass = { token = { source = "env" } } }), "pass.token.source" },
      { REPORT, report_body({ lease_generation = 0 }), "lease_generation" },
      { REPORT, report_body({ colour = 1 }), "colour" },
      -- the replicas a pass is about to submit
      { SUBMITS, submits_body() },
      { SUBMITS, submits_body({ state = "healthy" }), "replicas[0].state" },
      { SUBMITS, submits_body({ slot = N }), "replicas[0].slot" },
      { SUBMITS, submits_body({ nonce = "x" }), "replicas[0].nonce" },
      { SUBMITS, function() return { replicas = {} } end, "lease_generation" },
      { SUBMITS, function() return { lease_generation = gen, replicas = "all" } end, "replicas" },
      -- the launch flow: launch_spec's, launch_hf_spec's and launch_checks_spec's bodies
      { PREVIEW, function() return { recipe_id = "smoke-test" } end },
      { PREVIEW, function() return { recipe_id = "smoke-test", api_model_name = "m", values = { replicas = 2 } } end },
      { PREVIEW, function() return { recipe_id = "smoke-test", api_model_name = N, values = N, hf = N } end },
      { PREVIEW, function() return { recipe_id = "smoke-test", colour = 1 } end, "colour" },
      { PREVIEW, function() return { recipe_id = "smoke-test", values = { 1, 2 } } end, "values" },
      { PREVIEW, function() return { recipe_id = "smoke-test", api_model_name = 3 } end, "api_model_name" },
      { PREVIEW, function() return { recipe_id = "a b" } end, "recipe_id" },
      { PREVIEW, function() return { recipe_id = "smoke-test", save_recipe = { id = "x" } } end, "save_recipe" },
      { PREVIEW, function() return { hf = { engine = "vllm" } } end, "hf.repo_id" },
      { PREVIEW, function() return { hf = { repo_id = "a/b", engine = "vllm", speed = 1 } } end, "hf.speed" },
      { PREVIEW, function() return { hf = { repo_id = "a/b", engine = "vllm", revision = 3 } } end, "hf.revision" },
      { PREVIEW, function() return { hf = { repo_id = "a/b", engine = "vllm", choice = true } } end, "hf.choice" },
      { LAUNCH, function() return { recipe_id = "smoke-test", model_id = 999999 } end },
      { LAUNCH, function() return { recipe_id = "smoke-test", model_id = 1.5 } end, "model_id" },
      { LAUNCH, function() return { recipe_id = "smoke-test", save_recipe = { id = "Bad Id" } } end, "save_recipe.id" },
      { LAUNCH, function() return { recipe_id = "smoke-test", save_recipe = { name = "n" } } end, "save_recipe.id" },
      { LAUNCH, function() return { recipe_id = "smoke-test", save_recipe = { id = "ok", name = string.rep("n", 257) } } end,
        "save_recipe.name" },
      { YAML, function() return { yaml = "replicas: 2\n" } end },
      { YAML, function() return { yaml = "a: [", recipe_id = "smoke-test" } end },
      { YAML, function() return { yaml = 3 } end, "yaml" },
      { YAML, function() return {} end, "yaml" },
      { YAML, function() return { yaml = "x: 1", colour = 1 } end, "colour" },
      -- saved recipes: api_recipes_spec's
      { RECIPE, function() return recipe() end },
      { RECIPE, function() return recipe({ id = "saved-agree-2", source = "saved", name = N }) end },
      { RECIPE, function() return recipe({ id = "a b" }) end, "id" },
      { RECIPE, function() return recipe({ id = "saved-agree-3", name = 3 }) end, "name" },
      { RECIPE, function() return recipe({ id = "saved-agree-4", source = "library" }) end, "source" },
      { RECIPE, function() return recipe({ id = "saved-agree-5", engine = "rocket" }) end, "engine" },
      { RECIPE, function() return recipe({ id = "saved-agree-6", colour = 1 }) end, "colour" },
      { RECIPE, function() return recipe({ id = N }) end, "id" },
      { RECIPE_PUT, function() local r = recipe(); r.id = nil; return r end },
      { RECIPE_PUT, function() return recipe({ id = "saved-agree-put", engine = N }) end, "engine" },
    }
    for i, ex in ipairs(examples) do
      local route, make, field = ex[1], ex[2], ex[3]
      it(("%s example %d: %s"):format(route[3], i, field and ("both refuse a bad " .. field) or "both take it"), function()
        local body = make()
        local st, ans = srv:request(route[1], route[2], body, { ["Obleth-Lease-Token"] = token })
        local ok, why = json_schema.check({ ["$ref"] = "#/components/schemas/" .. route[3] },
          cjson.decode(cjson.encode(body)), doc)
        if field then
          assert.equal(400, st, route[2] .. ": " .. tostring(ans and ans.error and ans.error.message))
          assert.equal(field, ans.error.field, ans.error.message)
          assert.is_false(ok, route[3] .. " took it")
        else
          assert(st ~= 400, route[2] .. ": " .. tostring(ans and ans.error and ans.error.message))
          assert(ok, why)
        end
      end)
    end

    it("derives every request body of the document from its schema: no placeholder is left", function()
      for _, r in ipairs(api.load_routes()) do
        if r.body_schema then
          local s = doc.components.schemas[r.body]
          assert.equal("object", s.type, r.body)
          assert.is_table(s.properties, r.body)
        end
      end
      for _, name in ipairs({ "ProvisionerReport", "ProvisionerLease", "ProvisionerSubmits", "LaunchRequest",
        "LaunchPreview", "LaunchYaml", "Recipe", "RecipeById" }) do
        assert.is_table(doc.components.schemas[name].properties, name)
      end
    end)
  end)
end)
