-- `obleth serve` over real HTTP: auth, routing errors, models and endpoints, OpenAPI.
local server = require "spec.support.server"
local http = require "obleth.http"

describe("obleth serve: auth, routing and models", function()
  local srv
  setup(function() srv = server.start() end)
  teardown(function() srv:cleanup() end)

  it("answers 401 to every /api/ route without the admin bearer token, whatever the route", function()
    for _, h in ipairs({ { Authorization = false }, { Authorization = "Bearer wrong-token-0123456789" },
      { Authorization = "Basic " .. srv.token }, { Authorization = "Bearer " .. srv.token .. "x" } }) do
      for _, p in ipairs({ "/api/v1/models", "/api/v1/nope", "/api/v1/provisioner/snapshot", "/api/v1/openapi.json" }) do
        local st, doc, _, headers = srv:request("GET", p, nil, h)
        assert.equal(401, st, p)
        assert.equal("unauthorized", doc.error.code)
        assert.matches("Bearer", headers["www-authenticate"])
      end
    end
  end)

  it("unknown routes are 404, wrong methods 405 with Allow", function()
    local _
    local st, doc = srv:request("GET", "/api/v1/nope")
    assert.equal(404, st)
    assert.equal("no_route", doc.error.code)
    st = srv:request("GET", "/elsewhere")
    assert.equal(404, st)
    local headers
    st, doc, _, headers = srv:request("DELETE", "/api/v1/managed")
    assert.equal(405, st)
    assert.equal("GET, HEAD", headers["allow"])
    assert.equal("method_not_allowed", doc.error.code)
    st, _, _, headers = srv:request("POST", "/api/v1/models/1/managed")
    assert.equal(405, st)
    assert.equal("DELETE, GET, HEAD, PUT", headers["allow"])
  end)

  -- a repeated key once took the last value silently: now it is refused
  it("a key given twice in a body, at any depth, is a 400 duplicate_key naming the key; invalid UTF-8 is bad_json",
    function()
      local st, doc = srv:request("POST", "/api/v1/models", '{"name": "a", "name": "b"}')
      assert.equal(400, st)
      assert.equal("duplicate_key", doc.error.code)
      assert.equal("name", doc.error.key)
      assert.matches('the key "name" appears twice in one object at character %d+', doc.error.message)
      st, doc = srv:request("POST", "/api/v1/models", '{"name": "a", "endpoints": [{"url": "http://x", "url": "y"}]}')
      assert.equal(400, st)
      assert.equal("url", doc.error.key)
      st, doc = srv:request("POST", "/api/v1/models", '{"name": "a\255"}')
      assert.equal(400, st)
      assert.equal("bad_json", doc.error.code)
      assert.is_nil(doc.error.message:find("\255", 1, true))
    end)

  it("malformed JSON is a 400 that says where; a body over the limit is 413", function()
    local st, doc = srv:request("POST", "/api/v1/models", '{"name": "a",, }')
    assert.equal(400, st)
    assert.equal("bad_json", doc.error.code)
    assert.equal(14, doc.error.at) -- the second comma
    assert.matches("at character 14", doc.error.message)
    st, doc = srv:request("POST", "/api/v1/models", "[1, 2]")
    assert.equal(400, st)
    assert.matches("JSON object", doc.error.message)
    st, doc = srv:request("POST", "/api/v1/models")
    assert.equal(400, st)
    assert.matches("body is required", doc.error.message)
    st = srv:request("POST", "/api/v1/models", '{"name": "' .. ("x"):rep(2 * 1024 * 1024) .. '"}')
    assert.equal(413, st)
  end)

  it("creates, reads, lists, renames and deletes models; names are unique and checked", function()
    local st, m = srv:request("POST", "/api/v1/models", { name = "meta-llama/Llama-3.1-8B-Instruct" })
    assert.equal(201, st)
    assert.equal("staged", m.status)
    assert.same({}, m.endpoints)
    assert.is_false(m.managed)
    local st2, dup = srv:request("POST", "/api/v1/models", { name = "meta-llama/Llama-3.1-8B-Instruct" })
    assert.equal(409, st2)
    assert.equal("name", dup.error.field)
    local st3, bad = srv:request("POST", "/api/v1/models", { name = "has space" })
    assert.equal(400, st3)
    assert.equal("name", bad.error.field)
    local st4, unk = srv:request("POST", "/api/v1/models", { name = "x", colour = "red" })
    assert.equal(400, st4)
    assert.equal("colour", unk.error.field)
    local _, got = srv:request("GET", "/api/v1/models/" .. m.id)
    assert.equal(m.name, got.name)
    local _, list = srv:request("GET", "/api/v1/models")
    assert.equal(1, #list.models)
    local st5, renamed = srv:request("PATCH", "/api/v1/models/" .. m.id, { name = "llama-8b", description = "d" })
    assert.equal(200, st5)
    assert.equal("llama-8b", renamed.name)
    assert.equal("d", renamed.description)
    assert.equal(404, (srv:request("GET", "/api/v1/models/999")))
    assert.equal(404, (srv:request("GET", "/api/v1/models/abc")))
    assert.equal(404, (srv:request("PATCH", "/api/v1/models/999", { name = "z" })))
    assert.equal(204, (srv:request("DELETE", "/api/v1/models/" .. m.id)))
    assert.equal(404, (srv:request("GET", "/api/v1/models/" .. m.id)))
    assert.equal(404, (srv:request("DELETE", "/api/v1/models/" .. m.id)))
  end)

  it("a model with a managed spec cannot be deleted (409) until the spec is gone", function()
    local _, m = srv:request("POST", "/api/v1/models", { name = "with-spec" })
    assert.equal(201, (srv:request("PUT", "/api/v1/models/" .. m.id .. "/managed", { launch_command = "x" })))
    local st, doc = srv:request("DELETE", "/api/v1/models/" .. m.id)
    assert.equal(409, st)
    assert.matches("managed spec", doc.error.message)
    assert.equal(204, (srv:request("DELETE", "/api/v1/models/" .. m.id .. "/managed")))
    assert.equal(204, (srv:request("DELETE", "/api/v1/models/" .. m.id)))
  end)

  it("adding an endpoint makes the model active; removing the last stages it", function()
    local _, m = srv:request("POST", "/api/v1/models", { name = "ep" })
    local path = "/api/v1/models/" .. m.id .. "/endpoints"
    local st, got = srv:request("POST", path, { url = "http://10.0.0.5:20001" })
    assert.equal(200, st)
    assert.equal("active", got.status)
    assert.same({ "http://10.0.0.5:20001" }, got.endpoints)
    st, got = srv:request("POST", path, { url = "ftp://x" })
    assert.equal(400, st)
    assert.equal("url", got.error.field)
    st, got = srv:request("DELETE", path .. "?url=http%3A%2F%2F10.0.0.5%3A20001")
    assert.equal(200, st)
    assert.equal("staged", got.status)
    assert.same({}, got.endpoints)
    st = srv:request("DELETE", path .. "?url=http%3A%2F%2F10.0.0.5%3A20001")
    assert.equal(404, st)
    st, got = srv:request("DELETE", path .. "?uri=x")
    assert.equal(400, st)
    assert.equal("uri", got.error.field)
  end)

  it("HEAD works like GET without a body", function()
    local r = assert(http.request { url = srv.base .. "/api/v1/models", method = "HEAD",
      headers = { Authorization = "Bearer " .. srv.token } })
    assert.equal(200, r.status)
    assert.equal("", r.body)
  end)
end)

describe("obleth serve: /api/v1/openapi.json", function()
  local srv, doc
  setup(function()
    srv = server.start()
    local st
    st, doc = srv:request("GET", "/api/v1/openapi.json")
    assert.equal(200, st)
  end)
  teardown(function() srv:cleanup() end)

  local function documented()
    local set = {}
    for path, ops in pairs(doc.paths) do
      for m in pairs(ops) do set[m:upper() .. " " .. path] = true end
    end
    return set
  end

  it("is OpenAPI 3 and names exactly the registered routes", function()
    assert.matches("^3%.", doc.openapi)
    local routes = require("obleth.api").load_routes()
    local registered = {}
    for _, r in ipairs(routes) do registered[r.method .. " " .. r.path] = true end
    local docd = documented()
    for k in pairs(registered) do assert.is_true(docd[k] == true, "registered but not documented: " .. k) end
    for k in pairs(docd) do assert.is_true(registered[k] == true, "documented but not registered: " .. k) end
  end)

  it("every route that may write declares the event topics it publishes (docs/dashboard.md)", function()
    local topics = require("obleth.api.changes").TOPICS
    for _, r in ipairs(require("obleth.api").load_routes()) do
      if r.method ~= "GET" then
        assert.is_table(r.changes, r.method .. " " .. r.path .. " declares no changes")
        for _, t in ipairs(r.changes) do assert.is_true(topics[t], r.path .. ": unknown topic " .. t) end
      else
        assert.is_nil(r.changes, r.path)
      end
    end
  end)

  it("has every route of the seed's Management API table, and each one answers (never no_route / 405)", function()
    local seed = {
      "GET /api/v1/models/{id}/managed", "PUT /api/v1/models/{id}/managed", "DELETE /api/v1/models/{id}/managed",
      "GET /api/v1/managed", "GET /api/v1/models/{id}/replicas", "GET /api/v1/replicas",
      "POST /api/v1/replicas/{id}/restart", "POST /api/v1/models/{id}/replicas/clear-lost",
      "PATCH /api/v1/models/{id}/managed/provision-error", "GET /api/v1/settings/slurm", "PUT /api/v1/settings/slurm",
      "POST /api/v1/settings/slurm/test", "GET /api/v1/deployments/launches", "GET /api/v1/slurm/resources",
      "GET /api/v1/provisioner/snapshot", "POST /api/v1/provisioner/report",
    }
    local docd = documented()
    for _, k in ipairs(seed) do assert.is_true(docd[k] == true, "missing: " .. k) end
    for k in pairs(docd) do
      local method, path = k:match("^(%S+) (.*)$")
      if k == "GET /api/v1/events" then method = "HEAD" end -- a stream: its headers are enough here
      local st, body = srv:request(method, path:gsub("{id}", "999999"), method ~= "GET" and "{}" or nil)
      assert.is_true(st ~= 405, k)
      assert.is_true(not (st == 404 and body and body.error.code == "no_route"), k)
    end
  end)
end)
