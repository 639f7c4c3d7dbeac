-- obleth-provisioner's settings from the environment: the admin token from a file (a Compose or
-- Kubernetes secret), a lease that outlasts two passes, and the test-only crash points of make chaos
-- (OBLETH_CHAOS) and the faults of the integration specs (OBLETH_FAULT), both obleth.provisioner.chaos.
local util = require "spec.support.util"

local function run(env, args)
  local a = {}
  for k, v in pairs(env) do a[#a + 1] = k .. "=" .. util.shq(v) end
  return util.sh(("env -u OBLETH_ADMIN_TOKEN %s timeout 20 %s provisioner %s"):format(table.concat(a, " "),
    util.shq(util.obleth()), args or "--once"))
end

describe("obleth-provisioner's environment", function()
  local dead = "http://127.0.0.1:9" -- discard: nothing answers HTTP there

  it("reads the admin token from OBLETH_ADMIN_TOKEN_FILE", function()
    local f = util.tmpfile("0123456789abcdef0123456789abcdef\n", ".token")
    local code, out = run { OBLETH_ADMIN_BASE_URL = dead, OBLETH_ADMIN_TOKEN_FILE = f }
    os.remove(f)
    -- it got as far as asking the Management API
    assert.equal(1, code, out)
    assert.matches("pass failed: Management API", out, 1, true)
    assert.is_nil(out:find("0123456789abcdef0123456789abcdef", 1, true))
  end)

  it("says which variable is missing or unreadable", function()
    local code, out = run { OBLETH_ADMIN_BASE_URL = dead, OBLETH_ADMIN_TOKEN_FILE = "/nonexistent/token" }
    assert.equal(2, code)
    assert.matches("OBLETH_ADMIN_TOKEN_FILE", out, 1, true)
    code, out = run { OBLETH_ADMIN_BASE_URL = dead }
    assert.equal(2, code)
    assert.matches("OBLETH_ADMIN_TOKEN", out, 1, true)
  end)

  it("refuses a lease shorter than two pass intervals", function()
    local code, out = run({ OBLETH_ADMIN_BASE_URL = dead, OBLETH_ADMIN_TOKEN = "0123456789abcdef0123",
      OBLETH_LEASE_TTL = "9" }, "--interval 5 --once")
    assert.equal(2, code)
    assert.matches("OBLETH_LEASE_TTL=9", out, 1, true)
  end)

  it("OBLETH_CHAOS=POINT:N kills the process with SIGKILL at the Nth visit of POINT, and no sooner", function()
    local env = { OBLETH_ADMIN_BASE_URL = dead, OBLETH_ADMIN_TOKEN = "0123456789abcdef0123",
      OBLETH_CHAOS = "pass_start" }
    local code, out = run(env)
    assert.equal(128 + 9, code, out)
    assert.matches("event=chaos_kill n=1 point=pass_start", out, 1, true)
    -- one --once pass reaches pass_start once: the second visit never comes, the pass fails as usual
    env.OBLETH_CHAOS = "pass_start:2"
    code, out = run(env)
    assert.equal(1, code, out)
    assert.matches("pass failed: Management API", out, 1, true)
    assert.is_nil(out:find("chaos_kill", 1, true))
  end)

  it("refuses an OBLETH_CHAOS that names no crash point, and lists them", function()
    for _, v in ipairs { "nowhere", "after_submit:0", "after_submit:x", "after_submit:1:2" } do
      local code, out = run { OBLETH_ADMIN_BASE_URL = dead, OBLETH_ADMIN_TOKEN = "0123456789abcdef0123",
        OBLETH_CHAOS = v }
      assert.equal(2, code, v)
      assert.matches("OBLETH_CHAOS=" .. v, out, 1, true)
      assert.matches("before_submit, after_submit", out, 1, true)
    end
  end)

  it("refuses an OBLETH_FAULT that names no fault, and lists them; a known one is taken", function()
    local env = { OBLETH_ADMIN_BASE_URL = dead, OBLETH_ADMIN_TOKEN = "0123456789abcdef0123", OBLETH_FAULT = "exit_now" }
    local code, out = run(env)
    assert.equal(2, code, out)
    assert.matches("OBLETH_FAULT=exit_now: expected one of exit_after_submit, pause_after_submit, stop_before_submit",
      out, 1, true)
    -- a known one is taken: the pass runs (and fails as usual, nothing answers the Management API)
    env.OBLETH_FAULT = "exit_after_submit"
    code, out = run(env)
    assert.equal(1, code, out)
    assert.matches("pass failed: Management API", out, 1, true)
  end)
end)
