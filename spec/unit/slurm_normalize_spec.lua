-- luacheck: std lua54+busted
-- Pins the normalizer on every slurmrestd recording in the shared cases folder
-- (v0.0.38, v0.0.40-42, captures for v0.0.41-43) and on the hand-built v0.0.39 /
-- v0.0.44 fixtures. Expected values were read from the JSON by hand.
local N = require "obleth.slurm.normalize"
local hostlist = require "obleth.util.hostlist"
local submit = require "obleth.slurm.submit"
local cjson = require "cjson"
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

local HUGE = math.huge

local function by_id(list)
  local t = {}
  for _, x in ipairs(list) do t[x.id or x.name] = x end
  return t
end

-- Which normalizer reads a recording, by file name.
local function handler(rel)
  local name = rel:match("([^/]+)%.json$")
  if name:match("_request$") then return "request" end
  if name:match("^slurmdb[-_]job") then return "db_jobs" end
  if name == "jobs" or name:match("^slurm%-job") or name == "jobs_bad_token" then return "jobs" end
  if name:match("node") then return "nodes" end
  if name:match("partitions") then return "partitions" end
  if name:match("qos") then return "qos" end
  if name:match("associations") then return "associations" end
  if name:match("accounts") then return "accounts" end
  if name:match("ping") then return "ping" end
  if name == "diag" then return "diag" end
  if name:match("submit") then return "submit" end
  return "errors"
end

describe("obleth.slurm.normalize", function()
  describe("numbers", function()
    it("reads NV objects: unset is nil, infinite is unlimited", function()
      assert.is_nil(N.count({ set = false, infinite = false, number = 0 }))
      assert.equal(5, N.count({ set = true, infinite = false, number = 5 }))
      assert.equal(HUGE, N.limit({ set = false, infinite = true, number = 0 }))
      assert.equal(HUGE, N.limit({ set = true, infinite = true, number = 0 }))
      assert.is_nil(N.limit({ set = false, infinite = false, number = 0 }))
    end)

    it("maps the unknown sentinels to nil and INFINITE limits to math.huge", function()
      assert.is_nil(N.count(-2))
      assert.is_nil(N.count(4294967294))
      assert.is_nil(N.count(18446744073709551614))
      assert.is_nil(N.count(cjson.null))
      assert.equal(HUGE, N.limit(4294967295))
      assert.equal(HUGE, N.limit(-1))
      assert.is_nil(N.limit(4294967294))
      assert.equal(HUGE, N.limit(cjson.null, true))
      assert.is_nil(N.limit(cjson.null))
    end)

    it("turns epoch 0 and unset times into nil", function()
      assert.is_nil(N.time(0))
      assert.is_nil(N.time({ set = true, infinite = false, number = 0 }))
      assert.equal(1796031606, N.time(1796031606))
    end)
  end)

  describe("exit codes", function()
    it("decodes v0.0.38 raw wait statuses", function()
      assert.same({ code = 1 }, N.exit_code(256))
      assert.same({ code = 0, signal = 15 }, N.exit_code(15))
      assert.same({ code = 0 }, N.exit_code(0))
      assert.same({ code = 2 }, N.exit_code(512))
      assert.is_nil(N.exit_code(4294967294))
    end)

    it("decodes v0.0.40+ exit code objects", function()
      assert.same({ code = 0, signal = 15 }, N.exit_code({ status = { "SIGNALED" },
        return_code = { set = false, infinite = false, number = 0 },
        signal = { id = { set = true, infinite = false, number = 15 }, name = "TERM" } }))
      assert.same({ code = 1 }, N.exit_code({ status = { "ERROR" },
        return_code = { set = true, infinite = false, number = 1 },
        signal = { id = { set = false, infinite = false, number = 0 }, name = "" } }))
    end)
  end)

  describe("node states", function()
    local function idle(state, flags)
      return N.is_idle(N.state(state, flags, "node"))
    end

    it("a node drained while idle never counts as idle", function()
      assert.is_false(idle({ "IDLE", "DRAIN" }))
      assert.is_false(idle("IDLE+DRAIN"))
      assert.is_false(idle("idle", { "DRAIN" }))
    end)

    it("a draining mixed node is not idle", function()
      assert.is_false(idle({ "MIXED", "DRAIN" }))
      assert.is_false(idle("MIXED+DRAIN"))
    end)

    it("a powered-down cloud node is not idle", function()
      assert.is_false(idle({ "IDLE", "CLOUD", "POWERED_DOWN" }))
      assert.is_false(idle("idle~"))
    end)

    it("a down, not responding node is not idle", function()
      assert.is_false(idle({ "DOWN", "NOT_RESPONDING" }))
      assert.is_false(idle("idle*"))
    end)

    it("planned, completing, reserved or rebooting idle nodes are not idle", function()
      for _, f in ipairs({ "PLANNED", "COMPLETING", "RESERVED", "REBOOT_REQUESTED", "MAINTENANCE",
        "POWERING_UP", "POWERING_DOWN", "POWER_DOWN", "FAIL", "DRAINED", "DRAINING" }) do
        assert.is_false(idle({ "IDLE", f }), f)
      end
    end)

    it("a plain idle node is idle in every spelling", function()
      assert.is_true(idle({ "IDLE" }))
      assert.is_true(idle("idle", {}))
      assert.is_true(idle("IDLE"))
      assert.is_true(idle({ "IDLE", "CLOUD" })) -- powered-up cloud node
    end)

    it("keeps the base first and the rest as flags", function()
      assert.same({ base = "MIXED", flags = { DRAIN = true } }, N.state("mixed+drain", nil, "node"))
      assert.same({ base = "PENDING", flags = { REQUEUED = true } },
        N.state({ "PENDING", "REQUEUED" }, nil, "job"))
    end)
  end)

  describe("errors", function()
    it("reads both v0.0.38 and later error entries", function()
      local errs = N.errors({ errors = {
        { description = 'Disabled key: "excluded_nodes"', error_number = 1,
          error = "Operation not permitted", source = "openapi specification" },
        { error_code = 9001, error = "Failure during parsing" } } })
      assert.equal(2, #errs)
      assert.same({ slurm_code = 1, message = "Operation not permitted",
        description = 'Disabled key: "excluded_nodes"', source = "openapi specification" }, errs[1])
      assert.same({ slurm_code = 9001, message = "Failure during parsing" }, errs[2])
    end)
  end)

  describe("v0.0.39 and v0.0.44 fixtures (built from Slurm's parsers.c)", function()
    it("reads v0.0.39 jobs: string states, NV limits, raw exit codes", function()
      local jobs = by_id(N.jobs(H.fixture("v0.0.39/jobs.json"), "v0.0.39"))
      local j = jobs[101]
      assert.equal("RUNNING", j.state.base)
      assert.equal(60, j.time_limit)
      assert.same({ "gpu01", "gpu02" }, j.node_list)
      assert.equal(2, j.gpus_per_node)
      assert.equal("a100", j.gpu_type)
      assert.equal(64000, j.memory_per_node)
      assert.equal(16, j.cpus)
      assert.same({ code = 1 }, jobs[102].exit_code)
      assert.equal("NonZeroExitCode", jobs[102].reason)
      assert.same({ code = 0, signal = 9 }, jobs[103].exit_code)
      assert.is_true(jobs[104].estimated)
      assert.is_nil(jobs[104].exit_code)
      assert.equal(1700086400, jobs[104].start_time)
      assert.is_true(submit.never_starts(jobs[104].reason))
      assert.equal(HUGE, jobs[105].time_limit)
    end)

    it("reads v0.0.39 nodes: flag arrays, CSV features, NO_VAL64 free memory", function()
      local nodes = by_id(N.nodes(H.fixture("v0.0.39/nodes.json"), "v0.0.39"))
      assert.is_false(nodes.gpu01.idle)
      assert.equal(1, nodes.gpu01.gpus_free)
      assert.is_false(nodes.gpu02.idle)
      assert.equal("bad DIMM", nodes.gpu02.reason)
      assert.is_false(nodes.gpu03.idle)
      assert.is_false(nodes.gpu04.idle)
      assert.is_nil(nodes.gpu04.free_memory)
      assert.is_true(nodes.gpu05.idle)
      assert.same({ a100 = 2, h100 = 2 }, nodes.gpu05.gres.gpu.by_type)
      assert.same({ a100 = true, ib = true }, nodes.gpu01.features)
      assert.same({}, nodes.gpu05.features)
    end)

    it("reads v0.0.39 partitions, which report neither state nor default", function()
      local p = by_id(N.partitions(H.fixture("v0.0.39/partitions.json"), "v0.0.39"))
      assert.equal(2880, p.gpu.max_time)
      assert.equal(HUGE, p.gpu.max_nodes)
      assert.is_nil(p.gpu.allowed_accounts)
      assert.is_nil(p.gpu.state)
      assert.is_nil(p.gpu.default)
      assert.equal(5, #p.gpu.node_list)
      assert.same({ research = true, teaching = true }, p.debug.allowed_accounts)
      assert.same({ long = true }, p.debug.denied_qos)
      assert.equal(1, p.debug.max_nodes)
      assert.equal(30, p.debug.max_time)
    end)

    it("reads v0.0.39 ping, submit and accounting job", function()
      local ping = N.ping(H.fixture("v0.0.39/ping.json"), "v0.0.39")
      assert.is_true(ping.ok)
      assert.equal("23.02.7", ping.release)
      assert.equal(106, (N.submit_response(H.fixture("v0.0.39/job_submit.json"), "v0.0.39", 200)))
      local j = assert(N.db_job(H.fixture("v0.0.39/slurmdb_job.json"), "v0.0.39"))
      assert.equal(103, j.id)
      assert.equal("CANCELLED", j.state.base)
      assert.same({ code = 0, signal = 9 }, j.exit_code)
      assert.equal(60, j.time_limit)
      assert.equal(4000, j.memory_per_node)
      assert.equal("obleth:replica=r1", j.comment)
      assert.equal(1700000020, j.start_time)
    end)

    it("reads v0.0.44 jobs: state arrays with flags and exit code objects", function()
      local jobs = by_id(N.jobs(H.fixture("v0.0.44/jobs.json"), "v0.0.44"))
      assert.equal(4, jobs[201].gpus_per_node)
      assert.equal("h100", jobs[201].gpu_type)
      assert.equal(0, jobs[201].memory_per_node) -- whole node
      assert.same({ "gpu07", "gpu08" }, jobs[201].node_list)
      assert.same({ base = "PENDING", flags = { REQUEUED = true } }, jobs[202].state)
      assert.is_nil(jobs[202].exit_code) -- meaningless while pending
      assert.same({ code = 137 }, jobs[203].exit_code)
      assert.equal("OUT_OF_MEMORY", jobs[203].state.base)
      assert.equal(HUGE, jobs[204].time_limit)
      assert.is_nil(jobs[204].start_time)
      assert.is_true(submit.never_starts(jobs[204].reason))
    end)

    it("reads v0.0.44 nodes, partitions, ping, submit and accounting job", function()
      local nodes = by_id(N.nodes(H.fixture("v0.0.44/nodes.json"), "v0.0.44"))
      assert.is_false(nodes.gpu07.idle)
      assert.is_false(nodes.gpu09.idle)
      assert.equal(0, nodes.gpu09.gpus_free) -- MIXED+DRAIN: its 3 unused GPUs are not free to a new job
      assert.is_false(nodes.gpu10.idle)
      assert.is_true(nodes.gpu11.idle)
      assert.is_nil(nodes.gpu11.free_memory)
      assert.is_false(nodes.gpu12.idle)
      local p = by_id(N.partitions(H.fixture("v0.0.44/partitions.json"), "v0.0.44"))
      assert.equal(HUGE, p.gpu.max_time)
      assert.equal("DRAIN", p.debug.state)
      assert.equal(1, p.debug.max_nodes)
      local ping = N.ping(H.fixture("v0.0.44/ping.json"), "v0.0.44")
      assert.is_true(ping.ok)
      assert.equal("ctl1", ping.hostname)
      assert.equal("25.11.0", ping.release)
      local id, warnings = N.submit_response(H.fixture("v0.0.44/job_submit.json"), "v0.0.44", 200)
      assert.equal(205, id)
      assert.equal("Ignoring unknown field: job.gpu", warnings[1].message)
      local j = assert(N.db_job(H.fixture("v0.0.44/slurmdb_job.json"), "v0.0.44"))
      assert.equal("OUT_OF_MEMORY", j.state.base)
      assert.equal("OutOfMemory", j.reason)
      assert.equal(64000, j.memory_per_node)
      assert.equal("/srv/obleth/203.out", j.stdout)
      assert.equal(2, j.gpus)
    end)
  end)

  describe("recordings", function()
    it_cases("normalizes every recording without error and with the documented types", function()
      local files = H.json_files(H.root)
      assert.is_true(#files > 250, "expected the full case set, found " .. #files)
      local seen = {}
      for _, rel in ipairs(files) do
        local v = H.version_of(rel)
        local kind = handler(rel)
        seen[kind] = (seen[kind] or 0) + 1
        local ok, doc = pcall(H.load, rel)
        assert(ok, rel .. ": not JSON: " .. tostring(doc))
        if kind == "jobs" or kind == "db_jobs" then
          for _, j in ipairs(kind == "jobs" and N.jobs(doc, v) or N.db_jobs(doc, v)) do
            assert(math.type(j.id) == "integer", rel .. ": job id")
            assert(type(j.state.base) == "string", rel .. ": job state")
            assert(j.reason ~= "None", rel .. ": reason None kept")
            assert(j.time_limit == nil or j.time_limit > 0, rel .. ": time limit")
            for _, t in ipairs({ "submit_time", "start_time", "end_time" }) do
              assert(j[t] == nil or math.type(j[t]) == "integer" and j[t] > 0, rel .. ": " .. t)
            end
            assert(j.nodes == nil or #j.node_list > 0, rel .. ": node_list")
          end
        elseif kind == "nodes" then
          for _, n in ipairs(N.nodes(doc, v)) do
            assert(type(n.name) == "string", rel .. ": node name")
            assert(type(n.state.base) == "string", rel .. ": node state")
            assert(type(n.idle) == "boolean", rel .. ": idle")
            assert(n.gpus_free <= n.gpus, rel .. ": gpus")
            assert(n.free_memory == nil or n.free_memory >= 0, rel .. ": free memory")
          end
        elseif kind == "partitions" then
          for _, p in ipairs(N.partitions(doc, v)) do
            assert(type(p.name) == "string", rel)
            assert(p.max_time and p.max_time > 0, rel .. ": max_time")
            assert(#p.node_list == p.total_nodes, rel .. ": node_list vs total_nodes")
          end
        elseif kind == "qos" then
          assert.is_true(#N.qos(doc, v) > 0, rel)
        elseif kind == "associations" then
          assert.is_true(#N.associations(doc, v) > 0, rel)
        elseif kind == "accounts" then
          assert.is_true(#N.accounts(doc, v) > 0, rel)
        elseif kind == "ping" then
          assert.is_boolean(N.ping(doc, v).ok, rel)
        elseif kind == "diag" then
          assert.is_table(N.diag(doc, v), rel)
        elseif kind == "submit" then
          local id, info = N.submit_response(doc, v, nil)
          assert(id or (type(info) == "table" and info.code), rel)
        elseif kind ~= "request" then
          assert.is_table(N.errors(doc), rel)
        end
      end
      for _, k in ipairs({ "jobs", "db_jobs", "nodes", "partitions", "qos", "associations",
        "accounts", "ping", "diag", "submit", "request" }) do
        assert(seen[k] and seen[k] > 0, "no recording exercised " .. k)
      end
    end)

    describe("v0.0.38 (Slurm 22.05.8, the live test cluster)", function()
      it_cases("reads the completed, cancelled, pending and running jobs", function()
        local jobs = by_id(N.jobs(H.load("v0.0.38/jobs.json"), "v0.0.38"))
        local done = jobs[2]
        assert.equal("obleth-done", done.name)
        assert.same({ base = "COMPLETED", flags = {} }, done.state)
        assert.is_nil(done.reason)
        assert.same({ code = 0 }, done.exit_code)
        assert.equal(5, done.time_limit)
        assert.equal(1796031606, done.start_time)
        assert.equal("/tmp", done.working_directory)

        assert.equal("AccountNotAllowed", jobs[3].reason)
        assert.equal("QOSNotAllowed", jobs[4].reason)
        assert.equal("PartitionTimeLimit", jobs[5].reason)
        assert.equal(90, jobs[5].time_limit)

        -- cancelled while running: raw status 15 = killed by SIGTERM
        assert.same({ code = 0, signal = 15 }, jobs[6].exit_code)
        assert.same({ "localhost" }, jobs[6].node_list)

        assert.equal("obleth replica=r1", jobs[7].comment)
        assert.equal(1000, jobs[7].memory_per_node)
        assert.equal("gres:gpu:a100:1", jobs[10].tres_per_node)
        assert.equal("a100", jobs[10].gpu_type)

        local run = jobs[12]
        assert.equal("obleth-m1-r1", run.name)
        assert.equal("RUNNING", run.state.base)
        assert.equal("obleth:replica=r1", run.comment)
        assert.equal(1, run.gpus_per_node)
        assert.equal("gres:gpu:1", run.tres_per_node)
        assert.equal(10, run.time_limit)
        assert.equal("localhost", run.batch_host)
        assert.equal(1796032261, run.end_time)
        assert.equal("/tmp/slurmlab/run-12.out", run.stdout) -- v0.0.38 sends the pattern: expanded here
        assert.equal("/tmp/slurmlab/run-%j.out", run.stdout_pattern)

        local pend = jobs[13]
        assert.equal("PENDING", pend.state.base)
        assert.equal("AccountNotAllowed", pend.reason)
        assert.is_nil(pend.start_time) -- 0 in the recording
        assert.is_nil(pend.end_time)
        assert.is_true(pend.estimated)
        assert.is_true(submit.never_starts(pend.reason))
      end)

      it_cases("reads the one node: mixed, 4 a100 GPUs of which 1 used", function()
        local n = N.nodes(H.load("v0.0.38/nodes.json"), "v0.0.38")[1]
        assert.equal("localhost", n.name)
        assert.same({ base = "MIXED", flags = {} }, n.state)
        assert.is_false(n.idle)
        assert.is_nil(n.reason)
        assert.equal(2, n.cpus)
        assert.equal(1, n.alloc_cpus)
        assert.equal(8000, n.memory)
        assert.equal(1000, n.alloc_memory)
        assert.equal(23060, n.free_memory)
        assert.same({ a100 = true, ib = true }, n.features)
        assert.same({ "gpu", "debug" }, n.partitions)
        assert.same({ gpu = { total = 4, by_type = { a100 = 4 } } }, n.gres)
        assert.equal(3, n.gpus_free)
      end)

      it_cases("reads partitions: gpu default 4 h, debug 30 min research-only denying long", function()
        local p = by_id(N.partitions(H.load("v0.0.38/partitions.json"), "v0.0.38"))
        assert.is_true(p.gpu.default)
        assert.equal(240, p.gpu.max_time)
        assert.equal(HUGE, p.gpu.max_nodes)
        assert.is_nil(p.gpu.allowed_accounts)
        assert.is_nil(p.gpu.denied_qos)
        assert.equal("UP", p.gpu.state)
        assert.same({ "localhost" }, p.gpu.node_list)
        assert.is_false(p.debug.default)
        assert.equal(30, p.debug.max_time)
        assert.same({ research = true }, p.debug.allowed_accounts)
        assert.same({ long = true }, p.debug.denied_qos)
        assert.equal(2, p.debug.total_cpus)
      end)

      it_cases("reads accounting: QoS without wall limit, associations, accounts", function()
        local q = by_id(N.qos(H.load("v0.0.38/db_qos.json"), "v0.0.38"))
        assert.is_not_nil(q.normal)
        assert.is_nil(q.long.max_wall)
        local assocs = N.associations(H.load("v0.0.38/db_associations.json"), "v0.0.38")
        assert.equal(6, #assocs)
        local found
        for _, a in ipairs(assocs) do
          if a.account == "research" and a.user == "root" then found = a end
        end
        assert.same({ long = true, normal = true }, found.qos)
        assert.is_nil(found.partition)
        assert.is_nil(found.default_qos)
        local names = {}
        for _, a in ipairs(N.accounts(H.load("v0.0.38/db_accounts.json"), "v0.0.38")) do
          names[#names + 1] = a.name
        end
        assert.same({ "research", "root", "teaching" }, names)
      end)

      it_cases("reads ping and diag", function()
        local p = N.ping(H.load("v0.0.38/ping.json"), "v0.0.38")
        assert.same({ ok = true, version = "v0.0.38", release = "22.05.8", hostname = "vm",
          mode = "primary" }, p)
        local d = N.diag(H.load("v0.0.38/diag.json"), "v0.0.38")
        assert.equal(12, d.jobs_submitted)
        assert.equal(9, d.jobs_canceled)
        assert.is_false(d.bf_active)
      end)

      it_cases("a submit with a job id and an error entry is accepted with a warning", function()
        local id, warnings = N.submit_response(H.load("v0.0.38/submit_accepted_but_pending_account.json"),
          "v0.0.38", 200)
        assert.equal(13, id)
        assert.same({ { slurm_code = 2015, message = "Requested partition configuration not available now" } },
          warnings)
        local ok_id, none = N.submit_response(H.load("v0.0.38/submit_ok.json"), "v0.0.38", 200)
        assert.equal(12, ok_id)
        assert.same({}, none)
      end)

      it_cases("an unknown property refuses the submit with 9001 and names the key", function()
        local id, err = N.submit_response(H.load("v0.0.38/submit_refused_badfield.json"), "v0.0.38", 500)
        assert.is_nil(id)
        assert.equal("refused", err.code)
        assert.equal(9001, err.slurm_code)
        assert.equal("excluded_nodes", err.key)
        assert.equal(500, err.http_status)
        assert.is_nil(submit.refusal_field(err.slurm_code, err.message))
      end)
    end)

    describe("v0.0.40-v0.0.42 (Slurm 24.11.7)", function()
      it_cases("reads array states, NV times and exit code objects", function()
        local jobs = by_id(N.jobs(H.load("v0.0.40/jobs.json"), "v0.0.40"))
        assert.same({ code = 0, signal = 15 }, jobs[1].exit_code)
        assert.equal("CANCELLED", jobs[1].state.base)
        assert.equal(1000, jobs[1].memory_per_cpu)
        assert.is_nil(jobs[1].memory_per_node)
        assert.equal("PartitionConfig", jobs[7].reason)
        assert.equal("PartitionTimeLimit", jobs[9].reason)
        assert.equal(45, jobs[9].time_limit)
        assert.equal(2, jobs[2].gpus_per_node)
        local f = jobs[10]
        assert.equal("obleth-fixture", f.name)
        assert.equal("RUNNING", f.state.base)
        assert.equal(500, f.memory_per_node)
        assert.equal(1, f.gpus_per_node)
        assert.equal(1796032570, f.end_time)
        local j41 = by_id(N.jobs(H.load("v0.0.41/jobs.json"), "v0.0.41"))
        assert.equal("RUNNING", j41[1].state.base)
        local j42 = by_id(N.jobs(H.load("v0.0.42/jobs.json"), "v0.0.42"))
        assert.same({ code = 0 }, j42[2].exit_code)
        assert.equal("long", j42[2].qos)
      end)

      it_cases("accounting keeps 'None assigned' out of nodes and reads the job comment object", function()
        local jobs = by_id(N.db_jobs(H.load("v0.0.40/slurmdb_jobs.json"), "v0.0.40"))
        assert.is_nil(jobs[7].nodes)
        assert.same({}, jobs[7].node_list)
        assert.same({ code = 0, signal = 15 }, jobs[1].exit_code)
        assert.equal(2, jobs[2].gpus)
        assert.equal(1796031960, jobs[2].start_time)
        assert.equal(1796031963, jobs[2].end_time)
        assert.equal(2, jobs[2].time_limit)
      end)

      it_cases("reads the idle node with untyped gpu:4", function()
        local n = N.nodes(H.load("v0.0.40/nodes.json"), "v0.0.40")[1]
        assert.is_true(n.idle)
        assert.equal(4, n.gpus)
        assert.equal(4, n.gpus_free)
        assert.same({ [""] = 4 }, n.gres.gpu.by_type)
        assert.equal(23677, n.free_memory)
        assert.same({}, n.features)
      end)

      it_cases("reads partitions from nested objects, unlimited nodes as math.huge", function()
        for _, v in ipairs({ "v0.0.40", "v0.0.41", "v0.0.42" }) do
          local p = by_id(N.partitions(H.load(v .. "/partitions.json"), v))
          assert.equal(240, p.gpu.max_time)
          assert.equal(30, p.debug.max_time)
          assert.equal(HUGE, p.gpu.max_nodes)
          assert.same({ research = true }, p.debug.allowed_accounts)
          assert.equal("UP", p.gpu.state)
          assert.is_nil(p.gpu.default)
        end
      end)

      it_cases("reads QoS long with a 2-day MaxWall and normal without", function()
        local q = by_id(N.qos(H.load("v0.0.42/qos.json"), "v0.0.42"))
        assert.equal(2880, q.long.max_wall)
        assert.is_nil(q.normal.max_wall)
        local a = N.associations(H.load("v0.0.42/associations.json"), "v0.0.42")
        assert.equal("normal", a[3].default_qos)
        assert.equal("research", a[3].account)
        assert.is_nil(a[3].user)
      end)

      it_cases("a bad token still pings 200 but is not ok", function()
        assert.is_false(N.ping(H.load("v0.0.42/ping_bad_token.json"), "v0.0.42").ok)
        local p = N.ping(H.load("v0.0.42/ping.json"), "v0.0.42")
        assert.is_true(p.ok)
        assert.equal("24.11.7", p.release)
        local errs = N.errors(H.load("v0.0.42/jobs_bad_token.json"))
        assert.equal(1007, errs[1].slurm_code)
        assert.equal("Protocol authentication error", errs[1].message)
      end)

      it_cases("an unknown account is refused with 2045 on the account field", function()
        for _, v in ipairs({ "v0.0.41", "v0.0.42" }) do
          local id, err = N.submit_response(H.load(v .. "/job_submit_invalid_account.json"), v, 500)
          assert.is_nil(id)
          assert.equal(2045, err.slurm_code)
          assert.equal("account", submit.refusal_field(err.slurm_code, err.message))
        end
        assert.equal(10, (N.submit_response(H.load("v0.0.40/job_submit.json"), "v0.0.40", 200)))
        assert.equal(3, (N.submit_response(H.load("v0.0.41/job_submit.json"), "v0.0.41", 200)))
        assert.equal(1, (N.submit_response(H.load("v0.0.42/job_submit.json"), "v0.0.42", 200)))
      end)
    end)

    describe("captures (Slurm 24.05-25.05, v0.0.41-v0.0.43)", function()
      local function node(rel, v)
        return N.nodes(H.load("captures/" .. rel), v)[1]
      end

      it_cases("applies the idle rule to every captured node state", function()
        assert.is_true(node("24.05/0.0.41/slurm-node-idle.json", "v0.0.41").idle)
        assert.is_false(node("24.05/0.0.41/slurm-node-drain.json", "v0.0.41").idle)
        assert.equal("ECC memory error", node("24.05/0.0.41/slurm-node-drain.json", "v0.0.41").reason)
        assert.is_false(node("24.05/0.0.41/slurm-node-draining.json", "v0.0.41").idle)
        assert.is_false(node("24.05/0.0.41/slurm-node-down.json", "v0.0.41").idle)
        assert.is_false(node("24.05/0.0.41/slurm-node-mixed.json", "v0.0.41").idle)
        assert.is_false(node("24.11/0.0.42/slurm-node-planned.json", "v0.0.42").idle)
        -- named "idle" by the capture, but still completing the last job
        assert.is_false(node("24.11/0.0.41/slurm-node-with-gpus-idle.json", "v0.0.41").idle)
        assert.is_true(node("24.11/0.0.42/slurm-node-idle.json", "v0.0.42").idle)
      end)

      it_cases("counts typed GPUs of several models and their free share", function()
        local n = node("24.11/0.0.42/slurm-node-with-gpus-model-allocated.json", "v0.0.42")
        assert.same({ h100 = 2, h200 = 4 }, n.gres.gpu.by_type)
        assert.equal(6, n.gpus)
        assert.equal(0, n.gpus_free)
        local m = node("25.05/0.0.43/slurm-node-with-gpus-model-mixed.json", "v0.0.43")
        assert.equal(3, m.gpus_free)
        assert.same({ h100 = 3 }, m.gres_free.gpu.by_type)
      end)

      it_cases("reads failed, timed-out, pending and multi-node jobs", function()
        local failed = N.job(H.load("captures/24.05/0.0.41/slurm-job-failed.json"), "v0.0.41")
        assert.equal(649719, failed.id)
        assert.equal("FAILED", failed.state.base)
        assert.equal("NonZeroExitCode", failed.reason)
        assert.same({ code = 1 }, failed.exit_code)
        local timeout = N.job(H.load("captures/24.05/0.0.41/slurm-job-timeout.json"), "v0.0.41")
        assert.equal("TIMEOUT", timeout.state.base)
        assert.same({ code = 0, signal = 15 }, timeout.exit_code)
        local pend = N.job(H.load("captures/24.05/0.0.41/slurm-job-pending.json"), "v0.0.41")
        assert.equal("BeginTime", pend.reason)
        assert.equal(1747758094, pend.start_time) -- Slurm's estimate
        assert.is_true(pend.estimated)
        assert.is_false(submit.never_starts(pend.reason))
        local multi = N.job(H.load("captures/24.05/0.0.41/slurm-job-gpus-multi-nodes.json"), "v0.0.41")
        assert.same({ "gpu1", "gpu2" }, multi.node_list)
        local typed = N.job(H.load("captures/24.05/0.0.41/slurm-job-gpus-type.json"), "v0.0.41")
        assert.equal(1, typed.gpus)
        assert.equal("h100", typed.gpu_type)
        local jobs = by_id(N.jobs(H.load("captures/24.05/0.0.41/slurm-jobs.json"), "v0.0.41"))
        assert.same({ "cn004", "cn005", "cn006" }, jobs[649728].node_list)
        local j43 = by_id(N.jobs(H.load("captures/25.05/0.0.43/slurm-jobs.json"), "v0.0.43"))
        assert.equal("QOSMaxCpuPerJobLimit", j43[2195].reason)
        assert.is_true(submit.never_starts(j43[2195].reason))
      end)

      it_cases("a job gone from slurmctld is not_found with error 2017", function()
        local j, err = N.job(H.load("captures/24.11/0.0.42/slurm-job-archived.json"), "v0.0.42")
        assert.is_nil(j)
        assert.equal("not_found", err.code)
        assert.equal(2017, err.slurm_code)
        local db = assert(N.db_job(H.load("captures/24.11/0.0.42/slurmdb-job-archived.json"), "v0.0.42"))
        assert.equal("integer", math.type(db.id))
        assert.is_string(db.state.base)
      end)

      it_cases("reads accounting jobs of v0.0.43", function()
        local f = N.db_job(H.load("captures/25.05/0.0.43/slurmdb-job-failed.json"), "v0.0.43")
        assert.equal(4732, f.id)
        assert.equal("FAILED", f.state.base)
        assert.same({ code = 1 }, f.exit_code)
        local p = N.db_job(H.load("captures/25.05/0.0.43/slurmdb-job-pending.json"), "v0.0.43")
        assert.is_nil(p.nodes)
        assert.is_nil(p.start_time)
      end)

      it_cases("reads the 512-node batch partition of 24.05 as unlimited in time", function()
        local p = by_id(N.partitions(H.load("captures/24.05/0.0.41/slurm-partitions.json"), "v0.0.41"))
        assert.equal(512, #p.batch.node_list)
        assert.equal(HUGE, p.batch.max_time)
        assert.equal(60, p.debug.max_time)
      end)

      it_cases("reads ping releases", function()
        assert.equal("24.05.3", N.ping(H.load("captures/24.05/0.0.41/slurm-ping.json"), "v0.0.41").release)
        assert.is_true(N.ping(H.load("captures/25.05/0.0.43/slurm-ping.json"), "v0.0.43").ok)
      end)
    end)
  end)

  describe("hostlist budget per answer", function()
    it("20 partitions of n[000000-999999] expand to at most one answer's budget", function()
      local parts = {}
      for i = 1, 20 do
        parts[i] = { name = "p" .. i, nodes = { configured = "n[000000-999999]", total = 1000000 },
          partition = { state = { "UP" } } }
      end
      local out = N.partitions({ partitions = parts }, "v0.0.41")
      local total = 0
      for _, p in ipairs(out) do total = total + #p.node_list end
      assert.equal(20, #out)
      assert.is_true(total <= hostlist.ANSWER_HOSTS, "expanded " .. total .. " names")
      -- what is only counted is still read from the answer
      assert.equal(1000000, out[20].total_nodes)
      assert.equal("n[000000-999999]", out[20].nodes)
      assert.is_true(out[20].node_list_truncated)
    end)

    it("a job answer shares one budget too", function()
      local jobs = {}
      for i = 1, 5 do
        jobs[i] = { job_id = i, name = "j", job_state = { "RUNNING" }, nodes = "n[0-99999]" }
      end
      local out = N.jobs({ jobs = jobs }, "v0.0.41")
      local total = 0
      for _, j in ipairs(out) do total = total + #j.node_list end
      assert.is_true(total <= hostlist.ANSWER_HOSTS, "expanded " .. total .. " names")
    end)
  end)

  describe("GPUs a node can give and GPUs a job asks for per socket or per task", function()
    local C = "captures/25.05/0.0.43/"

    it_cases("a drained, down or powered-down node has no free GPUs (its GPUs still count as configured)", function()
      local idle = H.load(C .. "slurm-node-idle.json").nodes[1]
      assert.equal(4, N.node_record(idle, "v0.0.43").gpus_free)
      for _, st in ipairs({ { "IDLE", "DRAIN" }, { "DOWN" }, { "IDLE", "POWERED_DOWN" }, { "MIXED", "DRAIN" },
        { "DOWN", "NOT_RESPONDING" } }) do
        idle.state = st
        local n = N.node_record(idle, "v0.0.43")
        assert.equal(0, n.gpus_free, table.concat(st, "+"))
        assert.equal(4, n.gpus)
      end
      -- v0.0.38 spelling: lowercase state plus flags
      local n = N.node_record({ name = "g", state = "idle", state_flags = { "DRAIN" }, gres = "gpu:a100:2",
        gres_used = "gpu:a100:0" }, "v0.0.38")
      assert.equal(0, n.gpus_free)
    end)

    it_cases("reads a running job's GPUs requested per socket (tres_per_socket) from what it was given", function()
      local j = N.jobs(H.load(C .. "slurm-job-gpus-per-socket.json"), "v0.0.43")[1]
      assert.equal("gres/gpu:2", j.tres_per_socket)
      assert.equal(2, j.gpus_per_socket)
      assert.equal(2, j.gpus_per_node) -- gres_detail gpu:h100:2(IDX:0-1)
      assert.equal(2, j.gpus)
      assert.equal("h100", j.gpu_type)
    end)

    it_cases("reads a running job's GPUs requested per task (tres_per_task gres/gpu=2, 2 tasks)", function()
      local j = N.jobs(H.load(C .. "slurm-job-gpus-per-task.json"), "v0.0.43")[1]
      assert.equal("gres/gpu=2", j.tres_per_task)
      assert.equal(2, j.gpus_per_task)
      assert.equal(4, j.gpus)
      assert.equal(4, j.gpus_per_node)
      assert.equal("h100", j.gpu_type)
    end)

    it("a pending job's per-socket and per-task requests multiply out (hand-written, no allocation yet)", function()
      local NV = function(n) return { set = true, infinite = false, number = n } end
      local jobs = N.jobs({ jobs = {
        { job_id = 1, job_state = { "PENDING" }, tres_per_socket = "gres/gpu:a100:2", sockets_per_node = NV(2),
          tasks = NV(1), node_count = NV(1) },
        { job_id = 2, job_state = { "PENDING" }, tres_per_task = "gres/gpu=2", tasks = NV(3), node_count = NV(1) },
        { job_id = 3, job_state = { "PENDING" }, tres_per_task = "cpu=2", tasks = NV(3) },
      } }, "v0.0.43")
      assert.equal(4, jobs[1].gpus_per_node)
      assert.equal("a100", jobs[1].gpu_type)
      assert.equal(6, jobs[2].gpus)
      assert.is_nil(jobs[3].gpus)
      assert.is_nil(jobs[3].gpus_per_node)
    end)
  end)

  describe("empty lists stay lists in JSON (obleth slurm --json, the API)", function()
    local fmt = require "obleth.util.format"
    local json = require "obleth.util.json"

    it("no jobs, no partitions, no nodes print as [], not {}", function()
      for _, f in ipairs({ "jobs", "db_jobs", "nodes", "partitions", "accounts", "associations", "qos" }) do
        assert.equal("[]", json.encode(fmt.jsonable(N[f]({}, "v0.0.41"))), f)
      end
    end)

    it("a pending job's node_list and a node without partitions print [] inside the record", function()
      local j = N.jobs({ jobs = { { job_id = 1, job_state = { "PENDING" } } } }, "v0.0.41")
      local out = json.encode(fmt.jsonable(j))
      assert.matches('"node_list":%[%]', out)
      local n = N.nodes({ nodes = { { name = "n1", state = { "IDLE" } } } }, "v0.0.41")
      assert.matches('"partitions":%[%]', json.encode(fmt.jsonable(n)))
    end)

    it("obleth slurm --json writes through that encoder", function()
      local src = assert(io.open("lua/obleth/cli/slurm.lua")):read("a")
      assert.is_nil(src:find("cjson.encode(fmt.jsonable", 1, true))
    end)
  end)

  describe("obleth slurm partitions table", function()
    it("has a STATE column, so a DOWN partition does not look usable", function()
      local fmt = require "obleth.util.format"
      local parts = N.partitions({ partitions = {
        { name = "gpu", nodes = { configured = "n[1-2]" }, partition = { state = { "UP" } } },
        { name = "old", nodes = { configured = "n3" }, partition = { state = { "DOWN" } } },
      } }, "v0.0.41")
      local out = fmt.partitions_table(parts, {})
      local header = out:match("^[^\n]+")
      assert.matches("STATE", header)
      local down = out:match("\nold[^\n]*")
      assert.matches("DOWN", down)
    end)
  end)

  describe("answers that break the documented shapes (found by make fuzz)", function()
    it("records that are not objects are skipped, odd field types read as unknown, nothing raises", function()
      for _, v in ipairs({ "v0.0.38", "v0.0.41", "v0.0.44" }) do
        assert.same({}, N.jobs({ jobs = { 5, true, "x" } }, v))
        assert.same({}, N.nodes({ nodes = { 1 } }, v))
        local e = N.errors({ errors = { { error_number = "2017", error_code = {}, error = "x" } } })
        assert.is_nil(e[1].slurm_code)
        local id, err = N.submit_response({ errors = { { error_number = "x" }, { error_code = 2017 } } }, v, 500)
        assert.is_nil(id)
        assert.equal(2017, err.slurm_code)
        assert.is_nil(N.exit_code(0.5))
        local dj = N.db_jobs({ jobs = { { job_id = 1, tres = { allocated = { 3, true } } } } }, v)
        assert.equal(1, #dj)
      end
    end)
  end)
end)
