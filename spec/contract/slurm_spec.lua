-- The contract between obleth's Slurm bindings and every Slurm release the harness runs live (22.05,
-- 24.11, 26.05: spec/run.sh runs this tier once against each, with that cluster's env file exported).
-- Where the releases really behave differently, RELEASES says how, and the spec checks each release
-- for its own behaviour; what obleth makes of it is the same on all three.
local slurm = require "obleth.slurm"
local jwt = require "obleth.slurm.jwt"
local loop = require "obleth.loop"
local cjson = require "cjson"
local util = require "spec.support.util"

local URL, USER, TOKEN = os.getenv("OBLETH_SLURM_URL"), os.getenv("OBLETH_SLURM_USER"), os.getenv("OBLETH_SLURM_TOKEN")
local RELEASE = os.getenv("OBLETH_CLUSTER_RELEASE") or "22.05"
local OTHER = "obleth-other" -- the harness's second job user (spec/cluster/README.md)

-- What each release does, seen live on the harness clusters.
--   api            the newest API version the release serves (obleth negotiates it)
--   group_submit   a job to an AllowGroups partition the user is not in: "refused" at submit, or
--                  "pending" (accepted, then never started)
--   lists_hidden   GET .../partitions without ?flags=ALL lists Hidden and AllowGroups partitions
local RELEASES = {
  ["22.05"] = { api = "v0.0.38", group_submit = "refused", lists_hidden = true },
  ["24.11"] = { api = "v0.0.42", group_submit = "pending", lists_hidden = false },
  ["26.05"] = { api = "v0.0.45", group_submit = "pending", lists_hidden = false },
}
local R = RELEASES[RELEASE]

local function connect(over)
  local o = { url = URL, user = USER, token = TOKEN, timeout = 30 }
  for k, v in pairs(over or {}) do o[k] = v end
  return slurm.connect(o)
end

local function token_for(user, lifespan)
  local code, out = util.sh(util.shq(util.root() .. "/spec/cluster/token.sh") .. " " .. (lifespan or 600) .. " "
    .. util.shq(user))
  assert(code == 0, "spec/cluster/token.sh: " .. out)
  return (out:gsub("%s+$", ""):gsub("^.*\n", ""))
end

local function desc(over)
  local d = { name = "obleth-contract", partition = "gpu", account = "research", time_limit = 5, nodes = 1,
    cpus_per_node = 1, memory_per_node = 100, script = "#!/bin/sh\nsleep 120\n", working_directory = "/tmp",
    -- never /tmp/slurm-%j.out: /tmp is shared by every harness release and run, and a file left there by
    -- another release's user (other uids) makes Slurm fail the job ("Could not open stdout file")
    stdout = "/dev/null", stderr = "/dev/null" }
  for k, v in pairs(over or {}) do d[k] = v end
  return d
end

local function eventually(fn, secs, what)
  local t_end = loop.monotonic() + (secs or 30)
  repeat
    local v = fn()
    if v then return v end
    loop.sleep(0.5)
  until loop.monotonic() > t_end
  error("timed out after " .. (secs or 30) .. " s waiting for " .. (what or "a condition"), 2)
end

local function by_name(list, key)
  local out = {}
  for _, x in ipairs(list) do out[x[key or "name"]] = x end
  return out
end

describe("Slurm " .. RELEASE .. " contract:", function()
  if not URL or not R then
    it("needs a harness cluster", function()
      pending("no harness cluster of a known release (OBLETH_SLURM_URL, OBLETH_CLUSTER_RELEASE=" .. RELEASE .. ")")
    end)
    return
  end

  local conn
  local submitted = {} -- {conn, id}: cancelled in teardown
  setup(function() conn = assert(connect()) end)
  teardown(function()
    for _, s in ipairs(submitted) do s[1]:cancel(s[2]) end
  end)

  local function submit(d, c)
    c = c or conn
    local id, res = c:submit(d)
    if id then submitted[#submitted + 1] = { c, id } end
    return id, res
  end

  it("ping: the controller answers, and says it runs Slurm " .. RELEASE, function()
    local p = assert(conn:ping())
    assert.is_true(p.ok)
    assert.matches("^" .. RELEASE:gsub("%.", "%%.") .. "%.%d+$", p.release)
  end)

  it("ping: obleth negotiates " .. R.api .. ", the newest API version " .. RELEASE .. " serves", function()
    assert.equal(R.api, conn:version())
    local status, out = util.sh("OBLETH_SLURM_API_VERSION=auto " .. util.shq(util.obleth()) .. " slurm ping")
    assert.equal(0, status, out)
    assert.matches("API%s+" .. R.api:gsub("%.", "%%.") .. "%s", out)
    assert.matches("Slurm " .. RELEASE:gsub("%.", "%%."), out)
  end)

  it("partitions: limits and account / QoS rules of gpu, debug and inference", function()
    local by = by_name(assert(conn:partitions()))
    assert.equal(240, by.gpu.max_time)
    assert.same({ "n0", "n1", "n2", "n3" }, by.gpu.node_list)
    assert.equal(30, by.debug.max_time)
    assert.same({ research = true }, by.debug.allowed_accounts)
    assert.same({ long = true }, by.debug.denied_qos)
    assert.same({ inference = true }, by.inference.allowed_qos)
    assert.equal(45, by.inference.default_time)
    assert.equal(120, by.inference.max_time)
  end)

  -- 24.11 and 26.05 list it only when asked with ?flags=ALL
  it("partitions: the AllowGroups partition staff is listed with its groups", function()
    local by = by_name(assert(conn:partitions()))
    assert.truthy(by.staff, "staff is missing from the partitions")
    assert.same({ ["obleth-staff"] = true }, by.staff.allowed_groups)
  end)

  it("partitions: the Hidden=YES partition maint is listed, marked hidden", function()
    local by = by_name(assert(conn:partitions()))
    assert.truthy(by.maint, "maint is missing from the partitions")
    assert.is_true(by.maint.hidden)
    assert.is_falsy(by.gpu.hidden)
  end)

  it("partitions: without ?flags=ALL, " .. RELEASE .. (R.lists_hidden and " lists" or " leaves out")
    .. " the partitions the user may not see", function()
    local status, doc = util.sh(("curl -sS -H %s -H %s %s"):format(util.shq("X-SLURM-USER-NAME: " .. USER),
      util.shq("X-SLURM-USER-TOKEN: " .. TOKEN), util.shq(URL .. "/slurm/" .. conn:version() .. "/partitions")))
    assert.equal(0, status, doc)
    local names = {}
    for _, p in ipairs(cjson.decode(doc).partitions) do names[p.name] = true end
    assert.is_true(names.gpu)
    assert.equal(R.lists_hidden, names.staff == true)
    assert.equal(R.lists_hidden, names.maint == true)
  end)

  it("nodes: n0-n2 with 4 A100s, n3 with 8 H100s, 8 CPUs and 32000 MiB each, with their features", function()
    local by = by_name(assert(conn:nodes()))
    for _, n in ipairs({ "n0", "n1", "n2" }) do assert.same({ a100 = 4 }, by[n].gres.gpu.by_type, n) end
    assert.same({ h100 = 8 }, by.n3.gres.gpu.by_type)
    for _, n in ipairs({ "n0", "n1", "n2", "n3" }) do
      assert.equal(8, by[n].cpus, n)
      assert.equal(32000, by[n].memory, n)
    end
    assert.same({ a100 = true, ib = true }, by.n0.features)
    assert.same({ h100 = true }, by.n3.features)
  end)

  it("accounts, QoS and associations from the accounting database", function()
    local accts = by_name(assert(conn:accounts()))
    assert.truthy(accts.research and accts.teaching)
    local qos = by_name(assert(conn:qos()))
    assert.truthy(qos.normal and qos.long and qos.inference)
    assert.equal(2 * 24 * 60, qos.long.max_wall)
    local mine = by_name(assert(conn:associations({ user = USER })), "account")
    assert.truthy(mine.research and mine.teaching)
    local theirs = by_name(assert(conn:associations({ user = OTHER })), "account")
    assert.truthy(theirs.research)
    assert.is_nil(theirs.teaching)
  end)

  it("submit with every field a job description has, then job and jobs read each back", function()
    local logdir = os.tmpname()
    os.remove(logdir)
    assert(os.execute("mkdir -p " .. util.shq(logdir) .. " && chmod 1777 " .. util.shq(logdir)))
    local id, warnings = submit(desc({
      name = "obleth-contract-all", comment = "every field", partition = "gpu", account = "teaching", qos = "long",
      time_limit = 7, nodes = 1, gpus_per_node = 2, gpu_type = "a100", cpus_per_node = 2, memory_per_node = 2000,
      constraint = "a100&ib", exclude = "n1", environment = { OBLETH_CONTRACT = "seen-by-the-job" },
      script = "#!/bin/sh\necho \"env=$OBLETH_CONTRACT\"\necho oops >&2\nsleep 120\n",
      stdout = logdir .. "/out-%j.log", stderr = logdir .. "/err-%j.log", working_directory = logdir,
      requeue = false }))
    assert.is_number(id, cjson.encode(warnings))
    local j = eventually(function()
      local x = conn:job(id)
      return x and x.state.base == "RUNNING" and x
    end, 60, "job " .. id .. " running")
    assert.equal("obleth-contract-all", j.name)
    assert.equal("every field", j.comment)
    assert.equal("gpu", j.partition)
    assert.equal("teaching", j.account)
    assert.equal("long", j.qos)
    assert.equal(7, j.time_limit)
    assert.equal(1, j.node_count)
    assert.same({ "n0" }, j.node_list) -- the only node with feature ib
    assert.equal(2, j.gpus_per_node)
    assert.equal("a100", j.gpu_type)
    assert.equal(2, j.cpus)
    assert.equal(2000, j.memory_per_node)
    assert.equal(logdir, j.working_directory)
    -- the job ran the script with its environment, and wrote where it was told
    local out = eventually(function()
      local fh = io.open(logdir .. "/out-" .. id .. ".log")
      local s = fh and fh:read("a")
      if fh then fh:close() end
      return s and s:find("env=", 1, true) and s
    end, 30, "the job's stdout")
    assert.matches("env=seen%-by%-the%-job", out)
    local fh = assert(io.open(logdir .. "/err-" .. id .. ".log"))
    assert.matches("oops", fh:read("a"))
    fh:close()
    local listed = by_name(assert(conn:jobs()), "id")[id]
    assert.truthy(listed, "jobs does not list job " .. id)
    assert.equal("RUNNING", listed.state.base)
    assert.is_true(conn:cancel(id))
    os.execute("rm -rf " .. util.shq(logdir))
  end)

  -- 22.05 (v0.0.38) and 26.05 (v0.0.43 and later) answer the raw patterns; 26.05 adds stdout_expanded,
  -- 22.05 nothing: obleth expands them itself there (obleth.slurm.normalize.expand_path)
  it("job: stdout and stderr are the paths Slurm writes to (%j expanded)", function()
    local id = assert(submit(desc({ stdout = "/tmp/obleth-contract-%j.out", stderr = "/tmp/obleth-contract-%x-%j.err" })))
    local j = assert(conn:job(id))
    assert.equal("/tmp/obleth-contract-" .. id .. ".out", j.stdout)
    assert.equal("/tmp/obleth-contract-obleth-contract-" .. id .. ".err", j.stderr)
    conn:cancel(id)
    os.remove("/tmp/obleth-contract-" .. id .. ".out")
    os.remove("/tmp/obleth-contract-obleth-contract-" .. id .. ".err")
  end)

  -- 22.05's refusal (error 2003) is read back onto the partition field
  it("submit to the AllowGroups partition staff: " .. RELEASE .. " " .. (R.group_submit == "refused"
    and "refuses it at submit, on the partition field" or "accepts it and never starts it"), function()
    local id, res = submit(desc({ partition = "staff" }))
    if R.group_submit == "refused" then
      assert.is_nil(id)
      assert.equal("refused", res.code)
      assert.equal(2003, res.slurm_code) -- ESLURM_JOB_MISSING_REQUIRED_PARTITION_GROUP
      assert.equal("partition", res.field)
    else
      assert.is_number(id, cjson.encode(res))
      local j = eventually(function()
        local x = conn:job(id)
        return x and x.reason and x
      end, 30, "a pending reason")
      assert.equal("PENDING", j.state.base)
      conn:cancel(id)
    end
  end)

  it("cancel: of an own job, which then ends CANCELLED", function()
    local id = assert(submit(desc()))
    assert.is_true(conn:cancel(id))
    eventually(function()
      local x = conn:job(id)
      return x and x.state.base == "CANCELLED"
    end, 30, "job " .. id .. " CANCELLED")
  end)

  -- 24.11 and 26.05 answer HTTP 200 and put the job's own outcome in status[].error
  it("cancel: of someone else's job is refused with Slurm's reason, and the job keeps going", function()
    local theirs = assert(connect({ user = OTHER, token = token_for(OTHER) }))
    local id = assert(submit(desc(), theirs))
    local ok_, err = conn:cancel(id)
    assert.is_nil(ok_)
    assert.equal("refused", err.code)
    assert.is_string(err.message)
    assert.is_number(err.slurm_code)
    local j = assert(theirs:job(id))
    assert.is_true(j.state.base == "PENDING" or j.state.base == "RUNNING", j.state.base)
    assert.is_true(theirs:cancel(id))
  end)

  it("cancel: of a job Slurm never had is refused", function()
    local ok_, err = conn:cancel(987654)
    assert.is_nil(ok_)
    assert.equal("refused", err.code)
    assert.equal(2017, err.slurm_code) -- ESLURM_INVALID_JOB_ID
  end)

  -- 24.11 and 26.05 answer ping with HTTP 200, responding: false; 24.11 answers /slurmdb/ with HTTP 502
  -- error 7000 "Failed to open slurmdbd connection, authentication error" for that token (and
  -- /slurm/vX/diag with 511), which the transport reads as auth
  it("a JWT slurmctld rejects (signed with another key) is auth on every call", function()
    local forged = jwt.mint({ key = "not the cluster's key", user = USER, lifespan = 600, now = os.time() })
    local c, err = connect({ token = forged })
    if c then
      local r
      r, err = c:ping()
      assert.is_nil(r, "ping answered " .. cjson.encode(r or {}))
      assert.equal("auth", err.code)
      r, err = c:jobs()
      assert.is_nil(r)
    end
    assert.equal("auth", err.code)
  end)
end)
