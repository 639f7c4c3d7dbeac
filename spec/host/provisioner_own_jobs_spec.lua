-- A pass normalizes only its own jobs of Slurm's listing (obleth.provisioner.own_jobs, the `keep` of
-- obleth.slurm.normalize.jobs): a shared cluster's other jobs cost a name comparison each.
local cjson = require "cjson"
local daemon = require "obleth.provisioner"
local normalize = require "obleth.slurm.normalize"
local tag = require "obleth.job.tag"

local INSTANCE = "0be4c4ba"

local function listing()
  local shared = os.getenv("OBLETH_SHARED") or "../shared"
  local fh = assert(io.open(shared .. "/cases/slurmrestd/v0.0.38/jobs.json"))
  local doc = cjson.decode(fh:read("a"))
  fh:close()
  local template = doc.jobs[1]
  local function job(id, name)
    local j = {}
    for k, v in pairs(template) do j[k] = v end
    j.job_id, j.name = id, name
    return j
  end
  doc.jobs = {
    job(1, tag.name(INSTANCE, 1, 1, "00000000000000a1")), -- this installation's
    job(2, "train-resnet"),                               -- somebody else's
    job(3, tag.name("ffffffff", 1, 1, "00000000000000a2")), -- another installation's
    job(4, "renamed-by-hand"),                            -- a job a replica records, renamed since
  }
  return doc
end

describe("a pass's own jobs of the listing", function()
  local snap = { instance = INSTANCE, models = { { id = 1, replicas = { { nonce = "00000000000000a4", job_id = 4 } } } } }

  it("keeps this installation's tagged jobs and the jobs replicas record, and leaves the rest unread", function()
    local keep = daemon.own_jobs(snap)
    local ids = {}
    for _, j in ipairs(normalize.jobs(listing(), "v0.0.38", keep)) do ids[#ids + 1] = j.id end
    assert.same({ 1, 4 }, ids)
    -- without keep: every job, as before
    assert.equal(4, #normalize.jobs(listing(), "v0.0.38"))
  end)

  it("keeps a record whose name is not a plain string (normalize decides), and keeps all without an instance", function()
    local keep = daemon.own_jobs(snap)
    assert.is_true(keep({ job_id = 9, name = { set = true } }))
    assert.is_false(keep({ job_id = 9, name = "x" }))
    assert.is_nil(daemon.own_jobs({ models = {} }))
  end)
end)

describe("parsed strings kept across a listing", function()
  it("jobs with the same node list and TRES get equal, separate answers (a kept parse is never shared)", function()
    local a = normalize.job_record({ job_id = 1, job_state = "RUNNING", nodes = "n[1-3]", node_count = 3,
      tres_per_node = "gres:gpu:a100:2" }, "v0.0.38")
    local b = normalize.job_record({ job_id = 2, job_state = "RUNNING", nodes = "n[1-3]", node_count = 3,
      tres_per_node = "gres:gpu:a100:2" }, "v0.0.38")
    assert.same({ "n1", "n2", "n3" }, a.node_list)
    assert.same(a.node_list, b.node_list)
    a.node_list[1] = "changed"
    assert.equal("n1", b.node_list[1])
    local c = normalize.job_record({ job_id = 3, job_state = "RUNNING", nodes = "n[1-3]", node_count = 3 }, "v0.0.38")
    assert.equal("n1", c.node_list[1])
    assert.same({ 2, "a100", 6 }, { b.gpus_per_node, b.gpu_type, b.gpus })
    assert.same(a.gpus_by_type, b.gpus_by_type)
  end)

  it("a kept node list still counts against the answer's budget of host names", function()
    local budget = { left = 5 }
    local doc = { jobs = {} }
    for i = 1, 3 do doc.jobs[i] = { job_id = i, job_state = "RUNNING", nodes = "m[1-2]", node_count = 2 } end
    local r1 = normalize.job_record(doc.jobs[1], "v0.0.38", budget)
    local r2 = normalize.job_record(doc.jobs[2], "v0.0.38", budget)
    local r3 = normalize.job_record(doc.jobs[3], "v0.0.38", budget)
    assert.same({ 2, 2, 0 }, { #r1.node_list, #r2.node_list, #r3.node_list })
    assert.is_true(r3.node_list_truncated)
  end)
end)
