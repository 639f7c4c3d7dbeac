-- Recipe inputs through the Management API: a saved recipe that puts an
-- input's text where the shell evaluates it is refused when saved, naming the line; a number input
-- of 1e400 (inf once decoded) is a field error naming the input, never 'inf' in a job script.
local server = require "spec.support.server"

describe("recipe inputs through the Management API", function()
  local srv
  setup(function() srv = server.start {} end)
  teardown(function() srv:stop(); srv:cleanup() end)

  it("refuses to save a recipe whose script evaluates an input's text, naming the line", function()
    local st, doc = srv:request("POST", "/api/v1/recipes", { id = "evil", name = "Evil", engine = "custom",
      inputs = { x = { type = "string" } }, environment = { OFFSET = "{{ inputs.x }}" },
      script = "#!/bin/bash\necho $((OBLETH_PORT + OFFSET))\n" })
    assert.equal(400, st)
    assert.equal("script", doc.error.field)
    assert.matches("line 2: OFFSET carries an input's text into arithmetic", doc.error.message, 1, true)
    st, doc = srv:request("POST", "/api/v1/recipes", { id = "evil2", name = "Evil", engine = "custom",
      inputs = { x = { type = "string" } }, launch = { "bash", "-c", "{{ inputs.x }}" } })
    assert.equal(400, st)
    assert.equal("launch[1]", doc.error.field)
  end)

  it("answers 1e400 for a number input with a field error naming the input", function()
    local st = srv:request("POST", "/api/v1/recipes", { id = "unbounded", name = "U", engine = "custom",
      inputs = { n = { type = "number" } }, launch = { "vllm", "serve", "m", "--x", "{{ inputs.n }}" } })
    assert.equal(201, st)
    for _, route in ipairs({ "preview", "launch" }) do
      local status, doc, raw = srv:request("POST", "/api/v1/deployments/" .. route,
        '{"recipe_id":"unbounded","api_model_name":"m","values":{"inputs":{"n":1e400}}}',
        { ["Content-Type"] = "application/json" })
      assert.is_truthy(status, route)
      local errs = doc.errors or (doc.error and doc.error.errors) or {}
      local found
      for _, e in ipairs(errs) do if e.field == "inputs.n" then found = e end end
      assert.is_table(found, route .. ": " .. tostring(raw):sub(1, 300))
      assert.matches("finite number", found.message)
      assert.is_nil(raw:find("%f[%a]inf%f[%A]"), route) -- the word inf, not "information"
    end
  end)
end)
