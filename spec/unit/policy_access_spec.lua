-- obleth.policy.access: roles from groups, actions to roles (pure).
local access = require "obleth.policy.access"

describe("policy access", function()
  local D = { default_role = "viewer", group_roles = { ops = "operator", hpc = "admin", odd = "root" },
    actions = access.DEFAULTS.actions }

  it("gives a user the highest role its groups map to, and viewer when none maps", function()
    assert.same({ "operator", "ops" }, { access.role_of({ user = "a", groups = { "staff", "ops" } }, D) })
    assert.same({ "admin", "hpc" }, { access.role_of({ user = "c", groups = { "ops", "hpc" } }, D) })
    assert.same({ "viewer" }, { access.role_of({ user = "b", groups = {} }, D) })
    assert.same({ "viewer" }, { access.role_of({ user = "b", groups = { "odd" } }, D) }) -- not a role
    assert.equal("admin", (access.role_of({ admin = true }, D)))
  end)

  it("lets each role take its actions and those below, and names the least role when it refuses", function()
    assert.is_true(access.allows("viewer", "read", D))
    assert.same({ false, "operator" }, { access.allows("viewer", "deployments.launch", D) })
    assert.is_true(access.allows("operator", "deployments.manage", D))
    assert.same({ false, "admin" }, { access.allows("operator", "settings.slurm", D) })
    assert.is_true(access.allows("admin", "keys.manage", D))
    -- an action nobody listed is the admin's
    assert.same({ false, "admin" }, { access.allows("operator", "something.new", D) })
  end)

  it("lists the actions of a role", function()
    local v = access.actions_of("viewer", D)
    assert.is_true(v.read)
    assert.is_nil(v["deployments.launch"])
    assert.is_true(access.actions_of("operator", D)["recipes.write"])
    assert.is_true(access.actions_of("admin", D)["users.manage"])
  end)

  it("gives a personal token every role up to its user's, and the admin token, which is no user, none", function()
    local tokens = require "obleth.api.tokens"
    assert.same({ "viewer" }, tokens.roles_for({ user = "bob", role = "viewer" }, access))
    assert.same({ "viewer", "operator" }, tokens.roles_for({ user = "alice", role = "operator" }, access))
    assert.same({ "viewer", "operator", "admin" }, tokens.roles_for({ user = "carol", role = "admin" }, access))
    assert.same({}, tokens.roles_for({ admin = true, role = "admin" }, access))
  end)

  it("is overridable in policy.d: the site's groups and an action moved to another role", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir))
    local f = assert(io.open(dir .. "/access.lua", "w"))
    f:write([[
local actions = {}
for k, v in pairs(builtin.DEFAULTS.actions) do actions[k] = v end
actions["recipes.write"] = "admin"
return { DEFAULTS = { group_roles = { ["ml-team"] = "operator" }, actions = actions } }
]])
    f:close()
    local pol = require("obleth.policy").new { dir = dir, names = { "access" }, stat = false }.get("access")
    os.execute("rm -rf " .. dir)
    assert.equal("operator", (pol.role_of({ user = "a", groups = { "ml-team" } }, pol.DEFAULTS)))
    assert.same({ false, "admin" }, { pol.allows("operator", "recipes.write", pol.DEFAULTS) })
    assert.is_true(pol.allows("operator", "deployments.launch", pol.DEFAULTS))
  end)
end)
