-- obleth.proc: a child process on the event loop: the caller's task waits,
-- other tasks run; the environment is built (no OBLETH_ variable); the deadline kills the whole
-- process group; output is bounded; outside a task the call still works (on a private loop).
local proc = require "obleth.proc"
local loop = require "obleth.loop"

describe("obleth.proc.run", function()
  it("returns status, stdout and stderr; other tasks run while it waits", function()
    local ticks = 0
    local t = loop.every(0.05, function() ticks = ticks + 1 end)
    local r = assert(proc.run { argv = { "/bin/sh", "-c", "echo out; echo err >&2; sleep 0.5; exit 3" } })
    t:cancel()
    assert.equal(3, r.status)
    assert.equal("out\n", r.stdout)
    assert.equal("err\n", r.stderr)
    assert.is_false(r.timed_out)
    assert.is_true(ticks >= 1) -- the loop turned while the child slept
  end)

  it("builds the environment: PATH, HOME, LANG, the inherited and given names, never OBLETH_", function()
    local r = assert(proc.run { argv = { "env" }, env = { FOO = "bar" }, inherit = { "HOSTNAME" } })
    assert.matches("PATH=", r.stdout, 1, true)
    assert.matches("FOO=bar", r.stdout, 1, true)
    assert.is_nil(r.stdout:find("OBLETH_", 1, true))
    assert.has_error(function() proc.run { argv = { "env" }, env = { OBLETH_ADMIN_TOKEN = "x" } } end)
    assert.has_error(function() proc.run { argv = { "env" }, inherit = { "OBLETH_ADMIN_TOKEN" } } end)
  end)

  it("kills the process group at the deadline", function()
    local r = assert(proc.run { argv = { "/bin/sh", "-c", "sleep 100 & sleep 100" }, timeout = 0.3 })
    assert.is_true(r.timed_out)
    assert.equal("KILL", r.signal)
  end)

  it("keeps stdout_limit bytes and kills a command that prints more; stderr is cut, not killed", function()
    local r = assert(proc.run { argv = { "/bin/sh", "-c", "head -c 5000000 /dev/zero" }, stdout_limit = 1000 })
    assert.equal(1000, #r.stdout)
    assert.is_true(r.stdout_truncated)
    r = assert(proc.run { argv = { "/bin/sh", "-c", "head -c 100000 /dev/zero >&2; echo done" }, stderr_limit = 10 })
    assert.equal(0, r.status)
    assert.equal("done\n", r.stdout)
    assert.equal(10, #r.stderr)
    assert.is_true(r.stderr_truncated)
  end)

  it("a program that cannot start is nil, {code = 'spawn'}", function()
    local r, err = proc.run { argv = { "/nonexistent/program" } }
    assert.is_nil(r)
    assert.equal("spawn", err.code)
    assert.matches("/nonexistent/program", err.message, 1, true)
  end)

  it("works where the caller cannot yield (a private loop)", function()
    local out
    string.gsub("x", "x", function()
      out = proc.run { argv = { "/bin/sh", "-c", "echo sync" } }.stdout
    end)
    assert.equal("sync\n", out)
  end)
end)
