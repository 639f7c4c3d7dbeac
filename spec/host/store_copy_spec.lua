-- obleth store copy: a SQLite store copied whole into an empty PostgreSQL one (and back), through the
-- command itself; what serve and the provisioner rely on survives: ids, the installation id, the
-- lease's generation, the next id after the copied ones. Needs PostgreSQL (spec.support.pg).
local pgs = require "spec.support.pg"
local available, why = pgs.available()

describe("obleth store copy", function()
  if not available then
    it("needs PostgreSQL", function() pending(why) end)
    return
  end
  local store_mod = require "obleth.store"
  local cli = require "obleth.cli.store"
  local cjson = require "cjson"
  local dir, url, drop

  before_each(function()
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir))
    url, drop = pgs.database()
  end)
  after_each(function()
    drop()
    os.execute("rm -rf " .. dir)
  end)

  -- a store with a bit of everything
  local function fill(s)
    local a = assert(s:create_model { name = "a", description = "first" })
    local b = assert(s:create_model { name = "b" })
    assert(s:delete_model(a.id)) -- ids with a hole: b keeps 2
    assert(s:add_endpoint(b.id, "http://h:1"))
    assert(s:put_spec(b.id, { replicas = 1, enabled = true, partition = "gpu", launch_command = "serve" }))
    local lid = assert(s:add_launch { model_id = b.id, recipe_id = "r", settings = { x = 1 }, created_by = "me" })
    assert(s:acquire_lease({ holder = "p", host = "h", pid = 1, ttl = 30, token_hash = string.rep("a", 64) }, 1000))
    assert(s:acquire_lease({ holder = "q", host = "h", pid = 2, ttl = 30, token_hash = string.rep("b", 64) }, 2000))
    assert(s:apply_report({ pass = { started_at = 3000, duration = 0.5, error = cjson.null }, lease_generation = 2,
      lease_proof = string.rep("b", 64),
      replicas = { { nonce = "n1", model_id = b.id, slot = 1, state = "ended", job_id = 7, ended_at = 3000.5,
        ["end"] = { state = "FAILED", signal = 9, exit_code = 1 } } },
      outcomes = { { nonce = "n1", model_id = b.id, job_id = 7, state = "FAILED", signal = "SIGKILL" } },
      endpoints = {}, provision_errors = {}, acknowledged = { restart = {}, clear_lost = {} } }, 3001))
    assert(s:put_settings({ url = "http://slurm", token = "secret" }))
    assert(s:put_recipe("r", "R", '{"engine":"x"}'))
    assert(s:create_api_key { name = "k", prefix = "ob-1", hash = string.rep("c", 64) })
    assert(s:put_replica_log(s:replica_by_nonce("n1").id, "stderr", "oom", "/x", 1, 3002))
    return b, lid
  end

  it("copies every row, keeping ids, the installation id and the lease generation; ids go on after them",
    function()
    local path = dir .. "/obleth.db"
    local src = assert(store_mod.open(path))
    local b, lid = fill(src)
    local instance = src:instance()
    local before = { models = src:list_models(), replicas = src:list_replicas(), launches = src:list_launches {},
      specs = src:list_specs(), keys = src:list_api_keys(), recipes = src:list_recipes(),
      settings = src:get_settings(), status = src:provisioner_status() }
    src:close()
    assert.equal(0, cli.main { "copy", "--from", "sqlite:" .. path, "--to", url })
    local dst = assert(store_mod.open(url))
    assert.equal(instance, dst:instance())
    assert.same(before, { models = dst:list_models(), replicas = dst:list_replicas(), launches = dst:list_launches {},
      specs = dst:list_specs(), keys = dst:list_api_keys(), recipes = dst:list_recipes(),
      settings = dst:get_settings(), status = dst:provisioner_status() })
    assert.equal(2, dst:provisioner_status().lease.generation)
    assert.equal("oom", dst:replica_logs(dst:replica_by_nonce("n1").id).stderr.tail)
    assert.equal(lid, dst:replica_by_nonce("n1").launch_id)
    -- new rows take the next ids, and the lease fence goes on from 2
    local c = assert(dst:create_model { name = "c" })
    assert.equal(b.id + 1, c.id)
    local l = assert(dst:acquire_lease({ holder = "r", host = "h", pid = 3, ttl = 30, token_hash = string.rep("d", 64) },
      9000))
    assert.equal(3, l.lease.generation)
    dst:close()
  end)

  it("refuses a destination that is not empty, writing nothing, and says so", function()
    local path = dir .. "/obleth.db"
    local src = assert(store_mod.open(path))
    fill(src)
    src:close()
    local dst = assert(store_mod.open(url))
    assert(dst:create_model { name = "already-here" })
    dst:close()
    assert.equal(1, cli.main { "copy", "--from", path, "--to", url })
    dst = assert(store_mod.open(url))
    assert.equal(1, #dst:list_models())
    assert.is_nil(dst:model_by_name("b"))
    dst:close()
  end)

  it("copies back from PostgreSQL to a new SQLite file the same rows", function()
    local path, back = dir .. "/obleth.db", dir .. "/back.db"
    local src = assert(store_mod.open(path))
    fill(src)
    local models = src:list_models()
    src:close()
    assert.equal(0, cli.main { "copy", "--from", path, "--to", url })
    assert.equal(0, cli.main { "copy", "--from", url, "--to", "sqlite:" .. back })
    local s = assert(store_mod.open(back))
    assert.same(models, s:list_models())
    s:close()
  end)

  it("is bad usage (2) without --from and --to, and fails (1) for a source that does not exist", function()
    assert.equal(2, cli.main { "copy", "--to", url })
    assert.equal(1, cli.main { "copy", "--from", dir .. "/missing.db", "--to", url })
  end)
end)
