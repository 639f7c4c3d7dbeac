-- obleth.deployment.input: managed specs, settings, reports and queries as the API
-- receives them (decoded by cjson, so numbers arrive as floats and null as cjson.null).
local cjson = require "cjson"
local validate = require "obleth.deployment.input"

local function spec(t)
  local base = { launch_command = "vllm serve /models/x" }
  for k, v in pairs(t or {}) do base[k] = v end
  return cjson.decode(cjson.encode(base))
end

local function refused(input, field, msg)
  local out, err = validate.managed_spec(input)
  assert.is_nil(out)
  assert.equal(field, err.field)
  assert.equal("invalid", err.code)
  if msg then assert.matches(msg, err.message, 1, true) end
  return err
end

describe("validate.managed_spec", function()
  it("fills every default of docs/managed-spec.md for a minimal spec", function()
    local s = assert(validate.managed_spec(spec()))
    assert.same({ true, 1, 60, 1, 0, 1, 0 },
      { s.enabled, s.replicas, s.time_limit, s.nodes, s.gpus_per_node, s.cpus_per_node, s.memory_per_node })
    assert.same({ path = "/health", interval = 10, timeout = 5, startup_grace = 600, failure_threshold = 3 }, s.health)
    assert.same({}, s.preamble)
    assert.same({}, s.environment)
    assert.is_nil(s.partition)
    assert.is_nil(s.image)
    assert.equal(math.type(s.replicas), "integer")
  end)

  it("takes Slurm's time forms and stores minutes, seconds rounding up", function()
    local cases = { ["90"] = 90, ["10:30"] = 11, ["1:30:00"] = 90, ["2-00"] = 2880, ["1-02:03"] = 1563,
      ["0-00:00:01"] = 1, [2.0] = 2 }
    for input, minutes in pairs(cases) do
      assert.equal(minutes, assert(validate.managed_spec(spec { time_limit = input })).time_limit, tostring(input))
    end
  end)

  it("refuses UNLIMITED, zero, more than a year and nonsense time limits, naming time_limit", function()
    refused(spec { time_limit = "UNLIMITED" }, "time_limit", "UNLIMITED")
    refused(spec { time_limit = 0 }, "time_limit")
    refused(spec { time_limit = 525601 }, "time_limit")
    refused(spec { time_limit = "400-00" }, "time_limit")
    refused(spec { time_limit = "1h" }, "time_limit")
    refused(spec { time_limit = 1.5 }, "time_limit")
    refused(spec { time_limit = true }, "time_limit")
  end)

  it("range-checks every integer field at both ends", function()
    local ranges = { replicas = { 0, 64 }, nodes = { 1, 64 }, gpus_per_node = { 0, 64 }, cpus_per_node = { 0, 1024 },
      memory_per_node = { 0, 16777216 } }
    for f, r in pairs(ranges) do
      -- more than one node needs a script_body (launch_command runs on one node)
      local multi = f == "nodes" and { launch_command = cjson.null, script_body = "#!/bin/sh\nsrun x\n" } or {}
      multi[f] = r[1]
      assert.is_truthy(validate.managed_spec(spec(multi)), f)
      multi[f] = r[2]
      assert.is_truthy(validate.managed_spec(spec(multi)), f)
      refused(spec { [f] = r[1] - 1 }, f)
      refused(spec { [f] = r[2] + 1 }, f)
      refused(spec { [f] = "2" }, f, "whole number")
      refused(spec { [f] = 1.25 }, f, "whole number, got 1.25")
      refused(spec { [f] = 1e30 }, f, "got 1e+30")
    end
  end)

  it("needs exactly one of script_body and launch_command", function()
    refused(cjson.decode('{"replicas": 1}'), "launch_command", "exactly one")
    refused(spec { script_body = "#!/bin/sh\nexec x" }, "script_body", "not both")
    assert.is_truthy(validate.managed_spec(cjson.decode('{"script_body": "#!/bin/sh\\nexec x"}')))
    -- blank counts as absent
    refused(cjson.decode('{"launch_command": "  "}'), "launch_command")
  end)

  it("keeps image and preamble with launch_command only", function()
    local s = assert(validate.managed_spec(spec { image = "/img/vllm.sif", preamble = { "module load cuda/12" } }))
    assert.equal("/img/vllm.sif", s.image)
    assert.same({ "module load cuda/12" }, s.preamble)
    refused(cjson.decode('{"script_body": "x", "image": "/a.sif"}'), "image")
    refused(cjson.decode('{"script_body": "x", "preamble": ["a"]}'), "preamble")
    assert.is_nil(assert(validate.managed_spec(spec { image = "" })).image)
  end)

  it("refuses unknown fields by name and ignores the read-only ones a GET returned", function()
    local err = refused(spec { walltime = 60, gpus = 2 }, "gpus", "walltime")
    assert.matches("unknown fields", err.message)
    assert.is_truthy(validate.managed_spec(spec { generation = 7, provision_error = cjson.null, model_id = 1 }))
  end)

  it("refuses launch_command (or image) with nodes > 1: the command would run on one node only", function()
    local _, err = validate.managed_spec(spec { nodes = 2 })
    assert.is_table(err)
    assert.equal("nodes", err.field)
    assert.matches("script_body", err.message)
    _, err = validate.managed_spec(spec { nodes = 4, image = "/img/vllm.sif" })
    assert.equal("nodes", err.field)
    -- a script_body runs as written, across the nodes it starts itself (the multi-node recipe)
    assert.is_truthy(validate.managed_spec(spec { nodes = 2, launch_command = cjson.null,
      script_body = "#!/bin/bash\nsrun --nodes=2 engine\n" }))
    assert.is_truthy(validate.managed_spec(spec { nodes = 1 }))
  end)

  it("checks names, constraint, exclude hostlist, environment names and health fields", function()
    refused(spec { partition = "gpu;rm -rf" }, "partition")
    refused(spec { account = ("a"):rep(65) }, "account")
    refused(spec { constraint = "a100 && $(x)" }, "constraint")
    assert.is_truthy(validate.managed_spec(spec { constraint = "a100|h100&ib" }))
    assert.equal("n[1-2],gpu7", assert(validate.managed_spec(spec { exclude = "n[1-2],gpu7" })).exclude)
    refused(spec { exclude = "n[2-" }, "exclude")
    -- numbers no integer holds, and a huge expansion, are refused on the field (were a 500)
    refused(spec { exclude = "n[99999999999999999999-99999999999999999999]" }, "exclude")
    refused(spec { exclude = "n[0-99999999]" }, "exclude")
    refused(spec { environment = { ["1BAD"] = "x" } }, "environment.1BAD")
    refused(spec { environment = { OK = { nested = true } } }, "environment.OK")
    refused(spec { health = { interval = 0 } }, "health.interval")
    refused(spec { health = { path = "health" } }, "health.path")
    refused(spec { health = { timeout = 30, interval = 10 } }, "health.timeout")
    refused(spec { health = { retries = 3 } }, "health.retries", "unknown field")
    refused(spec { preamble = "module load x" }, "preamble")
    refused(spec { preamble = { 1 } }, "preamble[0]")
    refused(spec { enabled = "yes" }, "enabled")
    refused(spec { rollover_margin = 60, time_limit = 60 }, "rollover_margin")
    refused(spec { stdout = "/logs/a\n/b" }, "stdout", "one line")
    -- job log paths: only sbatch's filename patterns
    refused(spec { stderr = "/logs/%q-%j.err" }, "stderr", "%q is not a Slurm filename pattern")
    refused(spec { stdout = "/logs/%" }, "stdout", "not a Slurm filename pattern")
  end)

  it("takes job log paths with sbatch's filename patterns", function()
    local out = assert(validate.managed_spec(spec { stdout = "/logs/%x-%j.out", stderr = "/logs/%u/%N-%4j-%%.err" }))
    assert.equal("/logs/%x-%j.out", out.stdout)
    assert.equal("/logs/%u/%N-%4j-%%.err", out.stderr)
  end)

  it("refuses a body that is not an object", function()
    local out, err = validate.managed_spec(cjson.decode("[1, 2]"))
    assert.is_nil(out)
    assert.matches("JSON object", err.message)
  end)
end)

describe("validate.settings", function()
  it("keeps a secret that is absent or masked, clears it with null", function()
    local s = assert(validate.settings(cjson.decode('{"url": "http://h:6820", "token": "********",'
      .. ' "defaults": {"hf_token": null}}')))
    assert.equal(validate.KEEP, s.token)
    assert.is_nil(s.defaults.hf_token)
    s = assert(validate.settings(cjson.decode('{"defaults": {}}')))
    assert.equal(validate.KEEP, s.token)
    assert.equal(validate.KEEP, s.defaults.hf_token)
  end)

  it("needs a url or socket to enable, never both, and checks defaults by field", function()
    local _, err = validate.settings(cjson.decode('{"enabled": true}'))
    assert.equal("url", err.field)
    _, err = validate.settings(cjson.decode('{"url": "http://a:1", "socket": "/run/s.sock"}'))
    assert.equal("socket", err.field)
    _, err = validate.settings(cjson.decode('{"defaults": {"port_range": [21000, 20000]}}'))
    assert.equal("defaults.port_range", err.field)
    _, err = validate.settings(cjson.decode('{"defaults": {"modules": ["cuda/12", "a b"]}}'))
    assert.equal("defaults.modules[1]", err.field)
    _, err = validate.settings(cjson.decode('{"defaults": {"colour": "red"}}'))
    assert.equal("defaults.colour", err.field)
    _, err = validate.settings(cjson.decode('{"api_version": "v0.0.37"}'))
    assert.equal("api_version", err.field)
  end)

  it("takes the Slurm user's groups and EnforcePartLimits as cluster defaults; null means unknown", function()
    local s = assert(validate.settings(cjson.decode('{"defaults": {"user_groups": ["hpc", "gpu-users"],'
      .. ' "enforce_part_limits": "ALL"}}')))
    assert.same({ "hpc", "gpu-users" }, s.defaults.user_groups)
    assert.equal("ALL", s.defaults.enforce_part_limits)
    s = assert(validate.settings(cjson.decode('{"defaults": {"user_groups": null, "enforce_part_limits": null}}')))
    assert.is_nil(s.defaults.user_groups)
    assert.is_nil(s.defaults.enforce_part_limits)
    local _, err = validate.settings(cjson.decode('{"defaults": {"enforce_part_limits": "yes"}}'))
    assert.equal("defaults.enforce_part_limits", err.field)
    _, err = validate.settings(cjson.decode('{"defaults": {"user_groups": ["hpc", "a b"]}}'))
    assert.equal("defaults.user_groups[1]", err.field)
  end)
end)

describe("validate.report", function()
  it("accepts what the provisioner sends and names the bad field inside arrays", function()
    local rep = assert(validate.report(cjson.decode([[{"pass": {"started_at": 1.5, "duration": 0.4, "error": null},
      "replicas": [{"nonce": "0123456789abcdef", "model_id": 1, "slot": 1, "state": "healthy", "node": null,
        "successor_of": "fedcba9876543210", "end": {"state": "TIMEOUT", "exit_code": 0, "signal": 15}}],
      "outcomes": [{"model_id": 1, "state": "NODE_FAIL", "replica_id": 3, "launch_id": null}],
      "endpoints": {"1": ["http://10.0.0.1:20001"]},
      "provision_errors": {"1": {"message": "bad account", "field": "account", "code": 2045, "generation": 2}},
      "acknowledged": {"restart": [17], "clear_lost": []}}]])))
    assert.same({ "http://10.0.0.1:20001" }, rep.endpoints[1])
    assert.equal(cjson.null, rep.replicas[1].node)
    local _, err = validate.report(cjson.decode([[{"pass": {}, "replicas": [{"nonce": "ab", "state": "dancing"}]}]]))
    assert.equal("replicas[0].state", err.field)
    _, err = validate.report(cjson.decode([[{"pass": {}, "endpoints": {"x": []}}]]))
    assert.equal("endpoints.x", err.field)
    _, err = validate.report(cjson.decode([[{"replicas": []}]]))
    assert.equal("pass", err.field)
  end)
end)

describe("validate.launches_query", function()
  it("defaults limit to 50, caps it at 500, and names any bad or unknown parameter", function()
    assert.same({ limit = 50 }, validate.launches_query({}))
    assert.same({ limit = 500, model_id = 3, recipe_id = "vllm" },
      validate.launches_query({ limit = "500", model_id = "3", recipe_id = "vllm" }))
    for q, field in pairs({ limit = "limit", model_id = "model_id", recipe_id = "recipe_id", sort = "sort" }) do
      local bad = ({ limit = "501", model_id = "x", recipe_id = "a b", sort = "asc" })[q]
      local _, err = validate.launches_query({ [q] = bad })
      assert.equal(field, err.field)
    end
    local _, err = validate.launches_query({ limit = "0" })
    assert.equal("limit", err.field)
  end)
end)

describe("validate.model", function()
  it("takes API model names of [A-Za-z0-9._:/-]{1,128} only", function()
    assert.equal("meta-llama/Llama-3.1-8B:q4_0", assert(validate.model({ name = "meta-llama/Llama-3.1-8B:q4_0" })).name)
    for _, bad in ipairs({ "", "a b", ("x"):rep(129), "naïve", "a\n" }) do
      local _, err = validate.model({ name = bad })
      assert.equal("name", err.field, bad)
    end
    local _, err = validate.model({})
    assert.equal("name", err.field)
    assert.is_truthy(validate.model({}, true))
  end)
end)

describe("validate: secrets in errors", function()
  it("a refused JWT or Hugging Face token is never echoed in the error", function()
    for _, body in ipairs({
      { enabled = true, url = "http://x:1", user = "u", token = "eyJhbGciOi secret-part" },
      { enabled = true, url = "http://x:1", user = "u", defaults = { hf_token = "hf_abcdefgh secret-part" } },
    }) do
      local ok, err = validate.settings(body)
      assert.is_nil(ok)
      local text = require("cjson").encode(err)
      assert.is_nil(text:find("secret-part", 1, true), text)
      assert.is_nil(text:find("eyJhbGciOi", 1, true), text)
      assert.is_nil(text:find("hf_abcdefgh", 1, true), text)
    end
  end)
end)

describe("obleth.deployment.input.model", function()
  it("refuses a name that starts with '-' (it would reach the engine as an option), on the name field", function()
    local m, err = validate.model({ name = "--trust-remote-code" })
    assert.is_nil(m)
    assert.equal("name", err.field)
    assert.truthy(validate.model({ name = "Qwen/Qwen2.5-0.5B" }))
  end)
end)
