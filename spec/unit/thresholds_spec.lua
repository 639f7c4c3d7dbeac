-- The numbers the dashboard words by come from the server, each from the one module that decides
-- with it. Expected values: the router's 503 takes a provisioner silent for 60 s for stopped, a static
-- JWT is warned about from a day before its expiry, the rollover policy's margin is 300 s (5 min).
local settings = require "obleth.api.settings"
local deployments = require "obleth.api.deployments"

describe("thresholds the server hands to the dashboard", function()
  it("GET /settings/slurm's thresholds are the ones the router and the token source decide with", function()
    assert.same({ provisioner_stale = 60, token_warn_before = 86400 }, settings.thresholds())
    assert.equal(require("obleth.router.unavailable").PROVISIONER_STALE, settings.thresholds().provisioner_stale)
    assert.equal(require("obleth.slurm.token_source").WARN_BEFORE, settings.thresholds().token_warn_before)
  end)

  it("the preview's fields carry each setting's bounds, and the rollover policy's margin for an empty one", function()
    local a = deployments.answer({ ok = true, settings = {}, learned = {}, fields = {
      { field = "rollover_margin" }, { field = "health.interval" }, { field = "cpus_per_node" }, { field = "inputs.x" },
    } }, { recipe = { id = "r" }, source = "library" })
    assert.same({ min = 0, max = 10080, unit = "minutes", empty = 5 }, a.fields[1].hint)
    assert.same({ min = 1, max = 3600, default = 10, unit = "seconds" }, a.fields[2].hint)
    assert.same({ min = 0, max = 1024, default = 1 }, a.fields[3].hint)
    assert.equal(require("cjson").null, a.fields[4].hint)
  end)

  it("a PUT that sends the GET's thresholds back is taken (they are read-only)", function()
    local input = require "obleth.deployment.input"
    assert.is_table(input.settings({ enabled = false, thresholds = settings.thresholds() }))
  end)
end)
