-- What each harness release (22.05, 24.11, 26.05: OBLETH_CLUSTER_RELEASE, default 22.05) answers for
-- the fixes it depends on, live: the API version negotiated, a cancel Slurm will not do (someone
-- else's job, an unknown job), a JWT slurmctld rejects, AllowGroups and Hidden partitions, and the
-- expanded log paths. Where releases differ the spec says so per release.
local slurm = require "obleth.slurm"
local versions = require "obleth.slurm.versions"
local util = require "spec.support.util"
local tag = require "obleth.job.tag"

local URL, USER, TOKEN = os.getenv("OBLETH_SLURM_URL"), os.getenv("OBLETH_SLURM_USER"), os.getenv("OBLETH_SLURM_TOKEN")
local RELEASE = os.getenv("OBLETH_CLUSTER_RELEASE") or "22.05"
-- the newest API version each release serves that obleth knows (docs/slurm-versions.md)
local NEWEST = { ["22.05"] = "v0.0.38", ["24.11"] = "v0.0.42", ["26.05"] = "v0.0.45" }
local OTHER = "obleth-other" -- the harness's second job user (spec/cluster/lib.sh), where it has one

local function connect(over)
  local o = { url = URL, user = USER, token = TOKEN, timeout = 30 }
  for k, v in pairs(over or {}) do o[k] = v end
  return slurm.connect(o)
end

local function desc(over)
  -- logs to /dev/null: each harness cluster numbers its jobs from 1, and /tmp/slurm-N.out left by another
  -- release's job (another uid inside its root) makes the job fail at start
  local d = { name = "obleth-release-spec", partition = "gpu", account = "research", time_limit = 5, nodes = 1,
    cpus_per_node = 1, memory_per_node = 100, script = "#!/bin/sh\nsleep 120\n", working_directory = "/tmp",
    stdout = "/dev/null", stderr = "/dev/null" }
  for k, v in pairs(over or {}) do d[k] = v end
  return d
end

describe("Slurm " .. RELEASE .. " on the harness, live", function()
  if not URL then
    it("needs the harness cluster", function() pending("harness cluster not running (OBLETH_SLURM_URL unset)") end)
    return
  end

  local conn
  local mine = {}
  setup(function() conn = assert(connect()) end)
  teardown(function()
    for _, id in ipairs(mine) do conn:cancel(id) end
  end)

  -- a job of the second user's, and a connection as that user; nil, why when the harness has none
  local function other_job(name, comment)
    local code, out = util.sh("id " .. OTHER)
    if code ~= 0 then return nil, "this harness has no second job user (" .. tostring(out) .. ")" end
    local assocs = conn:associations({ user = OTHER }) or {}
    if #assocs == 0 then return nil, "this cluster's accounting has no association for " .. OTHER end
    local tcode, tok = util.sh("spec/cluster/token.sh 300 " .. OTHER)
    assert.equal(0, tcode, tok)
    tok = tok:match("SLURM_JWT=(%S+)") or tok:match("(%S+)%s*$")
    local other = assert(connect({ user = OTHER, token = tok }))
    local id = assert(other:submit(desc({ name = name, comment = comment })))
    return id, other
  end

  it("negotiates the newest API version both sides know, and ping reports it", function()
    local want = NEWEST[RELEASE]
    assert.equal(want, conn:version())
    assert.truthy(versions.number(want))
    local p = assert(conn:ping())
    assert.is_true(p.ok)
    assert.equal(want, p.version)
    assert.matches("^" .. RELEASE:gsub("%.", "%%."), p.release)
  end)

  it("a cancel of a job Slurm does not know is refused with Slurm's message (2017)", function()
    local ok, err = conn:cancel(987654)
    assert.is_nil(ok)
    assert.equal("refused", err.code)
    assert.matches("Invalid job id specified", err.message, 1, true)
  end)

  it("a cancel of another user's job is refused (26.05: HTTP 200 with error 2002 in status[])", function()
    local id, other = other_job("obleth-release-spec-other")
    if not id then return pending(other) end
    local ok, err = conn:cancel(id)
    local cleanup_ok = other:cancel(id)
    assert.is_nil(ok)
    assert.equal("refused", err.code)
    assert.matches("Access/permission denied", err.message, 1, true)
    if RELEASE == "26.05" then assert.equal(200, err.http_status) end
    assert.is_true(cleanup_ok) -- its owner may
  end)

  it("the provisioner logs a cancel Slurm refused as failed, and sends it again on the next pass", function()
    local harness = require "spec.support.harness"
    local provisioner = require "spec.support.provisioner"
    local h = harness.start { port_range = { 21500, 21599 } }
    -- a job tagged for this installation but for a model it does not have, owned by someone else:
    -- the provisioner cancels it ("no such model"), and Slurm does not let it
    local nonce = "0123456789abcdef"
    local id, other = other_job(tag.name(h.instance, 9999, 0, nonce), tag.comment(h.instance, 9999, 0, nonce, 1, 21500))
    if not id then
      h:stop()
      return pending(other)
    end
    local prov = provisioner.start { base = h.srv.base, token = h.srv.token, interval = "1" }
    local function refused_cancels()
      local n = 0
      for line in prov:log():gmatch("[^\n]+") do
        if line:find("job_cancel", 1, true) and line:find("job_id=" .. id, 1, true) and line:find("ok=false", 1, true)
        then n = n + 1 end
      end
      return n >= 2 and n
    end
    local ok, n = pcall(util.wait_until, refused_cancels, 60, "two refused cancels of job " .. id)
    local log = prov:log()
    prov:stop()
    other:cancel(id)
    h:stop()
    assert.is_true(ok, tostring(n) .. "\n" .. log)
    assert.matches("Access/permission denied", log, 1, true)
    assert.is_nil(log:find("job_cancel[^\n]*job_id=" .. id .. "[^\n]*ok=true"))
  end)

  it("a JWT slurmctld rejects makes ping an auth error, not a controller that is down", function()
    local bad = assert(connect())
    bad:set_token("eyJhbGciOiJIUzI1NiJ9.eyJleHAiOjQxMDI0NDQ4MDAsInN1biI6Im9ibGV0aCJ9.bm90LXRoZS1zaXRlcy1rZXk")
    local r, err = bad:ping()
    assert.is_nil(r)
    assert.equal("auth", err.code)
  end)

  it("lists AllowGroups partitions (staff) and Hidden ones (maint, where the layout has it), marked", function()
    local ps = assert(conn:partitions())
    local by = {}
    for _, p in ipairs(ps) do by[p.name] = p end
    assert.is_table(by.staff, "staff is listed")
    assert.same({ ["obleth-staff"] = true }, by.staff.allowed_groups)
    -- obleth's own check is the guard: 26.05 accepts a job there and leaves it pending forever
    local validate = require "obleth.policy.validate"
    local errs = validate.check({ partition = "staff" }, { partitions = ps, associations = {},
      user = { name = USER, groups = { [USER] = true }, groups_from = "host" } })
    assert.equal("GroupNotAllowed", errs[1] and errs[1].code)
    if not by.maint then return pending("this harness layout has no Hidden partition") end
    assert.is_true(by.maint.hidden)
    assert.is_false(by.gpu.hidden)
  end)

  it("a job's log paths are the expanded ones (v0.0.43+ send stdout_expanded; older ones are expanded here)",
    function()
    local id = assert(conn:submit(desc({ stdout = "/tmp/%x-" .. RELEASE .. "-%j.out" })))
    mine[#mine + 1] = id
    local j = assert(conn:job(id))
    -- v0.0.43+ send the pattern and stdout_expanded; 24.11's v0.0.42 the expanded path; 22.05's v0.0.38
    -- the pattern, which obleth expands itself
    assert.equal(("/tmp/obleth-release-spec-%s-%d.out"):format(RELEASE, id), j.stdout)
    if RELEASE ~= "24.11" then assert.equal("/tmp/%x-" .. RELEASE .. "-%j.out", j.stdout_pattern) end
    conn:cancel(id)
    os.remove(("/tmp/obleth-release-spec-%s-%d.out"):format(RELEASE, id))
  end)
end)
