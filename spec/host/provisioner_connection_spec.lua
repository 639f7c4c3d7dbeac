-- What the provisioner's pass error says when no Slurm connection is saved: the place the
-- dashboard has for it (DESIGN's words: the Slurm connection on Deployments), not a "Settings"
-- page that does not exist.
local provisioner = require "obleth.provisioner"

describe("the provisioner without a Slurm connection", function()
  it("points at the Slurm connection on Deployments", function()
    local p = provisioner.new { api = {} }
    for _, settings in ipairs({ {}, { url = nil, socket = nil, user = "obleth" } }) do
      local conn, err = p:_connection(settings)
      assert.is_nil(conn)
      assert.equal("not_configured", err.code)
      assert.matches("the Slurm connection on Deployments", err.message, 1, true)
      assert.is_nil(err.message:find("Settings", 1, true), err.message)
    end
    local conn, err = p:_connection(nil)
    assert.is_nil(conn)
    assert.matches("the Slurm connection on Deployments", err.message, 1, true)
  end)
end)
