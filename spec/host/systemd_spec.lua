-- The shipped systemd units pass `systemd-analyze verify` (with ExecStart
-- pointed at the binary under test, since nothing is installed here).
local util = require "spec.support.util"

local function sh(cmd)
  local fh = io.popen(cmd .. " 2>&1")
  local out = fh:read("a")
  local _, _, code = fh:close()
  return code, out
end

describe("systemd units", function()
  if sh("command -v systemd-analyze") ~= 0 then
    it("need systemd-analyze", function() pending("systemd-analyze is not installed") end)
    return
  end
  for _, unit in ipairs({ "obleth.service", "obleth-provisioner.service" }) do
    it(unit .. " passes systemd-analyze verify", function()
      local dir = os.tmpname()
      os.remove(dir)
      assert.is_true(os.execute("mkdir -p " .. util.shq(dir)))
      local src = assert(io.open(util.root() .. "/deploy/systemd/" .. unit)):read("a")
      local exe = util.obleth()
      local text = src:gsub("ExecStart=/usr/local/bin/obleth%-provisioner", "ExecStart=" .. exe .. "-provisioner")
        :gsub("ExecStart=/usr/local/bin/obleth ", "ExecStart=" .. exe .. " ")
      local fh = assert(io.open(dir .. "/" .. unit, "w"))
      fh:write(text)
      fh:close()
      local code, out = sh("cd " .. util.shq(dir) .. " && systemd-analyze verify ./" .. unit)
      os.execute("rm -rf " .. util.shq(dir))
      assert.equal(0, code, out)
      assert.is_nil(out:find(unit .. ":", 1, true), out)
    end)
  end

  it("the provisioner unit is Type=notify with a watchdog and reads /etc/obleth/provisioner.env", function()
    local src = assert(io.open(util.root() .. "/deploy/systemd/obleth-provisioner.service")):read("a")
    assert.matches("\nType=notify\n", src, 1, true)
    assert.matches("\nWatchdogSec=", src, 1, true)
    assert.matches("\nEnvironmentFile=/etc/obleth/provisioner.env\n", src, 1, true)
    assert.matches("\nRestart=on%-failure\n", src)
  end)

  it("both units raise the descriptor limit (obleth serve's connection cap is half of it less 32)", function()
    for _, unit in ipairs({ "obleth.service", "obleth-provisioner.service" }) do
      local src = assert(io.open(util.root() .. "/deploy/systemd/" .. unit)):read("a")
      assert.matches("\nLimitNOFILE=65536\n", src, 1, true)
    end
  end)
end)
