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

describe("the listing read as one JSON text per job, with a cache of normalized jobs", function()
  local jsonscan = require "obleth.jsonscan"
  local snap = { instance = INSTANCE, models = { { id = 1, replicas = { { nonce = "00000000000000a4", job_id = 4 } } } } }
  local function texts(doc)
    local ok, t = jsonscan.elements(cjson.encode(doc), "jobs")
    assert.is_true(ok)
    return t
  end
  -- the listing as obleth.slurm reads it (obleth.jsonscan.element_hashes)
  local function hashed(doc)
    local text = cjson.encode(doc)
    local ok, hashes, firsts, lasts = jsonscan.element_hashes(text, "jobs")
    assert.is_true(ok)
    return { text = text, hashes = hashes, firsts = firsts, lasts = lasts }
  end
  -- cjson.decode calls made by obleth.slurm.normalize during f
  local function decodes(f)
    local real, n = cjson.decode, 0
    cjson.decode = function(s) n = n + 1; return real(s) end
    local ok, res = pcall(f)
    cjson.decode = real
    assert(ok, res)
    return n, res
  end

  it("normalizes what normalize.jobs does, and an unchanged job again costs no decode", function()
    local keep, prefilter = daemon.own_jobs(snap)
    local cache = {}
    local t = hashed(listing())
    -- the others' jobs are left by the prefilter: only 1 (tagged) and 4 (recorded) are decoded
    local n1, first = decodes(function() return normalize.jobs_cached(t, "v0.0.38", keep, prefilter, cache) end)
    assert.equal(2, n1)
    assert.same(normalize.jobs(listing(), "v0.0.38", keep), first)
    local n2, second = decodes(function() return normalize.jobs_cached(t, "v0.0.38", keep, prefilter, cache) end)
    assert.same(first, second)
    assert.equal(first[1], second[1]) -- the tagged job: the same record, from the cache
    -- the recorded job is kept for what the store records, not for its text: read again
    assert.equal(1, n2)
    assert.are_not.equal(first[2], second[2])
  end)

  it("a changed job is read again, a job gone is forgotten, another API version starts afresh", function()
    local keep, prefilter = daemon.own_jobs(snap)
    local cache = {}
    local doc = listing()
    local before = normalize.jobs_cached(hashed(doc), "v0.0.38", keep, prefilter, cache)
    doc.jobs[1].partition = "other"
    local after = normalize.jobs_cached(hashed(doc), "v0.0.38", keep, prefilter, cache)
    assert.are_not.equal(before[1], after[1])
    assert.equal("other", after[1].partition)
    local n = 0
    for _ in pairs(cache.map) do n = n + 1 end
    assert.equal(1, n) -- only the tagged job's current text
    for h in pairs(cache.map) do assert.equal(16, #h) end -- kept by its hash, not its text
    local n3 = decodes(function() return normalize.jobs_cached(hashed(doc), "v0.0.39", keep, prefilter, cache) end)
    assert.equal(2, n3)
  end)

  it("the prefilter refuses only jobs keep refuses", function()
    local keep, prefilter = daemon.own_jobs(snap)
    local doc = listing()
    doc.jobs[#doc.jobs + 1] = { job_id = 5 }                            -- no name: kept
    doc.jobs[#doc.jobs + 1] = { job_id = 6, name = "x\\u00e9" }         -- escapes
    for i, text in ipairs(texts(doc)) do
      if not prefilter(text) then assert.is_false(keep(cjson.decode(text)), "job " .. i) end
    end
    assert.is_true(prefilter(texts(doc)[5]))
  end)
end)
