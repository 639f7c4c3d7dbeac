-- obleth.store over databases an earlier obleth made: its migrations are written once
-- (obleth.store.migrations) for both backends since, and a database made before must open with every
-- row it holds, migrate the rest of the way, and end with the schema a new store gets. The databases
-- are spec/fixtures/store/: SQLite dumps made by obleth d885288 at schema versions 14 and 10 (rows in
-- every table), and the schema of a new PostgreSQL store made by that obleth.
local store_mod = require "obleth.store"
local sqlite = require "obleth.sqlite"
local schema = require "spec.support.schema"
local util = require "spec.support.util"

local FIXTURES = util.root() .. "/spec/fixtures/store/"
local slurp = util.slurp

local function sqlite_schema(path)
  local db = assert(sqlite.open(path))
  local s = schema.sqlite(db)
  db:close()
  return s
end

describe("obleth.store on a SQLite database an earlier obleth made", function()
  local dir
  before_each(function()
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir))
  end)
  after_each(function() os.execute("rm -rf " .. dir) end)

  -- the fixture's dump loaded into a new file: the database as that obleth left it
  local function restore(name)
    local path = dir .. "/" .. name .. ".db"
    local db = assert(sqlite.open(path))
    assert(db:exec(slurp(FIXTURES .. name .. ".sql")))
    db:close()
    return path
  end

  local function fresh_schema()
    local path = dir .. "/fresh.db"
    assert(store_mod.open(path)):close()
    return sqlite_schema(path)
  end

  it("migration 16 gives back a predecessor's nonce SQLite's integer affinity had turned into a number", function()
    local path = restore("sqlite-v14")
    local db = assert(sqlite.open(path))
    -- as obleth at schema 14 stored a rollover whose predecessor's nonce is all decimal digits
    assert(db:exec([[INSERT INTO replicas (id, model_id, slot, nonce, state, check_failures, created_at, updated_at)
        VALUES (10, 2, 2, '0000000000000042', 'healthy', 0, 3001.5, 3001.5);
      INSERT INTO replicas (id, model_id, slot, nonce, state, check_failures, successor_of, created_at, updated_at)
        VALUES (11, 2, 2, 'abc0000000000011', 'starting', 0, '0000000000000042', 3001.5, 3001.5);]]))
    -- the affinity this migration undoes
    assert.equal("integer", assert(db:first("SELECT typeof(successor_of) AS t FROM replicas WHERE id = 11")).t)
    db:close()
    local s = assert(store_mod.open(path))
    assert.equal("0000000000000042", s:replica_by_nonce("abc0000000000011").successor_of)
    assert.equal("n1", s:replica_by_nonce("n2").successor_of)
    -- and from now on a nonce of digits is kept as written
    assert(s:apply_report({ pass = { started_at = os.time(), duration = 0.1 }, replicas = { { nonce = "0000000000000077",
      model_id = 2, slot = 3, state = "starting", job_id = 77, check_failures = 0, successor_of = "0000000000000042" } },
      outcomes = {}, endpoints = {}, provision_errors = {}, acknowledged = { restart = {}, clear_lost = {} } }, os.time()))
    assert.equal("0000000000000042", s:replica_by_nonce("0000000000000077").successor_of)
    s:close()
  end)

  it("at schema 14 opens with every row, migrates to the last (15: load_shares), and takes new writes", function()
    local path = restore("sqlite-v14")
    local s = assert(store_mod.open(path))
    assert.equal(#s.db.migrations, s:schema_version())
    assert.equal("18ec9839", s:instance())
    local models = s:list_models()
    assert.equal(1, #models)
    assert.same({ 2, "b", "the one kept" }, { models[1].id, models[1].name, models[1].description })
    assert.same({ "http://h:1", "http://h:2" }, s:route_model("b").endpoints)
    assert.equal("gpu", s:get_spec(2).partition)
    local n1, n2 = s:replica_by_nonce("n1"), s:replica_by_nonce("n2")
    assert.equal("ended", n1.state)
    assert.equal(9, n1["end"].signal)
    assert.equal("n1", n2.successor_of)
    assert.equal(3000.25, n2.started_at)
    assert.equal("oom", s:replica_logs(n1.id).stderr.tail)
    assert.equal(2, s:provisioner_status().lease.generation)
    assert.equal("secret", s:get_settings().token)
    assert.equal("R", s:get_recipe("r").name)
    local key = s:list_api_keys()[1]
    assert.same({ "k", "alice", 60, 3 }, { key.name, key.owner, key.requests_per_minute, key.usage.requests })
    assert.equal("b", s:list_audit()[1].target)
    assert.equal("operator", s:list_personal_tokens("alice")[1].role)
    assert.same({ bound = "bound", expires_at = 99999999999, groups = { "g" } }, s:session_get(string.rep("e", 64)))
    local c = assert(s:create_model { name = "c" })
    assert.equal(3, c.id)
    s:close()
    assert.equal(fresh_schema(), sqlite_schema(path))
  end)

  it("at schema 10 migrates to the last, its rows kept, and ends with a new store's schema", function()
    local path = restore("sqlite-v10")
    local s = assert(store_mod.open(path))
    assert.equal(#s.db.migrations, s:schema_version())
    assert.equal("0a1b2c3d", s:instance())
    local m = s:model_by_name("old")
    assert.same({ 3, "from v10", "active" }, { m.id, m.description, m.status })
    assert.same({ "http://old:1" }, s:route_model("old").endpoints)
    assert.equal(1, s:get_spec(3).replicas)
    local r = s:get_replica(9)
    assert.same({ "abcdef0123456789", "healthy", 42, 1001.25, 5 }, { r.nonce, r.state, r.job_id, r.started_at, r.launch_id })
    assert.equal(7, s:list_api_keys()[1].usage.requests)
    assert.equal("ready", s:replica_logs(9).stdout.tail)
    -- the snapshot versions (migration 11) count from the upgrade on: a write to the model is seen
    local v = s:snapshot_version()
    assert(s:update_model(3, { description = "after" }))
    assert.is_true(s:snapshot_version() > v)
    s:close()
    assert.equal(fresh_schema(), sqlite_schema(path))
  end)
end)

describe("obleth.store on PostgreSQL", function()
  local pgs = require "spec.support.pg"
  local available, why = pgs.available()
  it("makes the schema an earlier obleth made, to the column, index and trigger", function()
    if not available then return pending(why) end
    local url, drop = pgs.database()
    assert(store_mod.open(url)):close()
    local c = assert(require("obleth.pg").connect(url))
    local got = schema.pg(function(sql) return assert(c:query(sql)) end)
    c:close()
    -- the tables of the migrations after the fixture's schema 14 (15: load_shares) are not in it
    got = got:gsub("[^\n]*load_shares[^\n]*\n", "")
    drop()
    local want = {}
    for line in slurp(FIXTURES .. "pg-schema-14.txt"):gmatch("[^\n]+") do
      if not line:match("^#") then want[#want + 1] = line end
    end
    want = table.concat(want, "\n") .. "\n"
    assert.equal(want, got)
  end)
end)
