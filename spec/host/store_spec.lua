-- obleth.store: the shapes its answers and its failures take, on SQLite and on PostgreSQL
-- (spec.support.stores), and what open says of a location it cannot use.
local store_mod = require "obleth.store"
local stores = require "spec.support.stores"

for _, backend in ipairs(stores.backends()) do
describe("obleth.store on " .. backend.name, function()
  local spec = { replicas = 1, enabled = true, partition = "gpu", launch_command = "engine serve" }
  local store, why_not
  before_each(function() store, why_not = backend.open() end)
  after_each(function() if store then store:close() end end)

  it("put_spec answers {spec, created}: created on the first put only, the spec as stored", function()
    if not store then return pending(why_not) end
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
    if not store then return pending(why_not) end
    local put, err = store:put_spec(999, spec)
    assert.is_nil(put)
    assert.equal("not_found", err.code)
    assert.equal("model 999 does not exist", err.message)
  end)
end)
end

describe("obleth.store.open on PostgreSQL", function()
  local pgs = require "spec.support.pg"
  local available, why = pgs.available()
  it("by three instances at once on a new database: each opens it, the migrations applied once", function()
    if not available then return pending(why) end
    local loop = require "obleth.loop"
    local url, drop = pgs.database()
    local opened, migrated, errs, n = {}, {}, {}, 0
    local done = loop.notifier()
    for i = 1, 3 do
      loop.spawn(function()
        local log = { info = function(ev, f) if ev == "store_migrated" then migrated[#migrated + 1] = f.version end end }
        local s, err = store_mod.open(url, { log = log, pool = 2 })
        opened[i], errs[i] = s, err
        n = n + 1
        if n == 3 then done:notify() end
      end)
    end
    done:wait()
    for i = 1, 3 do
      assert.is_nil(errs[i])
      assert.equal(#opened[i].db.migrations, opened[i]:schema_version())
    end
    table.sort(migrated)
    local want = {}
    for v = 1, #opened[1].db.migrations do want[v] = v end
    assert.same(want, migrated)
    for i = 1, 3 do opened[i]:close() end
    drop()
  end)
end)

describe("obleth.store backends", function()
  it("have the same migrations, one for one (a new one is written in both dialects)", function()
    local sqlite_m = require("obleth.store.sqlite").migrations
    local pg_m = require("obleth.store.pg").migrations
    assert.equal(#sqlite_m, #pg_m)
    for v = 1, #sqlite_m do
      -- the same tables in the same order (UNLOGGED is PostgreSQL's: a table of data it need not keep
      -- through a crash, migration 15's load_shares)
      local function tables(script)
        script = script:gsub("CREATE UNLOGGED TABLE", "CREATE TABLE")
        local t = {}
        for name in script:gmatch("CREATE TABLE (%w[%w_]*)") do t[#t + 1] = name end
        for name in script:gmatch("ALTER TABLE (%w[%w_]*) ADD COLUMN (%w[%w_]*)") do t[#t + 1] = name end
        return t
      end
      assert.same(tables(sqlite_m[v]), tables(pg_m[v]), "migration " .. v)
    end
  end)
end)

describe("obleth.store.open", function()
  it("of a PostgreSQL server it cannot reach is nil and {code = 'storage', message} without the password", function()
    local store, err = store_mod.open("postgresql://obleth:s3cret@127.0.0.1:1/obleth", { connect_timeout = 5 })
    assert.is_nil(store)
    assert.equal("storage", err.code)
    assert.matches("cannot connect to the database postgresql://obleth@127.0.0.1:1/obleth", err.message, 1, true)
    assert.is_nil(err.message:find("s3cret", 1, true))
  end)

  it("of a file in a directory that does not exist is nil and {code = 'storage', message}", function()
    local store, err = store_mod.open("/nonexistent-obleth-dir/x.db")
    assert.is_nil(store)
    assert.equal("storage", err.code)
    assert.matches("cannot open the database /nonexistent-obleth-dir/x.db", err.message, 1, true)
  end)
end)
