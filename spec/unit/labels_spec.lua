-- obleth.deployment.labels: an error about a field carries the field's label, and its message says the
-- label where it said the key (the words the dashboard shows next to the field).
local labels = require "obleth.deployment.labels"

describe("obleth.deployment.labels.say", function()
  it("says 'Walltime: ...' for 'time_limit: ...', and sets label", function()
    local e = labels.say { field = "time_limit", message = "time_limit: must be at most 30 min on debug" }
    assert.equal("Walltime", e.label)
    assert.equal("Walltime: must be at most 30 min on debug", e.message)
  end)

  it("reads recipe.resolve's api_name as the API model name", function()
    local e = labels.say { field = "api_model_name", message = "api_name must be 1 to 128 characters" }
    assert.equal("API model name: must be 1 to 128 characters", e.message)
  end)

  it("says the label for a trailing (field) too, and for the Slurm sheet's fields", function()
    local e = labels.say { field = "url", message = "url: is required unless socket is set (url)" }
    assert.equal("slurmrestd URL: is required unless socket is set (slurmrestd URL)", e.message)
    assert.equal("GPUs per node: must be from 0 to 64, got 99",
      labels.say({ field = "gpus_per_node", message = "gpus_per_node: must be from 0 to 64, got 99" }).message)
  end)

  it("an input is labelled with its name; a message that does not start with the key is kept", function()
    local e = labels.say { field = "inputs.model", message = "the model directory does not exist" }
    assert.equal("model", e.label)
    assert.equal("the model directory does not exist", e.message)
    assert.is_nil(labels.say({ field = "nosuch", message = "nosuch: x" }).label)
  end)

  it("is idempotent", function()
    local e = labels.say(labels.say { field = "qos", message = "qos: QoS long is not allowed on debug" })
    assert.equal("QoS: QoS long is not allowed on debug", e.message)
  end)
end)
