-- obleth.schema: the managed spec declared once, and the API's check, the OpenAPI document and a
-- recipe's settings all reading it. The bounds below are docs/managed-spec.md's, written by hand.
local cjson = require "cjson"
local wire = require "obleth.schema"
local managed = require "obleth.schema.managed"
local input = require "obleth.deployment.input"
local openapi = require "obleth.api.openapi"
local recipe = require "obleth.recipe"
local json_schema = require "spec.support.json_schema"

local function spec(over)
  local s = { launch_command = "engine --port $OBLETH_PORT" }
  for k, v in pairs(over or {}) do s[k] = v end
  return s
end

local function recipe_with(over)
  local r = { id = "t", name = "Test", engine = "custom", programs = { "engine" },
    launch = { "engine", "--port", "$OBLETH_PORT" }, resources = { time_limit = 600 } }
  for k, v in pairs(over) do r[k] = v end
  return r
end

local function recipe_error(over)
  local r, err = recipe.validate(recipe_with(over))
  if r then return nil end
  return err.errors[1].field
end

local DOC = openapi.document({})
local function openapi_takes(body)
  return json_schema.check({ ["$ref"] = "#/components/schemas/ManagedSpec" }, body, DOC)
end

describe("obleth.schema", function()
  describe("one bound per setting, the same for the API, OpenAPI and recipes", function()
    -- {field path, lowest, highest}
    local BOUNDS = {
      { "cpus_per_node", 0, 1024 },
      { "rollover_margin", 0, 10080 },
      { "health.interval", 1, 3600 },
      { "health.timeout", 1, 600 },
      { "health.startup_grace", 0, 604800 },
      { "health.failure_threshold", 1, 100 },
    }
    local function body_with(path, v)
      local head, leaf = path:match("^(%w+)%.(.+)$")
      if head then
        local h = { [leaf] = v }
        if leaf == "timeout" then h.interval = 600 end -- timeout must not pass interval
        if leaf == "interval" then h.timeout = 1 end
        return spec({ [head] = h, time_limit = 20000 })
      end
      return spec({ [path] = v, time_limit = 20000 })
    end
    local function recipe_over(path, v)
      local head, leaf = path:match("^(%w+)%.(.+)$")
      if head then
        local h = { [leaf] = v }
        if leaf == "timeout" then h.interval = 600 end
        if leaf == "interval" then h.timeout = 1 end
        return { health = h }
      end
      if path == "cpus_per_node" then return { resources = { time_limit = 20000, cpus_per_node = v } } end
      return { [path] = v, resources = { time_limit = 20000 } }
    end
    for _, b in ipairs(BOUNDS) do
      local path, lo, hi = b[1], b[2], b[3]
      it(("%s takes %d to %d everywhere"):format(path, lo, hi), function()
        for _, v in ipairs({ lo, hi }) do
          assert.is_table(input.managed_spec(body_with(path, v + 0.0)), path .. " = " .. v)
          assert.is_true(openapi_takes(body_with(path, v + 0.0)))
          assert.is_nil(recipe_error(recipe_over(path, v)), path .. " = " .. v)
        end
        for _, v in ipairs({ lo - 1, hi + 1 }) do
          local _, err = input.managed_spec(body_with(path, v + 0.0))
          assert.equal(path, err and err.field)
          assert.is_false((openapi_takes(body_with(path, v + 0.0))))
          assert.equal(path:find("%.") and path or (path == "cpus_per_node" and "resources.cpus_per_node" or path),
            recipe_error(recipe_over(path, v)))
        end
      end)
    end

    it("the OpenAPI document takes cpus_per_node 0, the whole node", function()
      assert.equal(0, openapi.schemas.ManagedSpec.properties.cpus_per_node.minimum)
    end)
  end)

  describe("defaults", function()
    it("fills the health check and the spec's defaults from the one declaration", function()
      assert.same({ path = "/health", interval = 10, timeout = 5, startup_grace = 600, failure_threshold = 3 },
        wire.defaults(managed.health))
      local s = assert(input.managed_spec(spec()))
      assert.same({ path = "/health", interval = 10, timeout = 5, startup_grace = 600, failure_threshold = 3 },
        s.health)
      assert.equal(60, s.time_limit)
      assert.equal(1, s.cpus_per_node)
      assert.same({}, s.environment)
    end)

    it("gives the form's hints: min, max, default, unit", function()
      assert.same({ min = 1, max = 3600, default = 10, unit = "seconds" }, wire.hint(managed.spec, "health.interval"))
      assert.same({ min = 0, max = 10080, unit = "minutes" }, wire.hint(managed.spec, "rollover_margin"))
      assert.same({ min = 1, max = 525600, default = 60, unit = "minutes" }, wire.hint(managed.spec, "time_limit"))
    end)
  end)

  describe("the OpenAPI ManagedSpec accepts what PUT accepts and refuses what it refuses", function()
    local N = cjson.null
    local taken = {
      spec(),
      spec({ partition = "gpu", account = N, qos = "", time_limit = "1-00:00:00", cpus_per_node = 0.0 }),
      spec({ environment = { HF_HOME = "/x", N = 3.0, B = true }, preamble = { "module load cuda" } }),
      spec({ health = { path = "/v1/models", interval = 30.0, timeout = 10.0 }, rollover_margin = N }),
      spec({ generation = 7.0, provision_error = N, model_id = 3.0 }),
      spec({ exclude = "n[1-2],gpu7", stdout = "/logs/%j.out", constraint = "a100&ib" }),
      { script_body = "#!/bin/sh\nexec engine\n", nodes = 2.0 },
    }
    local refused = {
      { spec({ replicas = 65.0 }), "replicas" },
      { spec({ replicas = 1.5 }), "replicas" },
      { spec({ enabled = "yes" }), "enabled" },
      { spec({ partition = "gpu a" }), "partition" },
      { spec({ colour = "red" }), "colour" },
      { spec({ health = { speed = 1.0 } }), "health.speed" },
      { spec({ health = { path = "health" } }), "health.path" },
      { spec({ time_limit = 525601.0 }), "time_limit" },
      { spec({ time_limit = 0.0 }), "time_limit" },
      { spec({ preamble = { "a\nb" } }), "preamble[0]" },
      { spec({ memory_per_node = -1.0 }), "memory_per_node" },
      { spec({ recipe_id = "a b" }), "recipe_id" },
      { spec({ launch_command = N, script_body = 3.0 }), "script_body" },
    }
    for i, body in ipairs(taken) do
      it(("takes example %d"):format(i), function()
        local s, err = input.managed_spec(body)
        assert(s, err and err.message)
        local ok, why = openapi_takes(body)
        assert(ok, why)
      end)
    end
    for _, r in ipairs(refused) do
      it("refuses a bad " .. r[2], function()
        local _, err = input.managed_spec(r[1])
        assert.equal(r[2], err and err.field)
        assert.is_false((openapi_takes(r[1])))
      end)
    end
  end)

  describe("the OpenAPI SlurmSettings accepts what PUT /settings/slurm accepts and refuses what it refuses", function()
    local N = cjson.null
    local function settings_takes(body)
      return json_schema.check({ ["$ref"] = "#/components/schemas/SlurmSettings" }, body, DOC)
    end
    local taken = {
      {},
      { url = "http://h:6820", user = "slurm", token = "********", verify = false, timeout = 2.5, api_version = "auto" },
      { socket = "/run/slurmrestd.sock", token_source = "key_file", token_key_file = "/etc/jwt.key", user = "slurm" },
      { defaults = { modules = { "cuda/12" }, port_range = { 21000.0, 21999.0 }, environment = { A = "1", N = 3.0 },
        user_groups = N, enforce_part_limits = "ALL", partition = "gpu", hf_token = "********" } },
      { provisioner = { passes = 3.0 }, token_set = true, thresholds = { provisioner_stale = 60.0 }, updated_at = 1.0 },
      { token_lifespan = N, ca_file = "", token_source = N },
    }
    local refused = {
      { { timeout = 0.05 }, "timeout" }, { { timeout = 121.0 }, "timeout" },
      { { token_lifespan = 29.0 }, "token_lifespan" }, { { token_source = "env" }, "token_source" },
      { { url = "ftp://x" }, "url" }, { { user = "a b" }, "user" }, { { token = "a b" }, "token" },
      { { enabled = "yes" }, "enabled" }, { { colour = 1.0 }, "colour" },
      { { defaults = { port_range = { 80.0, 81.0 } } }, "defaults.port_range[0]" },
      { { defaults = { port_range = { 21000.0 } } }, "defaults.port_range" },
      { { defaults = { modules = { "a b" } } }, "defaults.modules[0]" },
      { { defaults = { enforce_part_limits = "SOME" } }, "defaults.enforce_part_limits" },
      { { defaults = { colour = 1.0 } }, "defaults.colour" },
    }
    for i, body in ipairs(taken) do
      it(("takes example %d"):format(i), function()
        local s, err = input.settings(body)
        assert(s, err and err.message)
        local ok, why = settings_takes(body)
        assert(ok, why)
      end)
    end
    for _, r in ipairs(refused) do
      it("refuses a bad " .. r[2], function()
        local _, err = input.settings(r[1])
        assert.equal(r[2], err and err.field)
        assert.is_false((settings_takes(r[1])))
      end)
    end
  end)

  describe("the OpenAPI ModelInput accepts what PATCH /models/{id} accepts and refuses what it refuses", function()
    local N = cjson.null
    local function model_takes(body)
      return json_schema.check({ ["$ref"] = "#/components/schemas/ModelInput" }, body, DOC)
    end
    local taken = { { name = "llama-3" }, { name = "org/m:v1.5", description = N, id = 3.0, status = "active" },
      { description = "two\nlines" }, { name = string.rep("a", 128) } }
    local refused = { { { name = "-x" }, "name" }, { { name = "" }, "name" }, { { name = string.rep("a", 129) }, "name" },
      { { name = "a b" }, "name" }, { { colour = 1.0 }, "colour" }, { { description = 3.0 }, "description" } }
    for i, body in ipairs(taken) do
      it(("takes example %d"):format(i), function()
        local m, err = input.model(body, true)
        assert(m, err and err.message)
        local ok, why = model_takes(body)
        assert(ok, why)
      end)
    end
    for _, r in ipairs(refused) do
      it("refuses a bad " .. r[2], function()
        local _, err = input.model(r[1], true)
        assert.equal(r[2], err and err.field)
        assert.is_false((model_takes(r[1])))
      end)
    end
    it("a null description clears it; POST needs a name", function()
      assert.equal(N, (input.model({ description = N }, true)).description)
      assert.equal("name", select(2, input.model({ description = "x" })).field)
    end)
  end)

  describe("the kinds a protocol body needs", function()
    local N = cjson.null
    it("one_of checks a value against the alternative of its JSON type, and names the last one's want", function()
      local s = { type = "one_of", of = { { type = "string", pattern = "^%x+$", rule = "hex" },
        { type = "integer", min = 1, max = 9 } } }
      assert.equal("ab", wire.validate(s, "ab", "f"))
      assert.equal(3, wire.validate(s, 3.0, "f"))
      assert.equal("f: \"zz\" is not valid: hex", select(2, wire.validate(s, "zz", "f")).message)
      assert.equal("f: must be a whole number, got a boolean", select(2, wire.validate(s, true, "f")).message)
      local o = wire.openapi(s)
      assert.equal("string", o.oneOf[1].type)
      assert.equal("integer", o.oneOf[2].type)
    end)

    it("keep_null keeps a field sent as null (set to null), but never a required one", function()
      local s = { type = "object", keep_null = true, required = { "nonce" },
        fields = { { "nonce", { type = "string" } }, { "node", { type = "string" } } } }
      assert.same({ nonce = "a", node = N }, wire.validate(s, { nonce = "a", node = N }))
      local _, err = wire.validate(s, { nonce = N })
      assert.same({ code = "invalid", field = "nonce", message = "nonce: is required" }, err)
      local o = wire.openapi(s)
      assert.is_true(o.properties.node.nullable)
      assert.is_nil(o.properties.nonce.nullable)
      assert.same({ "nonce" }, o.required)
    end)

    it("a map of ids gives integer keys and names a key that is not one", function()
      local s = { type = "map", integer_keys = true, key_pattern = "^%d+$", key_rule = "model id", keep_null = true,
        values = { type = "array", items = { type = "string" } } }
      local out = assert(wire.validate(s, { ["3"] = { "a" }, ["4"] = N }, "endpoints"))
      assert.same({ "a" }, out[3])
      assert.equal(N, out[4])
      assert.equal("endpoints.x: is not a valid model id", select(2, wire.validate(s, { x = {} }, "endpoints")).message)
      assert.equal("^[0-9]+$", wire.openapi(s)["x-key-pattern"])
    end)

    it("a missing required field says its shape, with the field's own error code", function()
      local s = { type = "object", required = { "repo_id" },
        fields = { { "repo_id", { type = "string", code = "invalid_repo_id", shape = "namespace/name" } } } }
      assert.same({ code = "invalid_repo_id", field = "hf.repo_id", message = "hf.repo_id: is required (namespace/name)" },
        select(2, wire.validate(s, {}, "hf")))
      assert.equal("invalid_repo_id", select(2, wire.validate(s, { repo_id = 3.0 }, "hf")).code)
    end)
  end)

  it("turns the Lua patterns it declares into regular expressions", function()
    assert.equal("^[A-Za-z0-9_.\\-]+$", wire.regex("^[A-Za-z0-9_.%-]+$"))
    assert.equal("^[A-Za-z0-9]x*?$", wire.regex("^%wx-$"))
    assert.same({ "^%s*$", "^[A-Za-z0-9_.%-]+$" }, json_schema.lua_patterns("^\\s*$|^[A-Za-z0-9_.\\-]+$"))
  end)
end)
