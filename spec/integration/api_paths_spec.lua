-- Paths that try to dodge the admin check or escape /v1 are refused before routing.
local server = require "spec.support.server"
local http = require "obleth.http"
local util = require "spec.support.util"
local cjson = require "cjson"

describe("obleth serve: path tricks", function()
  local srv
  setup(function() srv = server.start() end)
  teardown(function() srv:stop(); srv:cleanup() end)

  local function get(path, headers)
    local r = assert(http.request { url = srv.base .. path, headers = headers, timeout = 5, path_as_is = true })
    return r
  end

  it("a doubled slash cannot reach an admin route without the token", function()
    for _, p in ipairs({ "//api/v1/provisioner/snapshot", "/api//v1/provisioner/snapshot", "///api/v1/models" }) do
      local r = get(p)
      assert.equal(400, r.status, p)
      assert.matches('"code":"bad_path"', r.body, 1, true)
    end
    local r = assert(http.request { url = srv.base .. "//api/v1/keys", method = "POST", body = '{"name":"x"}',
      headers = { ["Content-Type"] = "application/json" } })
    assert.equal(400, r.status)
  end)

  it("every /api/ path needs the admin token; outside /api/ only the dashboard's files answer", function()
    assert.equal(401, get("/api").status)
    assert.equal(401, get("/api/anything").status)
    assert.equal(404, get("/api/anything", { Authorization = "Bearer " .. srv.token }).status)
    local r = get("/anything", { Authorization = "Bearer " .. srv.token })
    assert.equal(404, r.status)
    assert.equal("text/plain; charset=utf-8", r.headers["content-type"])
    assert.equal(404, get("/anything").status)
  end)

  it("dot segments cannot escape /v1 to an engine path", function()
    for _, p in ipairs({ "/v1/../health", "/v1/%2e%2e/health", "/v1/./models" }) do
      assert.equal(400, get(p).status, p)
    end
  end)

  it("a /v1 path gets its refusal in the OpenAI error shape", function()
    local r = get("/v1/../health")
    local e = cjson.decode(r.body).error
    assert.equal("bad_path", e.code)
    assert.equal("invalid_request_error", e.type)
    assert.is_string(e.message)
  end)

  it("a request target with a space, a bare CR or a control byte is refused with 400, never passed on", function()
    for _, target in ipairs({ "/v1/a b", "/v1/a\rX-Injected: yes", "/v1/a\1b", "/v1/caf\195\169" }) do
      local _, out = util.sh(("curl -s -o - -w '\\n%%{http_code}' --request-target %s %s"):format(util.shq(target),
        util.shq(srv.base .. "/")))
      local body, code = out:match("^(.*)\n(%d+)%s*$")
      assert.equal("400", code, target)
      assert.equal("bad_target", cjson.decode(body).error.code)
    end
  end)
end)
