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
