-- A PostgreSQL store across a restart of the server (every connection cut): the next read and the
-- next write work on new connections, and the change-notice listener comes back by itself, says so
-- (fn(nil): notices may have been missed) and delivers notices again. A server of its own (Debian's,
-- spec/support/pg.sh), restarted with pg_ctl.
local pgs = require "spec.support.pg"
local available, why = pgs.available()
local bin = (os.getenv("OBLETH_PG_BIN") or "/usr/lib/postgresql/15/bin") .. "/pg_ctl"
local has_pg_ctl = io.open(bin) ~= nil

describe("a PostgreSQL store when the server restarts", function()
  if not available or not has_pg_ctl then
    it("needs PostgreSQL", function() pending(why or (bin .. " is missing (Debian package postgresql-15)")) end)
    return
  end
  local loop = require "obleth.loop"
  local root = debug.getinfo(1, "S").source:match("^@(.*)/spec/host/pg_restart_spec%.lua$") or "."
  local pgsh = root .. "/spec/support/pg.sh"
  local dir, url

  setup(function()
    dir = os.tmpname()
    os.remove(dir)
    local p = io.popen(pgsh .. " start " .. dir)
    url = p:read("a"):match("(postgresql://%S+)")
    assert(p:close() and url, "pg.sh start failed")
  end)
  teardown(function() os.execute(pgsh .. " stop " .. dir) end)

  it("reads, writes and hears notices again after the restart", function()
    local store = assert(require("obleth.store").open(url, { pool = 2 }))
    assert(store:create_model { name = "before" })
    local heard, back = {}, loop.notifier()
    local got = loop.notifier()
    local listener = store:listen_changes(function(payload)
      heard[#heard + 1] = payload or "(reconnected)"
      if payload == nil then back:notify() else got:notify() end
    end)
    -- the listener is up once a notice comes through
    repeat
      assert(store:notify_changes("ping"))
    until got:wait(0.5)
    assert.equal("ping", heard[#heard])
    assert(os.execute(pgsh .. " restart " .. dir))
    -- the pooled connections died with the server: the next read and write take new ones
    assert.equal("before", store:list_models()[1].name)
    assert(store:create_model { name = "after" })
    assert.equal(2, #store:list_models())
    back:wait()
    repeat
      assert(store:notify_changes("pong"))
    until got:wait(0.5)
    assert.equal("pong", heard[#heard])
    listener.close()
    store:close()
  end)
end)
