-- obleth.store on an in-memory SQLite database: the shapes its answers and its failures take.
local store_mod = require "obleth.store"

describe("obleth.store", function()
  local spec = { replicas = 1, enabled = true, partition = "gpu", launch_command = "engine serve" }

  it("put_spec answers {spec, created}: created on the first put only, the spec as stored", function()
    local store = assert(store_mod.open(":memory:"))
    local m = assert(store:create_model { name = "m" })
    local first = assert(store:put_spec(m.id, spec))
    assert.is_true(first.created)
    assert.equal("gpu", first.spec.partition)
    local again = assert(store:put_spec(m.id, { replicas = 2, enabled = true, partition = "gpu",
      launch_command = "engine serve" }))
    assert.is_false(again.created)
    assert.equal(2, again.spec.replicas)
  end)

  it("put_spec for a model that does not exist is nil and {code = 'not_found', message}", function()
    local store = assert(store_mod.open(":memory:"))
    local put, err = store:put_spec(999, spec)
    assert.is_nil(put)
    assert.equal("not_found", err.code)
    assert.equal("model 999 does not exist", err.message)
  end)

  it("open of a PostgreSQL location is nil and {code = 'unsupported', message}", function()
    local store, err = store_mod.open("postgres://db/obleth")
    assert.is_nil(store)
    assert.equal("unsupported", err.code)
    assert.matches("PostgreSQL stores are not supported yet", err.message, 1, true)
  end)

  it("open of a file in a directory that does not exist is nil and {code = 'storage', message}", function()
    local store, err = store_mod.open("/nonexistent-obleth-dir/x.db")
    assert.is_nil(store)
    assert.equal("storage", err.code)
    assert.matches("cannot open the database /nonexistent-obleth-dir/x.db", err.message, 1, true)
  end)
end)
