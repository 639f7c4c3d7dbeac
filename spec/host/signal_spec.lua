-- Signals reach Lua handlers without unwinding the loop; SIGTERM ends a
-- server cleanly. Each case runs a child obleth so the spec run itself is
-- never signalled.
local util = require("spec.support.util")

describe("signals", function()
  it("SIGTERM reaches a Lua handler, the loop finishes its work and the process exits 0", function()
    local script = util.tmpfile([[
      local loop = require("obleth.loop")
      local got = {}
      loop.on_signal("HUP", function(name) got[#got + 1] = name end)
      loop.on_signal("TERM", function(name)
        got[#got + 1] = name
        loop.sleep(0.05) -- the handler itself may wait
        loop.stop(0)
      end)
      io.stdout:write("ready\n"); io.stdout:flush()
      local code = loop.run()
      io.stdout:write("handled ", table.concat(got, ","), " code ", code, "\n")
      return code
    ]])
    local proc = util.spawn_obleth({ "lua", script })
    assert.truthy(proc:wait_line("ready", 5))
    proc:kill("HUP")
    util.sleep(0.1)
    proc:kill("TERM")
    local status, out = proc:wait(5)
    assert.equal(0, status)
    assert.matches("handled HUP,TERM code 0", out, 1, true)
  end)

  it("the exit status is the integer the main chunk returns, 1 when it raises", function()
    assert.equal(7, (util.run_obleth({ "lua", "-e", "return 7" })))
    local status, _, err = util.run_obleth({ "lua", "-e", "error('bad thing')" })
    assert.equal(1, status)
    assert.matches("bad thing", err, 1, true)
    assert.matches("stack traceback", err, 1, true)
  end)
end)
