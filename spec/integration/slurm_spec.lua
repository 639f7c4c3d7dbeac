-- obleth.slurm against the live harness cluster (make check: Slurm 26.05; spec/contract checks each
-- release the harness has).
local slurm = require "obleth.slurm"
local loop = require "obleth.loop"
local util = require "spec.support.util"

local URL, USER, TOKEN = os.getenv("OBLETH_SLURM_URL"), os.getenv("OBLETH_SLURM_USER"), os.getenv("OBLETH_SLURM_TOKEN")

local function connect(over)
  local o = { url = URL, user = USER, token = TOKEN, timeout = 10 }
  for k, v in pairs(over or {}) do o[k] = v end
  return slurm.connect(o)
end

local function desc(over)
  local d = { name = "obleth-spec", partition = "gpu", account = "research", time_limit = 5, nodes = 1,
    cpus_per_node = 1, memory_per_node = 100, script = "#!/bin/sh\nsleep 60\n", working_directory = "/tmp",
    -- never /tmp/slurm-%j.out: /tmp is shared by every harness release and run, and a file left there by
    -- another release's user (other uids) makes Slurm fail the job ("Could not open stdout file")
    stdout = "/dev/null", stderr = "/dev/null" }
  for k, v in pairs(over or {}) do d[k] = v end
  return d
end

-- Wait until fn() returns a truthy value (polling every 0.5 s), or time out.
local function eventually(fn, secs)
  local t_end = loop.monotonic() + (secs or 20)
  repeat
    local v = fn()
    if v then return v end
    loop.sleep(0.5)
  until loop.monotonic() > t_end
  return nil
end

describe("obleth.slurm on the harness cluster", function()
  if not URL then
    it("needs the harness cluster", function() pending("harness cluster not running (OBLETH_SLURM_URL unset)") end)
    return
  end

  local conn
  local submitted = {}
  setup(function() conn = assert(connect()) end)
  teardown(function()
    for _, id in ipairs(submitted) do conn:cancel(id) end
  end)

  local function submit(d)
    local id, res = conn:submit(d)
    if id then submitted[#submitted + 1] = id end
    return id, res
  end

  local harness = require "spec.support.harness"
  it("negotiates the newest API version the release serves and pings the controller", function()
    assert.equal(harness.API_VERSION, conn:version())
    local p = assert(conn:ping())
    assert.is_true(p.ok)
    assert.matches(harness.RELEASE_PATTERN, p.release)
    assert.equal(harness.API_VERSION, p.version)
  end)

  it("pins a version on request and refuses one the server does not serve", function()
    local c = assert(connect({ version = harness.API_VERSION }))
    assert.equal(harness.API_VERSION, c:version())
    -- 22.05 serves v0.0.36-38, 24.11 v0.0.40-42, 26.05 v0.0.42-45
    local none, err = connect({ version = harness.API_VERSION == "v0.0.38" and "v0.0.42" or "v0.0.38" })
    assert.is_nil(none)
    assert.equal("unsupported", err.code)
  end)

  it("reads partitions with their limits and nodes with GPUs by type", function()
    local parts = assert(conn:partitions())
    local by = {}
    for _, p in ipairs(parts) do by[p.name] = p end
    assert.equal(240, by.gpu.max_time)
    assert.equal(30, by.debug.max_time)
    assert.same({ research = true }, by.debug.allowed_accounts)
    assert.same({ long = true }, by.debug.denied_qos)
    assert.same({ "n0" }, by.debug.node_list)
    local nodes = assert(conn:nodes())
    local gpus = {}
    for _, n in ipairs(nodes) do gpus[n.name] = n.gres.gpu.by_type end
    assert.same({ a100 = 4 }, gpus.n0)
    assert.same({ a100 = 4 }, gpus.n2)
    assert.same({ h100 = 8 }, gpus.n3)
  end)

  it("reads accounts, QoS and the user's associations from the accounting database", function()
    local accts = assert(conn:accounts())
    local names = {}
    for _, a in ipairs(accts) do names[a.name] = true end
    assert.is_true(names.research and names.teaching)
    local qos = assert(conn:qos())
    local q = {}
    for _, x in ipairs(qos) do q[x.name] = x end
    assert.truthy(q.normal and q.long)
    assert.equal(2 * 24 * 60, q.long.max_wall)
    local assoc = assert(conn:associations({ user = USER }))
    local a = {}
    for _, x in ipairs(assoc) do a[x.account] = x end
    assert.truthy(a.research and a.teaching)
  end)

  it("submits, reads and cancels a job", function()
    local id, warnings = submit(desc())
    assert.is_number(id, warnings and warnings.message)
    assert.same({}, warnings)
    local j = assert(conn:job(id))
    assert.equal(id, j.id)
    assert.equal("obleth-spec", j.name)
    assert.equal(5, j.time_limit)
    local listed = eventually(function()
      for _, x in ipairs(assert(conn:jobs())) do if x.id == id then return x end end
    end)
    assert.truthy(listed)
    assert.is_true(conn:cancel(id))
    local ended = eventually(function()
      local x = conn:job(id)
      return x and x.state.base == "CANCELLED" and x
    end)
    assert.truthy(ended, "the job never showed as CANCELLED")
  end)

  it("0 CPUs per node gets the whole node: every CPU, and no other job beside it", function()
    local id, warnings = submit(desc({ cpus_per_node = 0 }))
    assert.is_number(id, warnings and warnings.message)
    local j = eventually(function() -- Slurm counts the node's CPUs once it allocates it
      local x = conn:job(id)
      return x and x.state.base == "RUNNING" and x
    end)
    assert.truthy(j, "the job never ran")
    assert.equal(8, j.cpus) -- the harness's nodes have 8
    assert.is_true(conn:cancel(id))
  end)

  describe("refusals name the field", function()
    local cases = {
      { "an account Slurm does not know", { account = "nosuch" }, "account", 2045 },
      { "a QoS Slurm does not know", { qos = "nosuch" }, "qos", 2066 },
      { "a partition that does not exist", { partition = "nosuch" }, "partition", 2000 },
      { "more GPUs per node than any node has", { gpus_per_node = 9 }, "gpus_per_node", 2014 },
      { "excluding every node of the partition", { partition = "debug", exclude = "n0" }, "exclude", 2014 },
    }
    for _, c in ipairs(cases) do
      it(c[1], function()
        local id, err = submit(desc(c[2]))
        assert.is_nil(id)
        assert.equal("refused", err.code)
        assert.equal(c[3], err.field)
        assert.equal(c[4], err.slurm_code)
        assert.is_string(err.message)
      end)
    end

    it("a property the API version does not have: v0.0.38 refuses the job, v0.0.40 and later warn", function()
      local v = conn:version()
      local body = require("obleth.slurm.submit").body(desc(), v)
      -- excluded_nodes is the v0.0.39+ name, exclude_nodes the v0.0.38 one
      local wrong = v == "v0.0.38" and "excluded_nodes" or "exclude_nodes"
      body.job[wrong] = "n1"
      local id, err = conn:submit_body(body)
      if v == "v0.0.38" then
        assert.is_nil(id)
        assert.equal("refused", err.code)
        assert.equal(9001, err.slurm_code)
        assert.equal("exclude", err.field)
      else
        assert.is_number(id, require("cjson").encode(err))
        submitted[#submitted + 1] = id
        assert.matches('unknown field "' .. wrong .. '"', err[1].message, 1, true)
      end
    end)
  end)

  describe("accepted but never started (EnforcePartLimits unset)", function()
    local cases = {
      { "an account the partition does not allow", { partition = "debug", account = "teaching" },
        { AccountNotAllowed = true, PartitionConfig = true } },
      { "a QoS the partition denies", { partition = "debug", qos = "long" }, { QOSNotAllowed = true, PartitionConfig = true } },
      -- 24.11 and 26.05 accept this one without a warning
      { "a time limit above the partition's MaxTime", { partition = "debug", time_limit = 60 },
        { PartitionTimeLimit = true, PartitionConfig = true }, harness.RELEASE ~= "22.05" },
    }
    for _, c in ipairs(cases) do
      it(c[1] .. " is a success" .. (c[4] and "" or " with a warning") .. ", then pends with its reason", function()
        local id, warnings = submit(desc(c[2]))
        assert.is_number(id)
        if not c[4] then assert.is_true(#warnings >= 1) end
        -- a busy node may first show Resources; the scheduler's next look gives the lasting reason
        local last
        local j = eventually(function()
          local x = conn:job(id)
          last = x and x.reason
          return x and c[3][x.reason] and x
        end, 60)
        assert.truthy(j, "unexpected reason " .. tostring(last))
        assert.equal("PENDING", j.state.base)
        assert.is_true(slurm.never_starts(j.reason))
      end)
    end
  end)

  it("reports an expired token as expired", function()
    local fh = io.popen(util.shq(util.root() .. "/spec/cluster/token.sh") .. " 2 " .. util.shq(USER))
    local short = fh:read("a"):gsub("%s+$", "")
    fh:close()
    assert.truthy(#short > 20)
    local c = assert(connect({ token = short }))
    loop.sleep(3.2)
    local r, err = c:ping()
    assert.is_nil(r)
    assert.equal("auth", err.code)
    assert.is_true(err.expired)
    local _, err2 = connect({ token = short })
    assert.equal("auth", err2.code)
    assert.is_true(err2.expired)
  end)

  it("reports a token slurmctld rejects as auth, never as a server error", function()
    -- 22.05 serves /openapi/v3 to anyone, then answers HTTP 500 to every call
    local c = assert(connect({ token = "not-a-jwt" }))
    local r, err = c:jobs()
    assert.is_nil(r)
    assert.equal("auth", err.code)
    local _, err2 = c:ping()
    assert.equal("auth", err2.code)
  end)

  it("reports a closed port as unreachable well under its timeout", function()
    local t0 = loop.monotonic()
    local c, err = slurm.connect({ url = "http://127.0.0.1:1", user = USER, token = TOKEN, timeout = 10 })
    assert.is_nil(c)
    assert.equal("unreachable", err.code)
    assert.is_true(loop.monotonic() - t0 < 2)
  end)

  it("obleth slurm partitions and nodes print the partitions, GPUs by type and node states", function()
    local status, out = util.run_obleth({ "slurm", "partitions" })
    assert.equal(0, status)
    assert.matches("gpu%*%s+UP%s+n%[0%-3%]", out)
    assert.matches("debug%s+UP%s+n0", out)
    status, out = util.run_obleth({ "slurm", "nodes" })
    assert.equal(0, status)
    for _, n in ipairs({ "n0", "n1", "n2" }) do assert.matches(n .. "%s+%u+[%u+_]*%s+%a+%s+%d+/8%s+32000 MiB%s+a100:4", out) end
    assert.matches("n3%s+%u+[%u+_]*%s+%a+%s+%d+/8%s+32000 MiB%s+h100:8", out)
    status, out = util.run_obleth({ "slurm", "nodes", "--json" })
    assert.equal(0, status)
    local nodes = require("cjson").decode(out)
    assert.equal(4, #nodes)
  end)
  it("obleth slurm takes the connection saved in obleth serve when no slurmrestd is given", function()
    local server = require "spec.support.server"
    local srv = server.start()
    local status = srv:request("PUT", "/api/v1/settings/slurm", { enabled = true, url = URL, user = USER, token = TOKEN })
    assert.equal(200, status)
    local fh = io.popen(("env -u OBLETH_SLURM_URL -u OBLETH_SLURM_TOKEN OBLETH_ADMIN_BASE_URL=%s "
      .. "OBLETH_ADMIN_TOKEN=%s %s slurm ping --json 2>&1"):format(util.shq(srv.base), util.shq(srv.token),
      util.shq(util.obleth())))
    local out = fh:read("a")
    fh:close()
    -- and token-expiry reads the saved token's expiry, never printing the token
    fh = io.popen(("env -u OBLETH_SLURM_URL -u OBLETH_SLURM_TOKEN OBLETH_ADMIN_BASE_URL=%s "
      .. "OBLETH_ADMIN_TOKEN=%s %s slurm token-expiry --json 2>&1"):format(util.shq(srv.base), util.shq(srv.token),
      util.shq(util.obleth())))
    local exp_out = fh:read("a")
    fh:close()
    srv:stop()
    srv:cleanup()
    local doc = require("cjson").decode(out)
    assert.is_true(doc.ok)
    assert.matches(require("spec.support.harness").RELEASE_PATTERN, doc.release)
    local exp = require("cjson").decode(exp_out)
    assert.equal(require("obleth.slurm").token_expiry(TOKEN), exp.exp)
    assert.is_nil(exp_out:find(TOKEN, 1, true))
  end)
end)
