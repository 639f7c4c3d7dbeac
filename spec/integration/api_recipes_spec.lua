-- Recipes over real HTTP: library ones from recipes/*.yaml (read-only), saved ones (CRUD).
local server = require "spec.support.server"
local util = require "spec.support.util"
local yaml = require "obleth.yaml"

local function smoke_recipe(id)
  local fh = assert(io.open(util.root() .. "/recipes/smoke-test.yaml"))
  local r = yaml.decode(fh:read("a"))
  fh:close()
  r.id = id
  return r
end

describe("obleth serve: recipes", function()
  local srv, lib_ids
  setup(function()
    srv = server.start()
    lib_ids = {}
    for _, name in ipairs(require("obleth.sys").listdir(util.root() .. "/recipes") or {}) do
      if name:match("%.ya?ml$") then
        local fh = io.open(util.root() .. "/recipes/" .. name)
        local doc = yaml.decode(fh:read("a"))
        fh:close()
        if type(doc) == "table" and doc.id then lib_ids[doc.id] = true end
      end
    end
  end)
  teardown(function() srv:cleanup() end)

  it("lists the library recipes by their id: field, read-only", function()
    local st, doc = srv:request("GET", "/api/v1/recipes")
    assert.equal(200, st)
    local seen = {}
    for _, r in ipairs(doc.recipes) do
      if r.source == "library" then seen[r.id] = true end
    end
    for id in pairs(lib_ids) do assert.is_true(seen[id] == true, id) end
    assert.is_true(lib_ids["smoke-test"], "the library recipe smoke-test is missing")
    local _, one = srv:request("GET", "/api/v1/recipes/smoke-test")
    assert.equal("library", one.source)
    assert.equal("smoke", one.recipe.engine)
    local st2, e = srv:request("PUT", "/api/v1/recipes/smoke-test", smoke_recipe("smoke-test"))
    assert.equal(409, st2)
    assert.equal("read_only", e.error.code)
    assert.equal(409, (srv:request("DELETE", "/api/v1/recipes/smoke-test")))
  end)

  it("saves, reads, replaces and deletes a recipe of the operator's", function()
    local st, r = srv:request("POST", "/api/v1/recipes", smoke_recipe("my-smoke"))
    assert.equal(201, st)
    assert.equal("saved", r.source)
    assert.equal("my-smoke", r.recipe.id)
    assert.equal(409, (srv:request("POST", "/api/v1/recipes", smoke_recipe("my-smoke"))))
    local changed = smoke_recipe("my-smoke")
    changed.name = "Renamed"
    st, r = srv:request("PUT", "/api/v1/recipes/my-smoke", changed)
    assert.equal(200, st)
    assert.equal("Renamed", r.name)
    local _, list = srv:request("GET", "/api/v1/recipes")
    local found
    for _, x in ipairs(list.recipes) do if x.id == "my-smoke" then found = x end end
    assert.equal("saved", found.source)
    assert.equal(204, (srv:request("DELETE", "/api/v1/recipes/my-smoke")))
    assert.equal(404, (srv:request("GET", "/api/v1/recipes/my-smoke")))
    assert.equal(404, (srv:request("DELETE", "/api/v1/recipes/my-smoke")))
  end)

  it("refuses an invalid recipe with the field, and an id that does not match the URL", function()
    local bad = smoke_recipe("broken")
    bad.health = { interval = "often" }
    local st, e = srv:request("POST", "/api/v1/recipes", bad)
    assert.equal(400, st)
    assert.matches("health", e.error.field or e.error.message)
    st, e = srv:request("PUT", "/api/v1/recipes/one", smoke_recipe("two"))
    assert.equal(400, st)
    assert.equal("id", e.error.field)
    st, e = srv:request("POST", "/api/v1/recipes", { name = "no id" })
    assert.equal(400, st)
    assert.equal("id", e.error.field)
    assert.equal(404, (srv:request("GET", "/api/v1/recipes/broken")))
  end)
end)
