-- POST /api/v1/settings/slurm/test with settings posted, not saved: a posted
-- token_command runs only where the daemon allows commands (OBLETH_ALLOW_TOKEN_COMMAND=1), and a
-- posted token_key_file is refused when it is the server's own database, naming field and reason.
local server = require "spec.support.server"

describe("the Slurm settings test route on a server that does not allow commands", function()
  local srv, dir

  setup(function()
    dir = os.tmpname()
    os.remove(dir)
    assert(require("obleth.sys").mkdir(dir))
    srv = server.start { env = { OBLETH_ALLOW_TOKEN_COMMAND = "" } }
    -- the settings test against the saved slurmrestd (a posted URL never gets this host's tokens)
    local st = srv:request("PUT", "/api/v1/settings/slurm", { enabled = false, url = "http://127.0.0.1:1",
      user = "slurm" })
    assert.equal(200, st)
  end)
  teardown(function()
    srv:stop()
    srv:cleanup()
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("does not run a posted token_command, and says how a host allows it", function()
    local canary = dir .. "/ran"
    local st, doc = srv:request("POST", "/api/v1/settings/slurm/test", {
      token_source = "command", token_command = "touch '" .. canary .. "'; echo SLURM_JWT=x.y.z" })
    assert.equal(200, st)
    assert.equal("token_command", doc.error.field)
    assert.matches("OBLETH_ALLOW_TOKEN_COMMAND=1", doc.error.message)
    assert.is_nil(io.open(canary), "the posted command ran")
  end)

  it("refuses the server's own database as the posted token_key_file, naming the field and the reason", function()
    require("obleth.sys").chmod(srv.db, tonumber("600", 8))
    local st, doc = srv:request("POST", "/api/v1/settings/slurm/test", { user = "slurm",
      token_source = "key_file", token_key_file = srv.db })
    assert.equal(200, st, doc and doc.error and doc.error.message)
    assert.equal("token_key_file", doc.error.field)
    assert.matches("obleth's own database", doc.error.message)
    assert.is_nil(doc.token ~= nil and doc.token ~= require("cjson").null and doc.token.expires_at or nil)
  end)
end)
