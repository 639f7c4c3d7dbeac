-- What a Slurm 26.05 slurmrestd answers (v0.0.42 to v0.0.45 served side by side), against a stand-in
-- on a real socket: the answers are the hand-written v0.0.45 fixtures (spec/fixtures/slurmrestd/README.md
-- says where each shape comes from) and the recorded 24.11 ones (v0.0.42).
local http = require "obleth.http"
local slurm = require "obleth.slurm"
local cli = require "obleth.cli.slurm"
local cjson = require "cjson"
local H = dofile("spec/fixtures/slurmrestd/cases.lua")

local TEXT, JSON = "text/plain", "application/json"
local NOTFOUND = "Unable find requested URL. Please view /openapi/v3 for API reference."

local function openapi(list, with_db)
  local paths = {}
  for _, v in ipairs(list) do
    paths["/slurm/" .. v .. "/ping/"] = {}
    paths["/slurm/" .. v .. "/jobs/"] = {}
    if with_db then paths["/slurmdb/" .. v .. "/clusters/"] = {} end
  end
  return cjson.encode({ openapi = "3.0.2", paths = paths })
end

local function fx(name) return H.read(H.fixtures .. "/v0.0.45/" .. name) end

-- A stand-in slurmrestd: route(req) -> status, content type, body. Counts requests by path, and
-- keeps the query of each.
local function stand_in(route)
  local hits, queries = {}, {}
  local srv = assert(http.server { port = 0, handler = function(req)
    hits[req.path] = (hits[req.path] or 0) + 1
    queries[#queries + 1] = { path = req.path, query = req.query or {} }
    local status, ctype, body = route(req)
    return { status = status, headers = { ["Content-Type"] = ctype }, body = body }
  end })
  return srv, "http://127.0.0.1:" .. srv:port(), hits, queries
end

-- Slurm 26.05: v0.0.42-45 with accounting; `over` answers first (nil: fall through).
local function slurm2605(over, opts)
  opts = opts or {}
  return stand_in(function(req)
    local p = req.path
    if over then
      local s, c, b = over(req)
      if s then return s, c, b end
    end
    if p == "/openapi/v3" then
      return 200, JSON, openapi(opts.versions or { "v0.0.45", "v0.0.44", "v0.0.43", "v0.0.42" }, opts.db ~= false)
    end
    if p:find("/ping") then return 200, JSON, fx("ping.json") end
    return 404, TEXT, NOTFOUND
  end)
end

local function connect(url)
  return slurm.connect { url = url, user = "alice", token = "x.y.z" }
end

-- Runs the CLI with io.stdout and io.stderr going to one string: pcall's results and the text.
local function run_cli(argv)
  local said = {}
  local sink = { write = function(self, ...) for _, x in ipairs({ ... }) do said[#said + 1] = x end return self end }
  local saved_err, saved_out = io.stderr, io.stdout
  io.stderr, io.stdout = sink, sink -- luacheck: ignore 122
  local ok, code = pcall(cli.main, argv)
  io.stderr, io.stdout = saved_err, saved_out -- luacheck: ignore 122
  return ok, code, table.concat(said)
end

describe("a Slurm 26.05 slurmrestd", function()
  it("negotiates v0.0.45, the newest both sides know, and v0.0.46 where it is served", function()
    local srv, url = slurm2605()
    local c = assert(connect(url))
    srv:close()
    assert.equal("v0.0.45", c:version())
    local srv2, url2 = slurm2605(nil, { versions = { "v0.0.46", "v0.0.45", "v0.0.44" } })
    local c2 = assert(connect(url2))
    srv2:close()
    assert.equal("v0.0.46", c2:version())
  end)

  it("refuses a slurmrestd that serves only versions obleth does not know, naming those it knows", function()
    local srv, url = slurm2605(function(req)
      if req.path:find("^/slurm/") and not req.path:find("/v0.0.47/", 1, true) then return 404, TEXT, NOTFOUND end
    end, { versions = { "v0.0.47" } })
    local c, err = connect(url)
    srv:close()
    assert.is_nil(c)
    assert.equal("unsupported", err.code)
    assert.matches("v0.0.38 to v0.0.46", err.message, 1, true)
    local c2, err2 = slurm.connect { url = url, user = "alice", token = "x.y.z", version = "v0.0.47" }
    assert.is_nil(c2)
    assert.equal("unsupported", err2.code)
    assert.matches("unknown API version v0.0.47 (obleth knows v0.0.38 to v0.0.46", err2.message, 1, true)
  end)

  describe("cancel", function()
    local function cancel_with(file)
      local srv, url = slurm2605(function(req)
        if req.method == "DELETE" then return 200, JSON, fx(file) end
      end)
      local c = assert(connect(url))
      local ok, err = c:cancel(6)
      srv:close()
      return ok, err
    end

    it("of another user's job: HTTP 200 with error 2002 in status[] is a refusal with Slurm's words", function()
      local ok, err = cancel_with("job_cancel_denied.json")
      assert.is_nil(ok)
      assert.equal("refused", err.code)
      assert.equal(2002, err.slurm_code)
      assert.equal("job 6: Access/permission denied", err.message)
    end)

    it("of an unknown job: error 2017 is a refusal", function()
      local ok, err = cancel_with("job_cancel_unknown.json")
      assert.is_nil(ok)
      assert.equal(2017, err.slurm_code)
      assert.matches("Invalid job id specified", err.message, 1, true)
    end)

    it("of an own job: an empty status[] is success", function()
      assert.is_true((cancel_with("job_cancel_ok.json")))
    end)

    it("obleth slurm cancel exits non-zero with Slurm's message", function()
      local srv, url = slurm2605(function(req)
        if req.method == "DELETE" then return 200, JSON, fx("job_cancel_denied.json") end
      end)
      local ok, code, text = run_cli({ "cancel", "6", "--url", url, "--user", "alice" })
      srv:close()
      assert.is_true(ok, code)
      assert.equal(1, code)
      assert.matches("refused: job 6: Access/permission denied", text, 1, true)
      assert.is_nil(text:find("cancelled job", 1, true))
    end)
  end)

  it("obleth slurm submit --json prints an empty warnings list as [] and job prints an empty list as []", function()
    local srv, url = slurm2605(function(req)
      if req.path:find("/job/submit") then
        return 200, JSON, cjson.encode({ job_id = 7, step_id = "batch", job_submit_user_msg = "", errors = {},
          warnings = {} })
      end
    end)
    local ok, code, text = run_cli({ "submit", "--wrap", "true", "--json", "--url", url, "--user", "alice" })
    srv:close()
    assert.is_true(ok, code)
    assert.equal(0, code, text)
    assert.same({ job_id = 7, warnings = {} }, cjson.decode(text))
    assert.matches('"warnings":[]', text, 1, true)
    local fmt = require "obleth.util.format"
    assert.matches("gres_detail%s+%[%]", fmt.kv({ gres_detail = require("obleth.util.tables").array() }))
  end)

  describe("ping", function()
    it("with a rejected JWT (v0.0.45's status) is an auth error, not a controller that is down", function()
      local srv, url = slurm2605()
      local c = assert(connect(url))
      srv:close()
      local srv2, url2 = slurm2605(function(req)
        if req.path:find("/ping") then return 200, JSON, fx("ping_bad_token.json") end
      end)
      local c2 = assert(connect(url2))
      local r, err = c2:ping()
      srv2:close()
      assert.is_nil(r)
      assert.equal("auth", err.code)
      assert.matches("rejected the credentials", err.message, 1, true)
      assert.is_table(c)
    end)

    it("with slurmctld stopped is a controller not responding (ok false), no error", function()
      local srv, url = slurm2605()
      local c = assert(connect(url))
      srv:close()
      local srv2, url2 = slurm2605(function(req)
        if req.path:find("/ping") and c then return 200, JSON, fx("ping_ctld_down.json") end
      end)
      -- connect pings too: a fresh server answers the down ping at once
      local c2 = assert(connect(url2))
      local r = assert(c2:ping())
      srv2:close()
      assert.is_false(r.ok)
      assert.equal("Unable to contact slurm controller (connect failure)", r.status)
    end)

    it("on v0.0.42 (pinged DOWN either way) asks slurmdbd with the same token to tell the two apart", function()
      if not H.available() then return pending(H.missing()) end
      local bad = H.read(H.root .. "/v0.0.42/ping_bad_token.json")
      local good = H.read(H.root .. "/v0.0.42/ping.json")
      local dbd_refuses = true
      local connected = false
      local srv, url, hits = stand_in(function(req)
        if req.path == "/openapi/v3" then return 200, JSON, openapi({ "v0.0.42" }, true) end
        if req.path:find("/ping") then return 200, JSON, connected and bad or good end
        if req.path:find("^/slurmdb/v0%.0%.42/clusters") then
          if dbd_refuses == "24.11" then
            return 502, JSON, cjson.encode({ errors = { { description = "Failed to open slurmdbd connection, "
              .. "authentication error", error_number = 7000, error = "Unable to connect to database",
              source = "openapi_get_db_conn" } }, warnings = {} })
          end
          if dbd_refuses then return 511, JSON, H.read(H.root .. "/v0.0.42/jobs_bad_token.json") end
          return 200, JSON, cjson.encode({ clusters = {}, errors = {}, warnings = {} })
        end
        return 404, TEXT, NOTFOUND
      end)
      local c = assert(connect(url))
      connected = true
      local r, err = c:ping()
      assert.is_nil(r)
      assert.equal("auth", err.code)
      assert.equal(1, hits["/slurmdb/v0.0.42/clusters"])
      -- what a live 24.11 slurmdbd answers a token it refuses: HTTP 502, error 7000
      dbd_refuses = "24.11"
      local r3, err3 = c:ping()
      assert.is_nil(r3)
      assert.equal("auth", err3.code)
      local q, qerr = c:clusters()
      assert.is_nil(q)
      assert.equal("auth", qerr.code)
      assert.matches("slurmdbd rejected the credentials", qerr.message, 1, true)
      dbd_refuses = true
      dbd_refuses = false -- slurmdbd takes the token: slurmctld is the one not answering
      local r2 = assert(c:ping())
      srv:close()
      assert.is_false(r2.ok)
    end)

    it("Test connection (POST /api/v1/settings/slurm/test) answers error.code auth, not ok=false with no error",
      function()
        local server = require "spec.support.server"
        local srv_slurm, url = slurm2605(function(req)
          if req.path:find("/ping") then return 200, JSON, fx("ping_bad_token.json") end
        end)
        local srv = server.start()
        local st, doc = srv:request("POST", "/api/v1/settings/slurm/test", { url = url, user = "alice",
          token = "eyJhbGciOiJIUzI1NiJ9.eyJleHAiOjQxMDI0NDQ4MDB9.c2ln" })
        srv:stop()
        srv:cleanup()
        srv_slurm:close()
        assert.equal(200, st)
        assert.is_table(doc.error, cjson.encode(doc))
        assert.equal("auth", doc.error.code)
        assert.matches("rejected the credentials", doc.error.message, 1, true)
        assert.is_false(doc.ok == true)
        assert.equal("v0.0.45", doc.api_version)
      end)

    it("obleth slurm ping says the credentials were rejected", function()
      local srv, url = slurm2605(function(req)
        if req.path:find("/ping") then
          return 200, JSON, fx("ping_bad_token.json")
        end
      end)
      local ok, code, text = run_cli({ "ping", "--url", url, "--user", "alice" })
      srv:close()
      assert.is_true(ok, code)
      assert.equal(1, code)
      assert.matches("auth: slurmctld rejected the credentials", text, 1, true)
      assert.is_nil(text:find("NOT RESPONDING", 1, true))
    end)
  end)

  describe("partitions", function()
    it("are asked for with ?flags=ALL, so AllowGroups and hidden partitions are seen (one request on v0.0.45)", function()
      local srv, url, _, queries = slurm2605(function(req)
        if req.path:find("/partitions") then
          if (req.query or {}).flags ~= "ALL" then
            -- what 26.05 lists without the flag: neither staff (AllowGroups) nor admin (Hidden)
            local d = cjson.decode(fx("partitions.json"))
            local keep = {}
            for _, p in ipairs(d.partitions) do
              if p.name ~= "staff" and p.name ~= "admin" then keep[#keep + 1] = p end
            end
            d.partitions = keep
            return 200, JSON, cjson.encode(d)
          end
          return 200, JSON, fx("partitions.json")
        end
      end)
      local c = assert(connect(url))
      local ps = assert(c:partitions())
      srv:close()
      local names = {}
      for _, p in ipairs(ps) do names[p.name] = p end
      assert.is_table(names.staff)
      assert.is_true(names.admin.hidden)
      local asked = 0
      for _, q in ipairs(queries) do
        if q.path:find("/partitions") then
          asked = asked + 1
          assert.equal("ALL", q.query.flags)
        end
      end
      assert.equal(1, asked)
    end)

    it("on v0.0.42, which sends no flags, a second plain listing tells the hidden ones", function()
      if not H.available() then return pending(H.missing()) end
      local rec = cjson.decode(H.read(H.root .. "/v0.0.42/partitions.json"))
      local hidden = cjson.decode(cjson.encode(rec.partitions[1]))
      hidden.name = "admin"
      local all = cjson.decode(cjson.encode(rec))
      all.partitions[#all.partitions + 1] = hidden
      local srv, url = stand_in(function(req)
        if req.path == "/openapi/v3" then return 200, JSON, openapi({ "v0.0.42" }, true) end
        if req.path:find("/ping") then return 200, JSON, H.read(H.root .. "/v0.0.42/ping.json") end
        if req.path:find("/partitions") then
          return 200, JSON, cjson.encode((req.query or {}).flags == "ALL" and all or rec)
        end
        return 404, TEXT, NOTFOUND
      end)
      local c = assert(connect(url))
      local ps = assert(c:partitions())
      srv:close()
      local by = {}
      for _, p in ipairs(ps) do by[p.name] = p end
      assert.is_true(by.admin.hidden)
      assert.is_false(by.gpu.hidden)
    end)
  end)

  it("reads EnforcePartLimits from /conf on v0.0.45; older versions say they do not serve it", function()
    local srv, url = slurm2605(function(req)
      if req.path:find("/conf") then return 200, JSON, fx("conf.json") end
    end)
    local c = assert(connect(url))
    local conf = assert(c:conf())
    assert.equal("NO", conf.enforce_part_limits)
    local old = assert(slurm.connect { url = url, user = "alice", token = "x.y.z", version = "v0.0.44" })
    local none, err = old:conf()
    srv:close()
    assert.is_nil(none)
    assert.equal("unsupported", err.code)
  end)

  describe("accounting", function()
    it("not configured (text 404 on /slurmdb/): no_accounting, and /openapi/v3 is read once", function()
      local srv, url, hits = slurm2605(function(req)
        if req.path:find("^/slurmdb/") then return 404, TEXT, NOTFOUND end
      end, { db = false })
      local c = assert(connect(url))
      for _ = 1, 3 do
        local q, err = c:qos()
        assert.is_nil(q)
        assert.equal("no_accounting", err.code)
        assert.matches("accounting", err.message, 1, true)
        assert.is_nil(err.message:find("version", 1, true))
      end
      srv:close()
      assert.equal(1, hits["/openapi/v3"])
    end)
  end)

  it("a 502 (slurmctld down, slurmrestd up) names slurmctld, not slurmrestd", function()
    local srv, url = slurm2605(function(req)
      if req.path:find("/jobs") then
        return 502, JSON, cjson.encode({ jobs = {}, errors = { { error_number = 1001,
          error = "Unable to contact slurm controller (connect failure)" } } })
      end
    end)
    local c = assert(connect(url))
    local jobs, err = c:jobs()
    srv:close()
    assert.is_nil(jobs)
    assert.matches("slurmctld does not answer (slurmrestd answered HTTP 502)", err.message, 1, true)
  end)
end)
