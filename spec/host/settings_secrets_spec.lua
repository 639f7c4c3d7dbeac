-- The Slurm settings' secrets over a real `obleth serve`: the saved JWT goes only to
-- the saved slurmrestd, a URL with a user name or password is refused (it would be
-- stored, returned and logged), and a token posted to the test route is not taken
-- as a secret to redact from every later log line (a token "info" made every line
-- read level=[redacted]).
local server = require "spec.support.server"
local http = require "obleth.http"

local JWT = "eyJhbGciOiJIUzI1NiJ9.eyJleHAiOjQxMDI0NDQ4MDB9.c2lnbmF0dXJl" -- exp 2100-01-01

describe("Slurm settings secrets", function()
  local srv, capture, seen

  setup(function()
    seen = {}
    -- a stand-in for slurmrestd that records the credentials each request carries
    capture = assert(http.server { port = 0, handler = function(req)
      seen[#seen + 1] = { token = req.headers["x-slurm-user-token"], auth = req.headers["authorization"] }
      return { status = 404, headers = { ["Content-Type"] = "text/plain" }, body = "no" }
    end })
    srv = server.start()
  end)

  teardown(function()
    srv:stop()
    capture:close()
  end)

  local function saved_on(port)
    local st, doc = srv:request("PUT", "/api/v1/settings/slurm", { enabled = false,
      url = "http://127.0.0.1:" .. port, user = "slurm", token = JWT })
    assert.equal(200, st, doc and doc.error and doc.error.message)
  end

  it("sends the saved token to the saved URL only, never to a URL posted to the test route", function()
    saved_on(1) -- nothing listens there
    seen = {}
    local st = srv:request("POST", "/api/v1/settings/slurm/test", { url = "http://127.0.0.1:" .. capture:port() })
    assert.equal(200, st, srv:log())
    assert.is_true(#seen > 0, "the test route did not reach the posted URL")
    for _, r in ipairs(seen) do
      assert.is_nil(r.token)
      assert.is_nil(r.auth)
    end
    -- the saved URL itself gets the saved token
    saved_on(capture:port())
    seen = {}
    srv:request("POST", "/api/v1/settings/slurm/test", {})
    assert.is_true(#seen > 0)
    assert.equal(JWT, seen[1].token)
    -- and so does the same URL posted with a token of its own
    seen = {}
    srv:request("POST", "/api/v1/settings/slurm/test", { url = "http://127.0.0.1:" .. capture:port(),
      token = JWT .. "x" })
    assert.equal(JWT .. "x", seen[1].token)
  end)

  it("refuses a URL with a user name or password, on the url field, in both routes", function()
    for _, url in ipairs({ "http://user:s3cr3tpw@127.0.0.1:6820", "https://tok@slurm.example:6820/",
      "http://127.0.0.1@evil:1" }) do
      local st, doc, raw = srv:request("PUT", "/api/v1/settings/slurm", { enabled = false, url = url })
      assert.equal(400, st, raw)
      assert.equal("url", doc.error.field)
      assert.is_nil(raw:find("s3cr3tpw", 1, true))
      st, doc = srv:request("POST", "/api/v1/settings/slurm/test", { url = url })
      assert.equal(400, st)
      assert.equal("url", doc.error.field)
    end
    assert.is_nil(srv:log():find("s3cr3tpw", 1, true))
  end)

  it("a token posted to the test route does not redact later log lines (token \"info\")", function()
    local st = srv:request("POST", "/api/v1/settings/slurm/test", { url = "http://127.0.0.1:1", token = "info" })
    assert.equal(200, st)
    srv:request("GET", "/api/v1/settings/slurm")
    local log = srv:log()
    assert.is_nil(log:find("[redacted]", 1, true), log)
    assert.matches("level=info event=http_request", log, 1, true)
  end)
end)
