-- The provisioner's health checks at scale (obleth.provisioner.check_all): a pass with many due checks
-- keeps at most a bound of them in flight and reuses connections, so the prober itself fails none.
-- The stand-in engines (spec/support/health_engine.py) answer /health on one port and count the
-- connections they saw; the prober runs in a child process with a file limit of 256, as a small
-- LimitNOFILE would leave it (spec/support/health_probe.lua).
local cjson = require "cjson"
local sys = require "obleth.sys"
local util = require "spec.support.util"

local N = 1000

describe("health checks of many replicas in one pass", function()
  local fh, pid, port

  setup(function()
    fh = assert(io.popen(("exec sh -c 'echo $$; exec python3 %s'"):format(
      util.shq(util.root() .. "/spec/support/health_engine.py"))))
    pid = tonumber(fh:read("l"))
    port = tonumber(fh:read("l"))
    assert(port, "health_engine.py did not start")
  end)

  teardown(function()
    sys.kill(pid, "TERM")
    fh:close()
  end)

  local function counts()
    local _, out = util.sh(("curl -sS http://127.0.0.1:%d/counts"):format(port))
    return cjson.decode(out)
  end

  local function probe(limit)
    counts() -- reset
    local code, out = util.sh(("ulimit -n 256 && %s lua %s %d %d %d"):format(util.shq(util.obleth()),
      util.shq(util.root() .. "/spec/support/health_probe.lua"), port, N, limit))
    assert.equal(0, code, out)
    return cjson.decode(out:match("{.*}")), counts()
  end

  it("every check at once (the unbounded prober) fails checks of healthy replicas", function()
    -- the premise of the next case: without a bound, the prober runs out of sockets
    local r = probe(N)
    assert.equal(N, r.checks)
    assert.is_true(r.failed > 0, cjson.encode(r))
  end)

  it("with the default bound all 1,000 checks pass, at most 64 in flight, over reused connections", function()
    local r, seen = probe(64)
    assert.same({ checks = N, failed = 0 }, { checks = r.checks, failed = r.failed }, cjson.encode(r))
    assert.equal(N, seen.requests)
    -- /counts' own connection is open while it answers
    assert.is_true(seen.max_open <= 64 + 1, cjson.encode(seen))
    assert.is_true(seen.connections <= 64 + 1, cjson.encode(seen))
  end)

  it("obleth-provisioner refuses an OBLETH_HEALTH_CONCURRENCY that is no whole number from 1 to 4096", function()
    for _, v in ipairs { "0", "x", "1.5", "5000" } do
      local code, out = util.sh(("env OBLETH_ADMIN_BASE_URL=http://127.0.0.1:9 OBLETH_ADMIN_TOKEN=0123456789abcdef0123 "
        .. "OBLETH_HEALTH_CONCURRENCY=%s timeout 20 %s provisioner --once"):format(v, util.shq(util.obleth())))
      assert.equal(2, code, out)
      assert.matches("OBLETH_HEALTH_CONCURRENCY=" .. v, out, 1, true)
    end
  end)
end)
