-- slurmrestd shapes the harness cluster (Slurm 22.05) cannot show, against a stand-in
-- slurmrestd on a real socket. Answers are the recorded ones (captures/25.05 ping) or,
-- for 25.11, hand-written from its source: a request without usable credentials gets
-- HTTP 500, text/plain "Authentication does not apply to request".
local http = require "obleth.http"
local slurm = require "obleth.slurm"
local cjson = require "cjson"
local H = dofile("spec/fixtures/slurmrestd/cases.lua")

local function ping_doc(version, release)
  return cjson.encode({ pings = { { hostname = "ctl", pinged = "UP", responding = true, latency = 2337,
    mode = "primary", primary = true } }, meta = { plugin = { data_parser = "data_parser/" .. version },
    slurm = { release = release } }, errors = {}, warnings = {} })
end

local function openapi(versions)
  local paths = {}
  for _, v in ipairs(versions) do
    paths["/slurm/" .. v .. "/ping/"] = {}
    paths["/slurm/" .. v .. "/jobs/"] = {}
  end
  return cjson.encode({ openapi = "3.0.2", paths = paths })
end

-- A stand-in slurmrestd: route(path) -> status, content type, body. Counts requests by path.
local function stand_in(route)
  local hits = {}
  local srv = assert(http.server { port = 0, handler = function(req)
    hits[req.path] = (hits[req.path] or 0) + 1
    local status, ctype, body = route(req.path, req)
    return { status = status, headers = { ["Content-Type"] = ctype }, body = body }
  end })
  return srv, "http://127.0.0.1:" .. srv:port(), hits
end

local TEXT, JSON = "text/plain", "application/json"
local NOAUTH = "Authentication does not apply to request"
local NOTFOUND = "Unable find requested URL. Please view /openapi/v3 for API reference."

describe("slurmrestd transport shapes", function()
  it("25.11's HTTP 500 'Authentication does not apply to request' at connect is auth", function()
    local srv, url = stand_in(function() return 500, TEXT, NOAUTH end)
    local c, err = slurm.connect { url = url, user = "u", token = "x.y.z" }
    srv:close()
    assert.is_nil(c)
    assert.equal("auth", err.code)
  end)

  it("the same answer to a call after connecting is auth, not 'job not known' or a server error", function()
    local refuse = false
    local srv, url = stand_in(function(path)
      if path == "/openapi/v3" then return 200, JSON, openapi({ "v0.0.44" }) end
      if refuse then return 500, TEXT, NOAUTH end
      return 200, JSON, ping_doc("v0.0.44", "25.11.0")
    end)
    local c = assert(slurm.connect { url = url, user = "u", token = "x.y.z" })
    refuse = true
    local job, err = c:job(42)
    local jobs, err2 = c:jobs()
    srv:close()
    assert.is_nil(job)
    assert.equal("auth", err.code)
    assert.is_nil(jobs)
    assert.equal("auth", err2.code)
  end)

  it("the job listing read as one text per job (call_raw): the same jobs; bad JSON and refused credentials as before", function()
    local answer, refuse = nil, false
    local srv, url = stand_in(function(path)
      if path == "/openapi/v3" then return 200, JSON, openapi({ "v0.0.44" }) end
      if path:match("/jobs/?$") then
        if refuse then return 500, TEXT, NOAUTH end
        return 200, JSON, answer
      end
      return 200, JSON, ping_doc("v0.0.44", "25.11.0")
    end)
    local c = assert(slurm.connect { url = url, user = "u", token = "x.y.z" })
    answer = cjson.encode({ jobs = { { job_id = 7, name = "a", job_state = { "RUNNING" }, nodes = "n[1-2]" },
      { job_id = 8, name = "b", job_state = { "PENDING" } } }, errors = {}, warnings = {} })
    local cache = {}
    local whole = assert(c:jobs())
    local parts = assert(c:jobs { cache = cache })
    assert.same(whole, parts)
    assert.same({ "n1", "n2" }, parts[1].node_list)
    local again = assert(c:jobs { cache = cache })
    assert.equal(parts[1], again[1]) -- unchanged: the cached record
    answer = '{"jobs": [{"job_id": 7}'
    local none, err = c:jobs { cache = cache }
    assert.is_nil(none)
    assert.equal("bad_response", err.code)
    refuse = true
    local none2, err2 = c:jobs { cache = cache }
    srv:close()
    assert.is_nil(none2)
    assert.equal("auth", err2.code)
  end)

  it("a version /openapi/v3 lists that answers text/plain 404 everywhere falls back to the next listed", function()
    local ping = H.available() and H.read(H.root .. "/captures/25.05/0.0.43/slurm-ping.json")
      or ping_doc("v0.0.43", "25.05.4")
    local srv, url = stand_in(function(path)
      if path == "/openapi/v3" then return 200, JSON, openapi({ "v0.0.44", "v0.0.43", "v0.0.42" }) end
      if path:find("^/slurm/v0%.0%.44/") then return 404, TEXT, NOTFOUND end
      if path:find("^/slurm/v0%.0%.43/ping") then return 200, JSON, ping end
      return 404, TEXT, NOTFOUND
    end)
    local c, err = slurm.connect { url = url, user = "u", token = "x.y.z" }
    srv:close()
    assert.is_table(c, err and err.message)
    assert.equal("v0.0.43", c:version())
  end)

  it("keeps /openapi/v3 per server and fetches it again only when the release changes", function()
    local release = "25.11.0"
    local srv, url, hits = stand_in(function(path)
      if path == "/openapi/v3" then return 200, JSON, openapi({ "v0.0.44", "v0.0.43" }) end
      if path:find("/ping") then return 200, JSON, ping_doc("v0.0.44", release) end
      return 404, TEXT, NOTFOUND
    end)
    for _ = 1, 3 do
      local c = assert(slurm.connect { url = url, user = "u", token = "x.y.z" })
      assert.equal("v0.0.44", c:version())
    end
    assert.equal(1, hits["/openapi/v3"])
    release = "25.11.1" -- the site upgraded
    local c = assert(slurm.connect { url = url, user = "u", token = "x.y.z" })
    srv:close()
    assert.equal("v0.0.44", c:version())
    assert.equal(2, hits["/openapi/v3"])
  end)
end)

-- A recorded job the listing no longer shows is looked up once (the controller, then the accounting
-- database). Only "not known to either" may end its replica (as UNKNOWN); slurmdbd not answering is a
-- failed poll, which must not. The 500 bodies are hand-written in 22.05's shape.
describe("a job the listing no longer shows", function()
  local function cluster(dbd_up)
    return stand_in(function(path)
      if path == "/openapi/v3" then return 200, JSON, openapi({ "v0.0.44" }) end
      if path:find("/ping") then return 200, JSON, ping_doc("v0.0.44", "25.11.0") end
      if path:find("^/slurm/v0%.0%.44/job/") then
        return 404, JSON, cjson.encode({ jobs = {}, errors = { { error_number = 2017,
          description = "Unable to find JobId=42", error = "Invalid job id specified" } } })
      end
      if path:find("^/slurmdb/v0%.0%.44/job/") then
        if dbd_up then
          return 200, JSON, cjson.encode({ jobs = {}, errors = {}, warnings = { {
            description = "slurmdb_jobs_get(0x7f) found nothing", source = "_dump_jobs" } } })
        end
        return 500, JSON, cjson.encode({ jobs = {}, errors = { { error_number = 7000,
          description = "Unable to connect to database", error = "Unable to connect to database" } } })
      end
      return 404, TEXT, NOTFOUND
    end)
  end
  local snap = { instance = "0123abcd", models = { { id = 1, replicas = { { nonce = "00000000000000aa",
    job_id = 42, state = "healthy" } } } } }

  it("is 'not known' (refused, 2017) when the accounting database has no record: left out of the lookup", function()
    local srv, url = cluster(true)
    local c = assert(slurm.connect { url = url, user = "u", token = "x.y.z" })
    local job, err = c:job(42)
    local by_id, lerr = require("obleth.provisioner").lookup_jobs(c, snap, {})
    srv:close()
    assert.is_nil(job)
    assert.equal("refused", err.code)
    assert.equal(2017, err.slurm_code)
    assert.same({}, by_id, lerr and lerr.message)
  end)

  it("is an error, not 'not known', when slurmdbd does not answer: the pass decides nothing", function()
    local srv, url = cluster(false)
    local c = assert(slurm.connect { url = url, user = "u", token = "x.y.z" })
    local job, err = c:job(42)
    local by_id, lerr = require("obleth.provisioner").lookup_jobs(c, snap, {})
    srv:close()
    assert.is_nil(job)
    assert.are_not.equal("refused", err.code)
    assert.equal(500, err.http_status)
    assert.is_nil(by_id)
    assert.matches("looking up job 42: .*Unable to connect to database", lerr.message)
  end)

  it("a JWT past its exp claim fails as expired auth before any request, at connect and after set_token", function()
    local jwt = require "obleth.slurm.jwt"
    local now = os.time()
    local function token(exp_in)
      return jwt.mint { key = "k", user = "u", lifespan = 3600, now = now + exp_in - 3600 }
    end
    local srv, url, hits = stand_in(function(path)
      if path == "/openapi/v3" then return 200, JSON, openapi({ "v0.0.44" }) end
      return 200, JSON, ping_doc("v0.0.44", "25.11.0")
    end)
    local c, err = slurm.connect { url = url, user = "u", token = token(-60) }
    assert.is_nil(c)
    assert.equal("auth", err.code)
    assert.is_true(err.expired)
    assert.is_nil(next(hits), "no request went out")
    c = assert(slurm.connect { url = url, user = "u", token = token(3600) })
    local before = hits["/openapi/v3"]
    c:set_token(token(-1))
    local r, cerr = c:ping()
    assert.is_nil(r)
    assert.is_true(cerr.expired)
    c:set_token(token(3600))
    assert.is_table((c:ping()))
    srv:close()
    assert.equal(before, hits["/openapi/v3"])
  end)
end)
