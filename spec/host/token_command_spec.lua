-- token_command runs on the event loop: a real `obleth serve` keeps
-- answering while the command runs, kills a hanging one (its whole process group) at the deadline,
-- keeps its memory when the command prints 50 MB, and gives the command neither the admin token nor
-- any other OBLETH_ variable; the command's stderr reaches the log bounded and redacted.
local server = require "spec.support.server"
local util = require "spec.support.util"
local loop = require "obleth.loop"
local http = require "obleth.http"

local JWT = "eyJhbGciOiJIUzI1NiJ9.eyJleHAiOjQxMDI0NDQ4MDB9.c2lnbmF0dXJl" -- exp 2100-01-01
local TIMEOUT = 10 -- OBLETH_TOKEN_COMMAND_TIMEOUT for this server

local function exists(path)
  local fh = io.open(path)
  if fh then fh:close() end
  return fh ~= nil
end

local function status_field(pid, name)
  local s = util.slurp("/proc/" .. pid .. "/status")
  return tonumber(s:match(name .. ":%s*(%d+)"))
end

describe("token_command on the event loop", function()
  local srv, dir

  setup(function()
    dir = os.tmpname()
    os.remove(dir)
    assert(require("obleth.sys").mkdir(dir))
    srv = server.start { env = { OBLETH_ALLOW_TOKEN_COMMAND = "1", OBLETH_TOKEN_COMMAND_TIMEOUT = tostring(TIMEOUT),
      OBLETH_SPEC_CANARY = "canary-value-123" } }
  end)

  teardown(function()
    srv:stop()
    srv:cleanup()
    os.execute("rm -rf " .. util.shq(dir))
  end)

  -- save token_command, then run it through the test route in a task of its own; returns a
  -- table whose .done turns true (with .status and .doc) when the test route answers
  local function run_command(cmd)
    local st, doc = srv:request("PUT", "/api/v1/settings/slurm", { enabled = false, url = "http://127.0.0.1:1",
      user = "slurm", token_source = "command", token_command = cmd })
    assert.equal(200, st, doc and doc.error and doc.error.message)
    local call = { done = false, wake = loop.notifier() }
    loop.spawn(function()
      call.status, call.doc = srv:request("POST", "/api/v1/settings/slurm/test", {})
      call.done = true
      call.wake:notify()
    end)
    return call
  end

  local function models()
    local r = http.request { url = srv.base .. "/api/v1/models", timeout = 20,
      headers = { Authorization = "Bearer " .. srv.token } }
    return r and r.status
  end

  it("a GET sent during `sleep 8` in the command is answered before the command ends", function()
    local started, finished = dir .. "/started", dir .. "/finished"
    local call = run_command(("touch %s; sleep 8; touch %s; echo SLURM_JWT=%s"):format(util.shq(started),
      util.shq(finished), JWT))
    util.wait_until(function() return exists(started) end, 20, "the command to start")
    assert.equal(200, models())
    assert.is_false(exists(finished)) -- the command still sleeps: the GET did not wait for it
    call.wake:wait(30)
    assert.is_true(call.done)
    assert.equal(200, call.status)
    assert.equal("command", call.doc.token.source) -- the command's token was read
  end)

  it("a hanging command is killed with its process group at the deadline; the server answers meanwhile", function()
    local pidfile = dir .. "/bgpid"
    local call = run_command(("sleep 1000 & echo $! > %s; wait"):format(util.shq(pidfile)))
    util.wait_until(function() return exists(pidfile) and util.slurp(pidfile):match("%d+") end, 20, "the command")
    local bg = tonumber(util.slurp(pidfile):match("%d+"))
    local answered = 0
    while not call.done do
      assert.equal(200, models())
      answered = answered + 1
      call.wake:wait(0.2)
    end
    assert.is_true(answered >= 1)
    assert.equal(200, call.status)
    assert.equal("auth", call.doc.error.code)
    assert.matches(("timed out after %d s"):format(TIMEOUT), call.doc.error.message, 1, true)
    -- the background sleep went with the group (it is gone, or a zombie of init's, never running)
    util.wait_until(function()
      local st = util.slurp("/proc/" .. bg .. "/status")
      return st == "" or st:match("State:%s*Z")
    end, 10, "the command's background process to be killed")
  end)

  it("50 MB of output is cut at the limit: the command is killed and the server's memory stays", function()
    local before = status_field(srv.pid, "VmHWM")
    local call = run_command("head -c 50000000 /dev/zero | tr '\\0' a")
    call.wake:wait(60)
    assert.is_true(call.done)
    assert.equal(200, call.status)
    assert.matches("printed more than 64 KiB", call.doc.error.message, 1, true)
    local after = status_field(srv.pid, "VmHWM")
    -- the old read("a") took the whole 50 MB (and more) into memory
    assert.is_true(after - before < 16 * 1024, ("peak RSS grew by %d kB"):format(after - before))
  end)

  it("the command's environment has no OBLETH_ variable; its stderr is logged bounded and redacted", function()
    local envfile = dir .. "/env"
    local call = run_command(("env > %s; echo 'stderr says %s and %s' >&2; head -c 100000 /dev/zero | tr '\\0' x >&2;"
      .. " echo SLURM_JWT=%s"):format(util.shq(envfile), srv.token, JWT, JWT))
    call.wake:wait(30)
    assert.is_true(call.done)
    local env = util.slurp(envfile)
    assert.matches("PATH=", env, 1, true)
    assert.is_nil(env:find("OBLETH_", 1, true), env)
    assert.is_nil(env:find(srv.token, 1, true))
    assert.is_nil(env:find("canary-value-123", 1, true))
    local log = srv:log()
    local line = log:match("[^\n]*slurm_token_command_stderr[^\n]*")
    assert.is_not_nil(line, log)
    assert.matches("stderr says", line, 1, true)
    assert.is_nil(line:find(srv.token, 1, true))
    assert.is_nil(line:find(JWT, 1, true))
    assert.is_true(#line < 8192, ("the stderr line is %d bytes"):format(#line))
  end)
end)
