-- obleth repl through a real pseudo-terminal (tmux), against the harness cluster.
local util = require "spec.support.util"
local sh = util.sh
local loop = require "obleth.loop"

local URL = os.getenv("OBLETH_SLURM_URL")


describe("obleth repl", function()
  if not URL then
    it("needs the harness cluster", function() pending("harness cluster not running (OBLETH_SLURM_URL unset)") end)
    return
  end
  if sh("command -v tmux") ~= 0 then
    it("needs tmux", function() pending("tmux is not installed") end)
    return
  end

  -- a tmux server of its own (never the user's or another spec's), its socket in the spec's HOME
  local home = os.tmpname()
  os.remove(home)
  local tmux = "tmux -S " .. util.shq(home .. "/tmux")
  local session = "repl"
  local function screen() return select(2, sh(tmux .. " capture-pane -p -t " .. session)) end
  local function send(keys) sh(tmux .. " send-keys -t " .. session .. " " .. keys) end
  local function wait_for(text, secs)
    local t_end = loop.monotonic() + (secs or 10)
    repeat
      local s = screen()
      if s:find(text, 1, true) then return s end
      loop.sleep(0.2)
    until loop.monotonic() > t_end
    return nil, screen()
  end

  setup(function()
    os.execute("mkdir -p " .. util.shq(home))
    local cmd = ("env HOME=%s TERM=xterm %s repl"):format(util.shq(home), util.shq(util.obleth()))
    assert.equal(0, (sh(("%s new-session -d -s %s -x 160 -y 50 %s"):format(tmux, session, util.shq(cmd)))))
  end)
  teardown(function()
    sh(tmux .. " kill-server")
    os.execute("rm -rf " .. util.shq(home))
  end)

  it("starts read-only and connected, and slurm.ping() answers", function()
    assert.truthy(wait_for("read-only", 10))
    send("'slurm.ping()' Enter")
    local s, last = wait_for('release = "' .. require("spec.support.harness").RELEASE .. ".", 10)
    assert.truthy(s, last)
    assert.truthy(s:find("ok = true", 1, true))
  end)

  it("refuses slurm.submit{...} without --write", function()
    send("'slurm.submit{partition = \"gpu\", script = \"#!/bin/sh\"}' Enter")
    local s, last = wait_for("refused: this REPL is read-only", 10)
    assert.truthy(s, last)
  end)

  it("completes table fields with Tab", function()
    send("'slurm.parti' Tab")
    local s, last = wait_for("slurm.partitions", 5)
    assert.truthy(s, last)
    send("C-u")
  end)

  it("filters jobs in Lua and pretty-prints the result", function()
    send("'#slurm.nodes()' Enter")
    local s, last = wait_for("\n4\n", 10)
    assert.truthy(s, last)
  end)
end)

describe("obleth repl for scripts", function()
  if not URL then
    it("needs the harness cluster", function() pending("harness cluster not running (OBLETH_SLURM_URL unset)") end)
    return
  end
  it("-e evaluates an expression and exits 0", function()
    local status, out = util.run_obleth({ "repl", "-e", "slurm:version()" })
    assert.equal(0, status)
    assert.equal('"' .. require("spec.support.harness").API_VERSION .. '"\n', out)
  end)

  it("piped input runs statement by statement and exits 1 after an error", function()
    local f = util.tmpfile("x = 2\nfor i = 1, 2 do\n  x = x * 10\nend\nx\nslurm.cancel(1)\n", ".txt")
    local fh = io.popen(util.shq(util.obleth()) .. " repl < " .. util.shq(f) .. " 2>&1; echo status=$?")
    local out = fh:read("a")
    fh:close()
    os.remove(f)
    assert.matches("\n?200\n", out)
    assert.matches("slurm.cancel refused", out, 1, true)
    assert.matches("status=1", out, 1, true)
  end)

  it("rows(list, fields...) prints any list of records as aligned rows, sets and arrays on one line", function()
    local status, out = util.run_obleth({ "repl", "-e", 'rows(slurm.nodes(), "name", "state.base", "features")' })
    assert.equal(0, status)
    assert.matches("^NAME%s+STATE%.BASE%s+FEATURES\n", out)
    assert.matches("\nn0%s+%u+%s+a100,ib\n", out)
    assert.matches("\nn3%s+%u+%s+h100\n", out)
  end)

  it("with --write but no terminal to ask, a write is named and refused unless --yes is given", function()
    local f = util.tmpfile("slurm.cancel(999999)\n", ".txt")
    local fh = io.popen(util.shq(util.obleth()) .. " repl --write < " .. util.shq(f) .. " 2>&1; echo status=$?")
    local out = fh:read("a")
    fh:close()
    os.remove(f)
    assert.matches("write refused: cancel job 999999 (not found in Slurm): no terminal to ask", out, 1, true)
    assert.matches('code = "declined"', out, 1, true)
  end)
end)
