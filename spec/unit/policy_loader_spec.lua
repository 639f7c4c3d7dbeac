-- obleth.policy: built-in modules, overrides from a directory, reload that
-- keeps the previous module when an edit is broken. Runs on temp dirs.
local policy = require "obleth.policy"

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute("mkdir -p '" .. d .. "'"))
  return d
end

local function write(path, text)
  local fh = assert(io.open(path, "w"))
  fh:write(text)
  fh:close()
end

-- a stat stand-in: a version number per path, bumped on every write
local function versioned()
  local versions = {}
  local function stat(path)
    local fh = io.open(path, "rb")
    if not fh then return nil end
    fh:close()
    return { mtime = versions[path] or 0, size = 0 }
  end
  local function put(path, text)
    write(path, text)
    versions[path] = (versions[path] or 0) + 1
  end
  return stat, put
end

describe("obleth.policy loader", function()
  local dir, stat, put
  before_each(function()
    dir = tmpdir()
    stat, put = versioned()
  end)
  after_each(function()
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("gives the built-in modules when the override directory is empty or missing", function()
    local set = policy.new({ dir = dir, stat = stat })
    assert.equal(require("obleth.policy.rollover"), set.get("rollover"))
    local missing = policy.new({ dir = dir .. "/nope", stat = stat })
    assert.equal(require("obleth.policy.lost"), missing.get("lost"))
    assert.same({}, missing.errors())
  end)

  it("raises for a policy name it does not know", function()
    local set = policy.new({ dir = dir, stat = stat })
    assert.has_error(function() set.get("nope") end)
  end)

  it("merges an override's DEFAULTS over the built-in ones", function()
    put(dir .. "/rollover.lua", "return {DEFAULTS = {margin = 600}}")
    local set = policy.new({ dir = dir, stat = stat })
    local p = set.get("rollover").plan({ time_limit = 60, started_at = 0, healthy_at = 0, now = 0 })
    assert.equal(3600 - 600, p.at)
    assert.equal(300, require("obleth.policy.rollover").DEFAULTS.margin, "the built-in is untouched")
  end)

  it("replaces a function and lets the override call the built-in one", function()
    put(dir .. "/lost.lua", [[
      return {
        check = function(ends, opts)
          local r = builtin.check(ends, opts)
          r.lost = r.failures >= 1
          return r
        end,
      }]])
    local set = policy.new({ dir = dir, stat = stat })
    assert.is_true(set.get("lost").check({ { healthy = false, at = 1 } }).lost)
    assert.equal(20, set.get("lost").backoff(2), "functions not overridden stay")
  end)

  it("a scale.lua override changes the decision on the next reload (late-bound need)", function()
    -- 6 requests on 1 replica at target_inflight 4: built-in need = ceil(6 / 4) = 2
    local f = { now = 1000, autoscale = { min_replicas = 1, max_replicas = 8, target_inflight = 4,
      scale_down_after = 300, idle_to_zero_after = 1800 }, replicas = { { slot = 1, state = "healthy" } },
      load = { inflight = 6, last_request_at = 1000, samples = {} } }
    local set = policy.new({ dir = dir, stat = stat })
    assert.equal(2, set.get("scale").decide(f).desired)
    -- an operator who wants a spare replica on top of the need: decide calls M.need, so it follows
    put(dir .. "/scale.lua", [[
      return { need = function(demand, load, s) return builtin.need(demand, load, s) + 1 end }]])
    set.reload()
    assert.equal(3, set.get("scale").decide(f).desired)
    -- DEFAULTS a spec leaves out: down_utilization 0.5 → 6 / (4 × 0.5) = 3 held on the way down
    put(dir .. "/scale.lua", "return {DEFAULTS = {down_utilization = 0.5}}")
    set.reload()
    f.replicas = { { slot = 1, state = "healthy" }, { slot = 2, state = "healthy" }, { slot = 3, state = "healthy" } }
    f.load.samples = { { at = 600, span = 10, inflight = 6 } }
    assert.equal(3, set.get("scale").decide(f).desired)
    assert.equal(2, require("obleth.policy.scale").decide(f).desired, "the built-in: ceil(6 / 3.2) = 2")
  end)

  it("overriding partition_takes_account changes check and accounts_for", function()
    -- an operator rule: the partition debug also takes account teaching, whatever AllowAccounts says
    put(dir .. "/validate.lua", [[
      return {
        partition_takes_account = function(partition, account)
          if partition.name == "debug" and account == "teaching" then return true end
          return builtin.partition_takes_account(partition, account)
        end,
      }]])
    local set = policy.new({ dir = dir, stat = stat })
    local debug = { name = "debug", max_time = 30, allowed_accounts = { research = true } }
    local assocs = { { account = "research", qos = {} }, { account = "teaching", qos = {} } }
    local facts = { partitions = { debug }, associations = assocs, qos = {} }
    local req = { partition = "debug", account = "teaching", time_limit = 10 }
    local builtin = require("obleth.policy.validate")
    assert.same({ "research" }, builtin.accounts_for(debug, assocs))
    assert.equal("account", builtin.check(req, facts)[1].field)
    assert.same({ "research", "teaching" }, set.get("validate").accounts_for(debug, assocs))
    assert.same({}, set.get("validate").check(req, facts))
  end)

  it("a function wrapped through builtin still calls the overridden helpers", function()
    put(dir .. "/validate.lua", [[
      local calls = 0
      return {
        partition_takes_account = function() calls = calls + 1; return true end,
        accounts_for = function(p, a) local r = builtin.accounts_for(p, a); r.calls = calls; return r end,
      }]])
    local set = policy.new({ dir = dir, stat = stat })
    local debug = { name = "debug", allowed_accounts = { research = true } }
    local got = set.get("validate").accounts_for(debug, { { account = "teaching" } })
    assert.same({ "teaching", calls = 1 }, got)
  end)

  it("picks up an edit on reload without a restart", function()
    put(dir .. "/learned.lua", "return {DEFAULTS = {window = 1}}")
    local set = policy.new({ dir = dir, stat = stat })
    local one = { { id = 1, account = "a", qos = "q" } }
    assert.equal("a", set.get("learned").defaults(one).account)
    put(dir .. "/learned.lua", "return {DEFAULTS = {window = 2}}")
    assert.is_true((set.reload()))
    assert.is_nil(set.get("learned").defaults(one))
  end)

  it("keeps the previous module when an edit does not compile, and reports the error with the file", function()
    put(dir .. "/rollover.lua", "return {DEFAULTS = {margin = 600}}")
    local set = policy.new({ dir = dir, stat = stat })
    local before = set.get("rollover")
    put(dir .. "/rollover.lua", "return {DEFAULTS = {margin = 600}")
    local ok, errs = set.reload()
    assert.is_false(ok)
    assert.equal(before, set.get("rollover"))
    assert.matches("rollover.lua", errs.rollover.path)
    assert.matches("rollover.lua:1:", errs.rollover.message)
    assert.same(errs, set.errors())
  end)

  it("keeps the previous module when an edit raises while loading", function()
    local set = policy.new({ dir = dir, stat = stat })
    put(dir .. "/lost.lua", "error('boom')")
    assert.is_false((set.reload()))
    assert.equal(require("obleth.policy.lost"), set.get("lost"))
    assert.matches("boom", set.errors().lost.message)
  end)

  it("refuses an override whose required function is not a function", function()
    local set = policy.new({ dir = dir, stat = stat })
    put(dir .. "/suggestions.lua", "return {suggest = 42}")
    assert.is_false((set.reload()))
    assert.matches("suggestions.suggest must be a function", set.errors().suggestions.message)
    assert.equal(require("obleth.policy.suggestions"), set.get("suggestions"))
  end)

  it("refuses an override that returns nothing", function()
    local set = policy.new({ dir = dir, stat = stat })
    put(dir .. "/validate.lua", "local x = 1")
    assert.is_false((set.reload()))
    assert.matches("must return a table", set.errors().validate.message)
  end)

  it("gives override files no io, no os.execute and no arbitrary require", function()
    local set = policy.new({ dir = dir, stat = stat })
    put(dir .. "/lost.lua", "return {DEFAULTS = {k = io and 1 or 2, backoff_max = os.execute and 1 or 600}}")
    assert.is_true((set.reload()))
    assert.equal(2, set.get("lost").DEFAULTS.k)
    assert.equal(600, set.get("lost").DEFAULTS.backoff_max)
    put(dir .. "/lost.lua", "local io = require('io'); return {}")
    assert.is_false((set.reload()))
    assert.matches("not allowed", set.errors().lost.message)
    assert.equal(2, set.get("lost").DEFAULTS.k, "the working override stays")
  end)

  it("loads an override that requires the pure helpers by their current or their former names", function()
    local set = policy.new({ dir = dir, stat = stat })
    put(dir .. "/lost.lua", [[
      local a, b = require("obleth.util.hostlist"), require("obleth.slurm.hostlist")
      local c, d, e = require("obleth.util.shell"), require("obleth.job.shell"), require("obleth.shell")
      return {DEFAULTS = {k = (a == b and c == d and d == e) and #a.expand("n[1-3]") or 0}}]])
    assert.is_true((set.reload()))
    assert.equal(3, set.get("lost").DEFAULTS.k)
  end)

  it("recovers once the broken file is fixed, and clears the error", function()
    local set = policy.new({ dir = dir, stat = stat })
    put(dir .. "/lost.lua", "syntax error here")
    set.reload()
    assert.is_table(set.errors().lost)
    put(dir .. "/lost.lua", "return {DEFAULTS = {k = 7}}")
    assert.is_true((set.reload()))
    assert.same({}, set.errors())
    assert.equal(7, set.get("lost").DEFAULTS.k)
  end)

  it("goes back to the built-in module when the override file is removed", function()
    put(dir .. "/lost.lua", "return {DEFAULTS = {k = 7}}")
    local set = policy.new({ dir = dir, stat = stat })
    assert.equal(7, set.get("lost").DEFAULTS.k)
    os.remove(dir .. "/lost.lua")
    set.reload()
    assert.equal(require("obleth.policy.lost"), set.get("lost"))
  end)

  it("does not recompile an unchanged file", function()
    local now = 1
    local set = policy.new({ dir = dir, stat = stat, clock = function() return now end })
    put(dir .. "/lost.lua", "return {")
    set.reload()
    assert.equal(1, set.errors().lost.at)
    now = 2
    set.reload()
    assert.equal(1, set.errors().lost.at, "the same broken file was not compiled again")
    put(dir .. "/lost.lua", "return {}}")
    set.reload()
    assert.equal(2, set.errors().lost.at, "a changed file is")
  end)

  it("recompiles on every reload when no stat is available", function()
    write(dir .. "/lost.lua", "return {DEFAULTS = {k = 4}}")
    local set = policy.new({ dir = dir, stat = false })
    assert.equal(4, set.get("lost").DEFAULTS.k)
    write(dir .. "/lost.lua", "return {DEFAULTS = {k = 5}}")
    set.reload()
    assert.equal(5, set.get("lost").DEFAULTS.k)
  end)

  it("reads the directory from OBLETH_POLICY_DIR by default", function()
    local set = policy.new({ stat = stat })
    local want = os.getenv("OBLETH_POLICY_DIR") or "/etc/obleth/policy.d"
    assert.equal(want, set.dir())
  end)

  it("has a process-wide set that configure() points at a directory", function()
    put(dir .. "/rollover.lua", "return {DEFAULTS = {margin = 60}}")
    policy.configure({ dir = dir, stat = stat })
    assert.equal(60, policy.get("rollover").DEFAULTS.margin)
    put(dir .. "/rollover.lua", "return {")
    assert.is_false((policy.reload()))
    assert.equal(60, policy.get("rollover").DEFAULTS.margin)
    assert.is_table(policy.errors().rollover)
    policy.configure({ dir = dir .. "/none", stat = stat })
  end)
end)
