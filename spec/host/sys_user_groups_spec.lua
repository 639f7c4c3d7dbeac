-- obleth.sys.user_groups: the Slurm user's groups from this host's databases
-- (NSS), for partitions with AllowGroups. Compared with id(1), which reads the
-- same databases independently.
local sys = require "obleth.sys"
local util = require "spec.support.util"

local function id_groups(user)
  local code, out = util.sh("id -Gn " .. util.shq(user))
  assert.equal(0, code, out)
  local set = {}
  for g in out:gmatch("%S+") do set[g] = true end
  return set
end

describe("obleth.sys.user_groups", function()
  it("lists root's groups as id -Gn does, the primary group first", function()
    local got = assert(sys.user_groups("root"))
    local set = {}
    for _, g in ipairs(got) do
      assert.is_nil(set[g], "listed twice: " .. g)
      set[g] = true
    end
    assert.same(id_groups("root"), set)
    local _, primary = util.sh("id -gn root")
    assert.equal(primary:match("%S+"), got[1])
  end)

  it("answers nil and a message naming a user this host does not know", function()
    local got, err = sys.user_groups("no-such-user-obleth-spec")
    assert.is_nil(got)
    assert.matches("no%-such%-user%-obleth%-spec is not in this host's user database", err)
  end)
end)
