-- obleth.policy.validate on the harness cluster's accounting: accounts
-- research and teaching, QoS normal and long (MaxWall 2 days on long),
-- partitions gpu (MaxTime 4 h) and debug (MaxTime 30 min,
-- AllowAccounts=research, DenyQos=long).
local validate = require "obleth.policy.validate"

local partitions = {
  { name = "gpu", max_time = 240 },
  { name = "debug", max_time = 30, allowed_accounts = { research = true }, denied_qos = { long = true } },
}
local associations = {
  { account = "research", user = "alice", qos = { normal = true, long = true } },
  { account = "teaching", user = "alice", qos = { normal = true } },
}
local qos = { { name = "normal" }, { name = "long", max_wall = 2880 } }
local facts = { partitions = partitions, associations = associations, qos = qos }

local function fields(errs)
  local out = {}
  for _, e in ipairs(errs) do out[#out + 1] = e.field end
  table.sort(out)
  return out
end

describe("policy.validate", function()
  it("offers both accounts on gpu and only research on debug", function()
    assert.same({ "research", "teaching" }, validate.accounts_for(partitions[1], associations))
    assert.same({ "research" }, validate.accounts_for(partitions[2], associations))
  end)

  it("does not offer teaching for debug", function()
    local only_teaching = { associations[2] }
    assert.same({}, validate.accounts_for(partitions[2], only_teaching))
  end)

  it("an association bound to one partition offers its account there only", function()
    local a = { { account = "research", partition = "gpu", qos = {} } }
    assert.same({ "research" }, validate.accounts_for(partitions[1], a))
    assert.same({}, validate.accounts_for(partitions[2], a))
  end)

  it("accepts research/normal for 30 min on debug", function()
    assert.same({}, validate.check({ partition = "debug", account = "research", qos = "normal", time_limit = 30 },
      facts))
  end)

  it("QoS long on debug is an error on the qos field", function()
    local errs = validate.check({ partition = "debug", account = "research", qos = "long", time_limit = 10 }, facts)
    assert.same({ "qos" }, fields(errs))
    assert.equal("QOSNotAllowed", errs[1].code)
  end)

  it("a 1-hour time limit on debug is an error on the time_limit field", function()
    local errs = validate.check({ partition = "debug", account = "research", qos = "normal", time_limit = 60 }, facts)
    assert.same({ "time_limit" }, fields(errs))
    assert.equal("PartitionTimeLimit", errs[1].code)
  end)

  it("account teaching on debug is an error on the account field", function()
    local errs = validate.check({ partition = "debug", account = "teaching", qos = "normal", time_limit = 10 }, facts)
    assert.same({ "account" }, fields(errs))
    assert.equal("AccountNotAllowed", errs[1].code)
  end)

  it("an account the user has no association with is an error", function()
    local errs = validate.check({ partition = "gpu", account = "physics", time_limit = 10 }, facts)
    assert.same({ "account" }, fields(errs))
  end)

  it("a QoS the association does not list is an error: teaching may not use long", function()
    local errs = validate.check({ partition = "gpu", account = "teaching", qos = "long", time_limit = 10 }, facts)
    assert.same({ "qos" }, fields(errs))
  end)

  it("an unknown QoS or partition is an error on its field", function()
    assert.same({ "qos" }, fields(validate.check({ partition = "gpu", account = "research", qos = "gold" }, facts)))
    assert.same({ "partition" }, fields(validate.check({ partition = "cpu", account = "research" }, facts)))
  end)

  it("a time limit above the QoS's MaxWall is an error even when the partition allows it", function()
    local p = { { name = "long", max_time = math.huge } }
    local errs = validate.check({ partition = "long", account = "research", qos = "long", time_limit = 2881 },
      { partitions = p, associations = associations, qos = qos })
    assert.same({ "time_limit" }, fields(errs))
    assert.same({}, validate.check({ partition = "long", account = "research", qos = "long", time_limit = 2880 },
      { partitions = p, associations = associations, qos = qos }))
  end)

  it("several problems give several field errors", function()
    local errs = validate.check({ partition = "debug", account = "teaching", qos = "long", time_limit = 240 }, facts)
    assert.same({ "account", "qos", "time_limit" }, fields(errs))
  end)

  it("offers the QoS the association and the partition both allow", function()
    assert.same({ "long", "normal" }, validate.qos_for(partitions[1], "research", associations, qos))
    assert.same({ "normal" }, validate.qos_for(partitions[2], "research", associations, qos))
  end)
end)
