-- luacheck: std lua54+busted
local submit = require "obleth.slurm.submit"
local H = dofile("spec/fixtures/slurmrestd/cases.lua")

-- A spec that needs the shared recordings: pending (never a silent pass) without them.
local function it_cases(name, fn)
  it(name, function()
    if not H.available() then
      pending(H.missing())
      return
    end
    fn()
  end)
end

local VERSIONS = { "v0.0.38", "v0.0.39", "v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44" }

-- environment order is not meaningful; empty excluded_nodes carries nothing
local function canonical(body)
  local job = body.job
  if type(job.environment) == "table" and job.environment[1] then table.sort(job.environment) end
  if type(job.excluded_nodes) == "table" and #job.excluded_nodes == 0 then job.excluded_nodes = nil end
  return body
end

describe("obleth.slurm.submit", function()
  describe("body", function()
    local full = {
      name = "obleth-m1-r1", comment = "obleth:replica=r1", partition = "gpu", account = "research",
      qos = "normal", time_limit = 10, nodes = 1, gpus_per_node = 2, gpu_type = "a100",
      cpus_per_node = 4, memory_per_node = 16000, constraint = "a100&ib", exclude = "n[1-2]",
      environment = { HF_HOME = "/srv/hf" }, script = "#!/bin/bash\nexec serve\n",
      stdout = "/srv/out-%j", stderr = "/srv/err-%j", working_directory = "/srv", requeue = false,
    }

    it("writes the v0.0.38 shapes checked on the live 22.05 cluster", function()
      local b = assert(submit.body(full, "v0.0.38"))
      assert.equal(full.script, b.script)
      assert.same({
        name = "obleth-m1-r1", comment = "obleth:replica=r1", partition = "gpu", account = "research",
        qos = "normal", time_limit = 10, nodes = "1", gpus_per_node = "a100:2",
        minimum_cpus_per_node = 4, memory_per_node = 16000, constraints = "a100&ib",
        exclude_nodes = "n[1-2]", environment = { HF_HOME = "/srv/hf", PATH = submit.DEFAULT_PATH },
        standard_output = "/srv/out-%j", standard_error = "/srv/err-%j",
        -- requeue = false is left out: 22.05 reads any value as true
        current_working_directory = "/srv",
      }, b.job)
    end)

    it("never sends excluded_nodes, tres_per_node or an empty environment on v0.0.38", function()
      local b = assert(submit.body({ script = "x", exclude = { "n1", "n2", "n3" }, gpus_per_node = 1 },
        "v0.0.38"))
      assert.is_nil(b.job.excluded_nodes)
      assert.is_nil(b.job.tres_per_node)
      assert.equal("n[1-3]", b.job.exclude_nodes)
      assert.equal("1", b.job.gpus_per_node)
      assert.equal(submit.DEFAULT_PATH, b.job.environment.PATH)
      assert.equal("/tmp", b.job.current_working_directory)
    end)

    it("writes v0.0.39 with tres_per_node, excluded_nodes array and integer limits", function()
      local b = assert(submit.body(full, "v0.0.39"))
      assert.equal(full.script, b.script)
      assert.equal("gres/gpu:a100:2", b.job.tres_per_node)
      assert.same({ "n1", "n2" }, b.job.excluded_nodes)
      assert.equal(10, b.job.time_limit)
      assert.equal(16000, b.job.memory_per_node)
      assert.same({ "HF_HOME=/srv/hf", "PATH=" .. submit.DEFAULT_PATH }, b.job.environment)
    end)

    it("writes NV limits from v0.0.40 and the script inside job from v0.0.41", function()
      for _, v in ipairs({ "v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44" }) do
        local b = assert(submit.body(full, v))
        assert.same({ set = true, infinite = false, number = 10 }, b.job.time_limit, v)
        assert.same({ set = true, infinite = false, number = 16000 }, b.job.memory_per_node, v)
        if v == "v0.0.40" then
          assert.equal(full.script, b.script)
        else
          assert.is_nil(b.script, v)
          assert.equal(full.script, b.job.script, v)
        end
      end
    end)

    it("asks for the whole node's memory with 0", function()
      local b = assert(submit.body({ script = "x", memory_per_node = 0, working_directory = "/w" }, "v0.0.42"))
      assert.same({ set = true, infinite = false, number = 0 }, b.job.memory_per_node)
    end)

    it("asks for the whole node with 0 CPUs: the --exclusive of each version", function()
      local b = assert(submit.body({ script = "x", cpus_per_node = 0, working_directory = "/w" }, "v0.0.38"))
      assert.same({ "exclusive", nil }, { b.job.exclusive, b.job.minimum_cpus_per_node })
      for _, v in ipairs({ "v0.0.39", "v0.0.41", "v0.0.44" }) do
        b = assert(submit.body({ script = "x", cpus_per_node = 0, working_directory = "/w" }, v))
        assert.same({ { "none" }, nil }, { b.job.shared, b.job.minimum_cpus_per_node }, v)
      end
      b = assert(submit.body({ script = "x", cpus_per_node = 4, working_directory = "/w" }, "v0.0.41"))
      assert.same({ nil, 4 }, { b.job.shared, b.job.minimum_cpus_per_node })
    end)

    it("sends a node range as a \"min-max\" string (v0.0.38 ignores a [min, max] array)", function()
      local b = assert(submit.body({ script = "x", nodes = { min = 1, max = 3 }, working_directory = "/w" },
        "v0.0.42"))
      assert.equal("1-3", b.job.nodes)
    end)

    it("requires a working directory from v0.0.39", function()
      for _, v in ipairs({ "v0.0.39", "v0.0.40", "v0.0.44" }) do
        local b, err = submit.body({ script = "x" }, v)
        assert.is_nil(b)
        assert.equal("required", err.code)
        assert.equal("working_directory", err.field)
      end
    end)

    it("reports bad values and unknown versions as nil, err", function()
      local b, err = submit.body({ script = "x", time_limit = -5 }, "v0.0.38")
      assert.is_nil(b)
      assert.same("time_limit", err.field)
      b, err = submit.body({ script = "x", gpu_type = "a100" }, "v0.0.38")
      assert.is_nil(b)
      assert.same("gpu_type", err.field)
      b, err = submit.body({ script = "x" }, "v0.0.37")
      assert.is_nil(b)
      assert.same({ code = "unsupported", field = "version" }, { code = err.code, field = err.field })
      b, err = submit.body({}, "v0.0.38")
      assert.is_nil(b)
      assert.equal("script", err.field)
    end)

    it("reports a field a version cannot express as unsupported", function()
      local saved = submit.capabilities["v0.0.39"].requeue
      submit.capabilities["v0.0.39"].requeue = false
      local b, err = submit.body({ script = "x", requeue = true, working_directory = "/w" }, "v0.0.39")
      submit.capabilities["v0.0.39"].requeue = saved
      assert.is_nil(b)
      assert.same({ "unsupported", "requeue" }, { err.code, err.field })
    end)

    it("raises on a description field that does not exist", function()
      assert.has_error(function() submit.body({ script = "x", gpus = 1 }, "v0.0.38") end)
    end)

    it("lists how every field travels for every version", function()
      for _, v in ipairs(VERSIONS) do
        local caps = submit.capabilities[v]
        for _, f in ipairs({ "name", "comment", "partition", "account", "qos", "time_limit", "nodes",
          "gpus_per_node", "gpu_type", "cpus_per_node", "memory_per_node", "constraint", "exclude",
          "environment", "script", "stdout", "stderr", "working_directory", "requeue" }) do
          assert(caps[f] == false or type(caps[f].property) == "string", v .. " " .. f)
        end
      end
      assert.equal("job.exclude_nodes", submit.capabilities["v0.0.38"].exclude.property)
      assert.equal("job.excluded_nodes", submit.capabilities["v0.0.39"].exclude.property)
    end)

    describe("against request bodies a 24.11 cluster accepted", function()
      it_cases("matches v0.0.40 job_submit_request.json", function()
          local want = canonical(H.load("v0.0.40/job_submit_request.json"))
        local got = canonical(assert(submit.body({
          name = "obleth-fixture", comment = "obleth:replica=r1", partition = "gpu", account = "research",
          qos = "normal", time_limit = 5, gpus_per_node = 1, memory_per_node = 500, exclude = {},
          working_directory = "/tmp", environment = { PATH = "/usr/bin:/bin" },
          script = "#!/bin/bash\nsleep 120\n",
        }, "v0.0.40")))
        assert.same(want, got)
        local with_excl = assert(submit.body({ script = "x", working_directory = "/tmp", exclude = "n1" },
          "v0.0.40"))
        assert.same({ "n1" }, with_excl.job.excluded_nodes)
      end)

      for _, case in ipairs({ { "v0.0.41", "job_submit_request.json" }, { "v0.0.42", "job_submit_request.json" },
        { "v0.0.42", "job_submit_invalid_account_request.json" } }) do
        it_cases("matches " .. case[1] .. "/" .. case[2], function()
              local want = canonical(H.load(case[1] .. "/" .. case[2]))
          local j = want.job
          local got = canonical(assert(submit.body({
            name = j.name, partition = j.partition, account = j.account, time_limit = j.time_limit.number,
            working_directory = j.current_working_directory,
            environment = { PATH = "/usr/local/bin:/usr/bin:/bin", HOME = "/root" },
            stdout = j.standard_output, stderr = j.standard_error, script = j.script,
          }, case[1])))
          assert.same(want, got)
        end)
      end
    end)
  end)

  describe("refusal_field", function()
    it("maps the refusals of the live clusters to form fields", function()
      assert.equal("account", submit.refusal_field(2045,
        "Invalid account or account/partition combination specified"))
      assert.equal("qos", submit.refusal_field(2066, "Invalid qos specification"))
      assert.equal("partition", submit.refusal_field(2000, "Invalid partition name specified"))
      assert.equal("time_limit", submit.refusal_field(nil,
        "Requested time limit is invalid (missing or exceeds some limit)"))
      assert.is_nil(submit.refusal_field(9001, "Failure during parsing"))
    end)

    it("decides 2014 from what was asked", function()
      local msg = "Requested node configuration is not available"
      assert.equal("exclude", submit.refusal_field(2014, msg, { exclude = "localhost" }))
      assert.equal("gpus_per_node", submit.refusal_field(2014, msg, { gpus_per_node = 8 }))
      local f, cands = submit.refusal_field(2014, msg, { gpus_per_node = 8, exclude = { "n1" } })
      assert.equal("gpus_per_node", f)
      assert.same({ "gpus_per_node", "exclude" }, cands)
      f, cands = submit.refusal_field(2014, msg)
      assert.equal("gpus_per_node", f)
      assert.same({ "gpus_per_node", "exclude" }, cands)
    end)
  end)

  describe("never_starts", function()
    it("flags pending reasons that need a change of job or configuration", function()
      for _, r in ipairs({ "AccountNotAllowed", "QOSNotAllowed", "PartitionTimeLimit", "PartitionConfig",
        "PartitionNodeLimit", "InvalidAccount", "InvalidQOS", "QOSMaxWallDurationPerJobLimit",
        "BadConstraints", "DependencyNeverSatisfied", "QOSMaxCpuPerJobLimit" }) do
        assert.is_true(submit.never_starts(r), r)
      end
    end)

    it("does not flag reasons that clear by themselves", function()
      for _, r in ipairs({ "Resources", "Priority", "ReqNodeNotAvail", "BeginTime", "Dependency",
        "JobHeldUser", "JobHeldAdmin", "PartitionDown", "QOSJobLimit", "AssocGrpCpuLimit", "None" }) do
        assert.is_false(submit.never_starts(r), r)
      end
      assert.is_false(submit.never_starts(nil))
    end)
  end)
  it("leaves requeue = false out on v0.0.38, where slurmrestd 22.05 would read it as true", function()
    local b38 = assert(submit.body({ name = "x", script = "#!/bin/sh\n", requeue = false, working_directory = "/tmp" },
      "v0.0.38"))
    assert.is_nil(b38.job.requeue)
    local b38t = assert(submit.body({ name = "x", script = "#!/bin/sh\n", requeue = true, working_directory = "/tmp" },
      "v0.0.38"))
    assert.is_true(b38t.job.requeue)
    local b40 = assert(submit.body({ name = "x", script = "#!/bin/sh\n", requeue = false, working_directory = "/tmp" },
      "v0.0.40"))
    assert.is_false(b40.job.requeue)
  end)
end)
