-- luacheck: std lua54+busted
-- API v0.0.45 (Slurm 26.05) and v0.0.46 (SchedMD master) read into the same model as the older
-- versions, on the fixtures written from their parsers.c (spec/fixtures/slurmrestd/README.md); and
-- the shapes a live 26.05 showed (cancel's per-job status, a rejected JWT's ping).
local N = require "obleth.slurm.normalize"
local versions = require "obleth.slurm.versions"
local submit = require "obleth.slurm.submit"
local H = dofile("spec/fixtures/slurmrestd/cases.lua")

local function by_id(list)
  local t = {}
  for _, x in ipairs(list) do t[x.id or x.name] = x end
  return t
end

describe("the API versions obleth knows", function()
  it("are one list, newest first, from v0.0.46 down to v0.0.38", function()
    assert.same({ "v0.0.46", "v0.0.45", "v0.0.44", "v0.0.43", "v0.0.42", "v0.0.41", "v0.0.40", "v0.0.39",
      "v0.0.38" }, versions.known)
    assert.equal("v0.0.38 to v0.0.46", versions.range())
    assert.equal(45, versions.number("v0.0.45"))
    assert.is_nil(versions.number("v1"))
  end)

  it("every one of them can build a submit body (submit reads the same list)", function()
    for _, v in ipairs(versions.known) do
      assert.is_table(submit.capabilities[v], v)
      local body = assert(submit.body({ name = "x", script = "#!/bin/sh\n", working_directory = "/tmp",
        cpus_per_node = 0, gpus_per_node = 1 }, v))
      assert.is_table(body.job, v)
    end
    -- the whole node on v0.0.45+: `shared` is still a JOB_DESC_MSG field there (only job info dropped it)
    assert.same({ "none" }, (submit.body({ script = "x", working_directory = "/tmp", cpus_per_node = 0 },
      "v0.0.45")).job.shared)
  end)
end)

for _, v in ipairs({ "v0.0.45", "v0.0.46" }) do
  describe(v .. " (fixtures of v0.0.45; v0.0.46 changes no field obleth reads)", function()
    it("ping: responding / primary / status instead of pinged / mode", function()
      local p = N.ping(H.fixture("v0.0.45/ping.json"), v)
      assert.is_true(p.ok) -- today's pinged-based test called every healthy v0.0.45 controller down
      assert.equal("ctl1", p.hostname)
      assert.equal("primary", p.mode)
      assert.is_true(p.primary)
      assert.equal("No error", p.status)
      assert.equal("26.05.3", p.release)
      assert.is_nil(p.auth_rejected)
    end)

    it("ping: a rejected JWT is told from a controller that does not answer", function()
      local bad = N.ping(H.fixture("v0.0.45/ping_bad_token.json"), v)
      assert.is_false(bad.ok)
      assert.is_true(bad.auth_rejected)
      local down = N.ping(H.fixture("v0.0.45/ping_ctld_down.json"), v)
      assert.is_false(down.ok)
      assert.is_nil(down.auth_rejected)
      assert.equal("Unable to contact slurm controller (connect failure)", down.status)
    end)

    it("partitions: flags (DEFAULT, HIDDEN), exclusive, oversubscribe, the partition's QoS and tier", function()
      local p = by_id(N.partitions(H.fixture("v0.0.45/partitions.json"), v))
      assert.is_true(p.gpu.default)
      assert.is_false(p.gpu.hidden)
      assert.is_false(p.debug.default)
      assert.equal("NO", p.gpu.exclusive)
      assert.equal("USER", p.debug.exclusive)
      assert.equal("FORCE:4", p.debug.oversubscribe)
      assert.same({ ["obleth-staff"] = true }, p.staff.allowed_groups)
      assert.is_false(p.staff.hidden)
      assert.is_true(p.admin.hidden)
      assert.equal("adminq", p.admin.qos)
      assert.equal(5, p.admin.priority_tier)
      assert.is_nil(p.gpu.qos)
      assert.equal("DRAIN", p.debug.state)
      assert.equal(6, #p.gpu.node_list)
    end)

    it("nodes: POWER_DOWN_ASAP and POWER_DOWN_FORCE are neither idle nor free", function()
      local n = by_id(N.nodes(H.fixture("v0.0.45/nodes.json"), v))
      assert.is_true(n.gpu11.idle)
      assert.equal(4, n.gpu11.gpus_free)
      for _, name in ipairs({ "gpu20", "gpu21" }) do
        assert.is_false(n[name].idle, name)
        assert.equal(0, n[name].gpus_free, name)
      end
      assert.is_true(n.gpu20.state.flags.POWER_DOWN_ASAP)
      assert.is_true(n.gpu21.state.flags.POWER_DOWN_FORCE)
    end)

    it("jobs: without `shared`, with the expanded log paths preferred to the pattern", function()
      local j = by_id(N.jobs(H.fixture("v0.0.45/jobs.json"), v))
      assert.equal(4, j[201].gpus_per_node)
      assert.equal("h100", j[201].gpu_type)
      assert.equal("/scratch/logs/obleth-m2-r1-201.out", j[201].stdout)
      assert.equal("/scratch/logs/obleth-m2-r1-201.err", j[201].stderr)
      assert.equal("/scratch/logs/%x-%j.out", j[201].stdout_pattern)
      assert.same({ base = "PENDING", flags = { REQUEUED = true } }, j[202].state)
      assert.same({ code = 137 }, j[203].exit_code)
    end)

    it("conf: EnforcePartLimits (v0.0.45 added GET /conf)", function()
      local c = N.conf(H.fixture("v0.0.45/conf.json"), v)
      assert.equal("NO", c.enforce_part_limits)
      assert.equal("obleth", c.cluster)
      assert.equal(30, c.min_job_age)
      assert.equal("ALL", N.conf({ slurm_conf = { EnforcePartLimits = { "YES" } } }, v).enforce_part_limits)
      assert.is_nil(N.conf({ slurm_conf = { EnforcePartLimits = "maybe" } }, v).enforce_part_limits)
    end)

    it("submit and cancel answers", function()
      assert.equal(205, (N.submit_response(H.fixture("v0.0.45/job_submit.json"), v, 200)))
      assert.same({}, N.cancel_failures(H.fixture("v0.0.45/job_cancel_ok.json")))
      assert.same({ { slurm_code = 2002, message = "Access/permission denied", job_id = 6 } },
        N.cancel_failures(H.fixture("v0.0.45/job_cancel_denied.json")))
      assert.same({ { slurm_code = 2017, message = "Invalid job id specified", job_id = 999999 } },
        N.cancel_failures(H.fixture("v0.0.45/job_cancel_unknown.json")))
    end)
  end)
end

describe("older versions' partitions", function()
  it("v0.0.38 sends Hidden and Default as flags", function()
    local p = N.partition_record({ name = "x", nodes = "n0", flags = { "default", "hidden" }, qos = "partq",
      priority_tier = 3 }, "v0.0.38")
    assert.is_true(p.default)
    assert.is_true(p.hidden)
    assert.equal("partq", p.qos)
    assert.equal(3, p.priority_tier)
  end)

  it("v0.0.40-44 skip the flags: hidden comes from which partitions the plain listing leaves out", function()
    local function part(name, groups)
      return { name = name, nodes = { configured = "n0" }, groups = { allowed = groups or "" },
        qos = { assigned = name == "gpu" and "gpuq" or "" } }
    end
    local all = N.partitions({ partitions = { part("gpu"), part("staff", "obleth-staff"), part("admin") } },
      "v0.0.42")
    assert.is_nil(all[3].hidden) -- not sent
    assert.equal("gpuq", all[1].qos)
    local plain = N.partitions({ partitions = { part("gpu") } }, "v0.0.42")
    local p = by_id(N.mark_listed(all, plain))
    assert.is_true(p.gpu.listed)
    assert.is_false(p.gpu.hidden)
    assert.is_true(p.admin.hidden) -- left out, and no AllowGroups to explain it
    assert.is_false(p.staff.listed)
    assert.is_nil(p.staff.hidden) -- left out: hidden, or the user is not in obleth-staff
  end)

  it("a v0.0.42 cancel answer with an empty status list is success", function()
    if not H.available() then return pending(H.missing()) end
    assert.same({}, N.cancel_failures(H.load("v0.0.42/job_delete.json")))
  end)
end)

describe("a job's GPUs, on the recorded captures (Slurm 24.11, 25.05)", function()
  local C = "captures/"
  local function job(rel, edit)
    local doc = H.load(C .. rel)
    if edit then edit(doc.jobs[1]) end
    return N.jobs(doc, "v" .. rel:match("/(0%.0%.%d+)/"))[1]
  end
  local function as_pending(j) j.gres_detail = {}; j.job_state = { "PENDING" } end

  it("two GPU models on one job: one stable description, every model counted", function()
    if not H.available() then return pending(H.missing()) end
    for _ = 1, 20 do -- a random pick of one model would change from read to read
      local j = job("24.11/0.0.42/slurm-job-gpus-multi-types.json")
      assert.equal("h100,h200", j.gpu_type)
      assert.same({ h100 = 1, h200 = 1 }, j.gpus_by_type)
      assert.equal(2, j.gpus)
    end
    -- before it runs (no gres_detail): the request says the same
    local p = job("24.11/0.0.42/slurm-job-gpus-multi-types.json", as_pending)
    assert.equal("h100,h200", p.gpu_type)
    assert.same({ h100 = 1, h200 = 1 }, p.gpus_by_type)
    assert.equal(2, p.gpus_per_node)
    assert.equal(2, p.gpus)
  end)

  it("--gpus-per-node on two nodes gives the job's total, also while pending", function()
    if not H.available() then return pending(H.missing()) end
    local p = job("25.05/0.0.43/slurm-job-gpus-per-node.json", as_pending)
    assert.equal(1, p.gpus_per_node)
    assert.equal(2, p.gpus)
  end)

  it("--gpus-per-socket gives per node and per job, also while pending", function()
    if not H.available() then return pending(H.missing()) end
    local p = job("25.05/0.0.43/slurm-job-gpus-per-socket.json", as_pending)
    assert.equal(2, p.gpus_per_socket)
    assert.equal(4, p.gpus_per_node) -- 2 per socket x 2 sockets
    assert.equal(4, p.gpus)
  end)

  it("a finished --gpus N job that ran on one node has all N per node", function()
    if not H.available() then return pending(H.missing()) end
    local j = job("25.05/0.0.43/slurm-job-gpus-completed.json")
    assert.equal("COMPLETED", j.state.base)
    assert.equal(4, j.gpus)
    assert.equal(4, j.gpus_per_node)
    local k = job("24.11/0.0.42/slurm-job-gpus-completed.json")
    assert.equal(6, k.gpus_per_node)
  end)
end)

describe("an AllowGroups partition read from v0.0.45", function()
  it("is there to check, so a launch by a user outside its groups is GroupNotAllowed on the partition", function()
    local validate = require "obleth.policy.validate"
    local parts = N.partitions(H.fixture("v0.0.45/partitions.json"), "v0.0.45")
    local errs = validate.check({ partition = "staff" }, { partitions = parts, associations = {},
      user = { name = "alice", groups = { alice = true }, groups_from = "host" } })
    assert.equal("partition", errs[1].field)
    assert.equal("GroupNotAllowed", errs[1].code)
  end)
end)

describe("log paths on versions that send only the pattern (v0.0.38-42)", function()
  it("are expanded from the job's own values, and stay the pattern when one is not known", function()
    local j = N.job_record({ job_id = 42, name = "llm", user_name = "alice", job_state = "RUNNING", nodes = "n[1-2]",
      batch_host = "n1", standard_output = "/logs/%x-%j.out", standard_error = "/logs/%u/%N-%6j.err" }, "v0.0.38")
    assert.equal("/logs/llm-42.out", j.stdout)
    assert.equal("/logs/alice/n1-000042.err", j.stderr)
    assert.equal("/logs/%x-%j.out", j.stdout_pattern)
    local arr = N.job_record({ job_id = 43, name = "a", user_name = "alice", job_state = "PENDING",
      standard_output = "/logs/%A_%a.out", standard_error = "/logs/%N.err" }, "v0.0.42")
    assert.equal("/logs/%A_%a.out", arr.stdout) -- %a: an array index this job does not have
    assert.equal("/logs/%N.err", arr.stderr) -- no node yet
    assert.equal("/logs/100%.out", N.expand_path("/logs/100%%.out", {}))
  end)

  it("a refusal of an AllowGroups partition at submit (22.05: error 2003) is on the partition field", function()
    assert.equal("partition", (submit.refusal_field(2003, "User's group not permitted to use this partition")))
  end)
end)
